"""Reading what a model produced: one `ModelOutput` per Qid, from the authors' layout or ours.

Authors' layout: ``json/cs_<set>.json`` or ``json/<set>.json`` (one JSON array, as their writer makes it,
or JSON lines; rows {Qid, Response}) + ``wav/cs_<set>/<Qid>.wav``, ``wav/<set>/<Qid>.wav`` or
``wav/<Qid>.wav``
(no ``wav/`` folder: a text-only model); ``json_asr/cs_<set>.json`` ({Qid, Response_hyp}) holds given
transcripts (`read_given_transcripts`). This module is the one home of both layouts.
Ours: ``<set>.jsonl`` (JSON lines {Qid, text, audio}; audio relative to the outputs dir or absolute), and/or
the per-rank shards ``<set>.rank<k>.jsonl`` of a data-parallel run (read as their union).
Problems of single items (bad JSON line, empty response, missing wav) are carried on the item
(``ModelOutput.problem``); only a missing or ambiguous outputs directory raises.
"""

from __future__ import annotations

import codecs
import glob
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cs3_tasks.core.data import SETS, check_set
from cs3_tasks.core.text import valid_text

if TYPE_CHECKING:  # pragma: no cover
    from cs3_tasks.core.audio import AudioSource

IN_MEMORY_AUDIO = "<in-memory audio>"
# The authors' file stem of each set (json/<stem>.json, wav/<stem>/, json_asr/<stem>.json, utils/<stem>.py).
AUTHORS_SET_FILES = {
    "knowledge": "cs_knowledge",
    "knowledge_en": "cs_knowledge_en",
    "open_ended": "cs_open_ended",
}


@dataclass
class ModelOutput:
    """One model output for one Qid."""

    qid: str
    text: str | None  # text-channel response
    audio: AudioSource | None  # speech-channel response (path/bytes/array) or None (text-only model)
    problem: str | None = None  # input problem found while reading (missing wav, empty response, ...)
    transcript: str | None = None  # a given transcript of the speech (--use-given-transcripts): no ASR


def audio_label(audio: Any, root: str | os.PathLike | None = None) -> str | None:
    """What a record says about an output's audio: its path (relative to ``root``, the outputs folder, when
    it lies inside it: results name no folder of this machine), or a placeholder for in-memory audio."""
    if audio is None:
        return None
    if isinstance(audio, Mapping) and isinstance(audio.get("path"), str) and audio.get("path"):
        audio = audio["path"]
    if not isinstance(audio, (str, os.PathLike)):
        return IN_MEMORY_AUDIO
    if root is not None:
        relative = os.path.relpath(os.path.abspath(audio), os.path.abspath(root))
        if not relative.startswith(os.pardir):
            return Path(relative).as_posix()
    return str(audio)


def repair_text(text: str) -> tuple[str, str | None]:
    """A text response made encodable (`text.valid_text`) and the problem to record when it was not."""
    return valid_text(text, "text response")


def failed_item(text: Any, error: str) -> tuple[str | None, str]:
    """The text and problem of an item whose generation failed with ``error`` (a wrapper's row or
    response): a failure, not a wrong answer. An empty text is no answer; a text the model did give (e.g.
    before its TTS failed) is still scored."""
    return (text if isinstance(text, str) and text.strip() else None), f"generation failed: {error}"


def join_problems(*problems: str | None) -> str | None:
    """The problems that are set, joined with "; " (None when there is none)."""
    kept = [p for p in problems if p]
    return "; ".join(kept) if kept else None


def read_outputs(
    outputs_dir: Path, set_name: str, *, known_sets: Sequence[str] = SETS
) -> dict[str, ModelOutput]:
    """Read one set's outputs from ``outputs_dir`` (see the module docstring for the two layouts).

    ``known_sets``: the accepted set names (other tasks, e.g. the belle_eval_s2s conversation set, pass
    theirs).
    """
    if set_name not in known_sets:
        check_set(set_name)
    outputs_dir = Path(outputs_dir)
    authors = authors_file(outputs_dir, "json", set_name)
    ours = output_files(outputs_dir, set_name)
    if authors is not None and ours:
        raise ValueError(
            f"{outputs_dir}: both {authors.name} (authors' layout) and {ours[0].name} exist; keep one"
        )
    if authors is not None:
        return _read_rows(authors, outputs_dir, set_name, authors_layout=True)
    if ours:
        return read_output_union(ours, outputs_dir, set_name)
    stem = AUTHORS_SET_FILES.get(set_name, set_name)
    raise FileNotFoundError(
        f"no outputs for set {set_name!r} in {outputs_dir}: expected json/{stem}.json (or "
        f"json/{set_name}.json) + wav/{stem}/<Qid>.wav (authors' layout) or {set_name}.jsonl"
    )


