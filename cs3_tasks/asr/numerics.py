"""Arithmetic that gives the same transcripts on any x86-64 machine with AVX2 (faster-whisper on a CPU).

Two parts of faster-whisper's arithmetic follow the CPU it runs on, and each changes borderline transcripts
(benchmarks/README.md, "Same transcripts on any machine"):

- the log-mel features: numpy's float32 matrix product and logarithm take the code path of the CPU (OpenBLAS
  kernels, numpy's own AVX-512 loops), so their last bits differ between machines. ``log_mel`` computes the
  same features in float64 and rounds them to float32 once at the end: every machine, kernel and thread count
  gives the same float32 values (float64 rounding differences vanish in that last rounding).
- CTranslate2's matrix products run in Intel MKL, which picks its kernels by CPU (AVX-512 VNNI, AVX2...),
  and CTranslate2 itself picks MKL on Intel CPUs and oneDNN elsewhere. ``PINNED_ENVIRONMENT`` fixes both to
  MKL's AVX2 code path under its conditional numerical reproducibility mode (``MKL_CBWR``), which gives the
  same results on every CPU that has AVX2. These variables are read when the engine starts, so they are set
  for the ASR child process (cs3_tasks.asr.process), which starts with them.

``$CS3_ASR_NUMERICS=native`` leaves the engine on this CPU's own code paths (features stay float64); the
ASR fingerprint then says "native" and the transcripts are this machine's.
"""

from __future__ import annotations

import platform
from typing import Any

from cs3_tasks.core.environment import env_choice

NUMERICS_ENV = "CS3_ASR_NUMERICS"
PORTABLE = "portable-avx2"
NATIVE = "native"
# MKL's AVX2 code path in reproducibility mode; MKL on every CPU (CTranslate2 uses oneDNN on non-Intel CPUs
# otherwise); CTranslate2's own kernels on AVX2 (its default on AVX2 and AVX-512 CPUs alike).
PINNED_ENVIRONMENT = {"MKL_CBWR": "AVX2", "CT2_USE_MKL": "1", "CT2_FORCE_CPU_ISA": "AVX2"}


def numerics_mode(environ: Any = None) -> str:
    """PORTABLE when this CPU can run the pinned AVX2 code paths and $CS3_ASR_NUMERICS is not "native";
    else NATIVE (the engine's arithmetic follows this machine). Another value of the variable is refused
    (`core.environment`), naming it."""
    choice = env_choice(NUMERICS_ENV, ("portable", NATIVE), "portable", environ)
    return PORTABLE if choice == "portable" and "avx2" in cpu_features() else NATIVE


def engine_environment(environ: Any = None) -> dict[str, str]:
    """The variables the ASR child starts with so that its engine computes as on every AVX2 machine (none in
    NATIVE mode). They win over the user's own: a run's numbers must not follow a variable of the shell."""
    return dict(PINNED_ENVIRONMENT) if numerics_mode(environ) == PORTABLE else {}


def cpu_features() -> list[str]:
    """The CPU's vector-arithmetic features that select engine code paths (x86 flags as /proc/cpuinfo names
    them); the machine name alone where the platform says no more."""
    wanted = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "avx512_bf16")
    wanted += ("avx512_fp16", "amx_int8", "amx_bf16")
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith(("flags", "Features")):
                    flags = set(line.split(":", 1)[1].split())
                    return [f for f in wanted if f in flags] or sorted(flags)
    except OSError:
        pass
    return [platform.machine().lower()]


def log_mel(extractor: Any, waveform: Any, padding: int = 160, chunk_length: int | None = None) -> Any:
    """faster-whisper's ``FeatureExtractor.__call__`` (the same steps and constants) in float64, rounded to
    float32 at the end: the same values on every CPU, BLAS kernel and thread count."""
    import numpy as np

    if chunk_length is not None:  # as the extractor does: its window length follows the call
        extractor.n_samples = chunk_length * extractor.sampling_rate
        extractor.nb_max_frames = extractor.n_samples // extractor.hop_length
    # the extractor hands the model float32 audio; start from the same samples
    samples = np.asarray(waveform, dtype=np.float32).astype(np.float64)
    if padding:
        samples = np.pad(samples, (0, padding))
    window = np.hanning(extractor.n_fft + 1)[:-1]
    spectrum = extractor.stft(
        samples, extractor.n_fft, extractor.hop_length, window=window, return_complex=True
    )
    magnitudes = np.abs(spectrum[..., :-1]) ** 2
    mel = np.asarray(extractor.mel_filters, dtype=np.float64) @ magnitudes
    log_spec = np.log10(np.clip(mel, a_min=1e-10, a_max=None))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).astype(np.float32)


class PortableFeatures:
    """A faster-whisper feature extractor whose features are `log_mel`'s; other attributes are the wrapped
    extractor's (WhisperModel.transcribe and our batched paths both compute features through it)."""

    def __init__(self, extractor: Any):
        self._extractor = extractor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._extractor, name)

    def __call__(self, waveform: Any, padding: int = 160, chunk_length: int | None = None) -> Any:
        return log_mel(self._extractor, waveform, padding, chunk_length)
