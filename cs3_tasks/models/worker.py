"""Wrappers whose model runs in its own Python environment, as a worker process.

GLM-4-Voice, Kimi-Audio, MiniCPM-o 2.6, Baichuan-Omni-1.5 and VITA-Audio need environments that conflict
with each other and with ours (transformers 4.44 for MiniCPM-o's remote code, flash-attn and Kimi's own
package, repositories on sys.path). ``WorkerLM`` starts ``<python> -u cs3_tasks/models/workers/<model>.py``
(``python=`` model_arg, default: this interpreter) and talks to it over the JSON-lines protocol of
``cs3_tasks.models.workers.workerlib`` (versioned; request ids; the query audio and the spoken answer pass
as files in a private scratch directory), so ``lm_eval`` itself runs in our environment.

- Crash: the worker's exit is noticed at once; the item it was working on fails with an error naming the
  item, the exit code and the last lines of the worker's stderr (all of it is in
  ``<output_dir>/worker-<model>.log``); the next item starts a fresh worker (``max_restarts``, default 3;
  after that every remaining item fails fast with the cause). Answers already saved are never lost.
- Hang: no answer within ``item_timeout`` seconds per item (``init_timeout`` for loading) kills the worker's
  process group and fails the item, named, the same way.
- ``in_process=true`` runs the same worker code inside this process (when our environment can import the
  model's code): no process boundary, hence no crash or hang protection.

Everything else (resume, ``errors.jsonl``, ``<set>.jsonl`` + ``<task>/<Qid>.wav``, batching with one-by-one
fall-back, the speech response string) is ``SpeechLM``'s, identical for every wrapper. ``--device`` is
passed to the worker as ``device``.
"""

from __future__ import annotations

import collections
import importlib
import json
import logging
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cs3_tasks.core.audio import write_wav
from cs3_tasks.models.base import ItemError, Outcome, SpeechLM, SpeechReply, SpeechRequest, as_bool, safe_name
from cs3_tasks.models.workers import workerlib

log = logging.getLogger(__name__)

WORKERS_DIR = Path(workerlib.__file__).parent
STDERR_TAIL_LINES = 40
_EOF = object()


class WorkerError(RuntimeError):
    """The worker process failed as a whole (crashed, hung, spoke another protocol)."""


class WorkerCrashed(WorkerError):
    pass


class WorkerHung(WorkerError):
    pass


class ModelCodeMissing(ImportError):
    """The model's official code is not importable in the worker's environment (the message says what to
    install)."""


def worker_script(module: str) -> Path:
    return WORKERS_DIR / f"{module}.py"


def worker_module(module: str):
    """The worker module (standard library only at import): its DEFAULTS, INSTALL and Backend."""
    return importlib.import_module(f"cs3_tasks.models.workers.{module}")


