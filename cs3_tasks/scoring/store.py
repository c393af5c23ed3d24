"""The resumable store of a result dir: ``<set>.records.jsonl`` + ``<set>.settings.json``, the dir's lock."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cs3_tasks.core.audio import AudioError, content_hash
from cs3_tasks.core.cache import atomic_write, json_text, stable_key
from cs3_tasks.core.refusal import Refusal
from cs3_tasks.core.statefile import (
    RECORDS_LIMIT,
    StateFileError,
    check_state_file,
    read_state_text,
)
from cs3_tasks.scoring.outputs import (
    ModelOutput,
    audio_label,
)
from cs3_tasks.scoring.records import RETRYABLE_ERRORS


class SettingsMismatchError(ValueError):
    """The records in a result dir were made with other settings than this run's."""


class ResultDirBusy(Refusal, RuntimeError):
    """Another run holds the result dir's lock: a refusal (exit 2)."""


LOCK_FILE = ".cs3-bench.lock"


# the record field holding `input_key`: what the record was computed from
INPUT_KEY = "input_key"
# the fields of a cs3 dataset item that scoring reads (prompts, keyword tests, categories)
SCORED_DOC_FIELDS = ("Qid", "Question", "Answer", "Answer_zh", "Answer_en", "Category")

# settings keys added since result dirs were first written: a dir whose settings lack one is resumed (its
# records lack `INPUT_KEY` too, so every item is scored again against this run's inputs)
ADDED_SETTINGS = ("dataset_sha256",)

# what identifies the scored system in <set>.settings.json: one result dir holds one system
IDENTITY_KEYS = ("model",)
# settings that say where a run ran, for the record only: never compared (a resume on another machine with
# the same fingerprints is the same run)
INFORMATIONAL_KEYS = ("machine",)
# this machine's paths of a result dir (the outputs folder it scored), beside the results but not part of
# them: nothing shared names a local folder; a copy without it reads the same
LOCAL_FILE = ".cs3-bench.local.json"


@contextmanager
def result_dir_lock(out: Path, *, wait: bool = False) -> Iterator[None]:
    """Hold the exclusive lock of result dir ``out`` (``fcntl.flock`` on ``<out>/.cs3-bench.lock``, released
    when the holder ends, even killed). Busy: ResultDirBusy naming the holder, or wait for it (``wait``)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - no flock on this platform: runs are not serialised
        yield
        return
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    check_state_file(out / LOCK_FILE, links=False)  # written in place: a FIFO, a device, a link refused
    with open(out / LOCK_FILE, "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                handle.seek(0)
                holder = handle.read().strip() or "another process"
                raise ResultDirBusy(
                    f"{out} is in use by another cs3-bench run ({holder}); wait for it, pass --wait to "
                    "queue behind it, or use another --out"
                ) from None
            fcntl.flock(handle, fcntl.LOCK_EX)
        import os

        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def check_same_system(out: Path, settings: Mapping, outputs: Path | None = None) -> None:
    """SettingsMismatchError when result dir ``out`` holds results of another system: another set's
    settings name another model (`IDENTITY_KEYS`), or on this machine the dir was made from another outputs
    folder (`LOCAL_FILE`). One result dir holds one model's results."""
    mine = {k: settings.get(k) for k in IDENTITY_KEYS}
    for path in sorted(Path(out).glob("*.settings.json")):
        try:
            theirs = json.loads(read_state_text(path))
        except StateFileError:
            raise
        except (OSError, ValueError):
            continue
        theirs = {k: theirs.get(k) for k in IDENTITY_KEYS} if isinstance(theirs, dict) else {}
        if theirs != mine:
            raise SettingsMismatchError(
                f"{out} holds results of another system ({path.name}: model {theirs.get('model')!r}); this "
                f"run scores model {mine['model']!r}. Use another --out, or --restart to score this model "
                "here."
            )
    scored = local_outputs(out)
    if outputs is not None and scored is not None and scored != Path(outputs).resolve():
        raise SettingsMismatchError(
            f"{out} holds the results of the outputs in {scored}; this run scores {Path(outputs).resolve()}. "
            "Use another --out, or --restart to score these outputs here."
        )