def find_output_sets(outputs_dir: Path, known_sets: Sequence[str] = SETS) -> list[str]:
    """The sets an outputs folder holds, in either layout, in ``known_sets`` order (for ``--set all``)."""
    outputs_dir = Path(outputs_dir)
    return [
        name
        for name in known_sets
        if (name in SETS and authors_file(outputs_dir, "json", name)) or output_files(outputs_dir, name)
    ]


def authors_file(outputs_dir: Path, folder: str, set_name: str) -> Path | None:
    """``<folder>/cs_<set>.json`` or ``<folder>/<set>.json`` of an outputs folder in the authors' layout
    (another task's set: ``<folder>/<set>.json``); None when absent, ValueError when both are there."""
    found = [
        Path(outputs_dir) / folder / f"{name}.json"
        for name in dict.fromkeys([AUTHORS_SET_FILES.get(set_name, set_name), set_name])
        if (Path(outputs_dir) / folder / f"{name}.json").is_file()
    ]
    if len(found) > 1:
        raise ValueError(
            f"{outputs_dir}: both {found[0].name} and {found[1].name} in {folder}/ for set {set_name}; "
            "keep one"
        )
    return found[0] if found else None


def read_given_transcripts(outputs_dir: Path, set_name: str) -> dict[str, str | None]:
    """Qid -> ``Response_hyp`` of ``json_asr/cs_<set>.json`` (the authors' transcripts); FileNotFoundError
    when absent. A row without usable text maps to None (the speech channel of that item is then missing);
    rows without a Qid are skipped, the first row of a Qid wins."""
    check_set(set_name)
    path = authors_file(Path(outputs_dir), "json_asr", set_name)
    if path is None:
        raise FileNotFoundError(
            f"no transcripts for set {set_name!r} in {outputs_dir}: expected "
            f"json_asr/{AUTHORS_SET_FILES[set_name]}.json with Response_hyp"
        )
    given: dict[str, str | None] = {}
    for line_no, row in _rows(path):
        if line_no is not None:  # a JSON line: parsed here; a bad one names no Qid
            try:
                row = json.loads(row) if isinstance(row, str) else None
            except ValueError:
                row = None
        qid = row.get("Qid") if isinstance(row, dict) else None
        if not isinstance(qid, str) or not qid.strip() or qid.strip() in given:
            continue
        value = row.get("Response_hyp")
        given[qid.strip()] = value if isinstance(value, str) else None
    return given


def output_files(outputs_dir: Path, set_name: str) -> list[Path]:
    """Our layout's files of one set, oldest first: ``<set>.jsonl`` and the shards ``<set>.rank<k>.jsonl``
    that rank k of a data-parallel run writes. Empty when there is none."""
    outputs_dir = Path(outputs_dir)
    files = [outputs_dir / f"{set_name}.jsonl"]
    files += [
        path
        for path in outputs_dir.glob(f"{glob.escape(set_name)}.rank*.jsonl")
        if re.fullmatch(r"rank\d+", path.suffixes[-2].lstrip(".") if len(path.suffixes) > 1 else "")
    ]
    return sorted(
        (path for path in files if path.is_file()), key=lambda path: (path.stat().st_mtime_ns, path.name)
    )


def read_output_union(files: Sequence[Path], outputs_dir: Path, set_name: str) -> dict[str, ModelOutput]:
    """The union of several files of one set (the shards of a data-parallel run), ``files`` oldest first.

    The ranks of one run answer disjoint Qids; a Qid in several files (shards of runs with different
    process counts in one folder) takes its row from the newest file, as a re-run's row replaces an older
    one within a file."""
    union: dict[str, ModelOutput] = {}
    for path in files:
        union.update(_read_rows(Path(path), Path(outputs_dir), set_name, authors_layout=False))
    return union


