"""One client for OpenAI-compatible ``POST {base_url}/chat/completions`` endpoints.

Used by the LLM judge (and the recipe's rewriter/checker through it), ``cs3-openai-audio`` and
``cs3-cascade``'s endpoint LLM, so all of them fail and retry the same way:

- one error type, ``EndpointError``, whose ``retryable`` says whether trying again may help;
- one retry policy (``RetryPolicy``, ``call_with_retries``): timeouts, connection errors, HTTP
  408/429/5xx and malformed bodies are retried with exponential backoff and jitter, honouring a server's
  ``Retry-After`` up to the cap; other HTTP errors (400, 401, 404...) are not retried;
- one whole-request deadline (`http_deadline`): connect, status line, headers and body together, however
  slowly a server drips them;
- replies decoded as UTF-8, whatever their Content-Type says (chat-completions bodies are JSON);
- redirects followed only within the endpoint's origin, so a prompt and its API key never go elsewhere.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urljoin, urlsplit, urlunsplit

import requests
import tenacity

from cs3_tasks.core.http_deadline import deadline_session, request_deadline

T = TypeVar("T")


class EndpointError(RuntimeError):
    """A request that did not give a usable reply. ``cause`` says why; ``raw`` keeps the reply text (if any)
    for auditing; ``retryable`` says whether the retry policy tries again, and ``backoff`` whether it waits
    first (an answer the caller could not read is asked again at once: the server is not the problem)."""

    def __init__(
        self,
        cause: str,
        *,
        retryable: bool,
        raw: str = "",
        retry_after: float | None = None,
        backoff: bool = True,
    ):
        super().__init__(cause)
        self.cause, self.retryable, self.raw, self.retry_after = cause, retryable, raw, retry_after
        self.backoff = backoff


class AuthenticationError(EndpointError):
    """HTTP 401/403: the endpoint refused the credentials. Every further request would fail the same way,
    so callers stop the run instead of recording one error per item."""

    def __init__(self, cause: str, status: int):
        super().__init__(cause, retryable=False)
        self.status = status


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 3  # retries after the first attempt
    backoff_initial: float = 1.0  # seconds before the first retry, doubled per retry (with jitter)
    backoff_max: float = 30.0


def is_retryable_status(status: int) -> bool:
    """HTTP statuses worth retrying: request timeout, rate limit and server errors."""
    return status in (408, 429) or status >= 500


def chat_url(base_url: str) -> str:
    """``{base_url}/chat/completions`` (a base URL that already ends so is kept), its query string
    (e.g. ``?api-version=``) kept."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/")
    if not path.endswith("/chat/completions"):
        path += "/chat/completions"
    return urlunsplit(parts._replace(path=path))


def snippet(text: str, limit: int = 200) -> str:
    """``text`` on one line, cut to ``limit`` characters (for error messages)."""
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[:limit] + "..."


def _retry_after(response: requests.Response) -> float | None:
    try:
        return float(response.headers.get("Retry-After", ""))
    except ValueError:
        return None


def _read_body(response: requests.Response, deadline: float, timeout: float, max_bytes: int | None) -> bytes:
    """The body, read under the request's deadline and size bound: each read returns what one socket read
    gives (read1), so a server dripping bytes cannot keep the request open past the deadline."""
    import urllib3

    body = bytearray()
    sock = getattr(getattr(response.raw, "connection", None), "sock", None)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise EndpointError(
                f"timeout after {timeout:g} s (whole request; {len(body)} bytes received)", retryable=True
            )
        try:
            if sock is not None:
                sock.settimeout(left)  # no single read waits past the deadline
            chunk = response.raw.read1(65536, decode_content=True)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if time.monotonic() >= deadline - 0.01:
                raise EndpointError(
                    f"timeout after {timeout:g} s (whole request; {len(body)} bytes received)", retryable=True
                ) from exc
            raise EndpointError(
                f"connection error while reading the reply: {snippet(str(exc), 160)}", retryable=True
            ) from exc
        if not chunk:
            return bytes(body)
        body += chunk
        if max_bytes is not None and len(body) > max_bytes:
            raise EndpointError(
                f"reply body larger than {max_bytes} bytes: not read further", retryable=False
            )


