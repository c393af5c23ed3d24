"""Speech recognition: one batch API over faster-whisper, openai-whisper and transformers, cached on disk.

``transcribe_batch(audios, language=None)`` returns one Transcript per input, in order (module
cs3_tasks.asr.transcribe documents the decoding modes). The modules, one job each:

- ``config``: backends, models, DecodingOptions, AsrConfig, Transcript, AsrModelError (no model loaded)
- ``offline``: the offline Whisper-base of the `offline` extra, joined once
- ``numerics``: arithmetic that gives the same transcripts on every AVX2 machine
- ``fingerprint``: what a transcript depends on, by identity (results and cache keys)
- ``device``: device, threads and batch size
- ``packing``: short clips packed into one 30 s window and split back (pure)
- ``transcribe``: the batch API, its cache and grouping
- ``runners``: the Runner protocols and the models loaded once per process
- ``faster_whisper``, ``openai_whisper``, ``transformers_whisper``: one file per backend
"""

from __future__ import annotations

from cs3_tasks.asr.config import (
    BACKEND_ENV,
    BACKENDS,
    DECODING,
    DEFAULT_BACKEND,
    MAX_WINDOW_TOKENS,
    MIN_CLIP_SECONDS,
    MODEL_ENV,
    PAPER_MODEL,
    SHORT_CLIP_DECODINGS,
    SHORT_CLIPS_ENV,
    TRANSFORMERS_PAPER_MODEL,
    WHISPER_WINDOW_SECONDS,
    AsrConfig,
    AsrModelError,
    DecodingOptions,
    Transcript,
    check_backend,
    decoding_options,
    default_backend,
    default_model,
    max_new_tokens,
)
from cs3_tasks.asr.device import (
    DEFAULT_BATCH_SIZE,
    DEVICE_ENV,
    GPU_BATCH_SIZE,
    asr_device,
    batch_size_for,
    cpu_threads,
)
from cs3_tasks.asr.fingerprint import asr_fingerprint, describe_fingerprint, fingerprint_key, machine
from cs3_tasks.asr.numerics import NUMERICS_ENV
from cs3_tasks.asr.offline import OFFLINE_MODEL_DIR, offline_whisper_base
from cs3_tasks.asr.packing import (
    PACK_GAP_SECONDS,
    PACK_MAX_CLIPS,
    PACK_MIN_LANGUAGE_PROBABILITY,
    PACK_WINDOW_SECONDS,
    PlacedClip,
    pack_windows,
    split_window,
)
from cs3_tasks.asr.runners import BatchRunner, PackingRunner, Runner, load_runner
from cs3_tasks.asr.transcribe import MEMORY_CHUNK, transcribe_batch

__all__ = [
    "BACKENDS",
    "BACKEND_ENV",
    "DECODING",
    "DEFAULT_BACKEND",
    "DEFAULT_BATCH_SIZE",
    "DEVICE_ENV",
    "GPU_BATCH_SIZE",
    "MAX_WINDOW_TOKENS",
    "MEMORY_CHUNK",
    "MIN_CLIP_SECONDS",
    "MODEL_ENV",
    "NUMERICS_ENV",
    "OFFLINE_MODEL_DIR",
    "PACK_GAP_SECONDS",
    "PACK_MAX_CLIPS",
    "PACK_MIN_LANGUAGE_PROBABILITY",
    "PACK_WINDOW_SECONDS",
    "PAPER_MODEL",
    "SHORT_CLIPS_ENV",
    "SHORT_CLIP_DECODINGS",
    "TRANSFORMERS_PAPER_MODEL",
    "WHISPER_WINDOW_SECONDS",
    "AsrConfig",
    "AsrModelError",
    "BatchRunner",
    "DecodingOptions",
    "PackingRunner",
    "PlacedClip",
    "Runner",
    "Transcript",
    "asr_fingerprint",
    "asr_device",
    "batch_size_for",
    "check_backend",
    "cpu_threads",
    "decoding_options",
    "default_backend",
    "default_model",
    "describe_fingerprint",
    "fingerprint_key",
    "load_runner",
    "machine",
    "max_new_tokens",
    "offline_whisper_base",
    "pack_windows",
    "split_window",
    "transcribe_batch",
]
