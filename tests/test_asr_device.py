"""The ASR device: the choice (--asr-device, $CS3_ASR_DEVICE, this rank's GPU), the batch size it implies, and
what reaches faster-whisper. No GPU here: CUDA is simulated by patching the device count."""

from __future__ import annotations

import os
import sys
import types

import pytest

from cs3_tasks import asr
from cs3_tasks.asr import device as asr_device
from cs3_tasks.asr import device as asr_device_module
from cs3_tasks.asr import runners as asr_runners
from cs3_tasks.asr.process import IN_PROCESS_ENV


@pytest.fixture
def gpus(monkeypatch):
    def set_count(n: int) -> None:
        monkeypatch.setattr(asr_device_module, "cuda_device_count", lambda backend="faster-whisper": n)

    monkeypatch.delenv(asr_device.DEVICE_ENV, raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    return set_count


def test_default_is_the_cpu_with_or_without_a_gpu_and_cuda_is_this_ranks_gpu(gpus, monkeypatch):
    gpus(0)
    assert asr.asr_device() == "cpu" and asr_device.batch_size_for("cpu") == asr.DEFAULT_BATCH_SIZE
    gpus(2)  # the default's transcripts are the portable CPU ones (README's numbers), GPU or not
    assert asr.asr_device() == "cpu"
    assert asr.asr_device("cuda") == "cuda" and asr_device.batch_size_for("cuda") == asr_device.GPU_BATCH_SIZE
    assert asr_device.batch_size_for("cpu", "transformers") == 1  # the authors' one clip at a time
    monkeypatch.setenv("WORLD_SIZE", "4")  # a data-parallel launch: each rank on its own GPU, or sharing one
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert asr.asr_device() == "cpu" and asr.asr_device("cuda") == "cuda:1"
    gpus(1)
    assert asr.asr_device("cuda") == "cuda:0"
    with pytest.raises(asr.AsrModelError, match="only 1 CUDA device"):
        asr.asr_device("cuda:1")


def test_explicit_choice_env_and_errors(gpus, monkeypatch):
    gpus(2)
    assert asr.asr_device("cpu") == "cpu" and asr.asr_device("CUDA:1") == "cuda:1"
    monkeypatch.setenv(asr_device.DEVICE_ENV, "cpu")
    assert asr.asr_device() == "cpu" and asr.asr_device("cuda") == "cuda"  # the argument wins
    with pytest.raises(ValueError, match="cpu, cuda or cuda:N"):
        asr.asr_device("gpu0")
    gpus(0)
    with pytest.raises(asr.AsrModelError, match="no CUDA device"):
        asr.asr_device("cuda:0")


def test_faster_whisper_gets_device_index_compute_type_and_thread_share(gpus, monkeypatch):
    made = []
    fake = types.ModuleType("faster_whisper")
    # a WhisperModel has a feature extractor, which the runner wraps
    model = types.SimpleNamespace(feature_extractor=lambda audio: audio)
    fake.WhisperModel = lambda name, **kwargs: made.append((name, kwargs)) or model
    monkeypatch.setitem(sys.modules, "faster_whisper", fake)
    monkeypatch.setattr(asr_runners, "_RUNNERS", {})
    monkeypatch.setenv(IN_PROCESS_ENV, "1")  # the fake module lives in this process
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    asr_runners.cached_runner("faster-whisper", "m", "cuda:1")
    asr_runners.cached_runner("faster-whisper", "m", "cpu")
    assert made[0] == (
        "m",
        {
            "device": "cuda",
            "device_index": 1,
            "compute_type": "float16",
            "cpu_threads": made[0][1]["cpu_threads"],
        },
    )
    assert made[1][1]["device"] == "cpu" and made[1][1]["compute_type"] == "int8"
    assert made[1][1]["cpu_threads"] == max(1, len(os.sched_getaffinity(0)) // 2)  # two ranks share the cores


def test_a_gpu_that_is_not_there_is_one_line_before_any_work(tmp_path, fake_asr, monkeypatch, capsys):
    from pathlib import Path

    from cs3_tasks import cli

    monkeypatch.setattr(asr_device_module, "cuda_device_count", lambda backend="faster-whisper": 0)
    demo = Path(cli.__file__).resolve().parents[1] / "demo" / "responses" / "demo-strong"
    argv = ["score", "--outputs", str(demo), "--set", "knowledge", "--out", str(tmp_path / "r")]
    argv += ["--dataset", "demo", "--no-judge", "--asr-device", "cuda"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ASR device cuda requested but no CUDA device is visible")
    assert "Traceback" not in err and not (tmp_path / "r").exists()  # nothing was started
