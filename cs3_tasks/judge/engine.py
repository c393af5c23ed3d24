"""The one judge engine: every judge request of every protocol goes through `ask_batch`.

Each prompt is sent as one user message (or a given message list) to ``POST {base_url}/chat/completions``
(``cs3_tasks.core.chat_api``) with a bounded number of requests in flight, retried by the shared policy
(timeouts, connection errors, HTTP 408/429/5xx, malformed bodies), its reply redacted (the API key never
reaches a record or the cache, even when a server echoes the Authorization header) and cut to
MAX_REPLY_CHARS, and cached in sqlite. How an item is asked and its reply read is an `AskPolicy`: the cs3
protocol's strict parser with one ask, or the reference protocol's rule (up to 10 asks, then a fallback).

Failure policy, the same for every policy: a request that still times out or errors after the last
attempt, and any other failure (a bad charset, a key that cannot be sent), yields
``Verdict(value=None, error="judge_error: <cause>")`` for that item only; it is never scored as right,
wrong or 0. Only refused credentials (HTTP 401/403) and a server that accepts no connection (checked once,
before the first request: `JudgeUnreachableError`) stop the run (`JudgeAuthError`): every request would fail
the same way.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from typing import Any

import requests

from cs3_tasks.core.cache import SqliteCache, stable_key
from cs3_tasks.core.chat_api import (
    AuthenticationError,
    EndpointError,
    call_with_retries,
    message_text,
    post_chat,
    snippet,
    unreachable_cause,
)
from cs3_tasks.core.text import valid_text
from cs3_tasks.judge.config import JudgeAuthError, JudgeConfig, JudgeUnreachableError
from cs3_tasks.judge.parsing import UnparseableReply
from cs3_tasks.judge.redaction import redact, url_secrets

JUDGE_ERROR = "judge_error"
# Bump when the request format changes in a way that makes old cached replies invalid.
CACHE_SCHEMA = "cs3-judge/v1"

# Size bounds of one judge exchange. A message longer than MAX_MESSAGE_CHARS is sent as its head and tail
# (the prompt's instructions sit at both ends) with a marker; a reply body larger than MAX_REPLY_BYTES is
# not read further (an error); the assistant text kept, parsed, cached and recorded is at most
# MAX_REPLY_CHARS. Each cut is said in Verdict.note.
MAX_MESSAGE_CHARS = 32_000
MAX_REPLY_BYTES = 4_000_000
MAX_REPLY_CHARS = 20_000
REACH_TIMEOUT = 10.0  # seconds for the one connection that checks the judge's server is there


@dataclass(frozen=True)
class Verdict:
    value: Any  # True/False for knowledge, a score for open-ended; None on error
    raw: str | None  # the judge's (last) reply, redacted and bounded
    error: str | None = None  # "judge_error: <cause>" when timed out / failed / unparseable
    note: str | None = None  # what was cut to bound the exchange (a long prompt or reply), else None
    asks: int = 1  # replies asked for (the reference protocol records it)
    fallback: bool = False  # no reply parsed in the policy's asks: its fallback value was applied
    model: str | None = None  # the model id the API answered with (its reply's "model"), None if unknown
    samples: tuple[Verdict, ...] | None = None  # the k fresh samples whose median this is (k > 1), else None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class AskPolicy:
    """How the engine asks one item and reads the reply.

    ``unparsed_is_error`` True (cs3): one ask; a reply ``parse`` rejects is re-sent within the transport
    retry budget and, still unparsed, is a judge_error (a verdict is never guessed); only parsed replies
    are cached. False (reference): up to ``max_asks`` asks, each with its own transport retries, every
    reply cached per (prompt, ask number) so a re-run replays the same sequence; after ``max_asks``
    unparsed replies the value is ``fallback`` (``Verdict.fallback``).
    """

    parse: Callable[[str], Any]  # the value of a reply, or raises UnparseableReply
    max_asks: int = 1
    fallback: Any = None
    unparsed_is_error: bool = True
    cache_schema: str = CACHE_SCHEMA  # part of the cache key: another reading never serves stale replies


def strict_policy(parse: Callable[[str], Any]) -> AskPolicy:
    """The cs3 protocol's policy for ``parse``: one ask, a reply it cannot read is a judge_error."""
    return AskPolicy(parse=parse)


