"""Reading what a model produced: one `ModelOutput` per Qid, from the authors' layout or ours.

Authors' layout: ``json/<set>.json`` (JSON lines {Qid, Response}) + ``wav/<Qid>.wav``.
Ours: ``<set>.jsonl`` (JSON lines {Qid, text, audio}; audio relative to the outputs dir or absolute), and/or
the per-rank shards ``<set>.rank<k>.jsonl`` of a data-parallel run (read as their union).
Problems of single items (bad JSON line, empty response, missing wav) are carried on the item
(``ModelOutput.problem``); only a missing or ambiguous outputs directory raises.
"""

from __future__ import annotations

import glob
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
    ours = output_files(outputs_dir, set_name)
    if authors.is_file() and ours:
        raise ValueError(
            f"{outputs_dir}: both {authors.name} (authors' layout) and {ours[0].name} exist; keep one"
        )
    if authors.is_file():
        return _read_lines(authors, outputs_dir, authors_layout=True)
    if ours:
        return read_output_union(ours, outputs_dir)
    raise FileNotFoundError(
        f"no outputs for set {set_name!r} in {outputs_dir}: expected json/{set_name}.json + wav/<Qid>.wav "
        f"(authors' layout) or {set_name}.jsonl"
    )


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


def read_output_union(files: Sequence[Path], outputs_dir: Path) -> dict[str, ModelOutput]:
    """The union of several files of one set (the shards of a data-parallel run), ``files`` oldest first.

    The ranks of one run answer disjoint Qids; a Qid in several files (shards of runs with different
    process counts in one folder) takes its row from the newest file, as a re-run's row replaces an older
    one within a file."""
    union: dict[str, ModelOutput] = {}
    for path in files:
        union.update(_read_lines(Path(path), Path(outputs_dir), authors_layout=False))
    return union


_QID_IN_BROKEN_LINE = re.compile(r'"Qid"\s*:\s*"([^"]+)"')


def _read_lines(path: Path, outputs_dir: Path, *, authors_layout: bool) -> dict[str, ModelOutput]:
    outputs: dict[str, ModelOutput] = {}
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            output = _parse_line(line, line_no, path, outputs_dir, authors_layout)
            if output.qid in outputs:  # keep the first answer, say so on it
                first = outputs[output.qid]
                first.problem = join_problems(
                    first.problem, f"duplicate Qid: line {line_no} of {path.name} ignored"
                )
                continue
            outputs[output.qid] = output
    return outputs


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
