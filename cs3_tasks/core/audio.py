"""Read any audio input to mono float32 at a requested rate; resample, encode and hash audio.

Every module that touches a waveform goes through here, so that a path, raw file bytes, a numpy
array or a Hugging Face audio dict all give the same samples. Decoding uses soundfile first and an
``ffmpeg`` subprocess for formats soundfile cannot read (mp3, m4a, ...). We never use ``datasets``'
Audio decoding: it needs torchcodec, which does not load on our machines.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import shutil
import stat
import struct
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Union

import numpy as np

SAMPLE_RATE = 16_000

# A bare np.ndarray is taken to be at SAMPLE_RATE already; a (array, sr) tuple carries its rate.
AudioSource = Union[str, os.PathLike, bytes, np.ndarray, "tuple[np.ndarray, int]", Mapping]

FFMPEG_TIMEOUT_S = 300
_CUT_MARGIN_S = 1.0  # resampled past a max_seconds cut: the kept samples equal those of the whole source

# What soundfile raises on unreadable input (LibsndfileError is a RuntimeError; odd headers give
# ValueError/TypeError/EOFError from the Python side).
_SOUNDFILE_ERRORS = (RuntimeError, ValueError, TypeError, EOFError, OSError)


class AudioError(ValueError):
    """Audio that cannot be used; the message names the input and the cause."""


# ---------------------------------------------------------------------------------------------
# public API


@dataclass(frozen=True)
class AudioClip:
    """Decoded audio: ``samples`` (1-D float32 mono at ``sample_rate``) of a source ``source_seconds`` long;
    ``cut`` when ``samples`` hold only the first ``max_seconds`` of it."""

    samples: np.ndarray
    sample_rate: int
    source_seconds: float
    cut: bool


def load_audio(
    source: AudioSource, sample_rate: int = SAMPLE_RATE, max_seconds: float | None = None
) -> np.ndarray:
    """Decode ``source`` to a 1-D float32 mono waveform at ``sample_rate`` Hz (at most its first
    ``max_seconds``: see `load_audio_clip`).

    Raises AudioError for a missing file, a directory or other non-regular file, an empty file, a
    truncated WAV (`wav_short_read`), undecodable bytes, zero-length audio, non-finite samples, or any other
    failure to read this one input (e.g. a header rate that would resample to more memory than there is).
    """
    return load_audio_clip(source, sample_rate, max_seconds).samples


def load_audio_clip(
    source: AudioSource, sample_rate: int = SAMPLE_RATE, max_seconds: float | None = None
) -> AudioClip:
    """`load_audio`, with the source's duration. With ``max_seconds``, only that much is read (soundfile)
    and resampled: the cut happens at the source's own rate, before resampling, so a header that claims
    1 Hz (a 4 MB file of 23 days) costs 181 samples, not a 119 GiB array.

    The samples kept are those of resampling the whole source and cutting it to
    ``int(max_seconds * sample_rate)`` samples (one second more than kept is resampled, more than the
    filter reaches)."""
    what = _describe(source)
    try:
        array, sr, source_frames = _decode(source, max_seconds)
        samples = _checked_samples(array, what)
        source_frames = len(samples) if source_frames is None else source_frames
        if max_seconds is not None and sr > 0:
            samples = samples[: _frames_to_read(max_seconds, sr)]  # arrays and ffmpeg output arrive whole
        resampled = resample(samples, sr, sample_rate)
    except AudioError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure reading this one input is this input's error
        raise AudioError(f"unreadable audio ({what}): {type(exc).__name__}: {exc}") from exc
    full_length = math.ceil(source_frames * sample_rate / sr)  # resample_poly's output length
    cut = max_seconds is not None and full_length > int(max_seconds * sample_rate)
    if cut:
        resampled = resampled[: int(max_seconds * sample_rate)]
    return AudioClip(np.ascontiguousarray(resampled, dtype=np.float32), sample_rate, source_frames / sr, cut)


def resample(audio: np.ndarray, orig_sr: int, target_sr: int) -> np.ndarray:
    """Polyphase resampling (scipy.signal.resample_poly) from ``orig_sr`` to ``target_sr``."""
    audio = np.asarray(audio, dtype=np.float32)
    orig_sr, target_sr = int(orig_sr), int(target_sr)
    if orig_sr <= 0 or target_sr <= 0:
        raise AudioError(f"invalid sample rate: {orig_sr} -> {target_sr}")
    if orig_sr == target_sr:
        return audio
    from scipy.signal import resample_poly

    g = math.gcd(orig_sr, target_sr)
    return resample_poly(audio, target_sr // g, orig_sr // g, axis=-1).astype(np.float32)


def flac_bytes(audio: np.ndarray, sample_rate: int = SAMPLE_RATE) -> bytes:
    """Encode a waveform as 16-bit FLAC (lossless for 16-bit sources, ~half the size of WAV)."""
    import soundfile as sf

    samples = _checked_samples(audio, "flac_bytes input")
    buffer = io.BytesIO()
    sf.write(buffer, np.clip(samples, -1.0, 1.0), int(sample_rate), format="FLAC", subtype="PCM_16")
    return buffer.getvalue()


def write_wav(path: str | os.PathLike, audio: np.ndarray, sample_rate: int = SAMPLE_RATE) -> None:
    """Write a 16-bit PCM WAV file (parent directories are created)."""
    import soundfile as sf

    samples = _checked_samples(audio, f"write_wav input for {path}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(path), np.clip(samples, -1.0, 1.0), int(sample_rate), format="WAV", subtype="PCM_16")


def content_hash(source: AudioSource) -> str:
    """sha256 hex digest identifying the audio content.

    Files and bytes are hashed as raw bytes (cheap: no decoding); arrays as float32 samples plus
    the sample rate. The same file given as a path or as its bytes has the same hash.
    """
    digest = hashlib.sha256()
    if isinstance(source, Mapping):
        if source.get("bytes") is not None:
            return content_hash(bytes(source["bytes"]))
        if source.get("array") is not None:
            return content_hash((np.asarray(source["array"]), _mapping_rate(source)))
        if source.get("path") is not None:
            return content_hash(source["path"])
        raise AudioError(f"audio dict without bytes, array or path (keys: {sorted(source)})")
    if isinstance(source, (bytes, bytearray, memoryview)):
        digest.update(b"bytes:")
        digest.update(bytes(source))
        return digest.hexdigest()
    if isinstance(source, (str, os.PathLike)):
        path = _existing_file(source)
        digest.update(b"bytes:")  # same prefix as bytes: path and its bytes hash alike
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()
    array, sr = _array_and_rate(source)
    digest.update(f"array:{sr}:{array.shape}:".encode())
    digest.update(np.ascontiguousarray(array, dtype=np.float32).tobytes())
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------
# decoding


# (samples in the source's own rate, that rate, frames of the whole source or None: as many as the samples)
Decoded = tuple[np.ndarray, int, "int | None"]


def _frames_to_read(max_seconds: float, rate: int) -> int:
    return math.ceil((max_seconds + _CUT_MARGIN_S) * rate)


def _decode(source: AudioSource, max_seconds: float | None = None) -> Decoded:
    """(samples, rate, frames of the whole source) in the source's own rate; samples may still be
    multi-channel/int. With ``max_seconds``, soundfile decodes only `_frames_to_read` frames (ffmpeg and
    arrays give all). Frames None: as many as the samples."""
    if isinstance(source, Mapping):
        # HF rows may carry both bytes and path; the bytes are the authoritative content.
        if source.get("array") is not None:
            return np.asarray(source["array"]), _mapping_rate(source), None
        if source.get("bytes") is not None:
            return _decode_bytes(bytes(source["bytes"]), _describe(source), max_seconds)
        if source.get("path") is not None:
            return _decode_path(source["path"], max_seconds)
        raise AudioError(f"audio dict without bytes, array or path (keys: {sorted(source)})")
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _decode_bytes(bytes(source), _describe(source), max_seconds)
    if isinstance(source, (str, os.PathLike)):
        return _decode_path(source, max_seconds)
    return (*_array_and_rate(source), None)


def _array_and_rate(source: object) -> tuple[np.ndarray, int]:
    if isinstance(source, tuple):
        if len(source) != 2:
            raise AudioError(f"audio tuple must be (array, sample_rate), got {len(source)} elements")
        array, sr = source
        if isinstance(array, (int, float)) and not isinstance(sr, (int, float)):
            array, sr = sr, array  # accept (sr, array) as scipy.io.wavfile returns it
        return np.asarray(array), int(sr)
    if isinstance(source, np.ndarray) or hasattr(source, "__array__"):
        return np.asarray(source), SAMPLE_RATE
    raise AudioError(f"unsupported audio source type: {type(source).__name__}")


def _mapping_rate(source: Mapping) -> int:
    sr = source.get("sampling_rate", source.get("sample_rate"))
    if sr is None:
        raise AudioError("audio dict with 'array' but no 'sampling_rate'")
    return int(sr)


def audio_file_problem(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be read as an audio file ("missing audio file: ...", "... is a directory",
    "... is not a regular file (a FIFO)", "empty audio file (0 bytes): ..."), or None.

    Looks with stat only: a FIFO is never opened (opening one for reading blocks until a writer comes)."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        return f"missing audio file: {p}"
    except OSError as exc:  # permission on a parent, a name too long, a loop of links, ...
        return f"audio file {p} cannot be examined: {exc.strerror or exc}"
    except ValueError:  # a name no file system takes: a NUL, a lone surrogate (half an emoji)
        return f"audio path {str(p)!r} cannot name a file"
    if stat.S_ISDIR(mode):
        return f"audio path {p} is a directory, not a file"
    if not stat.S_ISREG(mode):
        return f"audio path {p} is not a regular file ({_file_kind(mode)})"
    if p.stat().st_size == 0:
        return f"empty audio file (0 bytes): {p}"
    return None


def _file_kind(mode: int) -> str:
    kinds = [
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ]
    return next((name for test, name in kinds if test(mode)), "not a file")


def _existing_file(path: str | os.PathLike) -> Path:
    problem = audio_file_problem(path)
    if problem:
        raise AudioError(problem)
    return Path(path)


def wav_short_read(head: bytes, size: int) -> str | None:
    """Why a RIFF/WAVE file of ``size`` bytes starting with ``head`` is truncated, or None.

    Truncated: its ``data`` chunk declares more bytes than the file holds (a writer killed mid-file;
    soundfile then silently decodes what is there). A declared size of 0 or 0xFFFFFFFF (streamed WAV
    of unknown length) is not a truncation.
    """
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    offset = 12
    while offset + 8 <= len(head):
        chunk, length = head[offset : offset + 4], struct.unpack("<I", head[offset + 4 : offset + 8])[0]
        if chunk == b"data":
            held = size - (offset + 8)
            if length not in (0, 0xFFFFFFFF) and length > held:
                return f"truncated WAV: its data chunk declares {length} bytes, the file holds {max(held, 0)}"
            return None
        offset += 8 + length + (length & 1)
    return None


def _check_wav_complete(head: bytes, size: int, what: str) -> None:
    problem = wav_short_read(head, size)
    if problem:
        raise AudioError(f"{problem} ({what})")


def _soundfile_read(file: str | io.BytesIO, max_seconds: float | None) -> tuple[np.ndarray, int, int]:
    """soundfile's samples (with ``max_seconds``, at most `_frames_to_read` frames), rate and the frame
    count of the whole file."""
    import soundfile as sf

    with sf.SoundFile(file) as handle:
        rate, frames = int(handle.samplerate), int(handle.frames)
        wanted = -1 if max_seconds is None or rate <= 0 else min(frames, _frames_to_read(max_seconds, rate))
        return handle.read(frames=wanted, dtype="float32", always_2d=False), rate, frames


def _decode_path(path: str | os.PathLike, max_seconds: float | None = None) -> Decoded:
    p = _existing_file(path)
    with open(p, "rb") as handle:
        _check_wav_complete(handle.read(1 << 16), p.stat().st_size, f"audio file {p}")
    try:
        return _soundfile_read(str(p), max_seconds)
    except _SOUNDFILE_ERRORS as sf_error:
        return (*_ffmpeg_decode(str(p), f"audio file {p}", sf_error), None)


def _decode_bytes(data: bytes, what: str, max_seconds: float | None = None) -> Decoded:
    if not data:
        raise AudioError(f"empty audio ({what})")
    _check_wav_complete(data[: 1 << 16], len(data), what)
    try:
        return _soundfile_read(io.BytesIO(data), max_seconds)
    except _SOUNDFILE_ERRORS as sf_error:
        # ffmpeg needs a seekable input for containers like m4a (moov atom at the end): use a file.
        with tempfile.NamedTemporaryFile(suffix=".audio") as tmp:
            tmp.write(data)
            tmp.flush()
            return (*_ffmpeg_decode(tmp.name, what, sf_error), None)


def _ffmpeg_decode(path: str, what: str, sf_error: Exception) -> tuple[np.ndarray, int]:
    """Decode with ffmpeg to mono float32 at its native rate (we resample ourselves, like soundfile)."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise AudioError(
            f"undecodable audio ({what}): soundfile failed ({sf_error}) and ffmpeg is not installed"
        )
    rate = _ffmpeg_probe_rate(path) or SAMPLE_RATE
    cmd = [
        ffmpeg,
        "-nostdin",
        "-v",
        "error",
        "-i",
        path,
        "-vn",
        "-f",
        "f32le",
        "-ac",
        "1",
        "-ar",
        str(rate),
        "pipe:1",
    ]
    try:
        result = subprocess.run(cmd, capture_output=True, timeout=FFMPEG_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise AudioError(f"undecodable audio ({what}): ffmpeg timed out after {FFMPEG_TIMEOUT_S} s") from exc
    if result.returncode != 0:
        detail = result.stderr.decode("utf-8", "replace").strip().splitlines()
        raise AudioError(
            f"undecodable audio ({what}): soundfile: {sf_error}; ffmpeg: {detail[-1] if detail else 'failed'}"
        )
    samples = np.frombuffer(result.stdout, dtype="<f4").astype(np.float32)
    return samples, rate


def _ffmpeg_probe_rate(path: str) -> int | None:
    ffprobe = shutil.which("ffprobe")
    if ffprobe is None:
        return None
    cmd = [
        ffprobe,
        "-v",
        "error",
        "-select_streams",
        "a:0",
        "-show_entries",
        "stream=sample_rate",
        "-of",
        "default=noprint_wrappers=1:nokey=1",
        path,
    ]
    try:
        out = subprocess.run(cmd, capture_output=True, timeout=60, check=False).stdout.decode().strip()
        return int(out.splitlines()[0]) if out else None
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        return None


# ---------------------------------------------------------------------------------------------
# post-processing


def _to_mono_float(array: np.ndarray, what: str) -> np.ndarray:
    if array.dtype.kind in "iu":  # integer PCM -> [-1, 1)
        info = np.iinfo(array.dtype)
        if array.dtype.kind == "u":
            array = (array.astype(np.float64) - (info.max + 1) / 2) / ((info.max + 1) / 2)
        else:
            array = array.astype(np.float64) / -float(info.min)
    elif array.dtype.kind != "f":
        raise AudioError(f"audio samples must be numeric, got dtype {array.dtype} ({what})")
    array = array.astype(np.float32, copy=False)
    if array.ndim == 0:
        raise AudioError(f"audio is a scalar, not a waveform ({what})")
    if array.ndim == 2:
        # soundfile gives (frames, channels); torch-style arrays are (channels, frames).
        channels_first = array.shape[0] <= 8 and array.shape[0] < array.shape[1]
        array = array.mean(axis=0 if channels_first else 1)
    elif array.ndim > 2:
        raise AudioError(f"audio array has {array.ndim} dimensions, expected 1 or 2 ({what})")
    return array


def _checked_samples(audio: np.ndarray, what: str) -> np.ndarray:
    samples = _to_mono_float(np.asarray(audio), what)
    if samples.size == 0:
        raise AudioError(f"zero-length audio ({what})")
    if not np.all(np.isfinite(samples)):
        raise AudioError(f"audio contains NaN or infinite samples ({what})")
    return samples


def _describe(source: object) -> str:
    if isinstance(source, (str, os.PathLike)):
        return f"file {source}"
    if isinstance(source, (bytes, bytearray, memoryview)):
        return f"{len(source)} bytes"
    if isinstance(source, Mapping):
        path = source.get("path")
        return f"audio dict{f' path={path}' if path else ''}"
    if isinstance(source, tuple):
        return "(array, sample_rate) input"
    return f"{type(source).__name__} input"
