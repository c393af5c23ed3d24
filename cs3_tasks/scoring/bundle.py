"""A published result dir read as untrusted input (``cs3-bench score --from-results``): every file it reads
lies inside the bundle, and every settings and record field is checked for type and range before it counts.

A refusal is one `BundleError` line naming the file, the line or the field, and why (exit 2). The checks
follow the record schema (`records.blank_record` and what `Protocol.fill_verdict` adds): a verdict is true or
false, a judge score a finite number on the protocol's scale, a text a string, a count a whole number, an
audio label a path inside the outputs folder it names (never absolute, never ``..``). Fields the score does
not know are kept as they are; they count for nothing.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from cs3_tasks.core.cache import json_text
from cs3_tasks.core.data import KNOWLEDGE_SETS
from cs3_tasks.scoring.records import (
    CHANNELS,
    OPEN_ENDED_ASPECTS,
    PROTOCOLS,
    SCORE_RANGE,
    STATUSES,
    UNNAMED_PROTOCOL,
)
from cs3_tasks.scoring.settings import ScoringError
from cs3_tasks.scoring.store import RecordsError, flat_settings, read_records, read_run_settings

Check = Callable[[Any], str | None]  # why a value is wrong, or None


class BundleError(ScoringError):
    """A result dir that cannot be re-scored as it is: one line naming the file, the line or field, and
    why."""


def kind(value: Any) -> str:
    """A value's JSON kind, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def text_or_null(value: Any) -> str | None:
    return None if value is None or isinstance(value, str) else f"{kind(value)}, not a string or null"


def text(value: Any) -> str | None:
    return None if isinstance(value, str) and value else f"{kind(value)}, not a non-empty string"


def flag_or_null(value: Any) -> str | None:
    return None if value is None or isinstance(value, bool) else f"{kind(value)}, not true, false or null"


