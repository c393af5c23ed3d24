"""A fake OpenAI-compatible chat-completions server on loopback, for tests of anything that judges.

    from judge_server import FakeJudgeServer, Reply, by_keyword, loopback_config   # tests/ is on sys.path

    with FakeJudgeServer(by_keyword({"盐湖城": "正确 一致"}, default="错误 不一致")) as server:
        config = loopback_config(server, tmp_path)
        ...
        assert server.request_count == 3 and server.max_in_flight <= config.max_concurrency

In a test function, the ``judge_server`` fixture of tests/conftest.py starts one and stops it afterwards.

The server binds 127.0.0.1 on a free port (port 0) and serves each request in its own thread. A
*handler* decides each reply: ``handler(request) -> Reply | str`` (a str is a 200 reply with that
assistant text). ``mode`` overrides the handler for the failure cases: "timeout" (sleep ``delay``
seconds, then answer), "http500" (always HTTP 500), "garbage" (HTTP 200 with a non-JSON body), "drip"
(headers at once, then the body one byte every ``drip_interval`` seconds: a request that never idles long
enough for a per-read timeout).
Counters: ``request_count``, ``max_in_flight``, ``in_flight``, and the ``requests`` themselves.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

MODES = (None, "timeout", "http500", "garbage", "drip")


@dataclass(frozen=True)
class Request:
    """One request as the server saw it."""

    index: int  # 0-based arrival order
    path: str
    headers: dict[str, str]
    body: Any  # the parsed JSON body, or None when it was not JSON

    @property
    def messages(self) -> list[dict]:
        return list((self.body or {}).get("messages") or [])

    @property
    def prompt(self) -> str:
        """The text of the last user message ("" when there is none)."""
        users = [m.get("content") for m in self.messages if m.get("role") == "user"]
        return users[-1] if users and isinstance(users[-1], str) else ""

    @property
    def model(self) -> str | None:
        return (self.body or {}).get("model")


@dataclass
class Reply:
    """What the server sends back for one request."""

    content: str | None = None  # the assistant message of a 200 chat completion
    status: int = 200
    body: str | bytes | None = None  # a raw body instead of a chat completion (errors, garbage)
    delay: float = 0.0  # seconds to wait before answering (simulates a slow or hung judge)
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def text(cls, content: str, delay: float = 0.0) -> Reply:
        return cls(content=content, delay=delay)

    @classmethod
    def error(
        cls, status: int = 500, message: str = "internal server error", retry_after: float | None = None
    ) -> Reply:
        headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
        body = json.dumps({"error": {"message": message, "type": "server_error", "code": status}})
        return cls(status=status, body=body, headers=headers)

    @classmethod
    def garbage(cls) -> Reply:
        return cls(status=200, body=b"\x00<html>definitely not json</html>")

    @classmethod
    def sleep(cls, seconds: float, then: Reply | str = "") -> Reply:
        reply = then if isinstance(then, Reply) else cls.text(then)
        return Reply(reply.content, reply.status, reply.body, seconds, dict(reply.headers))


Handler = Callable[[Request], "Reply | str"]


def constant(reply: Reply | str) -> Handler:
    """Every request gets the same reply."""
    return lambda request: reply


def by_keyword(rules: Mapping[str, Reply | str], default: Reply | str = "") -> Handler:
    """The reply of the first rule whose key occurs in the prompt, else ``default``."""

    def handler(request: Request) -> Reply | str:
        for key, reply in rules.items():
            if key in request.prompt:
                return reply
        return default

    return handler


def fail_first(n: int, then: Handler | Reply | str, failure: Reply | None = None) -> Handler:
    """The first ``n`` requests (server-wide) fail with ``failure`` (HTTP 500), the rest go to ``then``."""
    failure = failure or Reply.error(500)
    after = then if callable(then) else constant(then)
    return lambda request: failure if request.index < n else after(request)


class FakeJudgeServer:
    """A loopback OpenAI-compatible server; use as a context manager or call start()/stop()."""

    def __init__(
        self,
        handler: Handler | Reply | str = "",
        *,
        mode: str | None = None,
        delay: float = 2.0,
        drip_interval: float = 0.5,
        model: str = "fake-judge",
    ):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.handler: Handler = handler if callable(handler) else constant(handler)
        self.mode = mode  # may be changed while the server runs
        self.delay = delay  # the sleep of mode "timeout"
        self.drip_interval = drip_interval  # seconds between two bytes of mode "drip"
        self.model = model
        self.requests: list[Request] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._counter = itertools.count()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle
    def start(self) -> FakeJudgeServer:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False  # never wait for a sleeping handler on shutdown
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-judge-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes handlers sleeping in mode "timeout" / Reply.delay
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeJudgeServer:  # noqa: PYI034 - py3.10 has no typing.Self
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- addresses and counters
    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the fake judge server is not running")
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self.requests)

    def reset(self) -> None:
        """Forget the requests seen so far (counters restart at 0)."""
        with self._lock:
            self.requests.clear()
            self.max_in_flight = self.in_flight
            self._counter = itertools.count()

    # -- request handling
    def _reply_for(self, request: Request) -> Reply:
        if self.mode == "timeout":
            inner = self.handler(request)
            return Reply.sleep(self.delay, inner if isinstance(inner, Reply) else str(inner))
        if self.mode == "http500":
            return Reply.error(500)
        if self.mode == "garbage":
            return Reply.garbage()
        reply = self.handler(request)
        return reply if isinstance(reply, Reply) else Reply.text(str(reply))

    def _completion_body(self, request: Request, content: str) -> bytes:
        return json.dumps(
            {
                "id": f"chatcmpl-fake-{request.index}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": request.model or self.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            },
            ensure_ascii=False,
        ).encode("utf-8")

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class _Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                pass

            def do_GET(self) -> None:
                if urlsplit(self.path).path.rstrip("/").endswith("/models"):
                    self._send(200, json.dumps({"object": "list", "data": [{"id": server.model}]}).encode())
                else:
                    self._send(404, b'{"error": {"message": "not found"}}')

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError):
                    body = None
                with server._lock:
                    request = Request(next(server._counter), self.path, dict(self.headers.items()), body)
                    server.requests.append(request)
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    if not urlsplit(self.path).path.rstrip("/").endswith("/chat/completions"):
                        self._send(404, b'{"error": {"message": "unknown path"}}')
                        return
                    reply = server._reply_for(request)
                    if reply.delay and server._stopping.wait(reply.delay):
                        return
                    if reply.body is not None:
                        payload = reply.body.encode("utf-8") if isinstance(reply.body, str) else reply.body
                    else:
                        payload = server._completion_body(request, reply.content or "")
                    if server.mode == "drip":
                        self._drip(reply.status, payload)
                    else:
                        self._send(reply.status, payload, reply.headers)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its timeout): nothing to answer
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def _send(self, status: int, payload: bytes, headers: Mapping[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)

            def _drip(self, status: int, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.flush()
                for i in range(len(payload)):
                    if server._stopping.wait(server.drip_interval):
                        return
                    self.wfile.write(payload[i : i + 1])
                    self.wfile.flush()

        return _Handler


def loopback_config(server: FakeJudgeServer, folder, **overrides: Any):
    """A JudgeConfig for ``server``: no API key, short timeout, fast retries, the cache in
    ``folder/judge.sqlite`` (overrides win)."""
    from pathlib import Path

    from cs3_tasks.judge import JudgeConfig

    settings: dict[str, Any] = {
        "base_url": server.base_url,
        "model": "fake-judge",
        "api_key_env": "",
        "cache_path": Path(folder) / "judge.sqlite",
        "timeout": 2.0,
        "max_retries": 2,
        "backoff_initial": 0.01,
        "backoff_max": 0.05,
        "max_concurrency": 4,
    }
    settings.update(overrides)
    return JudgeConfig(**settings)
