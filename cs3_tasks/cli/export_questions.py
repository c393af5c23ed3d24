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
content, else the export refuses before writing anything, naming the file, unless ``overwrite``. Each file's
entry is appended to a journal (`JOURNAL`, one JSON line each) only after the file is written, and folded into
the manifest at the end of each set: an export that dies leaves at most the file it was writing unlisted
(refused next time, never replaced), and no entry for a file it had not written yet.
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
from cs3_tasks.core.statefile import StateFileError, read_state_text
from cs3_tasks.judge.arguments import score_command

QUESTION_FIELD = "Question"
MANIFEST = ".cs3-questions.json"  # the files an export wrote: path relative to OUT -> sha256
JOURNAL = ".cs3-questions.journal"  # entries of the files written since the manifest was last written
WRITER = "cs3-bench export-questions"


class ExportRefused(ValueError):
    """An export would replace files it did not write."""


def read_manifest(out: Path) -> dict[str, str]:
    """The files earlier exports wrote into ``out`` (relative path -> sha256): the manifest, then the
    journal's entries; empty when there is neither (or they are not ours). Either file that is not a
    regular file of bounded size is refused, naming it (`core.statefile`)."""
    files: dict[str, str] = {}
    try:
        content = json.loads(read_state_text(Path(out) / MANIFEST))
    except StateFileError:
        raise
    except (OSError, ValueError):
        content = None
    listed = content.get("files") if isinstance(content, dict) and content.get("writer") == WRITER else None
    if isinstance(listed, dict):  # an entry without a hash (an older export's "being written"): not ours
        files.update({k: v for k, v in listed.items() if isinstance(k, str) and isinstance(v, str)})
    try:
        journal = read_state_text(Path(out) / JOURNAL, errors="replace").splitlines()
    except FileNotFoundError:
        journal = []
    for line in journal:  # a torn last line (a kill while appending) is no entry
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(entry, dict)
            and isinstance(entry.get("path"), str)
            and isinstance(entry.get("sha256"), str)
        ):
            files[entry["path"]] = entry["sha256"]
    return files


def write_manifest(out: Path, files: dict[str, str]) -> None:
    """The manifest with ``files``, then no journal (its entries are in the manifest now)."""
    atomic_write(Path(out) / MANIFEST, json_text({"writer": WRITER, "files": files}, indent=1) + "\n")
    (Path(out) / JOURNAL).unlink(missing_ok=True)


def journal_entry(out: Path, name: str) -> str:
    """Append the entry of a file just written (its path relative to ``out`` and sha256) to the journal;
    its sha256."""
    digest = file_sha256(Path(out) / name)
    with open(Path(out) / JOURNAL, "a", encoding="utf-8") as journal:
        journal.write(json_text({"path": name, "sha256": digest}) + "\n")
    return digest


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def not_ours(out: Path, targets: Sequence[str], manifest: dict[str, str]) -> list[str]:
    """The ``targets`` (paths relative to ``out``) that exist but were not written by an export as they are
    (not in the manifest, or changed since)."""
    found = []
    for name in targets:
        path = Path(out) / name
        if not path.exists() and not path.is_symlink():
            continue
        if name not in manifest or not path.is_file():
            found.append(name)
        elif file_sha256(path) != manifest[name]:
            found.append(name)
    return found


def check_overwrite(out: Path, targets: Sequence[str], manifest: dict[str, str]) -> None:
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
    out.mkdir(parents=True, exist_ok=True)
    for set_name, items in loaded.items():
        rows = []
        for item in items:  # each file's entry only after the file: a kill never lists an unwritten one
            qid = str(item["Qid"])
            wav = Path(set_name) / f"{qid}.wav"
            write_question_wav(item.get(AUDIO_COLUMN), out / wav, f"{set_name}/{qid}")
            manifest[wav.as_posix()] = journal_entry(out, wav.as_posix())
            rows.append({"Qid": qid, "question": item.get(QUESTION_FIELD) or "", "audio": wav.as_posix()})
        atomic_write(out / f"{set_name}.jsonl", "".join(json_text(row) + "\n" for row in rows))
        manifest[f"{set_name}.jsonl"] = journal_entry(out, f"{set_name}.jsonl")
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