def flag(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"{kind(value)}, not true or false"


def number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def count_or_null(value: Any) -> str | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return None
    return f"{value!r}, not a whole number >= 0 or null"


def rate_or_null(value: Any) -> str | None:
    return None if value is None or (number(value) and value >= 0) else f"{value!r}, not a finite number >= 0"


def asks(value: Any) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return None
    return f"{value!r}, not a whole number >= 1"


def score_on(scale: tuple[int, int]) -> Check:
    low, high = scale

    def check(value: Any) -> str | None:
        if value is None or (number(value) and low <= value <= high):
            return None
        return f"{value!r}, not a finite number on the {low}-{high} scale or null"

    return check


def samples_on(scale: tuple[int, int]) -> Check:
    score = score_on(scale)

    def check(value: Any) -> str | None:
        if value is None:
            return None
        if not isinstance(value, dict) or not isinstance(value.get("values"), list):
            return f"{kind(value)}, not an object with a list of values"
        models = value.get("models", [])
        why = next((w for v in value["values"] if (w := score(v))), None) or score(value.get("min"))
        why = why or score(value.get("max"))
        if not why and (not isinstance(models, list) or any(text_or_null(m) for m in models)):
            why = "its models are not a list of strings"
        return why

    return check


def one_of(choices: Sequence[Any]) -> Check:
    return lambda value: None if value in choices else f"{value!r}, not one of {', '.join(map(str, choices))}"


def audio_label(value: Any) -> str | None:
    """An audio label names a file inside the outputs folder it was scored from, or is null."""
    if value is None:
        return None
    if not isinstance(value, str):
        return f"{kind(value)}, not a string or null"
    path = PurePosixPath(value.replace("\\", "/"))
    if path.is_absolute() or re.match(r"^[A-Za-z]:", value) or ".." in path.parts:
        return f"{value!r} leads outside the bundle (absolute or ..): a bundle names audio relative to itself"
    return None


# the record fields that hold a text or nothing
TEXT_FIELDS = ("category", "problem", "text", "transcript", "asr_language", "asr_error", "asr_note")
TEXT_FIELDS += ("input_key", "text_language", "speech_language")


def record_checks(set_name: str, protocol: str) -> dict[str, Check]:
    """Every known field of a record of ``set_name`` scored under ``protocol``, with its check."""
    checks: dict[str, Check] = {
        "qid": text,
        "set": one_of([set_name]),
        "protocol": one_of([*PROTOCOLS, None]),
        **dict.fromkeys(TEXT_FIELDS, text_or_null),
        "audio": audio_label,
        "psr_recognised": count_or_null,
        "psr_total": count_or_null,
        "english_wer": rate_or_null,
        "mixed_error_rate": rate_or_null,
        "text_lsa": flag_or_null,
        "speech_lsa": flag_or_null,
    }
    scale = SCORE_RANGE[protocol]
    for ch in CHANNELS:
        if set_name in KNOWLEDGE_SETS:
            checks.update(dict.fromkeys((f"{ch}_keyword_hit", f"{ch}_judge", f"{ch}_correct"), flag_or_null))
            checks[f"{ch}_status"] = one_of(STATUSES)
            prefixes = [f"{ch}_judge"]
        else:
            checks[f"{ch}_understood"] = flag_or_null
            prefixes = [f"{ch}_{aspect}" for aspect in OPEN_ENDED_ASPECTS]
            for prefix in prefixes:
                checks[prefix] = score_on(scale)
                checks[f"{prefix}_fallback"] = flag_or_null
                checks[f"{prefix}_samples"] = samples_on(scale)
        for prefix in prefixes:
            for part in ("raw", "error", "note", "model"):
                checks[f"{prefix}_{part}"] = text_or_null
            checks[f"{prefix}_asks"] = asks
    return checks


def settings_checks() -> dict[str, Check]:
    """Every field of ``<set>.settings.json`` that a re-score reads or writes, with its check."""
    return {
        "protocol": one_of([*PROTOCOLS, None]),
        "model": text,
        "dataset_sha256": sha256,
        "asr": lambda v: None if isinstance(v, dict) else f"{kind(v)}, not an object",
        "asr_language": text_or_null,
        "judge": judge_settings,
        "machine": lambda v: None if v is None or isinstance(v, (dict, str)) else f"{kind(v)}, not an object",
        "reference_scripts": object_or_null,
        "judge_is_reference": flag,
        "asr_is_reference": flag,
        "comparable_to_paper": comparable,
    }


def sha256(value: Any) -> str | None:
    return (
        None
        if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value)
        else f"{value!r}, not a sha256"
    )


def object_or_null(value: Any) -> str | None:
    return None if value is None or isinstance(value, dict) else f"{kind(value)}, not an object or null"


