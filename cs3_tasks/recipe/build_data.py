"""``cs3-bench recipe build-data``: conversations -> code-switching items -> mix -> VocalNet training JSON.

Output directory:
  train.json            the mixed training set, VocalNet format (speech paths relative to this dir, or
                        absolute for external sources): pass this dir as VocalNet's ``--speech_folder``
  code_switching.json   the verified code-switching items alone (same format)
  report.json / .md     every candidate with its status (rewrite/check/TTS/ASR/QC failures kept), the mix
  audio/<id>.wav        synthesized queries (16 kHz)
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cs3_tasks.core.cache import atomic_write
from cs3_tasks.recipe import construct, mixing
from cs3_tasks.recipe.transforms import TransformConfig, transform_target

log = logging.getLogger(__name__)


@dataclass
class BuildDataConfig:
    input: Path
    out: Path
    rewriter: Any  # judge.JudgeConfig
    checker: Any  # judge.JudgeConfig
    mix: Path | None = None
    limit: int | None = None
    speech: construct.SpeechSettings = field(default_factory=construct.SpeechSettings)
    transforms: TransformConfig = field(default_factory=TransformConfig)  # baked into train.json


@dataclass
class BuildDataResult:
    counts: dict[str, int]
    mix: dict[str, Any] | None
    train_items: int
    out: Path


def _bake(items: list[dict], transforms: TransformConfig) -> list[dict]:
    """Items with CoR/KH applied to the gpt turn (for trainers that do not apply them, e.g. VocalNet's)."""
    if transforms.name == "none":
        return items
    out = []
    for item in items:
        convs = [dict(c) for c in item["conversations"]]
        convs[1]["value"] = transform_target(item.get("query_text"), convs[1]["value"], transforms)
        out.append({**item, "conversations": convs, "transform": transforms.name})
    return out


def build_data(config: BuildDataConfig) -> BuildDataResult:
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    mix_cfg = mixing.load_mix_config(config.mix) if config.mix else None
    external = {}  # read (and validate) external sources before any LLM or TTS work
    for spec in mix_cfg.sources if mix_cfg else []:
        if spec.kind != "code_switching":
            external[spec.name] = mixing.load_source(spec, mix_cfg)

    conversations = construct.read_conversations(config.input, config.limit)
    cands = construct.rewrite_and_check(
        conversations, config.rewriter, config.checker, progress=config.speech.progress
    )
    construct.synthesize_and_verify(cands, out, config.speech)
    cs_items = [construct.vocalnet_item(c) for c in cands if c.status == "ok"]
    _write_json(out / "code_switching.json", cs_items)

    summary = None
    if mix_cfg:
        pools = dict(external)
        for spec in mix_cfg.sources:
            if spec.kind == "code_switching":
                pools[spec.name] = cs_items
        train_items, summary = mixing.mix(pools, mix_cfg)
    else:
        train_items = cs_items
    _write_json(out / "train.json", _bake(train_items, config.transforms))

    counts = construct.status_counts(cands)
    report = {
        "input": str(config.input),
        "counts": counts,
        "mix": summary,
        "transform": config.transforms.name,
        "train_items": len(train_items),
        "items": construct.candidate_records(cands),
    }
    _write_json(out / "report.json", report)
    atomic_write(out / "report.md", _report_markdown(report))
    return BuildDataResult(counts, summary, len(train_items), out)


def _write_json(path: Path, data: Any) -> None:
    atomic_write(path, json.dumps(data, ensure_ascii=False, indent=1))


def _report_markdown(report: dict) -> str:
    header = (
        f"Input: `{report['input']}`; transform baked: {report['transform']}; "
        f"training items: {report['train_items']}"
    )
    lines = ["# Recipe data build", "", header, "", "| status | items |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in report["counts"].items()]
    if report["mix"]:
        lines += ["", "| source | available | drawn | ratio |", "| --- | --- | --- | --- |"]
        m = report["mix"]
        lines += [f"| {n} | {m['available'][n]} | {m['drawn'][n]} | {m['ratios'][n]} |" for n in m["ratios"]]
    failed = [i for i in report["items"] if i["status"] != "ok"]
    if failed:
        lines += ["", "## Not used (kept for review)", "", "| id | status | cause |", "| --- | --- | --- |"]
        lines += [
            f"| {i['id']} | {i['status']} | {(i['error'] or i['check_reason'] or '').replace('|', '/')} |"
            for i in failed
        ]
    return "\n".join(lines) + "\n"