def local_outputs(out: Path) -> Path | None:
    """The outputs folder a result dir was scored from, on this machine (None: not recorded here)."""
    try:
        found = json.loads(read_state_text(Path(out) / LOCAL_FILE)).get("outputs")
    except StateFileError:
        raise
    except (OSError, ValueError, AttributeError):
        return None
    return Path(found) if isinstance(found, str) else None


def write_local_outputs(out: Path, outputs: Path) -> None:
    """Record on this machine which outputs folder result dir ``out`` scores (`LOCAL_FILE`)."""

    atomic_write(Path(out) / LOCAL_FILE, json.dumps({"outputs": str(Path(outputs).resolve())}) + "\n")


def comparable_settings(settings: Mapping) -> dict:
    """``settings`` without the keys that only describe where the run ran (`INFORMATIONAL_KEYS`)."""
    return {k: v for k, v in settings.items() if k not in INFORMATIONAL_KEYS}


class RecordsError(ValueError):
    """A records file that cannot be read; the message names the file and line."""


def read_run_settings(result_dir: Path, set_name: str, summary: Mapping | None = None) -> dict | None:
    """The settings a set of a result dir was scored with: ``<set>.settings.json``, else the copy in its
    ``summary``; None when neither is there. RecordsError (naming the file) when the file is not a JSON
    object."""
    path = Path(result_dir) / f"{set_name}.settings.json"
    if not check_state_file(path):
        found = (summary or {}).get("settings")
        return found if isinstance(found, dict) else None
    try:
        settings = json.loads(read_state_text(path))
    except (ValueError, UnicodeDecodeError) as exc:
        raise RecordsError(f"{path}: not a JSON object ({exc})") from None
    if not isinstance(settings, dict):
        raise RecordsError(f"{path}: not a JSON object")
    return settings


def read_records(path: Path) -> dict[str, dict]:
    """The latest record per Qid in a records file (in the order Qids first appear), read the same way by the
    scorer, its resume, reports and comparisons: a torn last line (a run killed while writing it: no newline
    at its end) is skipped, with a note on stderr (a re-run scores that item again); any other line that is
    not a JSON record with a "qid" is a RecordsError naming the file and line."""
    records: dict[str, dict] = {}
    path = Path(path)
    if not check_state_file(path, RECORDS_LIMIT):
        return records
    content = read_state_text(path, RECORDS_LIMIT, errors="surrogateescape")
    lines = content.splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as exc:
            if number == len(lines) and not content.endswith("\n"):
                print(
                    f"note: {path}: the last line (line {number}) is torn, as a run killed while writing it "
                    "leaves it: skipped (a re-run scores that item again)",
                    file=sys.stderr,
                )
                break
            cause = getattr(exc, "msg", None) or type(exc).__name__
            raise RecordsError(f"{path}:{number}: not a JSON record ({cause})") from None
        if not isinstance(record, dict) or not isinstance(record.get("qid"), str):
            raise RecordsError(f"{path}:{number}: a record needs a 'qid'")
        records[record["qid"]] = record
    return records


def needs_rescore(
    record: Mapping,
    output: ModelOutput | None,
    key: str,
    retryable: Sequence[str] = RETRYABLE_ERRORS,
) -> bool:
    """A record is reused unless it carries a retryable failure or was computed from other inputs than
    ``key`` (`input_key`: the output's text and audio bytes, the doc's fields); a record without a key (a
    file from before keys were stored) is scored again."""
    if any(record.get(key_) for key_ in retryable):
        return True
    if output is None and (record.get("text") is not None or record.get("audio") is not None):
        return True
    return record.get(INPUT_KEY) != key


