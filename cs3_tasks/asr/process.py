"""faster-whisper in a process of its own: on a CPU, one whose memory allocator keeps what it frees; on a GPU,
one that finds pip's CUDA 12 libraries.

CTranslate2's encoder allocates buffers of hundreds of MB per 30 s window (attention over 1500 frames)
and frees them at once. glibc serves any block over 32 MB with a fresh mmap and returns it on free, so
every window page-faults its buffers in again and the kernel zeroes each page: on 2 cores about a third
of the encoder's time (benchmarks/README.md). glibc stops doing so when told at start-up (GLIBC_TUNABLES:
no mmap, no trimming, one arena, so that CTranslate2's worker threads allocate from the heap that keeps
its free blocks). Those settings are read once, when a process starts, and would change the whole of a
user's process, so the model runs in a child started with them. Transcripts are the same either way:
an allocator does not change the arithmetic.

On a GPU the allocator is CUDA's; the child is started with the folders of pip's ``nvidia-cublas-cu12`` and
``nvidia-cudnn-cu12`` on LD_LIBRARY_PATH (cs3_tasks.asr.gpu), which the loader reads only at start-up.

``FasterWhisperProcess`` has the runner's methods and forwards each call (audio arrays in, results out,
pickled over the child's stdin and stdout). A child that dies (killed, out of memory) fails the call in
flight with AsrProcessError; the next call starts a new child. $CS3_ASR_IN_PROCESS=1 keeps the model in
the calling process.
"""

from __future__ import annotations

import os
import pickle
import platform
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cs3_tasks.asr.config import AsrModelError
from cs3_tasks.asr.faster_whisper import FasterWhisperRunner
from cs3_tasks.asr.gpu import library_path_environment
from cs3_tasks.asr.numerics import engine_environment
from cs3_tasks.core.environment import env_flag

IN_PROCESS_ENV = "CS3_ASR_IN_PROCESS"
# glibc's names for: never mmap a block, never give the heap's top back, one arena for every thread.
MALLOC_TUNABLES = {
    "glibc.malloc.mmap_max": "0",
    "glibc.malloc.trim_threshold": str(2**62),
    "glibc.malloc.arena_max": "1",
}


class AsrProcessError(RuntimeError):
    """The ASR child process ended during a call (its clips fail; the next call starts a new child)."""


def runs_in_own_process(device: str) -> bool:
    """Whether faster-whisper on ``device`` runs in a child process: on CPUs under glibc (the allocator), on
    GPUs under Linux (the CUDA libraries' folders), unless $CS3_ASR_IN_PROCESS is set."""
    if env_flag(IN_PROCESS_ENV):
        return False
    if device != "cpu":
        return sys.platform == "linux"
    return sys.platform == "linux" and platform.libc_ver()[0] == "glibc"


def malloc_tunables(current: str | None) -> str:
    """GLIBC_TUNABLES for the child: the user's own settings, then ours for the names they did not set."""
    mine = [item for item in (current or "").split(":") if item]
    named = {item.split("=", 1)[0] for item in mine}
    ours = [f"{name}={value}" for name, value in MALLOC_TUNABLES.items() if name not in named]
    return ":".join(mine + ours)


def allocator_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of ``environ`` (default: this process's) with our GLIBC_TUNABLES added (``malloc_tunables``)."""
    environ = os.environ if environ is None else environ
    return {**environ, "GLIBC_TUNABLES": malloc_tunables(environ.get("GLIBC_TUNABLES"))}


def child_environment(environ: Mapping[str, str] | None = None, device: str = "cpu") -> dict[str, str]:
    """The ASR child's environment: ``environ`` (default: this process's) with, on a CPU, our allocator
    settings and the engine's code paths of every AVX2 machine (`numerics.engine_environment`, winning over
    the user's), on a GPU pip's CUDA 12 library folders (`gpu.library_path_environment`); and this package
    importable from where the caller imports it (a checkout on sys.path, say)."""
    environ = os.environ if environ is None else environ
    if device == "cpu":
        env = allocator_environment(environ)
        env.update(engine_environment(environ))
    else:
        env = {**environ, **library_path_environment(environ)}
    env[IN_PROCESS_ENV] = "1"  # the child holds the model itself
    here = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, environ.get("PYTHONPATH")) if p)
    return env


