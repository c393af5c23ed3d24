"""cs3_tasks.core.audio: every input form decodes to the same 16 kHz mono float32 samples."""

from __future__ import annotations

import io
import os
import shutil
import struct
import subprocess
import threading

import numpy as np
import pytest
import soundfile as sf

from cs3_tasks.core.audio import (
    SAMPLE_RATE,
    AudioError,
    audio_file_problem,
    content_hash,
    flac_bytes,
    load_audio,
    load_audio_clip,
    resample,
    write_wav,
)


def _tone(sr: int, seconds: float = 0.5, freq: float = 440.0) -> np.ndarray:
    t = np.arange(int(sr * seconds)) / sr
    return (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def _wav_bytes(samples: np.ndarray, sr: int, subtype: str = "PCM_16") -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, samples, sr, format="WAV", subtype=subtype)
    return buffer.getvalue()


@pytest.fixture
def wav_22k(tmp_path):
    path = tmp_path / "tone22k.wav"
    sf.write(str(path), _tone(22_050), 22_050, subtype="PCM_16")
    return path


def test_path_bytes_and_hf_dicts_decode_identically(wav_22k):
    from_path = load_audio(wav_22k)
    raw = wav_22k.read_bytes()
    assert from_path.dtype == np.float32 and from_path.ndim == 1
    assert len(from_path) == SAMPLE_RATE // 2  # 0.5 s at 16 kHz
    np.testing.assert_array_equal(load_audio(raw), from_path)
    np.testing.assert_array_equal(load_audio(str(wav_22k)), from_path)
    np.testing.assert_array_equal(load_audio({"bytes": raw, "path": "ignored.wav"}), from_path)
    np.testing.assert_array_equal(load_audio({"bytes": None, "path": str(wav_22k)}), from_path)
    samples, sr = sf.read(str(wav_22k), dtype="float32")
    np.testing.assert_allclose(load_audio({"array": samples, "sampling_rate": sr}), from_path, atol=1e-6)
    np.testing.assert_allclose(load_audio((samples, sr)), from_path, atol=1e-6)


def test_bare_array_is_taken_at_16k():
    tone = _tone(SAMPLE_RATE)
    np.testing.assert_array_equal(load_audio(tone), tone)
    assert len(load_audio(tone, sample_rate=8_000)) == len(tone) // 2


@pytest.mark.parametrize("sr", [8_000, 22_050, 44_100, 48_000])
def test_resampling_keeps_duration_and_pitch(sr):
    out = load_audio((_tone(sr, seconds=1.0, freq=440.0), sr))
    assert len(out) == SAMPLE_RATE
    spectrum = np.abs(np.fft.rfft(out))
    peak_hz = np.argmax(spectrum) * SAMPLE_RATE / len(out)
    assert abs(peak_hz - 440.0) <= 2.0


def test_resample_identity_and_ratio():
    tone = _tone(44_100)
    assert resample(tone, 44_100, 44_100) is not None
    np.testing.assert_array_equal(resample(tone, 44_100, 44_100), tone)
    assert len(resample(tone, 44_100, 16_000)) == 8_000


