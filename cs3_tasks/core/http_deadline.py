"""A whole-request deadline for `requests`: connect, status line, headers and body together.

`requests` (like urllib3 and http.client under it) applies its ``timeout`` to each socket operation: a
server that sends one header line every 0.5 s never lets a 2 s read timeout fire, and held a judge request
50 s. Here a timer shuts the request's socket down when its deadline passes; the blocked read then returns
at once and the caller reports a timeout.

How the socket is found: sessions from `deadline_session` carry an adapter whose urllib3 connections
report every socket they get (new connection, TLS wrap) and the one they read a response from (a pooled
connection) to the deadline of the request running in this thread or task (`request_deadline`, a
context variable). Outside `request_deadline` they behave exactly as urllib3's own.
"""

from __future__ import annotations

import contextvars
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool


class RequestDeadline:
    """The deadline of one request: at ``seconds`` from its start, every socket it used is shut down."""

    def __init__(self, seconds: float):
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(0.0, seconds), self._expire)
        self._timer.daemon = True

    def watch(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        with self._lock:
            if not self.expired:
                self._sockets.append(sock)
                return
        _shut_down(sock)  # the deadline passed while connecting

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _shut_down(sock)


_CURRENT: contextvars.ContextVar[RequestDeadline | None] = contextvars.ContextVar(
    "cs3_request_deadline", default=None
)


@contextmanager
def request_deadline(seconds: float) -> Iterator[RequestDeadline]:
    """Within this block, requests made through a `deadline_session` in this thread end at ``seconds``:
    their socket is shut down (a read then fails or ends early); ``.expired`` says that happened."""
    deadline = RequestDeadline(seconds)
    token = _CURRENT.set(deadline)
    deadline._timer.start()
    try:
        yield deadline
    finally:
        deadline._timer.cancel()
        _CURRENT.reset(token)


def _shut_down(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # wakes a recv blocked in another thread; close() would not
    except OSError:
        pass  # already closed or never connected


def _watch(sock: Any) -> None:
    deadline = _CURRENT.get()
    if deadline is not None:
        deadline.watch(sock)


class _WatchedSocket:
    """Mixin for urllib3 connections: each socket assigned to ``self.sock`` (the TCP socket before TLS, then
    the TLS one) and the socket a response is read from are reported to the current deadline."""

    _watched_sock: Any = None

    @property
    def sock(self) -> Any:
        return self._watched_sock

    @sock.setter
    def sock(self, value: Any) -> None:
        self._watched_sock = value
        _watch(value)

    def getresponse(self, *args: Any, **kwargs: Any) -> Any:
        _watch(self.sock)  # a pooled connection: its socket was assigned during an earlier request
        return super().getresponse(*args, **kwargs)  # type: ignore[misc]


class _WatchedHTTPConnection(_WatchedSocket, HTTPConnection):
    pass


class _WatchedHTTPSConnection(_WatchedSocket, HTTPSConnection):
    pass


class _WatchedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


_WATCHED_POOLS = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}


class DeadlineAdapter(HTTPAdapter):
    """requests' HTTP adapter whose connections report their sockets to `request_deadline`."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _WATCHED_POOLS

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if not proxy.lower().startswith("socks"):  # SOCKS managers have connection classes of their own
            manager.pool_classes_by_scheme = _WATCHED_POOLS
        return manager


_mount_lock = threading.Lock()


def deadline_session(session: requests.Session | None = None) -> requests.Session:
    """``session`` (else a new one) with a `DeadlineAdapter` mounted for http:// and https:// (once)."""
    session = session if session is not None else requests.Session()
    with _mount_lock:
        for prefix in ("http://", "https://"):
            if not isinstance(session.adapters.get(prefix), DeadlineAdapter):
                session.mount(prefix, DeadlineAdapter())
    return session