class WorkerProcess:
    """One worker process and its JSON-lines channel."""

    def __init__(
        self,
        module: str,
        python: str,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        hello_timeout: float = 120.0,
    ) -> None:
        self.module = module
        self.log_path = log_path
        self.tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._lines: queue.Queue = queue.Queue()
        self._next_id = 0
        log_path.parent.mkdir(parents=True, exist_ok=True)
        child_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1", "PYTHONIOENCODING": "utf-8"}
        self.proc = subprocess.Popen(
            [python, "-u", str(worker_script(module))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
            env=child_env,
            start_new_session=True,
        )  # its own process group: a hung worker is killed with its children
        self._stderr_reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._stderr_reader.start()
        threading.Thread(target=self._read_stdout, daemon=True).start()
        hello = self._receive(None, hello_timeout, "starting")
        if hello.get("protocol") != workerlib.PROTOCOL_VERSION:
            self.kill()
            raise WorkerError(
                f"{module} worker speaks protocol {hello.get('protocol')!r}, this cs3-bench "
                f"speaks {workerlib.PROTOCOL_VERSION}: the worker script comes from another version"
            )
        self.python_version = hello.get("python")

    def _read_stdout(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(_EOF)

    def _read_stderr(self) -> None:
        with open(self.log_path, "a", encoding="utf-8") as log_file:
            for line in self.proc.stderr:
                log_file.write(line)
                log_file.flush()
                self.tail.append(line.rstrip("\n"))

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def stderr_tail(self, lines: int = 12) -> str:
        return "\n".join(list(self.tail)[-lines:])

    def _receive(self, request_id: int | None, timeout: float, what: str) -> dict:
        while True:
            try:
                line = self._lines.get(timeout=timeout)
            except queue.Empty:
                self.kill()
                raise WorkerHung(
                    f"the {self.module} worker gave no answer within {timeout:g} s while {what}; "
                    f"killed it (log: {self.log_path})"
                ) from None
            if line is _EOF:
                try:
                    code = self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.kill()
                    code = "unknown"
                self._stderr_reader.join(timeout=10)  # its last words name the cause
                raise WorkerCrashed(
                    f"the {self.module} worker exited (code {code}) while {what}; last stderr "
                    f"lines:\n{self.stderr_tail()}\n(full log: {self.log_path})"
                )
            try:
                message = json.loads(line)
            except json.JSONDecodeError:
                log.warning("%s worker: ignoring a non-protocol line: %s", self.module, line[:200])
                continue
            if request_id is None or message.get("id") == request_id:
                return message

    def request(self, op: str, timeout: float, what: str, **payload: Any) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "op": op, **payload}
        try:
            self.proc.stdin.write(json.dumps(message, ensure_ascii=False) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the worker is gone: _receive reports how it ended
        return self._receive(self._next_id, timeout, what)

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass

    def close(self, timeout: float = 30.0) -> None:
        if self.alive:
            try:
                self.request("shutdown", timeout, "shutting down")
                self.proc.wait(timeout=timeout)
            except (WorkerError, subprocess.TimeoutExpired):
                pass
        self.kill()


class InProcessWorker:
    """The worker's Backend run in this process (``in_process=true``): the same requests and replies."""

    def __init__(self, module: str) -> None:
        self.module = module
        self.backend_class = worker_module(module).Backend
        self.backend = None
        self.alive = True

    def request(self, op: str, timeout: float, what: str, **payload: Any) -> dict:
        try:
            if op == "init":
                self.backend = self.backend_class(dict(payload.get("options") or {}))
                return {"ok": True, "result": dict(self.backend.info)}
            if op == "generate":
                return {"ok": True, "results": workerlib.generate_items(self.backend, list(payload["items"]))}
            return {"ok": True, "result": {}}
        except Exception as error:  # noqa: BLE001 - same shape as the worker's reply
            return {
                "ok": False,
                "kind": "missing" if isinstance(error, workerlib.ModelCodeMissing) else "error",
                "error": f"{type(error).__name__}: {error}",
            }

    def close(self) -> None:
        self.backend = None


def _converted(value: Any, default: Any) -> Any:
    """A model_arg (lm-eval may give a str, int, float or bool) in the type of the worker's default."""
    if value is None or default is None:
        return None if value is None else (value if isinstance(value, (bool, int, float)) else str(value))
    if isinstance(default, bool):
        return as_bool(value)
    if isinstance(default, int):
        return int(value)
    if isinstance(default, float):
        return float(value)
    return str(value)


class WorkerLM(SpeechLM):
    """Base of the wrappers whose model runs in a worker; subclasses set ``model_name`` and ``worker``."""

    worker: str = ""  # module name in cs3_tasks/models/workers/

    def __init__(
        self,
        python: str | None = None,
        pythonpath: str | None = None,
        in_process: bool = False,
        init_timeout: float = 3600.0,
        item_timeout: float = 900.0,
        max_restarts: int = 3,
        **kwargs: Any,
    ) -> None:
        module = worker_module(self.worker)
        self.defaults: dict[str, Any] = dict(module.DEFAULTS)
        self.install_help: str = module.INSTALL
        # the model's own options (pretrained, repo, decoding...): every key of the worker's DEFAULTS
        # except device, which is lm-eval's --device handled by the base class
        self.options = {
            key: _converted(kwargs.pop(key), self.defaults[key])
            for key in list(kwargs)
            if key in self.defaults and key != "device"
        }
        super().__init__(**kwargs)
        if self.device_name:
            self.options["device"] = str(self.device_name)
        self.python = str(python or sys.executable)
        if python and not (Path(self.python).is_file() or shutil.which(self.python)):
            raise FileNotFoundError(f"{self.model_name}: python={python} is not an executable Python")
        self.pythonpath = str(pythonpath) if pythonpath else None
        self.in_process = as_bool(in_process)
        self.init_timeout = float(init_timeout)
        self.item_timeout = float(item_timeout)
        self.max_restarts = int(max_restarts)
        self.restarts = 0
        self.last_failure: str | None = None
        self.scratch = Path(tempfile.mkdtemp(prefix=f"cs3-{safe_name(self.worker)}-"))
        self.info: dict[str, Any] = {}
        self._worker: WorkerProcess | InProcessWorker | None = None
        self._finalizer = weakref.finalize(self, _cleanup, [None], self.scratch)
        self._start_worker()

    # -- the worker ---------------------------------------------------------------------------------------

    def label(self) -> str:
        pretrained = self.options.get("pretrained") or self.defaults.get("pretrained") or self.model_name
        return str(pretrained).rstrip("/").split("/")[-1]

    @classmethod
    def takes_pretrained(cls) -> bool:
        return "pretrained" in worker_module(cls.worker).DEFAULTS

    def run_name(self) -> str:
        pretrained = self.options.get("pretrained") or self.defaults.get("pretrained")
        return self.named_run or str(pretrained or self.label())

    @property
    def log_path(self) -> Path:
        return self.output_dir / f"worker-{self.worker}.log"

    def _start_worker(self) -> None:
        if self.in_process:
            if self.pythonpath:
                workerlib.add_paths(self.pythonpath.split(os.pathsep))
            worker: WorkerProcess | InProcessWorker = InProcessWorker(self.worker)
        else:
            env = {}
            if self.pythonpath:
                env["PYTHONPATH"] = os.pathsep.join(
                    filter(None, [self.pythonpath, os.environ.get("PYTHONPATH")])
                )
            worker = WorkerProcess(
                self.worker, self.python, self.log_path, env=env, hello_timeout=self.init_timeout
            )
        reply = worker.request("init", self.init_timeout, "loading the model", options=self.options)
        if not reply.get("ok"):
            worker.close()
            message = f"{self.model_name}: {reply.get('error')}"
            if reply.get("kind") == "missing":
                message = message.replace("ModelCodeMissing: ", "", 1)
                raise ModelCodeMissing(
                    message if self.install_help in message else f"{message}\n{self.install_help}"
                )
            raise RuntimeError(f"{message}\n(worker log: {self.log_path})")
        self.info = dict(reply.get("result") or {})
        self._worker = worker
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _cleanup, [worker], self.scratch)
        log.info("%s: worker ready (%s)", self.model_name, json.dumps(self.info, ensure_ascii=False)[:300])

    def _ensure_worker(self) -> WorkerProcess | InProcessWorker:
        if self._worker is not None and self._worker.alive:
            return self._worker
        if self.restarts >= self.max_restarts:
            raise WorkerError(
                f"the {self.worker} worker failed {self.restarts + 1} times; not restarting it "
                f"again (max_restarts={self.max_restarts}). Last failure: {self.last_failure}"
            )
        self.restarts += 1
        log.warning(
            "%s: restarting the worker (%d of at most %d restarts)",
            self.model_name,
            self.restarts,
            self.max_restarts,
        )
        self._start_worker()
        return self._worker

    def close(self) -> None:
        """Stop the worker and remove the scratch directory (also done when the wrapper is collected)."""
        self._finalizer()

    # -- SpeechLM -----------------------------------------------------------------------------------------

    def default_batch_size(self) -> int:
        return 1

    def generate_batch(self, requests: Sequence[SpeechRequest]) -> list[Outcome]:
        names = ", ".join(f"{req.task}/{req.qid}" for req in requests)
        try:
            worker = self._ensure_worker()
        except WorkerError as error:
            raise ItemError(f"{names}: {error}") from error
        items, outcomes = [], {}
        for n, req in enumerate(requests):
            key = f"{req.task}/{req.qid}"
            try:
                query = self.scratch / "in" / f"{n}-{safe_name(key)}.wav"
                write_wav(query, self.query_audio(req, 16_000), 16_000)
            except Exception as error:  # noqa: BLE001 - this item only
                outcomes[key] = error
                continue
            items.append(
                {
                    "key": key,
                    "audio": str(query),
                    "out": str(self.scratch / "out" / f"{n}-{safe_name(key)}.npy"),
                }
            )
        results = {}
        if items:
            try:
                reply = worker.request(
                    "generate", self.item_timeout * len(items), f"generating {names}", items=items
                )
            except WorkerError as error:
                self.last_failure = str(error)
                raise ItemError(f"{names}: {error}") from error
            finally:
                for item in items:
                    Path(item["audio"]).unlink(missing_ok=True)
            if not reply.get("ok"):
                raise ItemError(f"{names}: the worker failed the request: {reply.get('error')}")
            results = {r.get("key"): r for r in reply.get("results") or []}
        return [self._outcome(req, outcomes, results) for req in requests]

    def _outcome(self, req: SpeechRequest, outcomes: dict, results: dict) -> Outcome:
        key = f"{req.task}/{req.qid}"
        if key in outcomes:
            return outcomes[key]
        result = results.get(key)
        if result is None:
            return ItemError(f"{key}: the worker returned no result for this item")
        if not result.get("ok"):
            return ItemError(f"{key}: {result.get('error')}")
        audio = None
        if result.get("audio"):
            path = Path(result["audio"])
            try:
                audio = np.load(path)
            except Exception as error:  # noqa: BLE001 - this item only
                return ItemError(f"{key}: cannot read the worker's audio {path}: {error}")
            finally:
                path.unlink(missing_ok=True)
        return SpeechReply(
            text=str(result.get("text") or ""),
            audio=audio,
            sample_rate=int(result.get("sample_rate") or self.info.get("sample_rate") or 16_000),
        )


def _cleanup(worker_box: list, scratch: Path) -> None:
    for worker in worker_box:
        if worker is not None:
            worker.close()
    shutil.rmtree(scratch, ignore_errors=True)
