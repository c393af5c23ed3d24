"""The offline Whisper-base converted to a transformers checkpoint (cs3_tasks.asr.convert): the authors' ASR
code path, ``transformers.pipeline``, on real weights with no download.

Its encoder gives CTranslate2's encoder output within float tolerance (both in float32, on the same features),
and ``--asr-backend transformers`` hears real Mandarin questions through it. Needs the `offline` extra; the
BELLE clips come from ../shared (skipped with the reason when absent).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from shared_data import BELLE, need

from cs3_tasks import asr
from cs3_tasks.asr import convert
from cs3_tasks.core.audio import SAMPLE_RATE, load_audio
from cs3_tasks.scoring.protocols import reference

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(asr.offline_whisper_base(join=False) is None, reason="no offline Whisper-base"),
]


@pytest.fixture(scope="module")
def belle_three() -> list[tuple[Path, str]]:
    """Three BELLE clips spread over test.tsv; asked for before ``converted``, so a clone without them skips
    before converting the model."""
    need(BELLE / "test.tsv")
    rows = (BELLE / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]
    pairs = [(BELLE / "wav" / f"{r.split(chr(9))[0]}.wav", r.split(chr(9))[1].strip()) for r in rows]
    return pairs[:: len(pairs) // 3][:3]


@pytest.fixture(scope="module")
def converted() -> Path:
    return convert.offline_transformers_whisper()


def test_the_converted_encoder_gives_ctranslate2s_output(converted):
    import ctranslate2
    import torch
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration

    model = WhisperForConditionalGeneration.from_pretrained(converted, dtype=torch.float32).eval()
    noise = np.random.default_rng(0).normal(0, 0.1, SAMPLE_RATE * 4).astype(np.float32)
    features = WhisperFeatureExtractor(feature_size=80)(noise, sampling_rate=SAMPLE_RATE, return_tensors="np")
    batch = np.ascontiguousarray(features.input_features, dtype=np.float32)
    with torch.no_grad():
        ours = model.model.encoder(torch.from_numpy(batch)).last_hidden_state.numpy()
    engine = ctranslate2.models.Whisper(str(asr.offline_whisper_base()), device="cpu", compute_type="float32")
    theirs = np.asarray(engine.encode(ctranslate2.StorageView.from_array(batch)))
    difference = float(np.abs(ours - theirs).max())
    largest = float(np.abs(theirs).max())
    print(f"encoder max |transformers - CTranslate2| = {difference:.2e} (max |value| {largest:.1f})")
    assert ours.shape == theirs.shape and difference < 5e-3


@pytest.mark.shared
def test_the_transformers_backend_hears_real_speech_offline(belle_three, converted, monkeypatch):
    from cs3_tasks.core.metrics import corpus_character_error_rate

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("CS3_ASR_MODEL", raising=False)
    sample = belle_three
    config = asr.AsrConfig(backend="transformers")
    heard = asr.transcribe_batch([wav for wav, _ in sample], asr=config, use_cache=False, progress=False)
    assert [t.error for t in heard] == [None] * 3
    cer = corpus_character_error_rate([text for _, text in sample], [t.text for t in heard])
    assert cer < 0.3, [t.text for t in heard]
    fingerprint = asr.asr_fingerprint(config)
    assert fingerprint["model"]["name"] == convert.TRANSFORMERS_MODEL_DIR and fingerprint["model"]["sha256"]
    assert fingerprint["engine"]["transformers"] and fingerprint["numerics"] == "native"
    # their pipeline, not their model: never said to be the paper's ASR
    assert not reference.is_reference_asr(fingerprint["backend"], fingerprint["model"]["name"])
    assert load_audio(sample[0][0]).size > 0