_QID_IN_BROKEN_LINE = re.compile(r'"Qid"\s*:\s*"([^"]+)"')


def _rows(path: Path) -> Iterator[tuple[int | None, str | UnicodeDecodeError | Any]]:
    """(line number, text of the line, or its UTF-8 decoding error) of a JSON-lines file (`decoded_lines`),
    or (None, element) of a JSON array."""
    content = Path(path).read_bytes()
    if content.startswith(codecs.BOM_UTF8):
        content = content[len(codecs.BOM_UTF8) :]
    if content.lstrip().startswith(b"["):
        try:
            whole = json.loads(content.decode("utf-8"))
        except (ValueError, RecursionError):  # not UTF-8, not one JSON document, too deep: line by line
            whole = None
        if isinstance(whole, list):
            yield from ((None, element) for element in whole)
            return
    yield from decoded_lines(path)


def _read_rows(
    path: Path, outputs_dir: Path, set_name: str, *, authors_layout: bool
) -> dict[str, ModelOutput]:
    outputs: dict[str, ModelOutput] = {}
    for index, (line_no, line) in enumerate(_rows(path)):
        where = f"line {line_no}" if line_no is not None else f"element {index}"
        if line_no is None:  # an element of a JSON array, parsed like a line
            line = json.dumps(line, ensure_ascii=False)
        if isinstance(line, UnicodeDecodeError):
            output = _undecodable_line(line, where, path, outputs_dir, set_name, authors_layout)
        else:
            output = _parse_line(line, where, path, outputs_dir, set_name, authors_layout)
        if output.qid in outputs:  # keep the first answer, say so on it
            first = outputs[output.qid]
            first.problem = join_problems(first.problem, f"duplicate Qid: {where} of {path.name} ignored")
            continue
        outputs[output.qid] = output
    return outputs


def decoded_lines(path: Path) -> list[tuple[int, str | UnicodeDecodeError]]:
    """The non-blank lines of an outputs file, each decoded strictly as UTF-8 (a BOM is allowed), or the
    decoding error of a line that is not UTF-8. Raises ValueError naming the file when most lines are not
    (the file is in another encoding: scoring it would score garbage)."""
    lines: list[tuple[int, str | UnicodeDecodeError]] = []
    content = Path(path).read_bytes()
    if content.startswith(codecs.BOM_UTF8):
        content = content[len(codecs.BOM_UTF8) :]
    for line_no, raw in enumerate(content.splitlines(), start=1):
        try:
            line: str | UnicodeDecodeError = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = exc
        if isinstance(line, str) and not line.strip():
            continue
        lines.append((line_no, line))
    bad = [(n, e) for n, e in lines if isinstance(e, UnicodeDecodeError)]
    if bad and 2 * len(bad) > len(lines):
        first_no, first = bad[0]
        raise ValueError(
            f"{path}: {len(bad)} of {len(lines)} lines are not UTF-8 (first: line {first_no}, byte "
            f"{first.start}){_encoding_hint(first.object)}; expected UTF-8: re-save the file as UTF-8"
        )
    return lines


def _encoding_hint(raw: bytes) -> str:
    try:
        raw.decode("gb18030")
    except UnicodeDecodeError:
        return ""
    return " (looks like GBK)"


def _undecodable_line(
    exc: UnicodeDecodeError,
    row_name: str,
    path: Path,
    outputs_dir: Path,
    set_name: str,
    authors_layout: bool,
) -> ModelOutput:
    where = f"{path.name} {row_name}"
    found = _QID_IN_BROKEN_LINE.search(exc.object.decode("utf-8", errors="replace"))
    qid = found.group(1) if found else f"<{where}>"
    audio, audio_problem = (
        _authors_wav(outputs_dir, set_name, qid) if (authors_layout and found) else (None, None)
    )
    problem = f"{where} is not UTF-8 (byte {exc.start}){_encoding_hint(exc.object)}: expected UTF-8"
    return ModelOutput(qid, None, audio, join_problems(problem, audio_problem))