REDIRECTS = (301, 302, 303, 307, 308)
MAX_REDIRECTS = 5  # same-origin 307/308 hops followed (a trailing-slash or version-path move)


def _origin(url: str) -> str:
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    return f"{parts.scheme.lower()}://{(parts.hostname or '').lower()}:{port}"


def unreachable_cause(url: str, timeout: float) -> str | None:
    """Why nothing can be sent to ``url`` (one TCP connection to its host, or to the proxy the environment
    names for it, within ``timeout`` s), or None when something accepts connections there. A server that is
    not running fails every request alike: checked once, before the first one."""
    import socket

    proxy = requests.utils.get_environ_proxies(url).get(urlsplit(url).scheme.lower())
    target = proxy if proxy else url
    parts = urlsplit(target if "://" in target else f"http://{target}")
    host, port = parts.hostname or "", parts.port or {"https": 443}.get(parts.scheme.lower(), 80)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        via = f" (through the proxy {_origin(parts.geturl())})" if proxy else ""
        return f"no connection to {host}:{port}{via}: {exc.strerror or exc}"
    return None


def _post_within_origin(
    session: requests.Session, url: str, body: dict, headers: dict[str, str], deadline: float
) -> requests.Response:
    """POST ``body`` to ``url``; a 307/308 to the same origin is followed (method and body kept), any other
    redirect is an EndpointError: a cross-origin one would send the prompt (and, before requests strips it,
    the API key) to a server the user never named, and 301/302/303 would turn the POST into a GET."""
    for _ in range(MAX_REDIRECTS + 1):
        left = max(0.001, deadline - time.monotonic())
        response = session.post(
            url, json=body, headers=headers, timeout=left, stream=True, allow_redirects=False
        )
        status = response.status_code
        if status not in REDIRECTS:
            return response
        location = response.headers.get("Location", "")
        response.close()
        target = urljoin(url, location)
        if not location:
            raise EndpointError(f"HTTP {status} redirect without a Location header", retryable=False)
        if _origin(target) != _origin(url):
            raise EndpointError(
                f"HTTP {status} redirect to another origin ({_origin(url)} -> {_origin(target)}): "
                "not followed, so the prompt and the API key are not sent there; if that endpoint is the "
                "one you mean, give its URL as the base URL",
                retryable=False,
            )
        if status not in (307, 308):
            raise EndpointError(
                f"HTTP {status} redirect to {snippet(target, 120)} would turn the POST into a GET: not "
                "followed; give that URL as the base URL",
                retryable=False,
            )
        url = target
    raise EndpointError(f"more than {MAX_REDIRECTS} redirects: not followed further", retryable=False)


def _timeout_error(timeout: float, what: str) -> EndpointError:
    return EndpointError(f"timeout after {timeout:g} s ({what})", retryable=True)


def post_chat(
    url: str,
    body: dict,
    *,
    api_key: str | None,
    timeout: float,
    session: requests.Session | None = None,
    max_reply_bytes: int | None = None,
) -> dict:
    """One POST of a chat-completions ``body``, no retry: the reply's JSON object.

    ``timeout`` bounds the whole request (connect, status line, headers and body together: a server that
    drips header lines cannot hold it longer), not each read; a body over ``max_reply_bytes`` is not read
    further. The body is decoded as UTF-8 whatever its Content-Type charset says. Redirects are followed
    only to the same origin (307/308). ``session`` gets the deadline adapter mounted (`deadline_session`).
    Raises EndpointError: retryable for a timeout, a connection error, HTTP 408/429/5xx or a body that is
    not a UTF-8 JSON object; not retryable for other HTTP errors, an oversized body, a redirect that is not
    followed and requests that cannot be sent.
    """
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    own_session = session is None
    session = deadline_session(session)
    deadline = time.monotonic() + timeout
    try:
        with request_deadline(timeout) as watch:
            try:
                response = _post_within_origin(session, url, body, headers, deadline)
                try:
                    raw_body = _read_body(response, deadline, timeout, max_reply_bytes)
                finally:
                    response.close()
            except requests.Timeout as exc:
                raise _timeout_error(timeout, type(exc).__name__) from exc
            except requests.ConnectionError as exc:
                if watch.expired or time.monotonic() > deadline:  # the deadline closed the connection
                    raise _timeout_error(timeout, type(exc).__name__) from exc
                raise EndpointError(f"connection error: {snippet(str(exc), 160)}", retryable=True) from exc
            except requests.RequestException as exc:
                raise EndpointError(f"request failed: {snippet(str(exc), 160)}", retryable=False) from exc
            except UnicodeEncodeError as exc:  # http.client sends headers as Latin-1; the text may be secret
                raise EndpointError(
                    "request cannot be sent: a header value (the API key?) is not Latin-1 text",
                    retryable=False,
                ) from exc
            if watch.expired:  # the body ended because the deadline shut the connection down
                raise _timeout_error(timeout, f"whole request; {len(raw_body)} bytes received")
    finally:
        if own_session:
            session.close()
    return _reply_object(response, raw_body)


