"""The per-item data of the HTML report: what each model answered, heard and was judged, item by item.

Everything here is plain JSON-able dicts: the question side once per set and Qid (`question_rows`), the
answer side once per model, set and Qid (`item_row`). Audio is referenced by a path relative to the report
folder, so the folder opens from file:// with no server and names no folder of this machine: question clips
are written once under ``audio/<set>/`` (`write_question_audio`), response clips linked or copied under
``audio/responses/<model>/<set>/`` (`place_response_audio`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import quote

from cs3_tasks.core.cache import atomic_write
from cs3_tasks.core.text import english_words

# record keys the report does not show per item (identity shown elsewhere, or replaced by a url)
NOT_SHOWN = frozenset({"set", "protocol", "audio"})
# marked English words kept per item (the page shows 200): a 10 MB response has millions
PSR_WORDS_KEPT = 1000
AUDIO_SUFFIXES = {b"fLaC": ".flac", b"RIFF": ".wav", b"OggS": ".ogg", b"ID3": ".mp3"}


def psr_words(text_response: str | None, transcript: str | None) -> list[list]:
    """``[[word, heard], ...]``: each English word of the text response, in order, marked heard (1) while
    the transcript still has an unmatched copy of it (the count-aware overlap `metrics.pronunciation_counts`
    counts), else missed (0)."""
    left = Counter(english_words(transcript or ""))
    marked = []
    for word in english_words(text_response or ""):
        heard = left[word] > 0
        left[word] -= heard
        marked.append([word, int(heard)])
    return marked


def item_row(record: Mapping, audio_url: str | None = None) -> dict:
    """One model's item, as the report shows it: the record without None values, plus ``audio_url`` (the
    response audio's copy in the report, `place_response_audio`; without one, ``audio_label`` says which
    file the record names) and ``psr_words`` (English words of the text response, heard or missed)."""
    row = {k: v for k, v in record.items() if v is not None and k not in NOT_SHOWN}
    if audio_url:
        row["audio_url"] = audio_url
    elif record.get("audio"):  # not on this machine (moved, shared results, in-memory audio): say so
        row["audio_label"] = str(record["audio"])
    if record.get("psr_total"):
        words = psr_words(record.get("text"), record.get("transcript"))
        row["psr_words"] = words[:PSR_WORDS_KEPT]
        if len(words) > PSR_WORDS_KEPT:
            row["psr_words_total"] = len(words)
    return row


def safe_name(name: str) -> str:
    """A file name made of ``name`` (a Qid, a model name) in safe characters, distinct for distinct names: a
    name that had to change ("a#b", "a?b", "name:x", "..") gets the start of its sha256 (two Qids must
    never share one clip)."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name).lstrip(".")
    if safe == name:
        return safe
    return f"{safe or '_'}-{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}"


def url_of(path: Path, out: Path) -> str:
    """The URL of a file of the report folder ``out``, relative to it and percent-encoded (a name with "#",
    "?", "%", a space or a ":" before any "/" would otherwise be cut or read as a scheme)."""
    return quote(Path(path).relative_to(out).as_posix())


def place_response_audio(
    record: Mapping, outputs: Path | None, out: Path, model: str, set_name: str
) -> str | None:
    """Put the response audio a record names (relative to the model's ``outputs`` folder) into the report
    folder, ``audio/responses/<model>/<set>/<Qid><suffix>`` (a hard link where it can be, else a copy), and
    return its URL relative to the report; None when this machine does not have it. The report then names no
    folder of this machine and plays from any copy of it."""
    label = record.get("audio")
    if not isinstance(label, str) or not label:
        return None
    if outputs is None and not Path(label).is_absolute():  # relative to a folder this machine does not know
        return None
    source = Path(label) if Path(label).is_absolute() else Path(outputs) / label
    if not source.is_file():
        return None
    folder = Path(out) / "audio" / "responses" / safe_name(model) / set_name
    target = folder / f"{safe_name(str(record.get('qid')))}{source.suffix.lower()}"
    if not (target.is_file() and target.stat().st_size == source.stat().st_size and _same(target, source)):
        folder.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        try:
            os.link(source, target)
        except OSError:  # another file system, or links not allowed
            shutil.copyfile(source, target)
    return url_of(target, out)


def _same(a: Path, b: Path) -> bool:
    return a.samefile(b) or a.read_bytes() == b.read_bytes()


def question_row(doc: Mapping) -> dict:
    """The question side of an item: text, category, expected answers (every ``Answer*`` field)."""
    row: dict = {"question": doc.get("Question") or ""}
    if doc.get("Category"):
        row["category"] = doc["Category"]
    answers = {k: v for k, v in doc.items() if k.startswith("Answer") and v}
    if answers:
        row["answers"] = answers
    return row


def question_rows(docs: Sequence[Mapping]) -> dict[str, dict]:
    return {str(doc["Qid"]): question_row(doc) for doc in docs if doc.get("Qid") is not None}


def audio_suffix(data: bytes, name: str | None) -> str:
    """The file suffix of encoded audio: from its magic bytes, else its stored name, else .wav."""
    for magic, suffix in AUDIO_SUFFIXES.items():
        if data.startswith(magic):
            return suffix
    return Path(name).suffix if name and Path(name).suffix else ".wav"


def write_question_audio(rows: Mapping[str, dict], set_name: str, clips: Sequence[Mapping], out: Path) -> int:
    """Write each question clip (``{"Qid", "audio": {"bytes", "path"}}``) to ``out/audio/<set>/`` once and
    set ``audio_url`` on its question row; returns the number written. A file already holding the same
    bytes is left alone, so re-writing a report does not touch unchanged clips."""

    folder = Path(out) / "audio" / set_name
    written = 0
    for clip in clips:
        qid, audio = str(clip.get("Qid")), clip.get("audio") or {}
        data = audio.get("bytes") if isinstance(audio, Mapping) else None
        if qid not in rows or not data:
            continue
        path = folder / f"{safe_name(qid)}{audio_suffix(data, audio.get('path'))}"
        if not (path.is_file() and path.read_bytes() == data):
            folder.mkdir(parents=True, exist_ok=True)
            atomic_write(path, data)
            written += 1
        rows[qid]["audio_url"] = url_of(path, out)
    return written
