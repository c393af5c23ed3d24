"""Session-wide test settings and the fixtures shared by the test files.

Every test session gets its own cs3-bench cache (ASR transcripts, judge replies, joined offline model), so the
suite measures cold behaviour and never reads a developer's ~/.cache/cs3-bench. Set CS3_BENCH_CACHE yourself
to reuse a cache between runs.

Fixtures:

- ``judge_server(handler, **options)``: a loopback OpenAI-compatible server (tests/judge_server.py), stopped
  after the test; ``judge_server.loopback_config(server, folder)`` is a JudgeConfig for it.
- ``fake_asr(hear)``: replaces ``cs3_tasks.asr.transcribe_batch`` with a FakeASR of the same signature;
  ``hear(audio, language)`` gives each clip's Transcript (or its text).
- ``built_wheel``: this checkout built as a wheel (``pip wheel .``), once per test process.

Tests marked ``slow`` (model inference, full builds, lm_eval subprocesses) are left out by
``python -m pytest -q -m "not slow"``; CI runs them all. Tests marked ``gpu`` need CUDA and skip elsewhere,
with the reason; ``python -m pytest -m gpu`` runs them on a GPU machine (docs/gpu.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import shared_data
from judge_server import FakeJudgeServer

from cs3_tasks.asr import AsrConfig, Transcript


def pytest_configure(config):
    shared_data.hide_from_commands()  # CS3_TESTS_WITHOUT_SHARED=1: run as a clone without ../shared
    # a pytest-xdist worker inherits the controller's environment: it gets a cache of its own unless the
    # cache was the user's choice, so that every session stays cold
    made_here = os.environ.get("CS3_BENCH_TEST_CACHE")
    if not os.environ.get("CS3_BENCH_CACHE") or os.environ["CS3_BENCH_CACHE"] == made_here:
        os.environ["CS3_BENCH_CACHE"] = tempfile.mkdtemp(prefix="cs3-bench-test-cache-")
        os.environ["CS3_BENCH_TEST_CACHE"] = os.environ["CS3_BENCH_CACHE"]
    # Never reach for the network: the Hub and model hosts are not reachable on CI machines.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def pytest_collection_modifyitems(config, items):
    # tests marked gpu need CUDA: elsewhere each is skipped with the reason (`python -m pytest -m gpu`)
    gpu_tests = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_tests:
        return
    reason = _no_cuda_reason()
    if reason:
        for item in gpu_tests:
            item.add_marker(pytest.mark.skip(reason=reason))


def _no_cuda_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "needs a CUDA GPU: torch is not installed"
    if not torch.cuda.is_available():
        return "needs a CUDA GPU: torch sees none here (run `python -m pytest -m gpu` on a GPU machine)"
    return None


def pytest_unconfigure(config):
    # the session cache holds joined models (gigabytes): a process removes the one it made, never a user's
    made_here = os.environ.get("CS3_BENCH_TEST_CACHE")
    if made_here and os.environ.get("CS3_BENCH_CACHE") == made_here:
        shutil.rmtree(made_here, ignore_errors=True)


@pytest.fixture
def judge_server():
    """``judge_server(handler, **options)`` starts a FakeJudgeServer; every one started is stopped after."""
    started: list[FakeJudgeServer] = []

    def start(handler: Any = "", **options: Any) -> FakeJudgeServer:
        server = FakeJudgeServer(handler, **options).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


class FakeASR:
    """Stands in for ``cs3_tasks.asr.transcribe_batch`` with the same signature (tests/test_asr.py checks it):
    each clip is 'heard' as ``hear(audio, language)``, a Transcript or its text. Every call is recorded."""

    def __init__(self, hear: Callable[[Any, str | None], Transcript | str]):
        self.hear = hear
        self.calls: list[dict[str, Any]] = []

    def __call__(
        self,
        audios: Sequence[Any],
        language: str | None = None,
        *,
        asr: AsrConfig | None = None,
        use_cache: bool = True,
        progress: bool = True,
        batch_size: int | None = None,
    ) -> list[Transcript]:
        config = asr or AsrConfig()
        self.calls.append(
            {
                "audios": list(audios),
                "language": language,
                "model": config.model,
                "backend": config.backend,
                "short_clips": config.short_clips,
            }
        )
        heard = [unreadable_audio(audio) or self.hear(audio, language) for audio in audios]
        return [h if isinstance(h, Transcript) else Transcript(text=h, language=language) for h in heard]


def unreadable_audio(audio: Any) -> Transcript | None:
    """The real engine's answer for a file it cannot read (missing, a directory, a FIFO: never opened)."""
    import os

    from cs3_tasks.core.audio import audio_file_problem

    problem = audio_file_problem(audio) if isinstance(audio, (str, os.PathLike)) else None
    return Transcript("", None, error=f"audio_error: {problem}") if problem else None


@pytest.fixture
def fake_asr(monkeypatch):
    """``fake_asr(hear)`` installs a FakeASR as ``cs3_tasks.asr.transcribe_batch`` and returns it."""

    def install(hear: Callable[[Any, str | None], Transcript | str]) -> FakeASR:
        fake = FakeASR(hear)
        monkeypatch.setattr("cs3_tasks.asr.transcribe_batch", fake)
        return fake

    return install


REPO = Path(__file__).resolve().parents[1]
NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
    "tests",
    "cs3_demo",
    "cs3_outputs",
)


# setuptools' own output folders, at the top of the checkout only (cs3_tasks/build/ is a package)
TOP_LEVEL_OUTPUTS = {"build", "dist"}


def _not_source(folder: str, names: list[str]) -> set[str]:
    # any virtual environment in the checkout, whatever its name: CI makes .venv there, gigabytes of it
    venvs = {name for name in names if (Path(folder, name) / "pyvenv.cfg").is_file()}
    outputs = TOP_LEVEL_OUTPUTS & set(names) if Path(folder).resolve() == REPO else set()
    return set(NOT_SOURCE(folder, names)) | venvs | outputs


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory) -> Path:
    """This checkout's sources (no tests, caches, outputs or virtualenvs) built by ``pip wheel``."""
    folder = tmp_path_factory.mktemp("wheel")
    source, wheels = folder / "src", folder / "wheels"
    shutil.copytree(REPO, source, ignore=_not_source)
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    shutil.rmtree(source)
    return next(wheels.glob("cs3_bench-*.whl"))