def bounded_messages(messages: Sequence[dict]) -> tuple[list[dict], str | None]:
    """``messages`` with every text content longer than MAX_MESSAGE_CHARS cut to its head and tail around a
    marker, and a note saying what was cut (None when nothing was)."""
    out, cuts = [], []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str) and len(content) > MAX_MESSAGE_CHARS:
            half = (MAX_MESSAGE_CHARS - 100) // 2
            marker = f"\n[... {len(content) - 2 * half} characters cut by cs3-bench ...]\n"
            message = {**message, "content": content[:half] + marker + content[-half:]}
            cuts.append(f"{len(content)} -> {len(message['content'])}")
        out.append(message)
    note = f"judge request cut to bound its size (message characters {', '.join(cuts)})" if cuts else None
    return out, note


def chat_completion(
    messages: Sequence[dict],
    config: JudgeConfig,
    *,
    api_key: str | None = None,
    session: requests.Session | None = None,
) -> tuple[str, str | None]:
    """One POST {base_url}/chat/completions, no retry: the assistant message text, and the model id the API
    answered with (the reply's ``model``; None when it names none).

    ``config.timeout`` bounds the whole request (connect, headers and body), not each read; a reply body
    over MAX_REPLY_BYTES is not read. Raises chat_api.EndpointError (``retryable`` per the shared policy),
    its texts redacted (`redact`: URL credentials and the key).
    """
    payload: dict[str, Any] = {
        "model": config.model,
        "messages": list(messages),
        "temperature": config.temperature,
    }
    if config.max_tokens is not None:
        payload["max_tokens"] = config.max_tokens
    try:
        reply = post_chat(
            config.endpoint,
            payload,
            api_key=api_key,
            timeout=config.timeout,
            session=session,
            max_reply_bytes=MAX_REPLY_BYTES,
        )
        answered = reply.get("model") if isinstance(reply, dict) else None
        return message_text(reply), (str(answered)[:200] if answered is not None else None)
    except EndpointError as exc:  # error texts are written to records: no credentials
        secrets = (api_key, *url_secrets(config.base_url))
        exc.cause, exc.raw = redact(exc.cause, *secrets), redact(exc.raw, *secrets)
        raise


def bounded_reply(raw: str, *secrets: str | None) -> tuple[str, str | None]:
    """The reply as kept, parsed, cached and recorded: credentials redacted (a server may echo the key;
    ``secrets`` as in `redact`), at most MAX_REPLY_CHARS, valid Unicode (a lone surrogate, e.g. half an
    emoji sent as "\\ud83d", becomes U+FFFD: `text.valid_text`); and a note when it was cut or repaired."""
    raw, repaired = valid_text(redact(raw, *secrets), "judge reply")
    if len(raw) <= MAX_REPLY_CHARS:
        return raw, repaired
    cut = f"judge reply cut to its first {MAX_REPLY_CHARS} of {len(raw)} characters"
    return raw[:MAX_REPLY_CHARS], _join_notes(cut, repaired)


def _join_notes(*notes: str | None) -> str | None:
    kept = [n for n in notes if n]
    return "; ".join(kept) if kept else None


def _cache_key(
    policy: AskPolicy, config: JudgeConfig, messages: Sequence[dict], ask: int, sample: int = 0
) -> str:
    # base_url is part of the key: a model name means different weights on different servers.
    parts: list[Any] = [
        policy.cache_schema,
        config.base_url.rstrip("/"),
        config.model,
        list(messages),
        config.temperature,
        config.max_tokens,
    ]
    if not policy.unparsed_is_error:
        parts.append(ask)  # each ask of a re-asking policy is its own sample
    if sample:  # each of k samples is its own reply (sample 0 is the one-sample key: k = 1 reuses it)
        parts.append(["sample", sample])
    return stable_key(*parts)


