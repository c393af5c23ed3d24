"""cs3_tasks.asr backend "transformers": Whisper through transformers.pipeline, as the CS3-Bench authors run
it.

Plumbing only: a randomly initialised 1-layer Whisper with a byte-level tokenizer is built in the test and
saved locally (no Hub); its transcripts are noise, the settings and the per-item error handling are real.
"""

from __future__ import annotations

import numpy as np
import pytest
from tiny_whisper import build_whisper

from cs3_tasks import asr
from cs3_tasks.asr import AsrConfig, transcribe_batch
from cs3_tasks.asr import runners as asr_runners
from cs3_tasks.core.audio import SAMPLE_RATE

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tiny_whisper(tmp_path_factory) -> str:
    return build_whisper(tmp_path_factory.mktemp("tiny-whisper-hf"))


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


def test_a_decoder_smaller_than_the_pipelines_budget_gets_a_budget_that_fits(tiny_whisper):
    from transformers import GenerationConfig

    from cs3_tasks.asr.transformers_whisper import PROMPT_TOKENS, fit_to_context

    runner = asr_runners.cached_runner("transformers", tiny_whisper)
    generation = runner.pipe.model.generation_config
    assert generation.max_new_tokens + PROMPT_TOKENS <= min(64, generation.max_length)  # 64 positions
    real = GenerationConfig(max_length=448)  # a real Whisper checkpoint: left as it is
    fit_to_context(real, 448)
    assert real.max_new_tokens is None and real.max_length == 448


@pytest.mark.gpu
def test_fp16_on_cuda_batched_and_one_at_a_time(tiny_whisper):
    config = AsrConfig(model=tiny_whisper, backend="transformers", device="cuda")
    libraries = asr.check_asr_device(config)  # the encoder ran once on the GPU
    assert isinstance(libraries, dict)
    runner = asr.load_runner("transformers", tiny_whisper, "cuda")
    assert runner.dtype == torch.float16 and next(runner.pipe.model.parameters()).is_cuda
    clips = [_noise(seconds) for seconds in (0.5, 1.0, 2.0, 3.0, 4.0)]
    batched = transcribe_batch(clips, asr=config, progress=False, use_cache=False)
    single = transcribe_batch(clips, asr=config, progress=False, use_cache=False, batch_size=1)
    assert [t.error for t in batched + single] == [None] * 10
    fingerprint = asr.asr_fingerprint(config)
    assert fingerprint["device"] == "cuda" and fingerprint["compute_type"] == "float16"
    assert "cuda_libraries" in fingerprint
