"""ASR settings: backends and models by name, the deterministic decoding options, the per-clip result.

Everything here is plain data and environment lookups; nothing loads a model.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

from cs3_tasks.asr.convert import offline_transformers_whisper
from cs3_tasks.asr.errors import AsrModelError
from cs3_tasks.asr.offline import offline_whisper_base
from cs3_tasks.core.audio import SAMPLE_RATE
from cs3_tasks.core.environment import env_choice

MODEL_ENV = "CS3_ASR_MODEL"
BACKEND_ENV = "CS3_ASR_BACKEND"
BACKENDS = ("faster-whisper", "openai-whisper", "transformers")
DEFAULT_BACKEND = "faster-whisper"
PAPER_MODEL = "large-v3"  # the CS3-Bench authors' ASR (openai-whisper large-v3)
# The same model by its Hub id, for the transformers backend (the authors' utils/whisper_asr.py runs it so).
TRANSFORMERS_PAPER_MODEL = "openai/whisper-large-v3"


@dataclass(frozen=True)
class DecodingOptions:
    """Deterministic decoding, identical for both backends; part of every cache key."""

    beam_size: int = 5
    temperature: float = 0.0
    condition_on_previous_text: bool = False
    vad_filter: bool = False
    # Cap on generated tokens per second of audio (per 30 s window). Real speech needs < 8 tokens/s; on
    # unintelligible audio Whisper can loop until its 448-token limit, which costs seconds per clip.
    max_tokens_per_second: float = 15.0
    # The duration that cap is computed from is rounded up to this step, and a batch holds clips of one cap
    # only: where a looping clip stops is then a function of the clip, not of its batch neighbours.
    cap_step_seconds: float = 2.0
    # A clip whose peak is below this level is silence: its transcript is "" without decoding (Whisper
    # writes "You" for 3 s of digital silence on its own, and other text when it is packed).
    silence_peak_dbfs: float = -60.0
    # How faster-whisper decodes clips <= 30 s: "batched" (a function of the clip alone) or "packed" (of the
    # set of clips transcribed together; see cs3_tasks.asr.transcribe; $CS3_ASR_SHORT_CLIPS). In the cache key
    # because the two can give different transcripts; the batch size is not.
    short_clip_decoding: str = "batched"
    # Only this much of a clip is transcribed (the rest is cut); Transcript.note says so.
    max_audio_seconds: float = 180.0
    # The log-mel features (faster-whisper) are computed in float64 and rounded to float32 once: numpy's
    # float32 path follows the CPU's kernels and the BLAS thread count (cs3_tasks.asr.numerics).
    feature_arithmetic: str = "float64"


DECODING = DecodingOptions()
SHORT_CLIP_DECODINGS = ("packed", "batched")
SHORT_CLIPS_ENV = "CS3_ASR_SHORT_CLIPS"
WHISPER_WINDOW_SECONDS = 30.0  # Whisper's encoder input: longer clips are decoded per clip
# Generated tokens per 30 s window at most: Whisper's 448-token decoder context less its prompt.
MAX_WINDOW_TOKENS = 440
MIN_CLIP_SECONDS = 0.05  # shorter audio holds no word: "too short to transcribe" (Whisper hallucinates text)


def decoding_options(short_clips: str | None = None) -> DecodingOptions:
    """The options in force: DECODING with the short-clip decoding applied (``short_clips``, else
    $CS3_ASR_SHORT_CLIPS, else batched)."""
    mode = short_clips or env_choice(SHORT_CLIPS_ENV, SHORT_CLIP_DECODINGS, DECODING.short_clip_decoding)
    if mode not in SHORT_CLIP_DECODINGS:
        raise ValueError(f"short_clips={mode!r}: choose one of {', '.join(SHORT_CLIP_DECODINGS)}")
    return replace(DECODING, short_clip_decoding=mode)


def max_new_tokens(audio) -> int:
    """The generation cap for one clip (16 kHz samples), at most Whisper's window limit.

    The duration is rounded up to ``cap_step_seconds`` so that clips of similar length share one cap: a batch
    holds clips of one cap only, so a looping clip stops where it would alone, whatever its neighbours.
    """
    step = DECODING.cap_step_seconds
    seconds = math.ceil(len(audio) / SAMPLE_RATE / step) * step
    window_seconds = min(seconds, WHISPER_WINDOW_SECONDS)
    return int(min(MAX_WINDOW_TOKENS, 32 + DECODING.max_tokens_per_second * window_seconds))


@dataclass(frozen=True)
class Transcript:
    text: str
    language: str | None
    error: str | None = None  # set when ASR failed for this item; text is "" then
    note: str | None = None  # what the transcript does not cover (audio cut at max_audio_seconds), else None


# ---------------------------------------------------------------------------------------------
# settings shared by every entry point that transcribes


@dataclass(frozen=True)
class AsrConfig:
    """Which ASR runs: backend, model (None: ``default_model(backend)``), short-clip decoding
    (None: $CS3_ASR_SHORT_CLIPS, else batched) and device (None: ``asr_device()``). ``backend`` None
    means ``default_backend()``."""

    backend: str | None = None
    model: str | None = None
    short_clips: str | None = None
    device: str | None = None

    def resolved(self) -> AsrConfig:
        """Every field filled in from the environment and defaults (what a report records); ValueError for
        an unknown backend or short-clip decoding."""
        backend = self.backend or default_backend()
        check_backend(backend)
        return AsrConfig(
            backend=backend,
            model=self.model or default_model(backend),
            short_clips=decoding_options(self.short_clips).short_clip_decoding,
            device=self.device,
        )


def default_backend() -> str:
    """$CS3_ASR_BACKEND, else faster-whisper."""
    return str(env_choice(BACKEND_ENV, BACKENDS, DEFAULT_BACKEND))


def default_model(backend: str | None = None) -> str:
    """$CS3_ASR_MODEL, else the offline Whisper-base (extra `offline`), else "large-v3".

    The offline model is a CTranslate2 model for faster-whisper; the transformers backend takes
    openai/whisper-large-v3 where the local Hugging Face cache has it, else the offline model converted to a
    transformers checkpoint (`asr.convert`); openai-whisper falls back to the paper's "large-v3".
    """
    override = os.environ.get(MODEL_ENV)
    if override:
        return override
    if (backend or default_backend()) == "faster-whisper":
        offline = offline_whisper_base(join=False)  # joined when ASR runs (transcribe_batch), not before
        if offline is not None:
            return str(offline)
    if backend == "transformers":  # their model where this machine has it, else the offline one, converted
        if hub_model_cached(TRANSFORMERS_PAPER_MODEL):
            return TRANSFORMERS_PAPER_MODEL
        converted = offline_transformers_whisper(convert=False)
        return str(converted) if converted is not None else TRANSFORMERS_PAPER_MODEL
    return PAPER_MODEL


def hub_model_cached(model_id: str) -> bool:
    """True when ``model_id``'s config is in the local Hugging Face cache (it loads without a download)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    found = try_to_load_from_cache(model_id, "config.json")
    return isinstance(found, str) and Path(found).is_file()


