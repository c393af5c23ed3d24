"""Manual QC decisions (the paper's manual correction step): a corrections file, read and checked."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

CORRECTION_ACTIONS = ("resynthesize", "accept")


@dataclass(frozen=True)
class Correction:
    """A manual QC decision for one item (the paper's manual correction step)."""

    action: str  # "resynthesize" | "accept"
    speaker: str | None = None
    seed: int | None = None
    voice: str | None = None
    settings: tuple[tuple[str, Any], ...] = ()
    note: str | None = None


class CorrectionsError(ValueError):
    """Invalid corrections file; lists every problem, each naming the Qid."""


def load_corrections(path: Path, source: dict[str, list[dict]]) -> dict[tuple[str, str], Correction]:
    """Read a corrections file (YAML or JSON): ``{"<Qid>" | "<set>/<Qid>": {action: ..., ...}}``.

    A bare Qid applies to every built set that has it (knowledge and knowledge_en share Qids).
    Returns ``{(set, Qid): Correction}``; raises CorrectionsError listing every problem.
    """
    import yaml

    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as err:
        raise CorrectionsError(f"cannot read corrections file {path}: {err}") from err
    if not isinstance(raw, dict):
        raise CorrectionsError(f"corrections file {path}: expected a mapping of Qid -> correction")
    qids = {name: {r["Qid"] for r in records} for name, records in source.items()}
    problems: list[str] = []
    result: dict[tuple[str, str], Correction] = {}
    for key, spec in raw.items():
        key = str(key)
        set_name, _, qid = key.rpartition("/")
        targets = [set_name] if set_name else [s for s in qids if qid in qids[s]]
        if set_name and set_name not in qids:
            problems.append(f"{key}: set {set_name!r} is not being built ({sorted(qids)})")
            continue
        if not targets or any(qid not in qids[t] for t in targets):
            problems.append(f"Qid {qid}: not in the source ({key})")
            continue
        correction = _parse_correction(key, spec, problems)
        if correction is not None:
            for target in targets:
                result[(target, qid)] = correction
    if problems:
        raise CorrectionsError(f"{len(problems)} problem(s) in {path}:\n  " + "\n  ".join(problems))
    return result


def _parse_correction(key: str, spec: Any, problems: list[str]) -> Correction | None:
    if not isinstance(spec, dict):
        problems.append(f"{key}: expected a mapping like {{action: resynthesize, seed: 1}}")
        return None
    action = spec.get("action")
    if action not in CORRECTION_ACTIONS:
        problems.append(f"{key}: action must be one of {list(CORRECTION_ACTIONS)}, got {action!r}")
        return None
    unknown = set(spec) - {"action", "speaker", "seed", "voice", "settings", "note"}
    if unknown:
        problems.append(f"{key}: unknown key(s) {sorted(unknown)}")
        return None
    seed = spec.get("seed")
    if seed is not None and not isinstance(seed, int):
        problems.append(f"{key}: seed must be an integer, got {seed!r}")
        return None
    settings = spec.get("settings") or {}
    if not isinstance(settings, dict):
        problems.append(f"{key}: settings must be a mapping")
        return None
    if action == "resynthesize" and not any(
        spec.get(k) is not None for k in ("speaker", "seed", "voice", "settings")
    ):
        problems.append(f"{key}: resynthesize needs a new speaker, seed, voice or settings")
        return None
    return Correction(
        action=action,
        speaker=spec.get("speaker"),
        seed=seed,
        voice=spec.get("voice"),
        settings=tuple(sorted(settings.items())),
        note=spec.get("note"),
    )
