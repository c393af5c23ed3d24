"""What one lm-eval run shares across its cs3 tasks: the run's settings and each task's records.

lm-eval builds every task of a run (calling each task's ``custom_dataset`` loader with the run's
``--metadata``) before it filters any, then runs every task's filter, then the aggregations. `LmEvalRun`
holds what crosses those phases:

* ``settings``: the run's setting keys of ``--metadata`` (`SETTING_KEYS`), given by the loaders and
  passed explicitly to whatever needs them (``utils.judge_config(settings)``, the ASR config);
* ``records``: (variant, set) -> the compact records of a task, put by its filter, read by the cs-vs-en
  aggregations of the English twin;
* one summary per (kind, record content), so that the many aggregations of a task summarise once;
* the run's settings resolved (`ScoringSettings`: protocol, ASR, judge, the authors' prompts read from their
  scripts) once per run, by the first loader, filter or aggregation that asks (`LmEvalRun.resolved`).

Lifetime: a run starts with the first task loader after the previous run's filters (`LmEvalRun.load_task`),
so records of an earlier run in the same process (e.g. the previous ``cs3-bench demo`` system) never leak
into this run's comparison. The single instance `RUN` lives in this module, imported by name from
``utils.py`` and ``conversation_utils.py`` however lm-eval loads those files.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cs3_tasks.core.cache import stable_key
from cs3_tasks.scoring.options import METADATA_KEYS, MetadataError, check_metadata

__all__ = ["RUN", "SETTING_KEYS", "LmEvalRun", "MetadataError", "check_metadata"]

# the run's setting keys of --metadata: the run options lm-eval takes (cs3_tasks/scoring/options.py)
SETTING_KEYS = METADATA_KEYS
_MAX_SUMMARIES = 64


class LmEvalRun:
    """Settings and per-task records of one lm-eval run (see the module docstring)."""

    def __init__(self, settings: Mapping[str, Any] | None = None) -> None:
        self.settings: dict[str, Any] = dict(settings or {})
        self.records: dict[tuple[str, str], list[dict]] = {}
        self._summaries: dict[str, dict] = {}
        self._resolved: dict[tuple[str, bool], Any] = {}
        # how this run is scored (protocol, judge, comparable_to_paper, notes): lm-eval's results carry it
        self.note: dict[str, Any] | None = None

    def load_task(self, metadata: Mapping[str, Any]) -> dict[str, Any]:
        """Called by every task loader: starts a new run after filters ran; returns the settings."""
        if self.records:  # the previous run's filters ran: this loader belongs to a new run
            self.records.clear()
            self._summaries.clear()
            self._resolved.clear()
        self.settings = check_metadata(metadata)  # every key and value checked as the command line checks it
        return self.settings

    def resolved(
        self, settings: Mapping[str, Any], resolve: Callable[..., Any], *, reference_prompts: bool = True
    ):
        """``resolve(settings, reference_prompts=...)`` (`settings_from_options`), once per run for the same
        settings and environment (a judge's key, ``$CS3_*``: what the resolution reads): every loader, filter
        and helper of the run gets the same object, the authors' prompts read once. A resolution with the
        prompts serves a caller that needs none (``reference_prompts=False``: the conversation scorer)."""

        key = stable_key(dict(settings), sorted(os.environ.items()))
        for flag in (True,) if reference_prompts else (True, False):
            if (key, flag) in self._resolved:
                return self._resolved[(key, flag)]
        if len(self._resolved) >= _MAX_SUMMARIES:
            self._resolved.clear()
        found = self._resolved[(key, reference_prompts)] = resolve(
            settings, reference_prompts=reference_prompts
        )
        return found

    def describe(self, note: Mapping[str, Any]) -> None:
        self.note = dict(note)

    def put_records(self, variant: str, set_name: str, records: Sequence[dict]) -> None:
        self.records[(variant, set_name)] = list(records)

    def records_of(self, variant: str, set_name: str) -> list[dict] | None:
        return self.records.get((variant, set_name))

    def failed_tasks(self) -> list[str]:
        """One line per task and channel of this run that failed as a whole (`scoring.run.failed_parts`, the
        rule ``cs3-bench score`` applies), from the records the filters kept (every rank's, gathered)."""
        from cs3_tasks.scoring.run import failed_parts

        return [
            f"cs3_{set_name}{'_text' if variant == 'text' else ''}: {line}"
            for (variant, set_name), records in sorted(self.records.items())
            for line in failed_parts(records, "lm-eval's --log_samples files")
        ]

    def summary(self, kind: str, records: Sequence[Mapping], summarize: Callable[[list], dict]) -> dict:
        """``summarize(records)``, computed once per record content (every aggregation of a task gets
        the same records)."""

        key = stable_key(kind, list(records))
        hit = self._summaries.get(key)
        if hit is None:
            if len(self._summaries) >= _MAX_SUMMARIES:
                self._summaries.clear()
            hit = self._summaries[key] = summarize([dict(r) for r in records])
        return hit


RUN = LmEvalRun()
