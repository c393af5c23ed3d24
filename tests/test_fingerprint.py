"""What a transcript depends on, by identity (cs3_tasks.asr.fingerprint), and the arithmetic that makes it the
same on every AVX2 machine (cs3_tasks.asr.numerics).

The slow test hears a few demo clips in an ASR child whose environment asks for this machine's own code paths
(AVX-512 kernels, another BLAS kernel): the pinned arithmetic wins and the clips are heard as the golden file
says; with ``$CS3_ASR_NUMERICS=native`` on an AVX-512 VNNI machine they are not (the cause of issue 29).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cs3_tasks import asr, cli
from cs3_tasks.asr import fingerprint, numerics, process
from cs3_tasks.asr import offline as asr_offline
from cs3_tasks.core.audio import SAMPLE_RATE, load_audio

OFFLINE = asr.offline_whisper_base(join=False)
needs_offline = pytest.mark.skipif(OFFLINE is None, reason="no offline Whisper-base (extra `offline`)")
DEMO = Path(__file__).resolve().parents[1] / "cs3_tasks" / "demo" / "responses"
# demo clips that this AVX-512 VNNI machine hears otherwise on its own code paths (benchmarks/README.md)
SENSITIVE = (
    "demo-strong/knowledge/demo_knowledge-001",
    "demo-strong/knowledge/demo_knowledge-002",
    "demo-strong/knowledge/demo_knowledge-017",
    "demo-weak/knowledge_en/demo_knowledge-014",
)
# what a user's shell could say to pull the engine onto other code paths
OTHER_PATHS = {"CT2_FORCE_CPU_ISA": "AVX512", "OPENBLAS_CORETYPE": "SkylakeX", "MKL_CBWR": "AUTO"}


@needs_offline
def test_the_same_model_under_another_home_is_the_same_model(tmp_path, monkeypatch):
    """Name and weights' hash, never a path: joined or not, under any cache folder, the offline model is the
    same model, and its hash is that of its weights (also when computed from the two parts)."""
    identities = []
    for home in ("a", "b"):
        monkeypatch.setenv("CS3_BENCH_CACHE", str(tmp_path / home))
        before = fingerprint.model_identity(str(asr.offline_whisper_base(join=False)))  # from the parts
        after = fingerprint.model_identity(str(asr.offline_whisper_base()))  # joined here
        assert before == after
        identities.append(after)
    assert identities[0] == identities[1]
    assert identities[0]["name"] == asr_offline.OFFLINE_MODEL_DIR and len(identities[0]["sha256"]) == 64
    assert str(tmp_path) not in json.dumps(fingerprint.asr_fingerprint(asr.AsrConfig()))


def test_a_model_by_name_has_no_hash_until_its_weights_are_here(tmp_path):
    assert fingerprint.model_identity("large-v3") == {"name": "large-v3", "sha256": None}
    assert fingerprint.model_identity("org/not-in-the-cache") == {
        "name": "org/not-in-the-cache",
        "sha256": None,
    }
    local = tmp_path / "my-whisper"
    local.mkdir()
    (local / "model.safetensors").write_bytes(b"weights")
    import hashlib

    digest = hashlib.sha256(b"weights").hexdigest()
    assert fingerprint.model_identity(str(local)) == {"name": "my-whisper", "sha256": digest}
    (local / "model.safetensors").write_bytes(b"other weights")  # same folder, other weights: another model
    assert fingerprint.model_identity(str(local))["sha256"] != digest


def test_the_fingerprint_says_what_the_numbers_depend_on(monkeypatch):
    fp = fingerprint.asr_fingerprint(
        asr.AsrConfig(backend="faster-whisper", model="some-model", device="cpu")
    )
    assert set(fp) >= {"backend", "model", "engine", "compute_type", "device", "numerics", "decoding"}
    assert fp["engine"]["faster-whisper"] and fp["engine"]["ctranslate2"] and fp["compute_type"] == "int8"
    monkeypatch.setenv(numerics.NUMERICS_ENV, "native")
    native = fingerprint.asr_fingerprint(
        asr.AsrConfig(backend="faster-whisper", model="some-model", device="cpu")
    )
    assert native["numerics"] == "native" and native["cpu_features"]  # the CPU becomes part of the identity
    assert fingerprint.fingerprint_key(native) != fingerprint.fingerprint_key(fp)
    line = fingerprint.describe_fingerprint(fp)
    assert line.startswith("faster-whisper some-model int8 cpu") and "ctranslate2" in line


def test_the_child_starts_on_the_pinned_code_paths_whatever_the_shell_says(monkeypatch):
    environ = {**os.environ, **OTHER_PATHS}
    env = process.child_environment(environ)
    if "avx2" in numerics.cpu_features():
        assert {k: env[k] for k in numerics.PINNED_ENVIRONMENT} == numerics.PINNED_ENVIRONMENT
    env = process.child_environment({**environ, numerics.NUMERICS_ENV: "native"})
    assert env["CT2_FORCE_CPU_ISA"] == "AVX512"  # native: the user's own choice stands
    with pytest.raises(
        ValueError, match=r"\$CS3_ASR_NUMERICS='fast' is not allowed: choose one of portable, native"
    ):
        numerics.numerics_mode({numerics.NUMERICS_ENV: "fast"})


_LOG_MEL = (
    "import sys, numpy as np; from faster_whisper.feature_extractor import FeatureExtractor; "
    "from cs3_tasks.asr.numerics import log_mel; "
    "audio = np.random.default_rng(0).normal(0, 0.1, 16000 * 7).astype(np.float32); "
    "sys.stdout.write(log_mel(FeatureExtractor(feature_size=80), audio).tobytes().hex())"
)


@pytest.mark.parametrize(
    "machine",
    [
        {},
        {"OPENBLAS_CORETYPE": "Haswell"},
        {"OPENBLAS_CORETYPE": "Nehalem", "NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR"},
        {"OPENBLAS_NUM_THREADS": "2"},
    ],
    ids=["this-cpu", "avx2-blas", "sse-only", "two-blas-threads"],
)
def test_log_mel_features_are_the_same_on_any_blas_kernel_and_thread_count(machine):
    """numpy's float32 path gives other last bits per BLAS kernel, numpy SIMD level and thread count (and
    with them other transcripts); the float64 features rounded once do not."""
    pytest.importorskip("faster_whisper")
    base = subprocess.run([sys.executable, "-c", _LOG_MEL], capture_output=True, text=True, check=True).stdout
    env = {**os.environ, **machine}
    other = subprocess.run(
        [sys.executable, "-c", _LOG_MEL], capture_output=True, text=True, env=env, check=True
    )
    assert other.stdout == base


def test_log_mel_is_faster_whispers_features_to_float32_precision():
    from faster_whisper.feature_extractor import FeatureExtractor

    audio = np.random.default_rng(1).normal(0, 0.1, SAMPLE_RATE * 3).astype(np.float32)
    extractor = FeatureExtractor(feature_size=80)
    ours, theirs = numerics.log_mel(extractor, audio), extractor(audio)
    assert ours.dtype == np.float32 and ours.shape == theirs.shape
    assert float(np.abs(ours - theirs).max()) < 1e-4


def _clips() -> list:
    return [load_audio(DEMO / clip.replace("/", "/wav/", 1)).astype(np.float32) for clip in _flac(SENSITIVE)]


def _flac(clips) -> list[str]:
    return [f"{c}.flac" for c in clips]


@pytest.mark.slow
@needs_offline
def test_a_shell_asking_for_other_code_paths_hears_as_the_golden_file(monkeypatch):
    from test_reproducible import read_golden

    golden = read_golden().get("demo") or {}
    if not golden:
        pytest.skip("no golden demo transcripts yet")
    expected = [golden[clip] for clip in SENSITIVE]
    audios = _clips()
    for name, value in OTHER_PATHS.items():
        monkeypatch.setenv(name, value)
    model = str(asr.offline_whisper_base())
    pinned = process.FasterWhisperProcess(model, "cpu", "int8")
    try:
        heard = [text.strip() for text, _ in pinned.transcribe_many(audios, None)]
    finally:
        pinned.close()
    assert heard == expected
    if not {"avx512_vnni", "avx512f"} <= set(numerics.cpu_features()):
        return  # on an AVX2 machine this CPU's own paths are the pinned ones
    monkeypatch.setenv(numerics.NUMERICS_ENV, "native")
    native = process.FasterWhisperProcess(model, "cpu", "int8")
    try:
        heard_natively = [text.strip() for text, _ in native.transcribe_many(audios, None)]
    finally:
        native.close()
    assert heard_natively != expected  # the pins are what makes this machine hear as any AVX2 machine


def test_a_resume_with_another_engine_is_refused_naming_the_field(tmp_path, fake_asr, monkeypatch, capsys):
    """A changed engine never mixes its transcripts into another engine's records: the resume names the
    differing field; the machine's own description is never compared."""
    out = tmp_path / "results"
    fake_asr(lambda audio, language: "")
    argv = ["score", "--outputs", str(DEMO / "demo-strong"), "--set", "knowledge", "--out", str(out)]
    argv += ["--dataset", "demo", "--no-judge", "--no-progress", "--asr-model", "fake-asr"]
    assert cli.main(argv) == 0
    monkeypatch.setattr(asr, "machine", lambda: {"cpu_features": ["another-cpu"]})
    assert cli.main(argv) == 0  # another machine, same fingerprint: the same run, resumed
    installed = fingerprint.engine_versions("faster-whisper")
    upgraded = {**installed, "ctranslate2": "9.9.9"}
    monkeypatch.setattr(fingerprint, "engine_versions", lambda backend: upgraded)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert f"asr.engine.ctranslate2: {installed['ctranslate2']!r} -> '9.9.9'" in err and "--restart" in err


def test_an_outputs_root_rerun_with_another_engine_names_the_field_per_model(
    tmp_path, fake_asr, monkeypatch, capsys
):
    out = tmp_path / "results"
    fake_asr(lambda audio, language: "")
    argv = [
        "score",
        "--outputs-root",
        str(DEMO),
        "--out",
        str(out),
        "--set",
        "knowledge",
        "--dataset",
        "demo",
    ]
    argv += ["--no-judge", "--no-progress", "--asr-model", "fake-asr"]
    assert cli.main(argv) == 0
    installed = fingerprint.engine_versions("faster-whisper")
    monkeypatch.setattr(fingerprint, "engine_versions", lambda backend: {**installed, "ctranslate2": "9.9.9"})
    assert cli.main(argv) == 3  # every model refused: nothing of two engines is mixed
    models = json.loads((out / "models.json").read_text(encoding="utf-8"))["models"]
    assert {m: s["status"] for m, s in models.items()} == {"demo-strong": "failed", "demo-weak": "failed"}
    assert all("asr.engine.ctranslate2" in s["error"] for s in models.values())