def test_stereo_and_int_pcm_become_mono_float():
    left = _tone(SAMPLE_RATE)
    stereo = np.stack([left, left], axis=1)  # (frames, channels)
    np.testing.assert_allclose(load_audio(stereo), left, atol=1e-7)
    np.testing.assert_allclose(load_audio(stereo.T), left, atol=1e-7)  # (channels, frames)
    pcm = (left * 32767).astype(np.int16)
    out = load_audio(pcm)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, left, atol=1e-4)
    stereo_file = _wav_bytes(stereo, SAMPLE_RATE)
    np.testing.assert_allclose(load_audio(stereo_file), left, atol=1e-4)


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg not installed")
@pytest.mark.parametrize("fmt", ["mp3", "m4a"])
def test_compressed_formats_decode_via_soundfile_or_ffmpeg(tmp_path, wav_22k, fmt):
    encoded = tmp_path / f"tone.{fmt}"
    subprocess.run(["ffmpeg", "-y", "-v", "error", "-i", str(wav_22k), str(encoded)], check=True)
    ref = load_audio(wav_22k)
    for source in (encoded, encoded.read_bytes()):  # bytes need a seekable temp file for m4a
        out = load_audio(source)
        assert out.dtype == np.float32 and out.ndim == 1
        assert abs(len(out) - len(ref)) < 0.1 * SAMPLE_RATE  # encoders pad a few ms
        spectrum = np.abs(np.fft.rfft(out))
        assert abs(np.argmax(spectrum) * SAMPLE_RATE / len(out) - 440.0) <= 5.0


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg not installed")
def test_ffmpeg_fallback_is_used_when_soundfile_fails(tmp_path, wav_22k):
    m4a = tmp_path / "tone.m4a"
    subprocess.run(["ffmpeg", "-y", "-v", "error", "-i", str(wav_22k), "-c:a", "aac", str(m4a)], check=True)
    with pytest.raises(RuntimeError):  # soundfile.LibsndfileError
        sf.read(str(m4a))  # libsndfile has no AAC: only the fallback can decode this
    assert len(load_audio(m4a)) > 0.4 * SAMPLE_RATE


@pytest.mark.parametrize(
    ("source", "cause"),
    [
        ("/nonexistent/dir/q1.wav", "missing audio file"),
        (b"", "empty audio"),
        (b"definitely not audio" * 20, "undecodable"),
        (np.zeros(0, dtype=np.float32), "zero-length"),
        (np.array([0.1, np.nan, 0.2], dtype=np.float32), "NaN"),
        (np.ones((2, 3, 4), dtype=np.float32), "dimensions"),
        ({"path": None, "bytes": None}, "without bytes"),
        ({"array": [0.1, 0.2]}, "sampling_rate"),
        (12345, "unsupported"),
    ],
)
def test_bad_inputs_raise_audio_error_naming_the_cause(source, cause):
    with pytest.raises(AudioError, match=cause):
        load_audio(source)


def test_empty_file_and_zero_frame_wav(tmp_path):
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    with pytest.raises(AudioError, match="empty audio file"):
        load_audio(empty)
    zero = tmp_path / "zero.wav"
    sf.write(str(zero), np.zeros(0, dtype=np.float32), SAMPLE_RATE)
    with pytest.raises(AudioError, match="zero-length"):
        load_audio(zero)
    assert isinstance(AudioError("x"), ValueError)


def test_flac_roundtrip_is_16bit_lossless(tmp_path):
    tone = _tone(SAMPLE_RATE)
    encoded = flac_bytes(tone)
    assert encoded[:4] == b"fLaC"
    decoded = load_audio(encoded)
    np.testing.assert_allclose(decoded, tone, atol=1.0 / 32768 + 1e-6)
    assert sf.info(io.BytesIO(encoded)).subtype == "PCM_16"
    with pytest.raises(AudioError):
        flac_bytes(np.zeros(0, dtype=np.float32))


def test_write_wav_creates_parents_and_clips(tmp_path):
    path = tmp_path / "a" / "b" / "out.wav"
    write_wav(path, np.array([2.0, -2.0, 0.25], dtype=np.float32), 24_000)
    info = sf.info(str(path))
    assert (info.samplerate, info.subtype, info.frames) == (24_000, "PCM_16", 3)
    data, _ = sf.read(str(path), dtype="float32")
    assert data.max() <= 1.0 and data.min() >= -1.0 and abs(data[2] - 0.25) < 1e-3


