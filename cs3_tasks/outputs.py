"""Reading what a model produced: one `ModelOutput` per Qid, from the authors' layout or ours.

Authors' layout: ``json/<set>.json`` (JSON lines {Qid, Response}) + ``wav/<Qid>.wav``.
Ours: ``<set>.jsonl`` (JSON lines {Qid, text, audio}; audio relative to the outputs dir or absolute).
Problems of single items (bad JSON line, empty response, missing wav) are carried on the item
(``ModelOutput.problem``); only a missing or ambiguous outputs directory raises.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cs3_tasks.data import SETS, check_set

if TYPE_CHECKING:  # pragma: no cover
    from cs3_tasks.audio import AudioSource

IN_MEMORY_AUDIO = "<in-memory audio>"


@dataclass
class ModelOutput:
    """One model output for one Qid."""

    qid: str
    text: str | None  # text-channel response
    audio: AudioSource | None  # speech-channel response (path/bytes/array) or None (text-only model)
    problem: str | None = None  # input problem found while reading (missing wav, empty response, ...)


def audio_label(audio: Any) -> str | None:
    """What a record says about an output's audio: its path, or a placeholder for in-memory audio."""
    if audio is None:
        return None
    if isinstance(audio, (str, os.PathLike)):
        return str(audio)
    if isinstance(audio, Mapping) and isinstance(audio.get("path"), str) and audio.get("path"):
        return audio["path"]
    return IN_MEMORY_AUDIO


def repair_text(text: str) -> tuple[str, str | None]:
    """``text`` made encodable (`text.valid_unicode`) and the problem to record when it was not."""
    from cs3_tasks import text as text_module

    bad = text_module.lone_surrogates(text)
    if not bad:
        return text, None
    return text_module.valid_unicode(text), f"text response has {bad} lone surrogates, replaced by U+FFFD"


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
    authors = outputs_dir / "json" / f"{set_name}.json"
    ours = outputs_dir / f"{set_name}.jsonl"
    if authors.is_file() and ours.is_file():
        raise ValueError(
            f"{outputs_dir}: both {authors.name} (authors' layout) and {ours.name} exist; keep one"
        )
    if authors.is_file():
        return _read_lines(authors, outputs_dir, authors_layout=True)
    if ours.is_file():
        return _read_lines(ours, outputs_dir, authors_layout=False)
    raise FileNotFoundError(
        f"no outputs for set {set_name!r} in {outputs_dir}: expected json/{set_name}.json + wav/<Qid>.wav "
        f"(authors' layout) or {set_name}.jsonl"
    )


_QID_IN_BROKEN_LINE = re.compile(r'"Qid"\s*:\s*"([^"]+)"')


def _read_lines(path: Path, outputs_dir: Path, *, authors_layout: bool) -> dict[str, ModelOutput]:
    outputs: dict[str, ModelOutput] = {}
    lines = decoded_lines(path)
    for line_no, line in lines:
        if isinstance(line, str):
            output = _parse_line(line, line_no, path, outputs_dir, authors_layout)
        else:
            output = _undecodable_line(line, line_no, path, outputs_dir, authors_layout)
        if output.qid in outputs:  # keep the first answer, say so on it
            first = outputs[output.qid]
            first.problem = join_problems(
                first.problem, f"duplicate Qid: line {line_no} of {path.name} ignored"
            )
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
    exc: UnicodeDecodeError, line_no: int, path: Path, outputs_dir: Path, authors_layout: bool
) -> ModelOutput:
    where = f"{path.name} line {line_no}"
    found = _QID_IN_BROKEN_LINE.search(exc.object.decode("utf-8", errors="replace"))
    qid = found.group(1) if found else f"<{where}>"
    audio, audio_problem = _authors_wav(outputs_dir, qid) if (authors_layout and found) else (None, None)
    problem = f"{where} is not UTF-8 (byte {exc.start}){_encoding_hint(exc.object)}: expected UTF-8"
    return ModelOutput(qid, None, audio, join_problems(problem, audio_problem))


def _parse_line(line: str, line_no: int, path: Path, outputs_dir: Path, authors_layout: bool) -> ModelOutput:
    where = f"{path.name} line {line_no}"
    try:
        row = json.loads(line)
        if not isinstance(row, dict):
            raise TypeError(f"a JSON {type(row).__name__}, not an object")
    except (ValueError, TypeError) as exc:
        found = _QID_IN_BROKEN_LINE.search(line)
        qid = found.group(1) if found else f"<{where}>"
        audio, audio_problem = _authors_wav(outputs_dir, qid) if (authors_layout and found) else (None, None)
        return ModelOutput(qid, None, audio, join_problems(f"bad JSON in {where}: {exc}", audio_problem))
    qid = row.get("Qid")
    if not isinstance(qid, str) or not qid.strip():
        return ModelOutput(f"<{where}>", None, None, f"no Qid in {where}")
    qid = qid.strip()
    problem = None
    text = row.get("Response") if authors_layout else row.get("text")
    if text is not None and not isinstance(text, str):
        problem = join_problems(problem, f"text response is a {type(text).__name__}, not a string")
        text = None
    elif isinstance(text, str) and not text.strip():
        problem = join_problems(
            problem, "empty text response"
        )  # kept: an empty answer is scored as not correct
    elif text is None:
        problem = join_problems(problem, "no text response")
    if isinstance(text, str):
        text, repair = repair_text(text)
        problem = join_problems(problem, repair)
    if authors_layout:
        audio, audio_problem = _authors_wav(outputs_dir, qid)
    else:
        audio, audio_problem = _our_audio(outputs_dir, row.get("audio"))
    return ModelOutput(qid, text, audio, join_problems(problem, audio_problem))


def _authors_wav(outputs_dir: Path, qid: str) -> tuple[str | None, str | None]:
    wav = outputs_dir / "wav" / f"{qid}.wav"
    if not wav.is_file():
        return None, f"missing wav: wav/{qid}.wav"
    return str(wav), None


def _our_audio(outputs_dir: Path, audio: Any) -> tuple[str | None, str | None]:
    if audio is None:
        return None, None  # text-only model: the speech channel is not applicable
    if not isinstance(audio, str) or not audio.strip():
        return None, f"audio field is not a path: {audio!r}"
    path = Path(audio) if Path(audio).is_absolute() else outputs_dir / audio
    if not path.is_file():
        return None, f"missing audio file: {audio}"
    return str(path), None
