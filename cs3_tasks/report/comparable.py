"""Whether two scored runs can be compared item by item (``cs3-bench compare``, ``report --baseline``).

The one home of "how two runs' settings differ" (`run_differences`), for compare, report --baseline and the
sensitivity view. Two runs are comparable when every setting their ``<set>.settings.json`` records is the
same, except the keys that name the scored system (`SYSTEM_KEYS`), which are expected to differ, the keys that
only say where a run ran (`store.INFORMATIONAL_KEYS`) and flags derived from other settings (`DERIVED_KEYS`).
The check is generic: a setting added to settings.json later counts without a change here, unless it is one of
`store.ADDED_SETTINGS` and a run from before it lacks it (as a resume reads it). Each difference has a kind:
"asr" or "judge" (which ASR heard the speech, which judge gave the verdicts: `MEASUREMENT_KEYS`; the reference
protocol's scripts, read only for its judge, count as the judge's when one run has none) or "scoring"
(anything else: the dataset, the protocol, the authors' scripts, ...). Two systems are compared only when
nothing differs (`check_comparable`); one system's outputs scored twice with other ASR or judge settings is
the sensitivity view (report/sensitivity.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cs3_tasks.report.results import ModelResults
from cs3_tasks.scoring.store import ADDED_SETTINGS, INFORMATIONAL_KEYS, flat_settings

# name the scored system: two systems differ in them by definition
SYSTEM_KEYS = ("model", "outputs")
# which ASR heard the speech channel and which judge gave the verdicts: key -> kind of the difference
MEASUREMENT_KEYS = {"asr": "asr", "asr_language": "asr", "judge": "judge"}
# flags computed from other settings (the reference protocol's comparability with the paper): never compared,
# what they follow from is
DERIVED_KEYS = ("judge_is_reference", "asr_is_reference", "comparable_to_paper")
# the authors' scripts the reference judge's prompts are read from: named only by a run with a judge
JUDGE_PROMPTS = "reference_scripts"
SCORING = "scoring"
MISSING = "<no settings.json>"
# a refusal names at most this many fields (then "and N more")
SHOWN = 6


@dataclass(frozen=True)
class SettingDifference:
    """One setting of one set whose value differs between the two runs (``old``: the first run's)."""

    set_name: str
    field: str  # dotted path into settings.json ("asr.engine.ctranslate2")
    old: Any
    new: Any
    kind: str  # SCORING or a value of MEASUREMENT_KEYS

    @property
    def change(self) -> str:
        """``field: old -> new``, without the set."""
        return f"{self.field}: {_shown(self.old)} -> {_shown(self.new)}"

    def __str__(self) -> str:
        return f"{self.set_name} {self.change}"


class NotComparable(ValueError):
    """Two runs whose settings differ (a `SettingDifference` each): the difference is not the systems'."""

    def __init__(self, name_a: str, name_b: str, differences: Sequence[SettingDifference]):
        self.differences = list(differences)
        shown = "; ".join(str(d) for d in self.differences[:SHOWN])
        more = f"; and {len(self.differences) - SHOWN} more" if len(self.differences) > SHOWN else ""
        kinds = ", ".join(sorted(difference_kinds(self.differences)))
        super().__init__(
            f"{name_a} and {name_b} were not scored alike ({kinds} settings differ: {shown}{more}): their "
            "difference would not be the systems'; score both with the same dataset, protocol, ASR and judge"
        )


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _compared(settings: Mapping) -> dict[str, Any]:
    ignored = (*SYSTEM_KEYS, *INFORMATIONAL_KEYS, *DERIVED_KEYS)
    return flat_settings({k: v for k, v in settings.items() if k not in ignored})


def kind_of(field: str, old: Mapping | None = None, new: Mapping | None = None) -> str:
    """The kind of a difference in ``field`` (a dotted path): "asr", "judge" or SCORING. The reference
    protocol's scripts differ as the judge's when one of the runs (settings ``old``, ``new``) had no judge:
    without one they are not read."""
    top = field.split(".", 1)[0]
    if top == JUDGE_PROMPTS and any(run is not None and run.get("judge") is None for run in (old, new)):
        return "judge"
    return MEASUREMENT_KEYS.get(top, SCORING)


def settings_differences(set_name: str, old: Mapping | None, new: Mapping | None) -> list[SettingDifference]:
    """Every compared setting of one set whose value differs (a run without settings differs in all)."""
    if old is None or new is None:
        recorded = ["recorded" if side is not None else MISSING for side in (old, new)]
        return [SettingDifference(set_name, "settings", *recorded, SCORING)]
    a, b = _compared(old), _compared(new)
    added = {k for k in ADDED_SETTINGS if (k in old) != (k in new)}  # a run from before the field
    return [
        SettingDifference(set_name, key, a.get(key), b.get(key), kind_of(key, old, new))
        for key in dict.fromkeys([*a, *b])
        if a.get(key) != b.get(key) and key.split(".", 1)[0] not in added
    ]


def run_differences(a: ModelResults, b: ModelResults) -> list[SettingDifference]:
    """The differences between the settings of every set both runs scored."""
    shared = [s for s in a.records if s in b.records]
    return [d for s in shared for d in settings_differences(s, a.settings.get(s), b.settings.get(s))]


def difference_kinds(differences: Sequence[SettingDifference]) -> set[str]:
    return {d.kind for d in differences}


def measurement_only(differences: Sequence[SettingDifference]) -> bool:
    """True when the runs differ, in the ASR or the judge only (the same scoring otherwise)."""
    return bool(differences) and difference_kinds(differences) <= set(MEASUREMENT_KEYS.values())


def changes(differences: Sequence[SettingDifference]) -> list[str]:
    """Each distinct ``field: old -> new`` once (the sets of a run usually differ alike)."""
    return list(dict.fromkeys(d.change for d in differences))


def check_comparable(a: ModelResults, b: ModelResults) -> None:
    """NotComparable (a ValueError, one line naming each field, old -> new) unless every compared setting of
    the sets both scored is the same: two systems are compared under one dataset, protocol, ASR and judge."""
    differences = run_differences(a, b)
    if differences:
        raise NotComparable(a.name, b.name, differences)