def median_verdict(samples: Sequence[Verdict]) -> Verdict:
    """One verdict of k fresh samples of the same prompt: its value the median of theirs (a whole number
    when it is one, else x.5), its reply, note and model those of the sample at the median (the lower middle
    one for even k), its asks their sum, ``fallback`` when most samples fell back (the median is then the
    fallback value), ``samples`` all k. A sample without a value is a missing verdict: the verdict is that
    sample's judge_error (a median of fewer than k would not be the score asked for)."""
    samples = tuple(samples)
    k = len(samples)
    failed = [i for i, v in enumerate(samples) if not v.ok or v.value is None]
    if failed:
        first = samples[failed[0]]
        error = first.error or f"{JUDGE_ERROR}: no value"
        return replace(first, error=f"{error} (sample {failed[0] + 1} of {k})", value=None, samples=samples)
    median = statistics.median(v.value for v in samples)
    value = int(median) if float(median).is_integer() else float(median)
    order = sorted(range(k), key=lambda i: samples[i].value)
    middle = next((i for i in order if samples[i].value == median), order[(k - 1) // 2])
    return replace(
        samples[middle],
        value=value,
        note=_join_notes(*dict.fromkeys(v.note for v in samples)),
        asks=sum(v.asks for v in samples),
        fallback=2 * sum(v.fallback for v in samples) > k,
        samples=samples,
    )


class _Item:
    """One distinct prompt: asks it under the policy, reading and filling the cache ask by ask."""

    def __init__(
        self,
        messages: list[dict],
        policy: AskPolicy,
        config: JudgeConfig,
        cache: SqliteCache | None,
        sample: int = 0,
    ):
        self.messages, self.policy, self.config, self.cache = messages, policy, config, cache
        self.sample = sample  # which of k fresh samples of the prompt this is (its own cache entries)

    def _key(self, ask: int) -> str:
        return _cache_key(self.policy, self.config, self.messages, ask, self.sample)

    def _cached(self, ask: int) -> tuple[str, str | None, str | None] | None:
        """(reply, note, answering model id) of a cached ask (the model id is None in entries cached before
        it was kept)."""
        if self.cache is None:
            return None
        hit = self.cache.get(self._key(ask))
        return None if hit is None else (hit["raw"], hit.get("note"), hit.get("answered"))

    def _read(self, raw: str, note: str | None, answered: str | None, ask: int) -> Verdict | None:
        """The verdict of a reply, or None when the policy reads it as no verdict."""
        try:
            value = self.policy.parse(raw)
        except UnparseableReply:
            return None
        return Verdict(value=value, raw=raw, note=note, asks=ask + 1, model=answered)

    def _fallback(self, raw: str | None, note: str | None, answered: str | None) -> Verdict:
        policy = self.policy
        return Verdict(
            value=policy.fallback, raw=raw, note=note, asks=policy.max_asks, fallback=True, model=answered
        )

    def _error(self, cause: str, body: str | None, last: str | None, note: str | None, ask: int) -> Verdict:
        """A judge_error verdict. Its raw: the failing reply's body for a one-ask policy ("" without one),
        else that body or the reply of the previous ask (None when there was none)."""
        raw = (body or "") if self.policy.unparsed_is_error else (body or last)
        return Verdict(value=None, raw=raw, error=f"{JUDGE_ERROR}: {cause}", note=note, asks=ask + 1)

    def replay(self) -> Verdict | None:
        """The verdict from cached replies alone; None when some ask must be sent."""
        last: tuple[str | None, str | None, str | None] = (None, None, None)
        for ask in range(self.policy.max_asks):
            hit = self._cached(ask)
            if hit is None:
                return None
            verdict = self._read(*hit, ask)
            if verdict is not None:
                return verdict
            if self.policy.unparsed_is_error:
                return None  # a reply an older parser accepted: ask again
            last = hit
        return self._fallback(*last)

    def ask(self, api_key: str | None, session: requests.Session) -> Verdict:
        config, policy = self.config, self.policy
        messages, request_note = bounded_messages(self.messages)
        secrets = (api_key, *url_secrets(config.base_url))
        attempts = 0

        def attempt() -> tuple[str, str | None, str | None]:
            nonlocal attempts
            attempts += 1
            reply, answered = chat_completion(messages, config, api_key=api_key, session=session)
            raw, reply_note = bounded_reply(reply, *secrets)
            if policy.unparsed_is_error:
                try:
                    policy.parse(raw)
                except UnparseableReply as exc:  # re-ask: the next sample may follow the format
                    raise EndpointError(
                        f"unparseable reply: {exc}", retryable=True, raw=raw, backoff=False
                    ) from exc
            return raw, _join_notes(request_note, reply_note), answered

        last: tuple[str | None, str | None, str | None] = (None, request_note, None)
        for ask in range(policy.max_asks):
            hit = self._cached(ask)
            if hit is not None:
                verdict = self._read(*hit, ask)
                if verdict is not None:
                    return verdict
                if not policy.unparsed_is_error:
                    last = hit
                    continue
            attempts = 0
            try:
                raw, note, answered = call_with_retries(attempt, config.retry_policy)
            except AuthenticationError as exc:
                key_hint = (
                    f"the key in ${config.api_key_env}"
                    if config.api_key_env
                    else "no API key (api_key_env is '')"
                )
                raise JudgeAuthError(
                    f"LLM judge {config.model} at {config.public_base_url} refused the credentials "
                    f"({redact(exc.cause, *secrets)}); sent {key_hint}. Fix the key or the endpoint and "
                    "re-run (finished records are kept)."
                ) from None
            except EndpointError as exc:
                cause = exc.cause
                if exc.retryable:
                    cause = f"{cause} (after {attempts} attempt{'s' * (attempts > 1)})"
                return self._error(cause, exc.raw, last[0], request_note, ask)
            except Exception as exc:  # noqa: BLE001 - one item's failure (a bad charset, a key that cannot
                # be sent, a bug) must not sink the others: recorded, not hidden
                cause = f"unexpected {type(exc).__name__}: {snippet(redact(str(exc), *secrets))}"
                return self._error(cause, None, last[0], request_note, ask)
            if self.cache is not None:
                key = self._key(ask)
                self.cache.put(key, {"raw": raw, "model": config.model, "note": note, "answered": answered})
            verdict = self._read(raw, note, answered, ask)
            if verdict is not None:
                return verdict
            last = (raw, note, answered)
        return self._fallback(*last)


def ask_batch(
    prompts: Sequence[str | Sequence[dict]],
    policy: AskPolicy | Callable[[str], Any],
    config: JudgeConfig,
    *,
    progress: bool = False,
    desc: str = "judge",
    samples: int = 1,
) -> list[Verdict]:
    """Ask the model about each prompt under ``policy``; a Verdict per prompt, in order.

    A prompt is a str (sent as one user message, as the reference judge does) or a full chat message
    list. ``policy``: an `AskPolicy`, or a parse function (``parse(reply)`` returns the value or raises
    UnparseableReply) for the strict one-ask policy. Other modules that need an LLM (the recipe's
    rewriter/checker) reuse this engine as is.

    ``samples`` k > 1 (numeric values, e.g. scores): each prompt is asked k times, each ask a fresh sample
    with its own cache entries (sample 0's are those of k = 1), and its verdict is `median_verdict` of them.

    Identical prompts are asked once (k times). Cached replies are re-parsed (a parser change never serves
    stale values). The API key is checked before the first request and only when something is not cached
    (so a fully cached re-run needs no key).
    """
    if not isinstance(policy, AskPolicy):
        policy = strict_policy(policy)
    if not prompts:
        return []
    messages_list = [
        [{"role": "user", "content": p}] if isinstance(p, str) else [dict(m) for m in p] for p in prompts
    ]
    keys = [_cache_key(policy, config, m, 0) for m in messages_list]
    cache = SqliteCache(config.resolved_cache_path()) if config.use_cache else None
    try:
        items = {
            (key, sample): _Item(m, policy, config, cache, sample)
            for key, m in zip(keys, messages_list)
            for sample in range(samples)
        }
        done: dict[tuple[str, int], Verdict] = {}
        for key, item in items.items():
            verdict = item.replay()
            if verdict is not None:
                done[key] = verdict
        pending = {key: item for key, item in items.items() if key not in done}
        if pending:
            done.update(_run_pending(pending, config, progress, desc))
    finally:
        if cache is not None:
            cache.close()
    if samples == 1:
        return [done[(k, 0)] for k in keys]
    return [median_verdict([done[(k, sample)] for sample in range(samples)]) for k in keys]


def _run_pending(
    pending: dict[tuple[str, int], _Item], config: JudgeConfig, progress: bool, desc: str
) -> dict[tuple[str, int], Verdict]:
    api_key = config.validate()
    cause = unreachable_cause(config.endpoint, min(config.timeout, REACH_TIMEOUT))
    if cause is not None:
        raise JudgeUnreachableError(
            f"LLM judge {config.model} at {config.public_base_url} cannot be reached ({redact(cause)}): "
            "start the server, or give its URL (--judge-base-url), and re-run (finished records are kept)"
        )
    local = threading.local()
    sessions: list[requests.Session] = []
    sessions_lock = threading.Lock()

    def work(key: tuple[str, int]) -> Verdict:
        session = getattr(local, "session", None)
        if session is None:  # requests.Session is not guaranteed thread-safe: one per worker
            session = local.session = requests.Session()
            with sessions_lock:
                sessions.append(session)
        return pending[key].ask(api_key, session)

    results: dict[tuple[str, int], Verdict] = {}
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(pending), desc=desc, unit="item")
    try:
        with ThreadPoolExecutor(max_workers=min(config.max_concurrency, len(pending))) as pool:
            futures = {pool.submit(work, key): key for key in pending}
            for future in as_completed(futures):
                if isinstance(future.exception(), JudgeAuthError):
                    pool.shutdown(wait=False, cancel_futures=True)  # stop at once: every request would fail
                results[futures[future]] = future.result()
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
        for session in sessions:
            session.close()
    return results