class FasterWhisperProcess:
    """A FasterWhisperRunner in a child process (see the module docstring); one call at a time."""

    def __init__(self, model_name: str, device: str, compute_type: str):
        self._load_args = (model_name, device, compute_type)
        self._lock = threading.Lock()
        self._child: subprocess.Popen | None = None
        with self._lock:
            self._start()

    def transcribe(self, audio, language: str | None) -> tuple[str, str | None]:
        return self._call("transcribe", audio, language)

    def transcribe_many(self, audios: Sequence, language: str | None) -> list[tuple[str, str | None]]:
        return self._call("transcribe_many", list(audios), language)

    def transcribe_packed(
        self, audios: Sequence, language: str | None
    ) -> list[tuple[str, str | None] | None]:
        return self._call("transcribe_packed", list(audios), language)

    def probe(self) -> dict[str, str]:
        return self._call("probe")

    def close(self) -> None:
        with self._lock:
            self._stop()

    def _start(self) -> None:
        self._child = subprocess.Popen(
            [sys.executable, "-c", "from cs3_tasks.asr.process import main; main()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=child_environment(device=self._load_args[1]),
        )
        try:
            self._exchange("load", self._load_args)
        except AsrProcessError as exc:  # the child could not even start: no model, as for a failed load
            self._stop()
            raise AsrModelError(f"cannot start the faster-whisper process: {exc}") from None
        except BaseException:
            self._stop()
            raise

    def _stop(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        try:
            child.stdin.close()  # the child's loop ends at end of input
            child.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            child.kill()
            child.wait()
        child.stdout.close()

    def _call(self, method: str, *args: Any) -> Any:
        with self._lock:
            if self._child is None or self._child.poll() is not None:
                self._stop()
                self._start()
            return self._exchange(method, args)

    def _exchange(self, method: str, args: tuple) -> Any:
        child = self._child
        try:
            pickle.dump((method, args), child.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            child.stdin.flush()
            status, value = pickle.load(child.stdout)
        except (EOFError, OSError, pickle.UnpicklingError) as exc:
            code = child.wait()
            raise AsrProcessError(
                f"the ASR process ended during {method} (exit code {code}; {type(exc).__name__}); "
                "the next call starts a new one"
            ) from None
        except BaseException:  # e.g. Ctrl-C while waiting: a reply may still come, so this child is done
            child.kill()
            self._stop()
            raise
        if status == "error":
            raise value
        return value


def _serve(requests, replies) -> None:
    """The child's loop: one (method, args) in, one ("ok", result) or ("error", exception) out."""

    runner = None
    while True:
        try:
            method, args = pickle.load(requests)
        except EOFError:
            return
        try:
            if method == "load":
                runner = FasterWhisperRunner(*args)
                reply = ("ok", None)
            else:
                reply = ("ok", getattr(runner, method)(*args))
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the caller, named
            reply = ("error", _portable(exc))
        try:
            pickle.dump(reply, replies, protocol=pickle.HIGHEST_PROTOCOL)
            replies.flush()
        except BrokenPipeError:  # the caller is gone
            return


def _portable(exc: Exception) -> Exception:
    """The exception itself when it survives pickling, else a RuntimeError naming it."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any pickling failure
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def main() -> None:
    # Ctrl-C reaches the whole terminal's process group: the caller handles it and this child then sees
    # the end of its input.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Replies go to a private copy of stdout; what libraries print goes to stderr instead.
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    _serve(sys.stdin.buffer, replies)