def _parse_line(
    line: str, row_name: str, path: Path, outputs_dir: Path, set_name: str, authors_layout: bool
) -> ModelOutput:
    where = f"{path.name} {row_name}"
    try:
        row = json.loads(line)
        if not isinstance(row, dict):
            raise TypeError(f"a JSON {type(row).__name__}, not an object")
    except RecursionError:  # a line nested deeper than the parser's stack: that item's problem
        found = _QID_IN_BROKEN_LINE.search(line[:1000])
        qid = found.group(1) if found else f"<{where}>"
        return ModelOutput(qid, None, None, f"bad JSON in {where}: nested too deep to parse")
    except (ValueError, TypeError) as exc:
        found = _QID_IN_BROKEN_LINE.search(line)
        qid = found.group(1) if found else f"<{where}>"
        audio, audio_problem = (
            _authors_wav(outputs_dir, set_name, qid) if (authors_layout and found) else (None, None)
        )
        return ModelOutput(qid, None, audio, join_problems(f"bad JSON in {where}: {exc}", audio_problem))
    qid = row.get("Qid")
    if not isinstance(qid, str) or not qid.strip():
        return ModelOutput(f"<{where}>", None, None, f"no Qid in {where}")
    # a Qid that is not valid Unicode is recorded with U+FFFD (`valid_text`); its wav is the file it names
    given_qid = qid.strip()
    qid, problem = valid_text(given_qid, "Qid")
    text = row.get("Response") if authors_layout else row.get("text")
    failure = None if authors_layout else row.get("error")
    if failure:  # our wrappers' row of a failed item (`models.base`)
        text, failed = failed_item(text, failure)
        problem = join_problems(problem, failed)
    if text is not None and not isinstance(text, str):
        problem = join_problems(problem, f"text response is a {type(text).__name__}, not a string")
        text = None
    elif isinstance(text, str) and not text.strip():
        problem = join_problems(
            problem, "empty text response"
        )  # kept: an empty answer is scored as not correct
    elif text is None and not failure:
        problem = join_problems(problem, "no text response")
    if isinstance(text, str):
        text, repair = repair_text(text)
        problem = join_problems(problem, repair)
    if authors_layout:
        audio, audio_problem = _authors_wav(outputs_dir, set_name, given_qid)
    else:
        audio, audio_problem = _our_audio(outputs_dir, row.get("audio"))
        if isinstance(row.get("audio"), str):  # the record names the file with U+FFFD
            problem = join_problems(problem, valid_text(row["audio"], "audio path")[1])
    return ModelOutput(qid, text, audio, join_problems(problem, audio_problem))


def _authors_wav(outputs_dir: Path, set_name: str, qid: str) -> tuple[str | None, str | None]:
    if not (outputs_dir / "wav").is_dir():
        return None, None  # no wav/ folder at all: a text-only model, the speech channel is not applicable
    stem = AUTHORS_SET_FILES.get(set_name, set_name)
    if "/" in qid or "\\" in qid or "\x00" in qid or qid in (".", ".."):
        return None, f"Qid {qid!r} cannot name a wav file"
    try:  # a Qid too long for a file name (ENAMETOOLONG) is that item's problem
        for folder in dict.fromkeys([stem, set_name]):
            wav = outputs_dir / "wav" / folder / f"{qid}.wav"
            if wav.is_file():
                return str(wav), None
        wav = outputs_dir / "wav" / f"{qid}.wav"
        if not wav.exists():  # still the item's speech: the ASR fails it, naming the file (`_our_audio`)
            return str(outputs_dir / "wav" / stem / f"{qid}.wav"), None
    except OSError as exc:
        return None, f"no wav for Qid {qid[:40]!r}...: {exc.strerror}"
    return str(wav), None


def _our_audio(outputs_dir: Path, audio: Any) -> tuple[str | None, str | None]:
    if audio is None:
        return None, None  # text-only model: the speech channel is not applicable
    if not isinstance(audio, str) or not audio.strip():
        return None, f"audio field is not a path: {audio!r}"
    path = Path(audio) if Path(audio).is_absolute() else outputs_dir / audio
    try:  # a name too long for the file system (ENAMETOOLONG) is that item's problem
        path.exists()
    except OSError as exc:
        return None, f"audio file {audio[:60]!r}...: {exc.strerror}"
    # a file that is missing or not a regular file is still the item's speech: the ASR fails that item
    # naming the cause (`core.audio.audio_file_problem`, which never opens a FIFO), so the speech channel
    # counts it as missing; a set whose every file is missing fails as a whole, never "not applicable"
    return str(path), None
