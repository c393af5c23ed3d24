"""``cs3-bench export-questions``: each set's spoken questions as files, for a model's own generation loop.

    cs3-bench export-questions --out questions [--dataset demo] [--set knowledge ...]

writes, per set, ``OUT/<set>.jsonl`` (one row per question: ``Qid``, ``question`` (its text), ``audio``: the
wav's path relative to OUT) and ``OUT/<set>/<Qid>.wav`` (the question's audio as stored, re-encoded as WAV at
its own sample rate). Answer each question, write ``<set>.jsonl`` rows ``{"Qid", "text", "audio"}`` (the
answer's text and the path of its spoken answer, relative to that folder) into one folder, then
``cs3-bench score --outputs FOLDER --set all --out RESULTS``.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from cs3_tasks.core.data import AUDIO_COLUMN, SETS, DatasetUnavailableError, load_set

QUESTION_FIELD = "Question"


def export_questions(out: Path, sets: Sequence[str], dataset: str | None = None) -> dict[str, int]:
    """Write the questions of ``sets`` under ``out``; {set: number of questions}."""
    counts = {}
    for set_name in sets:
        rows = []
        for item in load_set(set_name, dataset):
            qid = str(item["Qid"])
            wav = Path(set_name) / f"{qid}.wav"
            write_question_wav(item.get(AUDIO_COLUMN), out / wav, f"{set_name}/{qid}")
            rows.append({"Qid": qid, "question": item.get(QUESTION_FIELD) or "", "audio": wav.as_posix()})
        (out / f"{set_name}.jsonl").write_text(
            "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8"
        )
        counts[set_name] = len(rows)
    return counts


def write_question_wav(audio: dict | None, path: Path, item: str) -> None:
    """The dataset's audio cell ({"bytes", "path"}, undecoded) as a WAV file at its own sample rate."""
    import soundfile as sf

    if not audio or not (audio.get("bytes") or audio.get("path")):
        raise ValueError(f"{item}: the dataset row has no audio")
    source = io.BytesIO(audio["bytes"]) if audio.get("bytes") else audio["path"]
    samples, rate = sf.read(source, dtype="float32", always_2d=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, samples, rate, format="WAV", subtype="PCM_16")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, type=Path, help="folder for <set>.jsonl + <set>/<Qid>.wav")
    parser.add_argument(
        "--dataset",
        default=None,
        help="Hub id, local build dir or 'demo' (default: $CS3_BENCH_DATASET, else the Hub)",
    )
    parser.add_argument(
        "--set", dest="sets", action="append", choices=SETS, help="a set to export (repeatable; default: all)"
    )


def run(args: argparse.Namespace) -> int:
    sets = tuple(dict.fromkeys(args.sets or SETS))
    try:
        counts = export_questions(args.out, sets, args.dataset)
    except (DatasetUnavailableError, OSError, ValueError) as error:
        print(f"cs3-bench export-questions: {error}", file=sys.stderr)
        return 2
    for set_name, n in counts.items():
        print(f"{set_name}: {n} questions -> {args.out / (set_name + '.jsonl')}")
    print(
        "answer them into FOLDER/<set>.jsonl rows {Qid, text, audio}, then: "
        "cs3-bench score --outputs FOLDER --set all --out RESULTS"
        + (f" --dataset {args.dataset}" if args.dataset else "")
    )
    return 0
