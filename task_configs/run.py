"""What one lm-eval run shares across its cs3 tasks: the run's settings and each task's records.

lm-eval builds every task of a run (calling each task's ``custom_dataset`` loader with the run's
``--metadata``) before it filters any, then runs every task's filter, then the aggregations. `LmEvalRun`
holds what crosses those phases:

* ``settings``: the run's setting keys of ``--metadata`` (`SETTING_KEYS`), given by the loaders and
  passed explicitly to whatever needs them (``utils.judge_config(settings)``, the ASR config);
* ``records``: (variant, set) -> the compact records of a task, put by its filter, read by the cs-vs-en
  aggregations of the English twin;
* one summary per (kind, record content), so that the many aggregations of a task summarise once.

Lifetime: a run starts with the first task loader after the previous run's filters (`LmEvalRun.load_task`),
so records of an earlier run in the same process (e.g. the previous ``cs3-bench demo`` system) never leak
into this run's comparison. The single instance `RUN` lives in this module, imported by name from
``utils.py`` and ``conversation_utils.py`` however lm-eval loads those files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

SETTING_KEYS = (
    "protocol",
    "reference_scripts",
    "asr_model",
    "asr_backend",
    "asr_short_clips",
    "asr_device",
    "judge",
    "judge_model",
    "judge_base_url",
)
_MAX_SUMMARIES = 64
# lm-eval hands a task loader its --metadata merged with the model's model_args and the YAML's metadata,
# so keys we do not know are legitimate; a key that looks like ours (judge_*, or a near miss) is a typo.
# Not "asr_*": cs3-cascade has model_args asr_language / asr_use_cache; a near miss cutoff of 0.85 keeps
# tts_backend (0.82 to asr_backend) out.
OUR_PREFIXES = ("judge_",)
OUR_KEYS = ("dataset", *SETTING_KEYS)
_TYPES: dict[str, tuple[type, ...]] = {"judge": (str, bool)}


class MetadataError(ValueError):
    """The cs3 keys of lm-eval's --metadata are misspelled or of the wrong type (raised when the task
    loads, before any generation)."""


def check_metadata(metadata: Mapping[str, Any]) -> None:
    """MetadataError listing every misspelled cs3 key (with the nearest known keys) and every value of the
    wrong type; nothing when the cs3 keys are fine."""
    import difflib

    problems = []
    for key, value in metadata.items():
        if key in OUR_KEYS:
            allowed = _TYPES.get(key, (str,))
            if value is not None and not isinstance(value, allowed):
                names = " or ".join(t.__name__ for t in allowed)
                problems.append(f"{key!r} must be a {names}, got {type(value).__name__} {value!r}")
            continue
        near = difflib.get_close_matches(str(key), OUR_KEYS, n=3, cutoff=0.85)
        if near or str(key).startswith(OUR_PREFIXES):
            hint = f"; did you mean {' or '.join(repr(n) for n in near)}?" if near else ""
            problems.append(f"unknown key {key!r}{hint}")
    if problems:
        raise MetadataError(
            "cs3 --metadata: " + "; ".join(problems) + f". Known keys: {', '.join(OUR_KEYS)}."
        )


class LmEvalRun:
    """Settings and per-task records of one lm-eval run (see the module docstring)."""

    def __init__(self, settings: Mapping[str, Any] | None = None) -> None:
        self.settings: dict[str, Any] = dict(settings or {})
        self.records: dict[tuple[str, str], list[dict]] = {}
        self._summaries: dict[str, dict] = {}
        # how this run is scored (protocol, judge, comparable_to_paper, notes): lm-eval's results carry it
        self.note: dict[str, Any] | None = None

    def load_task(self, metadata: Mapping[str, Any]) -> dict[str, Any]:
        """Called by every task loader: starts a new run after filters ran; returns the settings."""
        if self.records:  # the previous run's filters ran: this loader belongs to a new run
            self.records.clear()
            self._summaries.clear()
        check_metadata(metadata)
        self.settings = {k: metadata[k] for k in SETTING_KEYS if k in metadata}
        return self.settings

    def describe(self, note: Mapping[str, Any]) -> None:
        self.note = dict(note)

    def put_records(self, variant: str, set_name: str, records: Sequence[dict]) -> None:
        self.records[(variant, set_name)] = list(records)

    def records_of(self, variant: str, set_name: str) -> list[dict] | None:
        return self.records.get((variant, set_name))

    def summary(self, kind: str, records: Sequence[Mapping], summarize: Callable[[list], dict]) -> dict:
        """``summarize(records)``, computed once per record content (every aggregation of a task gets
        the same records)."""
        from cs3_tasks.core.cache import stable_key

        key = stable_key(kind, list(records))
        hit = self._summaries.get(key)
        if hit is None:
            if len(self._summaries) >= _MAX_SUMMARIES:
                self._summaries.clear()
            hit = self._summaries[key] = summarize([dict(r) for r in records])
        return hit


RUN = LmEvalRun()
