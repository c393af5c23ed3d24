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
  content hash, form packing groups of MEMORY_CHUNK, each packed as a whole, and a packed transcript is
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

On a CPU under glibc, faster-whisper runs in a child process whose allocator keeps the encoder's freed buffers
(cs3_tasks.asr.process; same transcripts, less time page-faulting).

openai-whisper decodes one clip at a time.

Bounds: a clip shorter than MIN_CLIP_SECONDS is an error ("too short to transcribe"), not a transcript;
only the first ``max_audio_seconds`` of a longer clip are transcribed, and Transcript.note says so.
faster-whisper's BatchedInferencePipeline, given the clips as one stream with clip_timestamps, batches them
about as fast as "batched" but its transcripts differ from per-clip decoding on half of the clips (no
timestamps, one language per call; benchmarks/score_throughput.py).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from cs3_tasks.asr.config import (
    DECODING,
    MIN_CLIP_SECONDS,
    WHISPER_WINDOW_SECONDS,
    AsrConfig,
    Transcript,
    check_model_folder,
    decoding_options,
    max_new_tokens,
)
from cs3_tasks.asr.device import asr_device, batch_size_for
from cs3_tasks.asr.fingerprint import asr_fingerprint, fingerprint_key
from cs3_tasks.asr.gpu import AsrDeviceError, is_machine_fault
from cs3_tasks.asr.runners import BatchRunner, PackingRunner, Runner, cached_runner, loadable_model
from cs3_tasks.core.audio import (
    SAMPLE_RATE,
    AudioClip,
    AudioError,
    AudioSource,
    content_hash,
    load_audio_clip,
)
from cs3_tasks.core.cache import SqliteCache, cache_dir, stable_key

log = logging.getLogger(__name__)

# What a decoder writes for the bytes of a character it did not finish (UTF-8 decoded with replacement)
PARTIAL_CHARACTER = "\ufffd"
# Clips decoded into memory at a time (sorted by length within the chunk); in packed mode, a packing group.
MEMORY_CHUNK = 128


def transcribe_batch(
    audios: Sequence[AudioSource],
    language: str | None = None,
    *,
    asr: AsrConfig | None = None,
    use_cache: bool = True,
    progress: bool = True,
    batch_size: int | None = None,
) -> list[Transcript]:
    """Transcribe every audio in order with the ASR of ``asr`` (default ``AsrConfig()``: the backend,
    model, short-clip decoding and device of the environment and defaults, `AsrConfig.resolved`);
    ``language=None`` lets Whisper detect it per item.

    A per-item failure gives Transcript(text="", language=None, error="<cause>") and the rest
    continue. A model that cannot be loaded raises AsrModelError (nothing could be transcribed).
    ``batch_size`` is how many clips faster-whisper decodes together (1: one at a time; default from the
    device).
    """
    config = (asr or AsrConfig()).resolved()
    backend, short_clips = config.backend, config.short_clips
    device = asr_device(config.device, backend)
    batch_size = batch_size_for(device, backend) if batch_size is None else batch_size
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    model_name = loadable_model(str(config.model))
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
            # the engine, its versions, the model's weights, precision, device kind, arithmetic, decoding
            engine = fingerprint_key(asr_fingerprint(AsrConfig(backend, model_name, short_clips, device)))
            for group in groups:
                # packed: a transcript depends on its packing group, so the group is part of its key
                group_key = stable_key(sorted({hashes[i] for i in group})) if packed else None
                for i in group:
                    keys[i] = stable_key("asr", hashes[i], engine, language, *([group_key] if packed else []))
                    hit = cache.get(keys[i])
                    if hit is not None:
                        results[i] = Transcript(
                            text=hit["text"], language=hit["language"], note=hit.get("note")
                        )
        if packed:  # a group is decoded whole: its cached clips are neighbours of the others
            todo = [group for group in groups if any(results[i] is None for i in group)]
        else:
            pending = [i for group in groups for i in group if results[i] is None]
            todo = [pending[w : w + MEMORY_CHUNK] for w in range(0, len(pending), MEMORY_CHUNK)]
        if todo:
            check_model_folder(backend, model_name)  # a folder it cannot load: one line naming what it lacks
            runner = cached_runner(backend, model_name, device)
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
                        if bar is not None:  # every clip of the content just heard: the bar ends at 100%
                            bar.update(len(copies[hashes[i]]))
            finally:
                if bar is not None:
                    bar.close()
    finally:
        if cache is not None:
            cache.close()
    return [whole_characters(r) for r in results if r is not None]


