"""ASR on a GPU: the engine is tried on the requested device once, before any work, and the CUDA libraries it
runs with are found and named.

faster-whisper computes with CTranslate2, whose pip wheels (4.x) are built against CUDA 12 (cuBLAS 12, cuDNN
9): on a machine with only CUDA 13 its first encode fails ("Library libcublas.so.12 is not found or cannot be
loaded"), although it counts the GPU. `cs3_tasks.asr.runners.check_asr_device` loads the run's model on its
device and encodes one second of silence there; a failure is one `AsrDeviceError` (`device_refusal`: the
missing library, the CUDA the engine needs and the ways out), raised before anything is transcribed or
written. A machine fault later in a run (`is_machine_fault`) fails the run the same way instead of being
recorded as per-item ASR failures.

pip's CUDA 12 libraries (``nvidia-cublas-cu12``, ``nvidia-cudnn-cu12``) install into site-packages, where the
dynamic loader does not look; faster-whisper on a GPU runs in a child process (cs3_tasks.asr.process) started
with their folders on LD_LIBRARY_PATH (`library_path_environment`), so the user sets nothing. The libraries
the engine loaded are named in the ASR fingerprint (`loaded_cuda_libraries`), by package and version, never by
path.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from cs3_tasks.asr.config import AsrModelError, installed_version
from cs3_tasks.core.refusal import Refusal

# pip distributions of the CUDA 12 libraries CTranslate2 4.x loads
CUDA12_PACKAGES = ("nvidia-cublas-cu12", "nvidia-cudnn-cu12")
# the shared libraries that identify a CUDA stack (their file names, as the loader maps them)
CUDA_LIBRARY = re.compile(r"lib(cublas|cublasLt|cudnn|cudart|nvrtc)(_\w+)?\.so(\.\d+)*$")
# the texts of errors that are the machine's, not a clip's: a library that cannot be loaded, a driver
# that does not match, a device that is gone
MACHINE_FAULT = re.compile(
    r"(Library \S+ is not found or cannot be loaded|cannot open shared object file|"
    r"CUDA driver version is insufficient|no CUDA-capable device|CUDA_ERROR_NO_DEVICE|"
    r"cudaErrorNoDevice|cudaErrorInsufficientDriver)",
    re.IGNORECASE,
)


class AsrDeviceError(AsrModelError, Refusal):
    """The ASR engine cannot run on the requested device (a missing CUDA library, a driver too old): a run
    refused as a whole (one line, exit 2), never a clip's failure."""


def is_machine_fault(exc: BaseException) -> bool:
    """Whether an engine error is the machine's (a CUDA library or driver), not one clip's."""
    return bool(MACHINE_FAULT.search(f"{type(exc).__name__}: {exc}"))


def device_refusal(backend: str, device: str, exc: BaseException) -> str:
    """One line: which engine cannot run on ``device``, the library it could not load, the CUDA it needs and
    the ways out."""
    cause = " ".join(f"{type(exc).__name__}: {exc}".split())
    missing = re.search(r"lib[\w+-]+\.so(\.\d+)*", cause)
    if backend == "faster-whisper":
        version = installed_version("ctranslate2") or "?"
        needs = (
            f"CTranslate2 {version} needs CUDA 12 (cuBLAS 12, cuDNN 9)"
            if version.startswith("4.")
            else f"CTranslate2 {version} needs the CUDA it was built for"
        )
        ways = (
            "pip install nvidia-cublas-cu12 nvidia-cudnn-cu12 (found without LD_LIBRARY_PATH), "
            "--asr-device cpu (the benchmark's portable transcripts), or --asr-backend transformers "
            "(torch's own CUDA)"
        )
    else:
        torch_cuda = _torch_cuda()
        needs = f"torch {installed_version('torch') or '?'} is built for CUDA {torch_cuda or 'none'}"
        ways = "--asr-device cpu (the benchmark's portable transcripts), or a torch built for this CUDA"
    named = f"{missing.group(0)} cannot be loaded" if missing else cause
    return (
        f"--asr-device {device}: {backend} cannot run on this GPU ({named}; {needs}). Ways out: {ways}. "
        f"Cause: {cause}"
    )


def pip_cuda_library_dirs() -> list[str]:
    """The ``lib`` folders of pip's CUDA 12 libraries (CUDA12_PACKAGES) where they are installed."""
    return [lib for lib, owner in _pip_library_owners().items() if owner.split()[0] in CUDA12_PACKAGES]


def library_path_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """LD_LIBRARY_PATH for a GPU engine's child: pip's CUDA 12 library folders, then the user's own ({} when
    pip has none)."""
    environ = os.environ if environ is None else environ
    dirs = pip_cuda_library_dirs()
    if not dirs:
        return {}
    current = [p for p in (environ.get("LD_LIBRARY_PATH") or "").split(os.pathsep) if p]
    return {"LD_LIBRARY_PATH": os.pathsep.join(dirs + [p for p in current if p not in dirs])}


def loaded_cuda_libraries(maps: str | None = None) -> dict[str, str]:
    """The CUDA libraries mapped into this process (``maps``: the text of /proc/self/maps, read when None),
    each by file name -> "<pip distribution> <version>" where one installed it, else "system"; no path."""
    if maps is None:
        try:
            maps = Path("/proc/self/maps").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return {}
    owners: dict[str, str] | None = None
    found: dict[str, str] = {}
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        path = fields[5].strip() if len(fields) == 6 else ""
        name = Path(path).name
        if path.startswith("/") and CUDA_LIBRARY.fullmatch(name) and name not in found:
            owners = _pip_library_owners() if owners is None else owners
            found[name] = owners.get(str(Path(path).parent), "system")
    return dict(sorted(found.items()))


def encoder_probe(encoder: Any, mel_bins: int, frames: int, dtype: Any, device: str) -> dict[str, str]:
    """A torch Whisper encoder's pass over one window of zeros on ``device`` (what the torch backends'
    ``probe`` runs), and the CUDA libraries it ran with."""
    import torch

    with torch.inference_mode():
        encoder(torch.zeros(1, mel_bins, frames, dtype=dtype, device=device))
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    return loaded_cuda_libraries()


def _pip_library_owners() -> dict[str, str]:
    """The ``lib`` folders of pip's NVIDIA distributions (nvidia-*) -> "<distribution> <version>"."""
    owners: dict[str, str] = {}
    for distribution in metadata.distributions():
        name = str(distribution.metadata["Name"] or "")
        if not name.lower().startswith("nvidia-"):
            continue
        for file in distribution.files or []:
            parts = Path(str(file)).parts
            if len(parts) >= 4 and parts[0] == "nvidia" and parts[2] == "lib":
                lib = Path(str(file.locate())).parent
                owners.setdefault(str(lib), f"{name.lower()} {distribution.version}")
    return owners


def _torch_cuda() -> Any:
    try:
        import torch

        return torch.version.cuda
    except ImportError:
        return None
