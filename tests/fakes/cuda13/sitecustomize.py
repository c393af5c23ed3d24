"""A simulated CUDA 13 machine for CTranslate2 (tests only), loaded at start-up as ``sitecustomize`` by every
Python process whose PYTHONPATH names this folder (the ASR child and lm_eval's processes too).

What a GPU machine with only CUDA 13 shows CTranslate2 4.x (built against CUDA 12), as measured on one: it
counts one CUDA device and offers float16 compute types there, a Whisper model loads on it, and the first
encode fails with "Library libcublas.so.12 is not found or cannot be loaded". CPU models are untouched.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

CUBLAS_ERROR = "Library libcublas.so.12 is not found or cannot be loaded"
CUDA_COMPUTE_TYPES = {"float32", "float16", "int8_float16", "int8_float32", "int8", "bfloat16"}


class _CudaWhisper:
    """A Whisper model 'loaded' on the simulated GPU: every computation fails as cuBLAS 12 is missing."""

    is_multilingual = True
    n_mels = 80
    device = "cuda"

    def __init__(self, model_path, device="cuda", device_index=0, **kwargs):
        self.model_path, self.device_index = model_path, device_index

    def _fail(self, *args, **kwargs):
        raise RuntimeError(CUBLAS_ERROR)

    encode = generate = detect_language = align = _fail


def _patch(ctranslate2) -> None:
    real_whisper = ctranslate2.models.Whisper
    real_types = ctranslate2.get_supported_compute_types

    def whisper(model_path, device="cpu", *args, **kwargs):
        if device == "cuda":
            return _CudaWhisper(model_path, device, *args, **kwargs)
        return real_whisper(model_path, device, *args, **kwargs)

    def compute_types(device, device_index=0):
        return set(CUDA_COMPUTE_TYPES) if device == "cuda" else real_types(device, device_index)

    ctranslate2.get_cuda_device_count = lambda: 1
    ctranslate2.get_supported_compute_types = compute_types
    ctranslate2.models.Whisper = whisper


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches ctranslate2 right after it is imported (importing it here would slow every process)."""

    def find_spec(self, name, path=None, target=None):
        if name != "ctranslate2":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _PatchOnImport())