def audio_identity(audio: Any) -> str | None:
    """What an output's audio is, for `input_key`: the hash of its bytes (`audio.content_hash`), or why it
    cannot be read (the record then says so too)."""

    if audio is None:
        return None
    try:
        return content_hash(audio)
    except (AudioError, OSError, ValueError, TypeError) as exc:
        return f"unreadable {audio_label(audio)}: {type(exc).__name__}"


def doc_identity(doc: Mapping | None, doc_fields: Sequence[str] | None) -> dict | None:
    """The fields of a dataset item that scoring reads (all of them when ``doc_fields`` is None)."""
    if doc is None:
        return None
    return {k: doc.get(k) for k in doc_fields if k in doc} if doc_fields is not None else dict(doc)


def input_key(doc: Mapping | None, output: ModelOutput | None, doc_fields: Sequence[str] | None) -> str:
    """What one record is computed from, as a sha256 hex digest: the doc's scored fields, the output's text,
    problem, given transcript and audio bytes (never its path: moved outputs are the same outputs)."""

    produced = None
    if output is not None:
        produced = {
            "text": output.text,
            "audio": audio_identity(output.audio),
            "problem": output.problem,
            "transcript": output.transcript,
        }
    return stable_key(doc_identity(doc, doc_fields), produced)


def dataset_identity(docs: Sequence[Mapping], doc_fields: Sequence[str] | None = SCORED_DOC_FIELDS) -> str:
    """The identity of a set's dataset for ``<set>.settings.json``: a sha256 of its items' scored fields, in
    order (the same content at another path or from another copy is the same dataset)."""

    return stable_key([doc_identity(doc, doc_fields) for doc in docs])


def settings_difference(previous: Mapping, current: Mapping) -> str:
    """The fields whose values differ, each as ``field: old -> new``; a nested field is named by its path
    (``asr.engine.ctranslate2: '4.6.0' -> '4.8.5'``). Informational keys are left out; settings hold no
    secret."""
    old, new = flat_settings(comparable_settings(previous)), flat_settings(comparable_settings(current))
    keys = [k for k in dict.fromkeys([*old, *new]) if old.get(k) != new.get(k)]
    return "; ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys)