def judge_settings(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        return f"{kind(value)}, not an object or null"
    fields: dict[str, Check] = {
        "model": text,
        "base_url": text_or_null,
        "host": text_or_null,
        "temperature": lambda v: None if v is None or number(v) else f"{v!r}, not a number",
        "samples": asks,
    }
    return next((f"{k}: {why}" for k, c in fields.items() if k in value and (why := c(value[k]))), None)


def comparable(value: Any) -> str | None:
    if isinstance(value, dict) and all(isinstance(v, bool) for v in value.values()):
        return None
    return f"{kind(value)}, not an object of true / false per channel"


def refused_field(checks: Mapping[str, Check], item: Mapping) -> str | None:
    """``field: why`` of the first field of ``item`` that fails its check; None when every one passes."""
    return next((f"{k}: {why}" for k, check in checks.items() if k in item and (why := check(item[k]))), None)


def inside(root: Path, path: Path) -> Path:
    """``path``, refused when it (or a link on the way) leads outside ``root``: nothing else is read."""
    resolved, top = Path(path).resolve(), Path(root).resolve()
    if resolved != top and top not in resolved.parents:
        raise BundleError(
            f"{path}: leads outside {root} (to {resolved}): a bundle is read only inside itself"
        )
    return Path(path)


def read_json_object(root: Path, path: Path) -> dict | None:
    """The JSON object in ``path`` (inside ``root``); None when there is no such file."""
    if not Path(path).is_file() and not Path(path).is_symlink():
        return None
    inside(root, path)
    try:
        found = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BundleError(f"{path}: not a JSON object ({type(exc).__name__})") from None
    if not isinstance(found, dict):
        raise BundleError(f"{path}: {kind(found)}, not a JSON object")
    return found


def bundle_summary(root: Path, folder: Path, set_name: str) -> dict | None:
    """The set's summary as the bundle holds it (what a re-score must reproduce); None: there is none."""
    return read_json_object(root, Path(folder) / f"{set_name}.summary.json")


def bundle_settings(root: Path, folder: Path, set_name: str) -> dict:
    """The settings a set of the bundle was scored with (``<set>.settings.json``, else its summary's
    copy), each field checked."""
    path = Path(folder) / f"{set_name}.settings.json"
    try:
        if path.is_file() or path.is_symlink():
            inside(root, path)
            settings, where = read_run_settings(folder, set_name), str(path)
        else:
            summary = bundle_summary(root, folder, set_name)
            settings = read_run_settings(folder, set_name, summary)
            where = f"{Path(folder) / set_name}.summary.json: settings"
    except RecordsError as exc:
        raise BundleError(str(exc)) from None
    if settings is None:
        raise BundleError(f"{folder}: {set_name} has records but no settings ({path.name} or a summary)")
    why = refused_field(settings_checks(), settings)
    if why:
        raise BundleError(f"{where}: {why}")
    for field in ("model", "dataset_sha256"):
        if field not in settings:
            raise BundleError(
                f"{where}: no {field}: a bundle names the system it scored and the dataset it was scored "
                "against (dataset_sha256), or it cannot be verified"
            )
    return settings


def bundle_records(root: Path, folder: Path, set_name: str, protocol: str) -> dict[str, dict]:
    """The records of a set of the bundle (the latest per Qid), each field checked, each record of
    ``set_name`` and ``protocol`` as its settings say."""
    path = Path(folder) / f"{set_name}.records.jsonl"
    inside(root, path)
    try:
        records = read_records(path)
    except RecordsError as exc:
        raise BundleError(str(exc)) from None
    checks = record_checks(set_name, protocol)
    for qid, record in records.items():
        where = f"{path}: the record of {qid!r}"
        why = refused_field(checks, record)
        if why:
            raise BundleError(f"{where}: {why}")
        recorded = record.get("protocol") or UNNAMED_PROTOCOL
        if recorded != protocol:
            raise BundleError(
                f"{where}: protocol: {recorded!r}, but the settings say {protocol!r}: settings and records "
                "must agree"
            )
    return records


def check_known_qids(
    path: Path, records: Mapping[str, Mapping], qids: set[str], unknown: Callable[[str], str]
):
    """A record of a Qid the dataset lacks must say so in its problem (``unknown(qid)``), as scoring wrote
    it."""
    for qid, record in records.items():
        if qid not in qids and not str(record.get("problem") or "").startswith(unknown(qid)):
            raise BundleError(f"{path}: qid: {qid!r} is not an item of the dataset scored against")


def distinct_systems(folders: Sequence[Path], model_of: Callable[[Path], str]) -> None:
    """Two result dirs of one system are refused, naming both (a leaderboard has one row per system)."""
    seen: dict[str, Path] = {}
    for folder in folders:
        model = model_of(folder)
        if model in seen:
            raise BundleError(
                f"{seen[model]} and {folder} both hold results of model {model!r}: one system, one result dir"
            )
        seen[model] = folder


def summary_difference(expected: Mapping | None, found: Mapping) -> str | None:
    """What ``found`` (a summary computed again) does not reproduce of ``expected`` (the summary as it was
    written): the first differing values as ``field: written -> computed``; None when every value of
    ``expected`` is reproduced (fields it lacks are newer, not differences) or nothing is expected."""
    if expected is None:
        return None
    old, new = flat_settings(expected), flat_settings(json.loads(json_text(found)))
    missing = object()
    differing = [k for k, v in old.items() if new.get(k, missing) != v]
    if not differing:
        return None
    shown = "; ".join(f"{k}: {old[k]!r} -> {new.get(k)!r}" for k in differing[:3])
    more = f" and {len(differing) - 3} more" if len(differing) > 3 else ""
    return f"{shown}{more}"