def check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"unknown ASR backend {backend!r}; choose one of {', '.join(BACKENDS)}")


# What a model folder of each backend holds: every entry is a file, or alternatives of which one is enough
MODEL_FOLDER_FILES = {
    "faster-whisper": ("model.bin", "config.json", ("tokenizer.json", "vocabulary.json", "vocabulary.txt")),
    "transformers": (
        "config.json",
        ("model.safetensors", "model.safetensors.index.json"),
        ("preprocessor_config.json", "processor_config.json"),
        ("tokenizer.json", "vocab.json"),
    ),
}


def installed_version(distribution: str) -> str | None:
    """The installed version of a distribution (None: not installed)."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def is_local(path: Path) -> bool:
    """Whether ``path`` names a file or folder here (False for a name no file system takes: too long, NUL)."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def check_model_folder(backend: str, model: str) -> None:
    """AsrModelError in one line when ``model`` is a local folder (or a path that names none) that the
    backend cannot load, naming the folder and the files it lacks; a model name to download passes."""
    path = Path(model).expanduser()
    looks_local = path.is_absolute() or model.startswith((".", "~"))
    if not is_local(path):
        if looks_local:
            raise AsrModelError(f"ASR model {model}: no such file or folder")
        return
    if backend == "openai-whisper" or not path.is_dir():
        return  # openai-whisper takes a checkpoint file; a file for another backend fails when it loads
    wanted = MODEL_FOLDER_FILES[backend]
    missing = [
        " or ".join(names) if isinstance(names, tuple) else names
        for names in wanted
        if not any((path / name).is_file() for name in (names if isinstance(names, tuple) else (names,)))
    ]
    if missing:
        raise AsrModelError(
            f"ASR model folder {path} is not a {backend} model: it lacks {', '.join(missing)}"
        )
