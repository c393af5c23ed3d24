"""espeak-ng as a subprocess: the dependency-light voice, robotic but deterministic.

Voice ``cmn`` reads Mandarin and reads Latin words as English; ``en-us`` reads the English twins and the
English runs of the code-switching voice (cs3_tasks.build.codeswitch_tts). Whisper hardly understands its
Mandarin (README "Offline TTS"), so the dataset build uses it only when asked (``--tts espeak``).
"""

from __future__ import annotations

import io
import shutil
import subprocess

import numpy as np

ESPEAK_BINARY = "espeak-ng"
ESPEAK_VOICES = {"zh": "cmn", "en": "en-us"}  # cmn: Mandarin, Latin words read as English
ESPEAK_TIMEOUT_S = 120
# espeak-ng options we pass through: setting name -> command line flag
ESPEAK_FLAGS = {"speed": "-s", "pitch": "-p", "amplitude": "-a", "word_gap": "-g"}


class EspeakError(RuntimeError):
    """espeak-ng is missing, failed, or produced no audio; the message says which."""


def synthesize_espeak(text: str, *, voice: str, **settings) -> tuple[np.ndarray, int]:
    """espeak-ng reading ``text`` with ``voice``: (float32 mono waveform, sample rate). Raises EspeakError."""
    import soundfile as sf

    binary = shutil.which(ESPEAK_BINARY)
    if binary is None:
        raise EspeakError(
            f"{ESPEAK_BINARY} is not installed or not on PATH (Debian/Ubuntu: apt-get install espeak-ng)"
        )
    unknown = set(settings) - set(ESPEAK_FLAGS)
    if unknown:
        raise EspeakError(f"unknown espeak setting(s) {sorted(unknown)}; known: {sorted(ESPEAK_FLAGS)}")
    command = [binary, "-v", voice, "--stdout", "--stdin"]
    for name, value in sorted(settings.items()):
        command += [ESPEAK_FLAGS[name], str(int(value))]
    try:
        # text on stdin: no shell quoting issues, and a text starting with "-" is not read as an option
        completed = subprocess.run(
            command, input=text.encode("utf-8"), capture_output=True, timeout=ESPEAK_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as err:
        raise EspeakError(f"{ESPEAK_BINARY} timed out after {ESPEAK_TIMEOUT_S} s") from err
    except OSError as err:
        raise EspeakError(f"{ESPEAK_BINARY} could not be started: {err}") from err
    stderr = completed.stderr.decode("utf-8", "replace").strip()
    if completed.returncode != 0:
        raise EspeakError(
            f"{ESPEAK_BINARY} -v {voice} failed (exit {completed.returncode}): {stderr or 'no message'}"
        )
    try:
        audio, sample_rate = sf.read(io.BytesIO(completed.stdout), dtype="float32", always_2d=True)
    except (RuntimeError, ValueError) as err:
        raise EspeakError(f"{ESPEAK_BINARY} -v {voice} produced no readable audio ({err}); {stderr}") from err
    audio = audio.mean(axis=1)
    if audio.size == 0 or not np.any(audio):
        raise EspeakError(f"{ESPEAK_BINARY} -v {voice} produced silence; {stderr or 'unknown voice?'}")
    return audio.astype(np.float32), int(sample_rate)