def test_content_hash_is_stable_and_content_sensitive(wav_22k, tmp_path):
    raw = wav_22k.read_bytes()
    h = content_hash(wav_22k)
    assert len(h) == 64
    assert content_hash(str(wav_22k)) == h == content_hash(raw) == content_hash({"bytes": raw, "path": None})
    copy = tmp_path / "copy.wav"
    copy.write_bytes(raw)
    assert content_hash(copy) == h  # content, not name
    tone = _tone(SAMPLE_RATE)
    assert content_hash(tone) == content_hash((tone, SAMPLE_RATE))
    assert content_hash(tone) != content_hash((tone, 22_050))  # same samples, other rate
    changed = tone.copy()
    changed[0] += 1e-3
    assert content_hash(changed) != content_hash(tone)
    assert content_hash({"array": tone, "sampling_rate": SAMPLE_RATE}) == content_hash(tone)
    with pytest.raises(AudioError, match="missing"):
        content_hash(tmp_path / "nope.wav")


# --- bounds and non-files (issue 22 items 2 and 10) ------------------------------------------------------


def _raw_wav(rate: int, samples: np.ndarray) -> bytes:
    """A 16-bit mono PCM WAV whose header says ``rate`` Hz, whatever the rate (soundfile refuses to write
    absurd ones)."""
    data = samples.astype("<i2").tobytes()
    fmt = struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
    return (
        b"RIFF"
        + struct.pack("<I", 36 + len(data))
        + b"WAVEfmt "
        + fmt
        + b"data"
        + struct.pack("<I", len(data))
        + data
    )


def test_a_header_of_1_hz_is_cut_by_duration_before_resampling():
    # 4 MB that claim 2,000,000 s: resampling it whole to 16 kHz is a 119 GiB array (a MemoryError that
    # lost the whole run). Cut first, it is 181 source samples.
    noise = np.random.default_rng(0).integers(-1000, 1000, 2_000_000)
    clip = load_audio_clip(_raw_wav(1, noise), SAMPLE_RATE, max_seconds=180.0)
    assert clip.samples.shape == (180 * SAMPLE_RATE,) and clip.samples.dtype == np.float32
    assert clip.cut and clip.source_seconds == 2_000_000.0


def test_a_cut_before_resampling_keeps_the_samples_of_cutting_after(tmp_path):
    path = tmp_path / "long44k.wav"
    sf.write(str(path), _tone(44_100, seconds=183.0, freq=300.0), 44_100, subtype="PCM_16")
    clip = load_audio_clip(path, SAMPLE_RATE, max_seconds=180.0)
    whole = load_audio(path)
    assert clip.cut and clip.source_seconds == 183.0
    np.testing.assert_array_equal(clip.samples, whole[: 180 * SAMPLE_RATE])
    short = load_audio_clip(path, SAMPLE_RATE, max_seconds=200.0)
    assert not short.cut and np.array_equal(short.samples, whole)


def test_any_failure_reading_one_input_is_an_audio_error(monkeypatch, wav_22k):
    def no_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate 119. GiB")

    monkeypatch.setattr("scipy.signal.resample_poly", no_memory)
    with pytest.raises(AudioError, match=r"MemoryError.*119\. GiB") as raised:
        load_audio(wav_22k)
    assert str(wav_22k) in str(raised.value)


def test_a_directory_given_as_audio_says_so(tmp_path):
    assert audio_file_problem(tmp_path) == f"audio path {tmp_path} is a directory, not a file"
    assert audio_file_problem(tmp_path / "absent.wav") == f"missing audio file: {tmp_path / 'absent.wav'}"
    for read in (load_audio, content_hash):
        with pytest.raises(AudioError, match="is a directory"):
            read(tmp_path)


def test_a_fifo_given_as_audio_says_so_without_opening_it(tmp_path):
    fifo = tmp_path / "pipe.wav"
    os.mkfifo(fifo)
    outcome: list[str] = []

    def read_all() -> None:  # opening the FIFO would block forever (no writer): run where it can be seen
        outcome.append(audio_file_problem(fifo) or "no problem")
        for read in (load_audio, content_hash):
            try:
                read(fifo)
            except AudioError as exc:
                outcome.append(str(exc))

    worker = threading.Thread(target=read_all, daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "reading a FIFO blocked"
    assert outcome == [f"audio path {fifo} is not a regular file (a FIFO)"] * 3
