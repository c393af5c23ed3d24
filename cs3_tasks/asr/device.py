"""Where ASR runs: the device (CPU, this rank's GPU), its thread count and its batch size.

``device=`` / ``--asr-device`` / $CS3_ASR_DEVICE: "cpu", "cuda" or "cuda:N"; by default the CPU, on every
machine, GPU or not: the default engine's transcripts on a CPU are the portable ones README's numbers and the
golden transcripts are (cs3_tasks.asr.numerics), and a GPU's float16 transcripts are that machine's
(docs/gpu.md). A GPU is used when asked for; under a data-parallel launcher "cuda" is this rank's GPU,
``cuda:<LOCAL_RANK % GPUs>`` (ranks share a GPU when there are more ranks than GPUs). GPU transcripts
(float16) are cached apart from CPU ones (int8).
"""

from __future__ import annotations

import os
import re

from cs3_tasks.asr.config import AsrConfig, AsrModelError
from cs3_tasks.core.environment import env_int, refused
from cs3_tasks.harness.distributed import cpu_threads_per_process
from cs3_tasks.harness.distributed import cuda_device_count as torch_cuda_device_count

DEFAULT_BATCH_SIZE = 8  # clips per batched decode (faster-whisper) on a CPU
# On a GPU the batch is bounded by memory, not cores: benchmarks/gpu_asr.py measures clips/s per batch size.
GPU_BATCH_SIZE = 32
DEVICE_ENV = "CS3_ASR_DEVICE"
DEFAULT_DEVICE = "cpu"


def cpu_threads() -> int:
    """CPU cores this process may use (faster-whisper's thread count): the ranks of a data-parallel launch
    on one machine share the cores."""

    return cpu_threads_per_process()


def asr_device(requested: str | None = None, backend: str = "faster-whisper") -> str:
    """The ASR device, "cpu", "cuda" or "cuda:N": ``requested``, else $CS3_ASR_DEVICE, else "cpu" (the
    benchmark's portable transcripts, whatever the machine has). "cuda" under a data-parallel launcher is this
    rank's GPU (``cuda:<LOCAL_RANK % GPUs>``). A CUDA request without CUDA is an error (say --asr-device cpu).
    """
    given = requested or os.environ.get(DEVICE_ENV)
    choice = str(given or DEFAULT_DEVICE).strip().lower()
    if not requested and not re.fullmatch(r"cpu|cuda(:\d+)?", choice):
        raise refused(DEVICE_ENV, os.environ.get(DEVICE_ENV, ""), "choose cpu, cuda or cuda:N")
    if not re.fullmatch(r"cpu|cuda(:\d+)?", choice):
        raise ValueError(f"--asr-device={given!r}: the ASR device must be cpu, cuda or cuda:N")
    if choice == "cpu":
        return choice
    gpus = cuda_device_count(backend)
    if gpus == 0:
        raise AsrModelError(f"ASR device {choice} requested but no CUDA device is visible; use cpu")
    if choice == "cuda" and env_int("WORLD_SIZE", 1, minimum=1) > 1:
        return f"cuda:{env_int('LOCAL_RANK', 0) % gpus}"
    if ":" in choice and int(choice.split(":")[1]) >= gpus:
        raise AsrModelError(f"ASR device {choice} requested but only {gpus} CUDA device(s) are visible")
    return choice


def batch_size_for(device: str, backend: str = "faster-whisper") -> int:
    """Clips decoded together: on a GPU as many as pay (GPU_BATCH_SIZE); on a CPU faster-whisper's batches
    (bounded by cores), the torch backends one at a time, as the authors decode (on a CPU every clip is
    padded to 30 s either way, and batching buys nothing: benchmarks/README.md)."""
    if device != "cpu":
        return GPU_BATCH_SIZE
    return DEFAULT_BATCH_SIZE if backend == "faster-whisper" else 1


def cuda_device_count(backend: str = "faster-whisper") -> int:
    """CUDA devices the backend's engine sees: CTranslate2's count for faster-whisper, torch's for the
    transformers and openai-whisper backends (0 where the engine is not installed)."""
    try:
        if backend == "faster-whisper":
            import ctranslate2

            return int(ctranslate2.get_cuda_device_count())
        return torch_cuda_device_count()
    except (ImportError, RuntimeError):
        return 0


def default_device_note(config: AsrConfig) -> str | None:
    """What a user on a GPU machine who chose no ASR device is told (None elsewhere): the ASR runs on the CPU,
    and why."""
    if config.device or os.environ.get(DEVICE_ENV):
        return None
    if cuda_device_count(str(config.resolved().backend)) == 0:
        return None
    return (
        "note: ASR runs on the CPU (the default: the benchmark's portable transcripts, README's numbers); "
        "this machine has a GPU: --asr-device cuda is faster, its float16 transcripts are this machine's "
        "(docs/gpu.md)"
    )
