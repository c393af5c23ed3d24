"""Where ASR runs: the device (CPU, this rank's GPU), its thread count and its batch size.

``device=`` / ``--asr-device`` / $CS3_ASR_DEVICE: "cpu", "cuda" or "cuda:N"; by default the GPU when CUDA is
available (under a data-parallel launcher each rank takes its own, ``cuda:<LOCAL_RANK>``), else the CPU, whose
cores the ranks on one machine share out. GPU transcripts (float16) are cached apart from CPU ones (int8).
"""

from __future__ import annotations

import os
import re

from cs3_tasks.asr.config import AsrModelError
from cs3_tasks.core.environment import env_int, refused
from cs3_tasks.harness.distributed import cpu_threads_per_process

DEFAULT_BATCH_SIZE = 8  # clips per batched decode (faster-whisper) on a CPU
# On a GPU the batch is bounded by memory, not cores (not measured here: no GPU on the development machines).
GPU_BATCH_SIZE = 32
DEVICE_ENV = "CS3_ASR_DEVICE"


def cpu_threads() -> int:
    """CPU cores this process may use (faster-whisper's thread count): the ranks of a data-parallel launch
    on one machine share the cores."""

    return cpu_threads_per_process()


def asr_device(requested: str | None = None) -> str:
    """The ASR device, "cpu", "cuda" or "cuda:N": ``requested``, else $CS3_ASR_DEVICE, else the GPU when CUDA
    is available
    (``cuda:<LOCAL_RANK>`` under a data-parallel launcher, so that each rank transcribes on its own),
    else "cpu". A CUDA request without CUDA is an error (say --asr-device cpu)."""
    choice = str(requested or os.environ.get(DEVICE_ENV) or "auto").strip().lower()
    if not requested and not re.fullmatch(r"auto|cpu|cuda(:\d+)?", choice):
        raise refused(DEVICE_ENV, os.environ.get(DEVICE_ENV, ""), "choose auto, cpu, cuda or cuda:N")
    gpus = _cuda_device_count()
    if choice == "auto":
        if gpus == 0:
            return "cpu"
        launched = env_int("WORLD_SIZE", 1, minimum=1) > 1
        return f"cuda:{env_int('LOCAL_RANK', 0) % gpus}" if launched else "cuda"
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