def whole_characters(transcript: Transcript) -> Transcript:
    """``transcript`` ending on a whole character, with a note when it did not. Whisper's tokens are bytes
    of UTF-8, and a Chinese character often spans two of them: a decode stopped between them (a looping clip
    cut at its token cap, `max_new_tokens`) ends in U+FFFD, half a character. That is dropped and the note
    says the transcript was cut there. Applied to cached transcripts too, so a transcript is the same text
    whether it was decoded now or before."""
    text = transcript.text.rstrip()
    if not text.endswith(PARTIAL_CHARACTER):
        return transcript
    kept = text.rstrip(PARTIAL_CHARACTER).rstrip()
    cut = (
        "the transcript was cut inside a character (decoding stopped at the token cap of this clip's "
        "length): the partial character was dropped"
    )
    return replace(transcript, text=kept, note="; ".join(n for n in (transcript.note, cut) if n))


def _decode_groups(hashes: Sequence[str | None], packed: bool) -> list[list[int]]:
    """Indices of the decodable clips in groups of at most MEMORY_CHUNK distinct clips.

    Per-clip modes: input order (a transcript does not depend on its group). Packed: the distinct clips
    sorted by content hash, so a group (and with it every packed window) is a function of the set of
    clips alone, not of their order or of what is cached.
    """
    indices = [i for i, h in enumerate(hashes) if h is not None]
    if not packed:
        return [indices[w : w + MEMORY_CHUNK] for w in range(0, len(indices), MEMORY_CHUNK)]
    by_hash: dict[str, list[int]] = {}
    for i in indices:
        by_hash.setdefault(hashes[i], []).append(i)
    distinct = sorted(by_hash)
    return [
        [i for h in distinct[w : w + MEMORY_CHUNK] for i in by_hash[h]]
        for w in range(0, len(distinct), MEMORY_CHUNK)
    ]


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
        if isinstance(audio, AudioClip):  # cut at max_audio_seconds before resampling (core.audio)
            if audio.cut:
                notes[i] = (
                    f"only the first {DECODING.max_audio_seconds:g} s of {audio.source_seconds:.1f} s "
                    "were transcribed"
                )
            audio = audio.samples
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
            _stop_on_machine_fault(exc)
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
            _stop_on_machine_fault(exc)
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
        clip = load_audio_clip(source, SAMPLE_RATE, DECODING.max_audio_seconds)
        audio = clip.samples
        if len(audio) < MIN_CLIP_SECONDS * SAMPLE_RATE:
            return Transcript(
                "",
                None,
                error=f"audio_error: too short to transcribe ({len(audio) / SAMPLE_RATE:.4f} "
                f"s; at least {MIN_CLIP_SECONDS:g} s)",
            )
        return clip
    except AudioError as exc:
        return Transcript("", None, error=f"audio_error: {exc}")
    except (OSError, TypeError, ValueError) as exc:  # e.g. unreadable file, malformed audio dict
        return Transcript("", None, error=f"audio_error: {type(exc).__name__}: {exc}")


def _transcribe_one(runner: Runner, audio, language: str | None) -> Transcript:
    try:
        text, detected = runner.transcribe(audio, language)
    except Exception as exc:  # noqa: BLE001 - any decoder failure is recorded for this item only
        _stop_on_machine_fault(exc)
        return Transcript("", None, error=f"asr_error: {type(exc).__name__}: {exc}")
    return Transcript(text=text.strip(), language=detected)


def _stop_on_machine_fault(exc: Exception) -> None:
    """A machine's fault (a CUDA library or driver, `gpu.is_machine_fault`) stops the run as one error: it is
    never recorded as the clips' ASR failures (what is cached so far stays)."""
    if is_machine_fault(exc):
        raise AsrDeviceError(
            f"ASR stopped: the engine failed on this machine, not on a clip ({type(exc).__name__}: {exc}); "
            "see docs/gpu.md, or run with --asr-device cpu"
        ) from None


def _progress_bar(todo: int, enabled: bool, total: int):
    if not enabled or todo < 2:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=todo, desc=f"ASR ({total - todo} cached)", unit="clip")
