"""What a loaded ASR model offers (Runner protocols), the models loaded once per process, and the check that
a model runs on the device asked for."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from cs3_tasks.asr.config import AsrConfig, AsrModelError, check_backend, default_backend, default_model
from cs3_tasks.asr.convert import convert_if_offline
from cs3_tasks.asr.device import asr_device
from cs3_tasks.asr.faster_whisper import FasterWhisperRunner
from cs3_tasks.asr.gpu import AsrDeviceError, device_refusal, is_machine_fault
from cs3_tasks.asr.offline import join_if_offline
from cs3_tasks.asr.openai_whisper import OpenAIWhisperRunner
from cs3_tasks.asr.process import FasterWhisperProcess, runs_in_own_process
from cs3_tasks.asr.transformers_whisper import TransformersWhisperRunner


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
_CHECKED: dict[tuple[str, str, str], dict[str, str]] = {}  # (backend, model, device) -> CUDA libraries


def loadable_model(model: str) -> str:
    """What a model name loads as: the offline Whisper-base joined (faster-whisper) or converted
    (transformers) on first use; any other name as it is."""
    return convert_if_offline(join_if_offline(model))


def load_runner(backend: str | None = None, model: str | None = None, device: str | None = None) -> Runner:
    """The loaded model (once per process) that ``transcribe_batch`` would use, for direct calls."""
    backend = backend or default_backend()
    check_backend(backend)
    model_name = loadable_model(model or default_model(backend))
    return cached_runner(backend, model_name, asr_device(device, backend))


def check_asr_device(config: AsrConfig) -> dict[str, str]:
    """Load ``config``'s model on its device and encode one second of silence there (the runner's ``probe``),
    once per process and model: the CUDA libraries it runs with (`gpu.loaded_cuda_libraries`; {} on a CPU,
    where nothing is tried). AsrDeviceError naming the cause and the ways out (`gpu.device_refusal`) when the
    engine cannot run there; AsrModelError when the model cannot be loaded at all."""
    resolved = config.resolved()
    backend = str(resolved.backend)
    device = asr_device(resolved.device, backend)
    if device == "cpu":
        return {}
    key = (backend, loadable_model(str(resolved.model)), device)
    with _RUNNERS_LOCK:
        if key in _CHECKED:
            return _CHECKED[key]
    try:
        libraries = dict(cached_runner(*key).probe())
    except AsrDeviceError:
        raise
    except Exception as exc:  # noqa: BLE001 - the engine's own error, named in the refusal
        if isinstance(exc, AsrModelError) and not is_machine_fault(exc):
            raise
        raise AsrDeviceError(device_refusal(backend, device, exc)) from None
    with _RUNNERS_LOCK:
        _CHECKED[key] = libraries
    return libraries


def cached_runner(backend: str, model_name: str, device: str = "cpu") -> Runner:
    """The runner of ``backend`` for a resolved model name and device, loaded on first use."""
    if backend == "faster-whisper":
        compute_type = "int8" if device == "cpu" else "float16"  # int8 on CPU: ~2x faster than float32
        own_process = runs_in_own_process(device)  # on CPUs: an allocator that keeps freed memory
        key = (backend, model_name, device, compute_type + (":process" if own_process else ""))
        runner_type = FasterWhisperProcess if own_process else FasterWhisperRunner
        with _RUNNERS_LOCK:
            if key not in _RUNNERS:
                _RUNNERS[key] = runner_type(model_name, device, compute_type)
            return _RUNNERS[key]
    key = (backend, model_name, device, "fp32" if device == "cpu" else "fp16")
    runner_class = TransformersWhisperRunner if backend == "transformers" else OpenAIWhisperRunner
    with _RUNNERS_LOCK:
        if key not in _RUNNERS:
            _RUNNERS[key] = runner_class(model_name, device)
        return _RUNNERS[key]
