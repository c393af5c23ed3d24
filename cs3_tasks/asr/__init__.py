"""Speech recognition: one batch API over faster-whisper, openai-whisper and transformers, cached on disk.

``transcribe_batch(audios, language=None)`` returns one Transcript per input, in order (module
cs3_tasks.asr.transcribe documents the decoding modes). The modules, one job each:

- ``config``: backends, models, DecodingOptions, AsrConfig, Transcript, AsrModelError (no model loaded)
- ``offline``: the offline Whisper-base of the `offline` extra, joined once
- ``numerics``: arithmetic that gives the same transcripts on every AVX2 machine
- ``fingerprint``: what a transcript depends on, by identity (results and cache keys)
- ``device``: device (the CPU unless a GPU is asked for), threads and batch size
- ``gpu``: CUDA libraries (pip's CUDA 12, what an engine loaded), machine faults, the refusal of a GPU
- ``packing``: short clips packed into one 30 s window and split back (pure)
- ``transcribe``: the batch API, its cache and grouping
- ``runners``: the Runner protocols, the models loaded once per process, the check of a requested GPU
- ``faster_whisper``, ``openai_whisper``, ``transformers_whisper``: one file per backend"""

from __future__ import annotations

from cs3_tasks.asr.config import (
    BACKEND_ENV,
    DECODING,
    MODEL_ENV,
    AsrConfig,
    AsrModelError,
    Transcript,
    decoding_options,
    default_backend,
    default_model,
    max_new_tokens,
)
from cs3_tasks.asr.device import DEFAULT_BATCH_SIZE, asr_device, cpu_threads, default_device_note
from cs3_tasks.asr.fingerprint import asr_fingerprint, describe_fingerprint, machine
from cs3_tasks.asr.offline import offline_whisper_base
from cs3_tasks.asr.runners import check_asr_device, load_runner
from cs3_tasks.asr.transcribe import transcribe_batch

# what the other packages use (each module's own names are imported from the module)
__all__ = [
    "BACKEND_ENV",
    "DECODING",
    "DEFAULT_BATCH_SIZE",
    "MODEL_ENV",
    "AsrConfig",
    "AsrModelError",
    "Transcript",
    "asr_device",
    "asr_fingerprint",
    "check_asr_device",
    "cpu_threads",
    "decoding_options",
    "default_device_note",
    "default_backend",
    "default_model",
    "describe_fingerprint",
    "load_runner",
    "machine",
    "max_new_tokens",
    "offline_whisper_base",
    "transcribe_batch",
]
