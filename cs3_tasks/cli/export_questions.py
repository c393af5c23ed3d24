"""``cs3-bench export-questions``: each set's spoken questions as files, for a model's own generation loop.

    cs3-bench export-questions --out questions [--dataset demo] [--set knowledge ...]

writes, per set, ``OUT/<set>.jsonl`` (one row per question: ``Qid``, ``question`` (its text), ``audio``: the
wav's path relative to OUT) and ``OUT/<set>/<Qid>.wav`` (the question's audio as stored, re-encoded as WAV at
its own sample rate). Answer each question, write ``<set>.jsonl`` rows ``{"Qid", "text", "audio"}`` (the
answer's text and the path of its spoken answer, relative to that folder) into one folder, then
``cs3-bench score --outputs FOLDER --set all --out RESULTS``.

That layout is an outputs folder's too: pointed at one, an export would replace the answers. It never
replaces a file it did not write: ``OUT/.cs3-questions.json`` (`MANIFEST`) lists each file it wrote with the
sha256 of its content; a file that is there already is replaced only when the manifest lists it with the same
content (or as being written by an export that was stopped), else the export refuses before writing anything,
naming the file, unless ``overwrite``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from cs3_tasks.core.cache import atomic_write, json_text
from cs3_tasks.core.data import AUDIO_COLUMN, SETS, DatasetUnavailableError, load_set
from cs3_tasks.judge.arguments import score_command

QUESTION_FIELD = "Question"
MANIFEST = ".cs3-questions.json"  # the files an export wrote: path relative to OUT -> sha256 (None: writing)
WRITER = "cs3-bench export-questions"


class ExportRefused(ValueError):
    """An export would replace files it did not write."""


def read_manifest(out: Path) -> dict[str, str | None]:
    """The files earlier exports wrote into ``out`` (relative path -> sha256; None: being written when the
    export stopped); empty when there is no manifest (or it is not one)."""
    try:
        content = json.loads((Path(out) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    files = content.get("files") if isinstance(content, dict) and content.get("writer") == WRITER else None
    return dict(files) if isinstance(files, dict) else {}


def write_manifest(out: Path, files: dict[str, str | None]) -> None:
    atomic_write(Path(out) / MANIFEST, json_text({"writer": WRITER, "files": files}, indent=1) + "\n")


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def not_ours(out: Path, targets: Sequence[str], manifest: dict[str, str | None]) -> list[str]:
    """The ``targets`` (paths relative to ``out``) that exist but were not written by an export as they are
    (not in the manifest, or changed since)."""
    found = []
    for name in targets:
        path = Path(out) / name
        if not path.exists() and not path.is_symlink():
            continue
        if name not in manifest or not path.is_file():
            found.append(name)
        elif manifest[name] is not None and file_sha256(path) != manifest[name]:
            found.append(name)
    return found


def check_overwrite(out: Path, targets: Sequence[str], manifest: dict[str, str | None]) -> None:
    """ExportRefused naming the first file of ``targets`` that an export would replace but did not write."""
    foreign = not_ours(out, targets, manifest)
    if foreign:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        raise ExportRefused(
            f"{Path(out) / foreign[0]}{more} exists and was not written by export-questions (no entry in "
            f"{MANIFEST}, or changed since): not replaced. Use an empty --out, or --overwrite to replace it"
        )


def export_questions(
    out: Path, sets: Sequence[str], dataset: str | None = None, *, overwrite: bool = False
) -> dict[str, int]:
    """Write the questions of ``sets`` under ``out``; {set: number of questions}. ExportRefused, before any
    file is written, when a file it would write is there and is not its own (unless ``overwrite``)."""
    out = Path(out)
    loaded = {set_name: load_set(set_name, dataset) for set_name in sets}
    targets = {
        set_name: [f"{set_name}.jsonl", *(f"{set_name}/{qid}.wav" for qid in rows["Qid"])]
        for set_name, rows in loaded.items()
    }
    manifest = read_manifest(out)
    if not overwrite:
        check_overwrite(out, [name for names in targets.values() for name in names], manifest)
    counts = {}
    for set_name, items in loaded.items():
        manifest.update(dict.fromkeys(targets[set_name]))  # being written: its own if the export stops
        write_manifest(out, manifest)
        rows = []
        for item in items:
            qid = str(item["Qid"])
            wav = Path(set_name) / f"{qid}.wav"
            write_question_wav(item.get(AUDIO_COLUMN), out / wav, f"{set_name}/{qid}")
            rows.append({"Qid": qid, "question": item.get(QUESTION_FIELD) or "", "audio": wav.as_posix()})
        atomic_write(out / f"{set_name}.jsonl", "".join(json_text(row) + "\n" for row in rows))
        manifest.update({name: file_sha256(out / name) for name in targets[set_name]})
        write_manifest(out, manifest)
        counts[set_name] = len(rows)
    return counts


def write_question_wav(audio: dict | None, path: Path, item: str) -> None:
    """The dataset's audio cell ({"bytes", "path"}, undecoded) as a WAV file at its own sample rate."""
    import soundfile as sf

    if not audio or not (audio.get("bytes") or audio.get("path")):
        raise ValueError(f"{item}: the dataset row has no audio")
    source = io.BytesIO(audio["bytes"]) if audio.get("bytes") else audio["path"]
    samples, rate = sf.read(source, dtype="float32", always_2d=False)
    wav = io.BytesIO()
    sf.write(wav, samples, rate, format="WAV", subtype="PCM_16")
    atomic_write(path, wav.getvalue())


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
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace files in --out that an export did not write (default: refuse, naming the file; an "
        f"export knows its own files by {MANIFEST} in --out, listing each with the sha256 of its content)",
    )


def run(args: argparse.Namespace) -> int:
    sets = tuple(dict.fromkeys(args.sets or SETS))
    try:
        counts = export_questions(args.out, sets, args.dataset, overwrite=args.overwrite)
    except (DatasetUnavailableError, OSError, ValueError) as error:
        print(f"cs3-bench export-questions: {error}", file=sys.stderr)
        return 2
    for set_name, n in counts.items():
        print(f"{set_name}: {n} questions -> {args.out / (set_name + '.jsonl')}")
    print("answer them into FOLDER/<set>.jsonl rows {Qid, text, audio}, then score them:")
    print(f"  {score_command('FOLDER', args.dataset)}")
    return 0