def _reply_object(response: requests.Response, raw_body: bytes) -> dict:
    """The JSON object of a complete reply, or the EndpointError its status or body calls for."""
    text = raw_body.decode("utf-8", errors="replace")  # for messages; the JSON is decoded strictly below
    status = response.status_code
    if is_retryable_status(status):
        raise EndpointError(
            f"HTTP {status}: {snippet(text)}", retryable=True, retry_after=_retry_after(response)
        )
    if status in (401, 403):
        raise AuthenticationError(f"HTTP {status}: {snippet(text)}", status)
    if status >= 400:
        raise EndpointError(f"HTTP {status} (not retried): {snippet(text)}", retryable=False)
    try:  # JSON is UTF-8 (RFC 8259): a missing or wrong charset in Content-Type does not change that
        strict = raw_body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EndpointError(
            f"reply body is not UTF-8 ({exc.reason} at byte {exc.start}): {snippet(text)}",
            retryable=True,
            raw=text[:2000],
        ) from exc
    try:
        reply = json.loads(strict)
    except ValueError:
        reply = None
    if not isinstance(reply, dict):
        raise EndpointError(f"malformed response body: {snippet(text)}", retryable=True, raw=text[:2000])
    return reply


def message_text(reply: dict) -> str:
    """The text of ``choices[0].message.content`` (a string, or a list of text parts as some servers send).

    Raises a retryable EndpointError when the reply has no such message.
    """
    try:
        content = reply["choices"][0]["message"]["content"]
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(p.get("text", "") for p in content if isinstance(p, dict))
        raise TypeError(f"message content is {type(content).__name__}")
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        text = json.dumps(reply, ensure_ascii=False, default=str)
        raise EndpointError(
            f"malformed response body: {snippet(text)}", retryable=True, raw=text[:2000]
        ) from exc


def _wait(policy: RetryPolicy) -> Callable[[tenacity.RetryCallState], float]:
    """Exponential backoff with jitter (none for an error raised with ``backoff=False``); a server's
    Retry-After (429/503) is honoured up to backoff_max."""

    def wait(state: tenacity.RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, EndpointError) and not exc.backoff:
            return 0.0
        delay = min(policy.backoff_max, policy.backoff_initial * 2 ** (state.attempt_number - 1))
        delay *= random.uniform(0.5, 1.0)
        if isinstance(exc, EndpointError) and exc.retry_after:
            delay = max(delay, min(exc.retry_after, policy.backoff_max))
        return delay

    return wait


def call_with_retries(attempt: Callable[[], T], policy: RetryPolicy) -> T:
    """``attempt()``, tried again while it raises a retryable EndpointError, at most ``policy.max_retries``
    more times; the last error (or a non-retryable one, at once) is raised."""
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(max(0, policy.max_retries) + 1),
        wait=_wait(policy),
        retry=tenacity.retry_if_exception(lambda e: isinstance(e, EndpointError) and e.retryable),
        reraise=True,
    )
    return retrying(attempt)


def chat(
    url: str,
    body: dict,
    *,
    api_key: str | None,
    timeout: float,
    policy: RetryPolicy,
    session: requests.Session | None = None,
) -> dict[str, Any]:
    """``post_chat`` with the retry policy: the reply's JSON object, or the last EndpointError."""
    return call_with_retries(
        lambda: post_chat(url, body, api_key=api_key, timeout=timeout, session=session), policy
    )
