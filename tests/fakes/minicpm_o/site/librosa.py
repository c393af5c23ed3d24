"""Fake librosa (the MiniCPM-o environment has the real one): load(path, sr=22050, mono=True)."""

import numpy as np
import soundfile as sf


def load(path, *, sr=22050, mono=True, offset=0.0, duration=None, dtype=np.float32, res_type="soxr_hq"):
    y, rate = sf.read(str(path), dtype="float32", always_2d=True)
    y = y.mean(axis=1) if mono else y.T
    if sr is not None and sr != rate:
        n = int(round(len(y) * sr / rate))
        y = np.interp(np.linspace(0, len(y) - 1, n), np.arange(len(y)), y).astype(np.float32)
        rate = sr
    return y.astype(dtype), rate
