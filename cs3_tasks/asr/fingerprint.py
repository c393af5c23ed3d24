"""What a transcript depends on, by identity: the ASR fingerprint of results and of the transcript cache.

A transcript is a function of the audio and of everything here: the backend, the versions of the engine and of
the libraries it computes with, the model (its name and a hash of its weights, never a local path: the same
model under another HOME is the same model), the compute type, the device kind, the arithmetic mode
(cs3_tasks.asr.numerics) and the decoding options. ``asr_fingerprint`` gives it as plain data for
``<set>.settings.json``, summaries and reports; ``fingerprint_key`` is its hash, part of every cache key, so
an upgraded engine never reuses another engine's transcripts. The CPU's features are recorded beside it
(``machine``); they are part of the fingerprint only when the arithmetic follows the CPU (``native``).
"""

from __future__ import annotations

import platform
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

from cs3_tasks.asr.config import AsrConfig, decoding_options, installed_version, is_local
from cs3_tasks.asr.convert import offline_transformers_whisper
from cs3_tasks.asr.device import asr_device
from cs3_tasks.asr.numerics import NATIVE, cpu_features, numerics_mode
from cs3_tasks.asr.offline import offline_weight_parts, offline_whisper_base
from cs3_tasks.asr.process import runs_in_own_process
from cs3_tasks.asr.runners import check_asr_device
from cs3_tasks.core.cache import files_sha256, stable_key

# the distributions whose versions a backend's transcripts depend on
# (numpy is not among faster-whisper's: its float64 features are the same across numpy versions, BLAS kernels
# and CPUs, measured in benchmarks/README.md; it is recorded with the machine)
ENGINE_PACKAGES = {
    "faster-whisper": ("faster-whisper", "ctranslate2", "tokenizers"),
    "transformers": ("transformers", "torch", "tokenizers", "numpy"),
    "openai-whisper": ("openai-whisper", "torch", "tiktoken", "numpy"),
}
WEIGHT_FILES = ("model.bin", "model.safetensors", "pytorch_model.bin")


def compute_type(backend: str, device: str) -> str:
    """The precision a backend runs at on ``device``: faster-whisper int8 on a CPU (about twice as fast as
    float32), float16 on a GPU; the torch backends float32 on a CPU, float16 on a GPU."""
    if backend == "faster-whisper":
        return "int8" if device == "cpu" else "float16"
    return "float32" if device == "cpu" else "float16"


def asr_fingerprint(config: AsrConfig) -> dict[str, Any]:
    """What the transcripts of ``config`` depend on (see the module docstring), as plain data."""
    resolved = config.resolved()
    device = asr_device(resolved.device, str(resolved.backend))
    backend = str(resolved.backend)
    numerics = numerics_of(backend, device)
    fingerprint: dict[str, Any] = {
        "backend": backend,
        "model": model_identity(str(resolved.model)),
        "engine": engine_versions(backend),
        "compute_type": compute_type(backend, device),
        "device": device.split(":")[0],
        "numerics": numerics,
        "decoding": asdict(decoding_options(resolved.short_clips)),
    }
    if numerics == NATIVE:  # the arithmetic follows this CPU: its features are part of the identity
        fingerprint["cpu_features"] = cpu_features()
    if device != "cpu":  # the CUDA libraries the engine ran with, by package and version (checked once)
        fingerprint["cuda_libraries"] = check_asr_device(resolved)
    return fingerprint


def fingerprint_key(fingerprint: dict[str, Any]) -> str:
    """The hash of a fingerprint (what cache keys and comparisons hold)."""
    return stable_key(fingerprint)


def machine() -> dict[str, Any]:
    """Where a run ran, for the record only (not part of any identity): the platform and CPU features."""
    return {
        "platform": f"{platform.system()}-{platform.machine()}",
        "python": platform.python_version(),
        "numpy": installed_version("numpy"),
        "cpu_features": cpu_features(),
    }


def numerics_of(backend: str, device: str) -> str:
    """The arithmetic mode of a run: portable only for faster-whisper in its own CPU process (which starts
    with the pinned code paths), else native (GPUs, torch backends, $CS3_ASR_IN_PROCESS)."""
    if backend == "faster-whisper" and device == "cpu" and runs_in_own_process(device):
        return numerics_mode()
    return NATIVE


def engine_versions(backend: str) -> dict[str, str | None]:
    """Installed versions of the distributions the backend computes with (None: not installed)."""
    return {name: installed_version(name) for name in ENGINE_PACKAGES.get(backend, ())}


def model_identity(model: str) -> dict[str, str | None]:
    """A model by identity: ``name`` (for a local folder or file its own name, else the name or Hub id as
    given) and ``sha256`` of its weights (None when they are not on this machine, e.g. a name to download).
    The offline Whisper-base converted for transformers is converted (once) to know its weights, so that
    its first run names it as every later one does."""
    path = Path(model).expanduser()
    if path == offline_transformers_whisper(convert=False):
        offline_transformers_whisper()  # converted and checked: its weights are known from the first run
    if is_local(path) or path == offline_whisper_base(join=False):  # the offline model, joined or not
        return {"name": path.name, "sha256": weights_sha256(path)}
    snapshot = _hub_snapshot(model)
    return {"name": model, "sha256": weights_sha256(snapshot) if snapshot is not None else None}


def _hub_snapshot(model: str) -> Path | None:
    """The local Hugging Face cache's snapshot folder of a Hub id, when its weights are there."""
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", model) or ".." in model:  # not a Hub id
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        for name in (*WEIGHT_FILES, "model.safetensors.index.json"):
            found = try_to_load_from_cache(model, name)
            if isinstance(found, str):
                return Path(found).parent
    except Exception:  # noqa: BLE001 - no cache or an unusual id: the weights are not known here
        return None
    return None


def weights_sha256(path: Path) -> str | None:
    """sha256 of a model's weights: the file itself, or the weight file(s) of a folder. Computed once per
    file content on this machine (cached by path, size and modification time). The offline Whisper-base:
    the hash of the joined bytes, from its parts, joined or not (a joined copy that differs is joined again
    before it is used: `offline.joined_model_problem`)."""
    if path.expanduser() == offline_whisper_base(join=False):
        return files_sha256(offline_weight_parts())
    files = [path] if path.is_file() else [path / n for n in WEIGHT_FILES if (path / n).is_file()]
    if not files and path.is_dir():
        files = sorted(path.glob("*.safetensors"))
    if not files:
        return None
    return files_sha256(files)


def describe_fingerprint(fingerprint: dict[str, Any] | None) -> str:
    """One line for people, never a path: "faster-whisper whisper-base-ct2 (sha256 1a2b3c4d5e6f) int8 cpu,
    portable-avx2; faster-whisper 1.2.1, ctranslate2 4.8.5, tokenizers 0.23.3, numpy 2.4.6"."""
    if not fingerprint:
        return "n/a"
    if fingerprint.get("source"):  # no ASR ran: the transcripts were given
        return str(fingerprint["source"])
    model = fingerprint.get("model") or {}
    digest = model.get("sha256")
    parts = [fingerprint.get("backend"), model.get("name")]
    parts += [f"(sha256 {digest[:12]})"] if digest else []
    parts += [fingerprint.get("compute_type"), fingerprint.get("device")]
    engine = ", ".join(f"{k} {v}" for k, v in (fingerprint.get("engine") or {}).items() if v)
    line = " ".join(str(p) for p in parts if p) + f", {fingerprint.get('numerics')}"
    return line + (f"; {engine}" if engine else "")
