"""Scored result dirs read back for reports and comparisons: each model's summaries and per-item records.

A result dir (written by ``cs3-bench score`` or ``cs3-bench demo``) holds ``<set>.summary.json`` and
``<set>.records.jsonl`` per scored set. The records file is an append log while a run is going: the last
record of a Qid is the one that counts (as `scoring` compacts it when the run finishes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cs3_tasks.core.data import KNOWLEDGE_SETS
from cs3_tasks.report.leaderboard import duplicate_system, load_summaries
from cs3_tasks.scoring.store import read_records as read_records_file
from cs3_tasks.scoring.store import read_run_settings


@dataclass
class ModelResults:
    """One system's scored sets, from one or several result dirs."""

    name: str
    summaries: dict[str, dict] = field(default_factory=dict)  # set -> summary
    records: dict[str, list[dict]] = field(default_factory=dict)  # set -> records, in file order
    result_dirs: dict[str, Path] = field(default_factory=dict)  # set -> the dir it came from
    settings: dict[str, dict | None] = field(default_factory=dict)  # set -> its settings.json (None: none)


def read_records(result_dir: Path, set_name: str) -> list[dict] | None:
    """The records of one set in a result dir (the last record of a Qid, in the order Qids first appear; a
    torn last line skipped and said, as the scorer reads it: `store.read_records`), or None without a file."""
    path = Path(result_dir) / f"{set_name}.records.jsonl"
    if not path.is_file():
        return None
    return list(read_records_file(path).values())


def result_dirs_in(paths: Sequence[Path]) -> list[Path]:
    """The result dirs named: each path itself, or, for a folder of them (what ``score --outputs-root`` and
    ``demo`` write: one result dir per model beside the leaderboard and the report), its result dirs."""
    found = []
    for path in map(Path, paths):
        holds = path.is_dir() and any(path.glob("*.summary.json"))
        inner = (
            sorted(d for d in path.iterdir() if d.is_dir() and any(d.glob("*.summary.json")))
            if path.is_dir()
            else []
        )
        found += inner if inner and not holds else [path]
    return found


def load_results(result_dirs: Sequence[Path]) -> dict[str, ModelResults]:
    """model -> its summaries and records, from every scored set in the dirs (model name as in
    `leaderboard.load_summaries`; the same errors for missing dirs and a set given twice)."""
    results: dict[str, ModelResults] = {}
    for result_dir in result_dirs:
        for model, summaries in load_summaries([Path(result_dir)]).items():
            entry = results.setdefault(model, ModelResults(model))
            for set_name, summary in summaries.items():
                if set_name in entry.summaries:
                    raise duplicate_system(set_name, model, Path(result_dir))
                entry.summaries[set_name] = summary
                entry.records[set_name] = read_records(Path(result_dir), set_name) or []
                entry.result_dirs[set_name] = Path(result_dir)
                entry.settings[set_name] = read_run_settings(Path(result_dir), set_name, summary)
    return results


def summaries_of(results: dict[str, ModelResults]) -> dict[str, dict[str, dict]]:
    """model -> set -> summary: what `leaderboard.write_leaderboard` takes."""
    return {name: dict(entry.summaries) for name, entry in results.items()}


def knowledge_sets(results: dict[str, ModelResults]) -> list[str]:
    """The knowledge sets scored for at least one model, in `KNOWLEDGE_SETS` order."""
    return [s for s in KNOWLEDGE_SETS if any(s in r.records for r in results.values())]
