"""cs3_tasks.asr backend "transformers": Whisper through transformers.pipeline, as the CS3-Bench authors run
it.

Plumbing only: a randomly initialised 1-layer Whisper with a byte-level tokenizer is built in the test and
saved locally (no Hub); its transcripts are noise, the settings and the per-item error handling are real.
"""

from __future__ import annotations

import numpy as np
import pytest

from cs3_tasks import asr
from cs3_tasks.asr import AsrConfig, transcribe_batch
from cs3_tasks.asr import runners as asr_runners
from cs3_tasks.core.audio import SAMPLE_RATE

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _byte_symbols() -> list[str]:
    """GPT-2's byte-to-unicode table: the 256 base symbols of a byte-level BPE vocabulary."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    codes, extra = list(printable), 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    return [chr(c) for c in codes]


@pytest.fixture(scope="module")
def tiny_whisper(tmp_path_factory) -> str:
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperProcessor,
        WhisperTokenizer,
    )
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    tokenizer = WhisperTokenizer(vocab={s: i for i, s in enumerate(_byte_symbols())}, merges=[])
    languages = [f"<|{code}|>" for code in LANGUAGES]
    specials = [
        "<|startoftranscript|>",
        *languages,
        "<|translate|>",
        "<|transcribe|>",
        "<|startoflm|>",
        "<|startofprev|>",
        "<|nocaptions|>",
        "<|notimestamps|>",
    ]
    tokenizer.add_special_tokens({"additional_special_tokens": specials})
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in [*specials, "<|endoftext|>"]}
    eot, sot = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    config = WhisperConfig(
        vocab_size=len(tokenizer),
        num_mel_bins=80,
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=1,
        decoder_attention_heads=1,
        encoder_ffn_dim=16,
        decoder_ffn_dim=16,
        max_source_positions=1500,
        max_target_positions=64,
        pad_token_id=eot,
        bos_token_id=eot,
        eos_token_id=eot,
        decoder_start_token_id=sot,
    )
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=sot,
        eos_token_id=eot,
        pad_token_id=eot,
        bos_token_id=eot,
        max_length=20,
        lang_to_id={token: ids[token] for token in languages},
        task_to_id={"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]},
        is_multilingual=True,
        no_timestamps_token_id=ids["<|notimestamps|>"],
        begin_suppress_tokens=[],
        suppress_tokens=[],
    )
    directory = tmp_path_factory.mktemp("tiny-whisper-hf")
    WhisperProcessor(
        feature_extractor=WhisperFeatureExtractor(feature_size=80), tokenizer=tokenizer
    ).save_pretrained(directory)
    model.save_pretrained(directory, safe_serialization=True)
    return str(directory)


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CS3_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(asr.MODEL_ENV, raising=False)


def _noise(seconds: float = 1.0) -> np.ndarray:
    return (0.05 * np.random.default_rng(0).standard_normal(int(seconds * SAMPLE_RATE))).astype(np.float32)


def test_transformers_backend_runs_a_tiny_local_checkpoint(tiny_whisper):
    out = transcribe_batch(
        [_noise(), b"not audio"], asr=AsrConfig(model=tiny_whisper, backend="transformers"), progress=False
    )
    assert out[0].error is None and isinstance(out[0].text, str)
    assert out[0].language is None  # not forced, and the pipeline call reports none
    assert out[1].error is not None and out[1].error.startswith("audio_error")
    again = transcribe_batch(
        [_noise()], asr=AsrConfig(model=tiny_whisper, backend="transformers"), progress=False
    )
    assert again[0].text == out[0].text  # deterministic (and now served from the cache)


def test_transformers_backend_uses_the_authors_settings(tiny_whisper, monkeypatch):
    runner = asr_runners.cached_runner("transformers", tiny_whisper)
    assert (
        runner.dtype == torch.float32 and runner.pipe.model.dtype == torch.float32
    )  # CPU: fp32 (CUDA: fp16)
    calls = []
    real = runner.pipe

    def spy(inputs, **kwargs):
        calls.append((inputs["sampling_rate"], dict(kwargs)))
        return real(inputs, **kwargs)

    monkeypatch.setattr(runner, "pipe", spy)
    transcribe_batch(
        [_noise(0.5)],
        asr=AsrConfig(model=tiny_whisper, backend="transformers"),
        progress=False,
        use_cache=False,
    )
    transcribe_batch(
        [_noise(0.5)],
        "zh",
        asr=AsrConfig(model=tiny_whisper, backend="transformers"),
        progress=False,
        use_cache=False,
    )
    assert calls == [(SAMPLE_RATE, {}), (SAMPLE_RATE, {"generate_kwargs": {"language": "zh"}})]


def test_transformers_backend_default_model_and_load_error(monkeypatch):
    from cs3_tasks.asr import config, convert

    monkeypatch.delenv("CS3_ASR_MODEL", raising=False)
    converted = convert.offline_transformers_whisper(convert=False)
    monkeypatch.setattr(config, "hub_model_cached", lambda model_id: True)  # their model is on this machine
    assert asr.default_model("transformers") == "openai/whisper-large-v3"
    monkeypatch.setattr(config, "hub_model_cached", lambda model_id: False)  # it is not: the offline one
    expected = str(converted) if converted is not None else "openai/whisper-large-v3"
    assert asr.default_model("transformers") == expected
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(asr.AsrModelError, match="cannot load transformers Whisper model"):
        transcribe_batch(
            [_noise(0.2)],
            asr=AsrConfig(model="no-such-org/no-such-whisper", backend="transformers"),
            progress=False,
        )