def flat_settings(value: Any, prefix: str = "") -> dict[str, Any]:
    """Settings as one level: a nested field under its dotted path (``asr.engine.ctranslate2``)."""
    if isinstance(value, Mapping) and value:
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(flat_settings(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: value}


def _write_records(path: Path, records: Iterable[dict]) -> None:

    atomic_write(path, "".join(json_text(record) + "\n" for record in records))


class RecordsFile:
    """The resumable records of one set in a result dir: ``<set>.records.jsonl`` (one JSON record per
    line, appended and flushed as each record is final) and ``<set>.settings.json`` (what the records
    depend on: a resumed run must use the same settings).

    Lifetime: `open` (checks the settings, reads what is done), `pending`, `appender` while scoring,
    `finish` (compacts the file to one record per id, in order).
    """

    def __init__(self, out: Path, set_name: str):
        self.out = Path(out)
        self.path = self.out / f"{set_name}.records.jsonl"
        self.settings_path = self.out / f"{set_name}.settings.json"
        self.done: dict[str, dict] = {}

    def open(
        self, settings: Mapping, *, restart: bool = False, outputs: Path | None = None
    ) -> dict[str, dict]:
        """The finished records (none with ``restart``); SettingsMismatchError if made otherwise (other
        settings, another system, another ``outputs`` folder on this machine)."""

        settings = json.loads(json_text(settings))  # compared as written (text made valid, `json_text`)
        self.out.mkdir(parents=True, exist_ok=True)
        if not restart and any(k in settings for k in IDENTITY_KEYS):
            check_same_system(self.out, settings, outputs)
        if restart:
            self.path.unlink(missing_ok=True)
        if check_state_file(self.path, RECORDS_LIMIT) and check_state_file(self.settings_path):
            previous = comparable_settings(json.loads(read_state_text(self.settings_path)))
            compared = {
                k: v
                for k, v in comparable_settings(settings).items()
                if k in previous or k not in ADDED_SETTINGS
            }
            if previous != compared:
                raise SettingsMismatchError(
                    f"{self.path} was made with other settings ({settings_difference(previous, settings)}). "
                    "Use --restart (ASR and judge caches keep it cheap) or another --out."
                )
        atomic_write(self.settings_path, json_text(settings, indent=2) + "\n")
        if outputs is not None:
            write_local_outputs(self.out, outputs)
        self.done = read_records(self.path)
        return self.done

    def pending(
        self,
        order: Sequence[str],
        outputs: Mapping[str, ModelOutput],
        keys: Mapping[str, str],
        retryable: Sequence[str] = RETRYABLE_ERRORS,
    ) -> set[str]:
        """The ids still to score: not done, done with a retryable failure, or made from other inputs
        (``keys``)."""
        return {
            q
            for q in order
            if q not in self.done or needs_rescore(self.done[q], outputs.get(q), keys[q], retryable)
        }

    @contextmanager
    def appender(self) -> Iterator[Callable[[dict], None]]:
        """A function that appends one final record to the file (flushed) and marks it done."""
        if self.path.is_file():  # a torn last line (killed mid-write) must not swallow the next record
            _write_records(self.path, self.done.values())
        with open(self.path, "a", encoding="utf-8") as handle:

            def append(record: dict) -> None:
                handle.write(json_text(record) + "\n")
                handle.flush()
                self.done[record["qid"]] = record

            yield append

    def score_pending(
        self,
        docs: Sequence[Mapping],
        outputs: Mapping[str, ModelOutput],
        score: Callable[[list[Mapping], list[ModelOutput], Callable[[dict], None]], object],
        *,
        doc_id: Callable[[Mapping], str],
        retryable: Sequence[str] = RETRYABLE_ERRORS,
        label: str = "",
        doc_fields: Sequence[str] | None = None,
        recorded_keys: Mapping[str, str | None] | None = None,
    ) -> list[dict]:
        """Score what is pending with ``score(docs, outputs, on_record)``, appending each final record with
        its `input_key` (``doc_fields``: the doc fields scoring reads; None: all); returns every record, one
        per id: docs in order, then unknown ids (after `open`). ``recorded_keys`` (a re-score of recorded
        results): each record keeps the key it was recorded with, and every item is scored again (nothing
        is heard or asked, and a record of this dir must never stand for the one being verified)."""
        doc_ids = [doc_id(d) for d in docs]
        by_id = dict(zip(doc_ids, docs))
        order = doc_ids + [q for q in outputs if q not in by_id]
        if recorded_keys is None:
            keys = {q: input_key(by_id.get(q), outputs.get(q), doc_fields) for q in order}
            pending = self.pending(order, outputs, keys, retryable)
        else:
            keys, pending = {q: recorded_keys.get(q) for q in order}, set(order)
        print(
            f"{label}: {len(order)} items, {len(order) - len(pending)} already scored, "
            f"{len(pending)} to score",
            file=sys.stderr,
        )

        def keyed(record: dict) -> dict:
            key = keys.get(record["qid"])
            if key is None and recorded_keys is not None:  # recorded without one: kept without one
                return record
            return {**record, INPUT_KEY: key}

        with self.appender() as append:
            if pending:
                score(
                    [d for d in docs if doc_id(d) in pending],
                    [o for q, o in outputs.items() if q in pending],
                    lambda record: append(keyed(record)),
                )
        return self.finish(order)

    def finish(self, order: Sequence[str]) -> list[dict]:
        """Compact the file: one record per id, in ``order``; returns those records."""
        final = [self.done[q] for q in order if q in self.done]
        _write_records(self.path, final)
        return final
