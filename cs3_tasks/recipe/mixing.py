"""Mixing the code-switching items with speech-translation and speech-instruction data by ratios.

Mixing configuration (YAML)::

    seed: 0
    total: null            # optional cap on the mixed set size
    sources:
      - {name: code_switching, kind: code_switching, ratio: 0.4}     # built by build-data
      - {name: covost2_zh_en, kind: speech_translation, ratio: 0.3,
         path: covost2/zh-CN/train.tsv, audio_root: covost2/zh-CN/clips,
         instruction: "Translate the speech into English."}
      - {name: voiceassistant, kind: speech_instruction, ratio: 0.3,
         path: VoiceAssistant-430K-vocalnet/VoiceAssistant-430K.json, audio_root: .}

``ratio`` is each source's share of the mixed set (normalised to sum 1). The mixed size is the largest
one no source has to repeat items for (capped by ``total``); items are drawn without replacement with
a seeded RNG. Relative paths in the config are relative to the config file.

Source file formats:
  speech_translation  CoVoST TSV (``path``, ``sentence``, ``translation``) or JSON lines
                      {"audio", "translation", "sentence"?}
  speech_instruction  VocalNet JSON list (id, speech, conversations, units?) or JSON lines
                      {"audio", "response", "question"?}
"""

from __future__ import annotations

import csv
import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KINDS = ("code_switching", "speech_translation", "speech_instruction")
DEFAULT_TRANSLATION_INSTRUCTION = "Translate the speech into English."


class MixConfigError(ValueError):
    """A mixing configuration or source file that cannot be used; names the source/item and cause."""


@dataclass
class SourceSpec:
    name: str
    kind: str
    ratio: float
    path: str | None = None
    audio_root: str | None = None
    instruction: str | None = None


@dataclass
class MixConfig:
    sources: list[SourceSpec]
    seed: int = 0
    total: int | None = None
    base_dir: Path = field(default_factory=Path.cwd)

    def resolve(self, path: str | None) -> Path | None:
        return None if path is None else (self.base_dir / path)


def load_mix_config(path: str | os.PathLike) -> MixConfig:
    import yaml

    path = Path(path)
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    specs = []
    for i, s in enumerate(raw.get("sources") or []):
        try:
            spec = SourceSpec(**s)
        except TypeError as exc:
            raise MixConfigError(f"{path}: source #{i}: {exc}") from exc
        if spec.kind not in KINDS:
            raise MixConfigError(f"{path}: source {spec.name}: kind must be one of {KINDS}")
        if not spec.ratio or spec.ratio < 0:
            raise MixConfigError(f"{path}: source {spec.name}: ratio must be > 0")
        if spec.kind != "code_switching" and not spec.path:
            raise MixConfigError(f"{path}: source {spec.name}: `path` is required for {spec.kind}")
        specs.append(spec)
    if not specs:
        raise MixConfigError(f"{path}: no sources")
    if len({s.name for s in specs}) != len(specs):
        raise MixConfigError(f"{path}: source names must be unique")
    return MixConfig(specs, int(raw.get("seed", 0)), raw.get("total"), path.resolve().parent)


# ---------------------------------------------------------------------------------------------
# reading sources into VocalNet items (speech paths absolute)


def _rows(path: Path) -> list[dict]:
    if not path.exists():
        raise MixConfigError(f"source file not found: {path}")
    if path.suffix == ".tsv":
        with open(path, encoding="utf-8", newline="") as fh:
            return list(csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        data = json.loads(text)
        if not isinstance(data, list):
            raise MixConfigError(f"{path}: expected a JSON list")
        return data
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _speech_path(root: Path, rel: str, where: str) -> str:
    p = root / rel
    if not p.exists():
        raise MixConfigError(f"{where}: audio file not found: {p}")
    return str(p.resolve())


def load_source(spec: SourceSpec, config: MixConfig) -> list[dict]:
    """The items of one external source, as VocalNet items with absolute speech paths."""
    path = config.resolve(spec.path)
    root = config.resolve(spec.audio_root) if spec.audio_root else path.parent
    items = []
    for i, row in enumerate(_rows(path)):
        where = f"{spec.name} item {row.get('id', i)} ({path})"
        if "conversations" in row:  # already VocalNet format
            item = dict(row)
            item["speech"] = _speech_path(root, row["speech"], where)
            if item.get("units"):
                item["units"] = str((root / item["units"]).resolve())
        else:
            audio = row.get("audio") or row.get("path")
            if not audio:
                raise MixConfigError(f"{where}: no `audio`/`path`")
            if spec.kind == "speech_translation":
                target = row.get("translation")
                human = "<speech>\n" + (spec.instruction or DEFAULT_TRANSLATION_INSTRUCTION)
                query = row.get("sentence")
            else:
                target = row.get("response") or row.get("answer")
                human = "<speech>" + ("\n" + spec.instruction if spec.instruction else "")
                query = row.get("question") or row.get("text")
            if not target:
                raise MixConfigError(f"{where}: no target text (translation/response)")
            item = {
                "id": str(row.get("id", i)),
                "speech": _speech_path(root, audio, where),
                "conversations": [{"from": "human", "value": human}, {"from": "gpt", "value": target}],
            }
            if query:
                item["query_text"] = query
        item["id"] = f"{spec.name}-{item['id']}"
        item["source"] = spec.name
        items.append(item)
    return items


# ---------------------------------------------------------------------------------------------
# mixing


def mix_counts(
    available: dict[str, int], ratios: dict[str, float], total: int | None = None
) -> dict[str, int]:
    """Items to draw per source: shares follow ``ratios``; no source needs more than it has."""
    norm = sum(ratios.values())
    shares = {k: v / norm for k, v in ratios.items()}
    size = min(available[k] / shares[k] for k in shares)
    if total is not None:
        size = min(size, total)
    counts = {k: min(available[k], round(shares[k] * size)) for k in shares}
    return counts


def mix(pools: dict[str, list[dict]], config: MixConfig) -> tuple[list[dict], dict[str, Any]]:
    """(mixed shuffled items, summary {available, drawn, ratios})."""
    ratios = {s.name: s.ratio for s in config.sources}
    available = {name: len(pools.get(name, [])) for name in ratios}
    empty = [n for n, c in available.items() if c == 0]
    if empty:
        raise MixConfigError(f"mixing: source(s) {empty} have no items")
    counts = mix_counts(available, ratios, config.total)
    rng = random.Random(config.seed)
    mixed: list[dict] = []
    for name in ratios:  # config order: deterministic draws
        mixed += rng.sample(pools[name], counts[name])
    rng.shuffle(mixed)
    return mixed, {"available": available, "drawn": counts, "ratios": ratios, "seed": config.seed}
