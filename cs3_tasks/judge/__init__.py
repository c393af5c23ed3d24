"""The LLM judge: prompts, strict verdict parsing and a cached, concurrent engine over an LLM endpoint.

One engine (``ask_batch``) serves every judge task: each prompt is rendered from a package-data template
(``cs3_tasks/prompts/*.txt``), sent as one user message to ``POST {base_url}/chat/completions``
(``cs3_tasks.core.chat_api``) with a bounded number of requests in flight, retried by the shared policy
(timeouts, connection errors, HTTP 408/429/5xx, malformed bodies) and on unparseable replies, and cached
in sqlite once a reply parses.

Failure policy: a prompt that still times out, errors or is unparseable after the last attempt yields
``Verdict(value=None, raw=<last reply>, error="judge_error: <cause>")``. It is never scored as right,
wrong or 0; the caller reports it separately. One failing item never stops the others.

The default configuration mirrors the CS3-Bench authors' reference judge (qwen-max-2025-01-25 at
temperature 0 through DashScope's OpenAI-compatible endpoint); any other endpoint is one option away
(``JudgeConfig.from_env``, ``CS3_JUDGE_*`` variables, ``--judge-*`` options, presets).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import threading
import unicodedata
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlparse, urlsplit

import requests

from cs3_tasks.core.cache import SqliteCache, cache_dir, stable_key
from cs3_tasks.core.chat_api import (
    AuthenticationError,
    EndpointError,
    RetryPolicy,
    call_with_retries,
    chat_url,
    message_text,
    post_chat,
    snippet,
)

DEFAULT_BASE_URL = "https://dashscope.aliyuncs.com/compatible-mode/v1"
DEFAULT_MODEL = "qwen-max-2025-01-25"
DEFAULT_API_KEY_ENV = "DASHSCOPE_API_KEY"

ENV_BASE_URL = "CS3_JUDGE_BASE_URL"
ENV_MODEL = "CS3_JUDGE_MODEL"
ENV_API_KEY_ENV = "CS3_JUDGE_API_KEY_ENV"

JUDGE_ERROR = "judge_error"
CACHE_FILE = "judge.sqlite"
# Bump when the request format changes in a way that makes old cached replies invalid.
_CACHE_SCHEMA = "cs3-judge/v1"

# Size bounds of one judge exchange. A message longer than MAX_MESSAGE_CHARS is sent as its head and tail
# (the prompt's instructions sit at both ends) with a marker; a reply body larger than MAX_REPLY_BYTES is
# not read further (an error); the assistant text kept, parsed, cached and recorded is at most
# MAX_REPLY_CHARS. Each cut is said in Verdict.note.
MAX_MESSAGE_CHARS = 32_000
MAX_REPLY_BYTES = 4_000_000
MAX_REPLY_CHARS = 20_000
REDACTED = "***"

# Named configurations: `--judge-preset gpt-4o-mini` is all it takes to switch judges.
PRESETS: dict[str, dict[str, str]] = {
    "qwen-max": {"base_url": DEFAULT_BASE_URL, "model": DEFAULT_MODEL, "api_key_env": DEFAULT_API_KEY_ENV},
    "gpt-4o-mini": {
        "base_url": "https://api.openai.com/v1",
        "model": "gpt-4o-mini",
        "api_key_env": "OPENAI_API_KEY",
    },
    "vllm": {"base_url": "http://localhost:8000/v1", "model": "Qwen/Qwen2.5-7B-Instruct", "api_key_env": ""},
    "ollama": {"base_url": "http://localhost:11434/v1", "model": "qwen2.5:7b", "api_key_env": ""},
}

# Hosts whose key variable is known, so pointing the judge at them never sends another provider's key.
_KNOWN_KEY_ENVS = {
    "dashscope.aliyuncs.com": "DASHSCOPE_API_KEY",
    "dashscope-intl.aliyuncs.com": "DASHSCOPE_API_KEY",
    "api.openai.com": "OPENAI_API_KEY",
}


class JudgeConfigError(ValueError):
    """The judge cannot run as configured (missing API key, bad URL...): raised before any request."""


class JudgeAuthError(RuntimeError):
    """The judge endpoint refused the credentials (HTTP 401/403): the run stops at once (every request would
    fail the same way); the message names the endpoint (redacted) and the key's variable."""


class UnparseableReply(ValueError):
    """A judge reply holds no unambiguous verdict; the message says why."""


# ---------------------------------------------------------------------------------------------------
# configuration


@dataclass
class JudgeConfig:
    base_url: str = DEFAULT_BASE_URL
    model: str = DEFAULT_MODEL
    api_key_env: str = DEFAULT_API_KEY_ENV  # "" = send no key (local servers)
    temperature: float = 0.0
    max_concurrency: int = 8
    timeout: float = 60.0  # seconds, per request: bounds the whole request (connect, headers, body)
    max_retries: int = 3  # retries after the first attempt
    cache_path: Path | None = None  # default cache_dir()/judge.sqlite
    max_tokens: int | None = None  # sent only when set (part of the cache key)
    backoff_initial: float = 1.0  # seconds before the first retry, doubled per retry (with jitter)
    backoff_max: float = 30.0
    use_cache: bool = True

    @classmethod
    def from_env(cls, *, preset: str | None = None, **overrides: Any) -> JudgeConfig:
        """Defaults < $CS3_JUDGE_* < preset < explicit overrides (None overrides are ignored).

        When no key variable is named, it follows the endpoint: DashScope -> DASHSCOPE_API_KEY,
        api.openai.com -> OPENAI_API_KEY, loopback -> none; another remote host must name it
        (``api_key_env`` / $CS3_JUDGE_API_KEY_ENV), so one provider's key never goes to another.
        """
        given = {k: v for k, v in overrides.items() if v is not None}
        unknown = set(given) - {f.name for f in fields(cls)}
        if unknown:
            raise TypeError(f"unknown JudgeConfig field(s): {sorted(unknown)}")
        if preset is not None:
            if preset not in PRESETS:
                raise JudgeConfigError(f"unknown judge preset {preset!r}; choose from {sorted(PRESETS)}")
            given = {**PRESETS[preset], **given}
        env = {
            "base_url": os.environ.get(ENV_BASE_URL),
            "model": os.environ.get(ENV_MODEL),
            "api_key_env": os.environ.get(ENV_API_KEY_ENV),
        }
        if "base_url" in given and "api_key_env" not in given:
            env["api_key_env"] = None  # the env key variable belongs to the env/default endpoint
        for name, value in env.items():
            if value and name not in given:
                given[name] = value
        if "api_key_env" not in given:
            given["api_key_env"] = default_api_key_env(given.get("base_url", DEFAULT_BASE_URL))
        return cls(**given)

    def __repr__(self) -> str:  # a config is printed in logs and tracebacks: never with credentials
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.name != "base_url")
        return f"JudgeConfig(base_url={redact(self.base_url)!r}, {shown})"

    @property
    def is_local(self) -> bool:
        return is_local_url(self.base_url)

    @property
    def endpoint(self) -> str:
        """``{base_url}/chat/completions``, the base URL's query string (e.g. ``?api-version=``) kept."""
        return chat_url(self.base_url)

    @property
    def public_base_url(self) -> str:
        """The base URL as it may be written or printed (credentials redacted, see `redact`)."""
        return redact(self.base_url)

    @property
    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(self.max_retries, self.backoff_initial, self.backoff_max)

    def resolved_cache_path(self) -> Path:
        return Path(self.cache_path) if self.cache_path is not None else cache_dir() / CACHE_FILE

    def api_key(self) -> str | None:
        """The key from the environment, or None when none is named or set."""
        return (os.environ.get(self.api_key_env) or None) if self.api_key_env else None

    def validate(self) -> str | None:
        """Check the configuration and return the API key (None for a key-less local server).

        Raises JudgeConfigError with the fix in the message; call it before starting long work.
        """
        parsed = urlparse(self.base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise JudgeConfigError(f"judge base_url {self.public_base_url!r} is not an http(s) URL")
        if not self.model:
            raise JudgeConfigError("judge model is empty: set --judge-model or $CS3_JUDGE_MODEL")
        if self.max_concurrency < 1:
            raise JudgeConfigError(f"judge max_concurrency must be >= 1, got {self.max_concurrency}")
        if self.timeout <= 0:
            raise JudgeConfigError(f"judge timeout must be > 0 s, got {self.timeout}")
        if self.max_retries < 0:
            raise JudgeConfigError(f"judge max_retries must be >= 0, got {self.max_retries}")
        key = self.api_key()
        if key is None and not self.is_local:
            if not self.api_key_env:
                how = "no API key variable is named for this endpoint"
            elif _ENV_NAME.fullmatch(self.api_key_env):
                how = f"environment variable {self.api_key_env} is not set"
            else:  # most likely the key itself: never echo it
                how = (
                    f"the API key variable given ({len(self.api_key_env)} characters, not shown) is not an "
                    "environment variable name; pass the name of the variable that holds the key, not the key"
                )
            raise JudgeConfigError(
                f"LLM judge {self.model} at {self.public_base_url}: {how}. Export the key, name its variable "
                "with "
                f"--judge-api-key-env / ${ENV_API_KEY_ENV}, point the judge elsewhere (--judge-preset, "
                f"--judge-base-url, --judge-model or ${ENV_BASE_URL}, ${ENV_MODEL}), or run with --no-judge."
            )
        return key


# What an environment variable holding a key is called (DASHSCOPE_API_KEY); anything else is not printed.
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
# Query parameters whose value is a credential (api-key=, key=, token=, sig=, password=, ...).
_SECRET_NAME = re.compile(
    r"(?i)(?:^|[-_.])(?:api[-_]?key|key|token|access[-_]?token|secret|password|passwd|pwd|"
    r"sig|signature|auth|authorization|credential)$"
)
_QUERY_PARAM = re.compile(r"([?&;])([A-Za-z0-9_.-]+)=([^&#\s'\"<>,)]*)")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@'\"<>]+@")
# "Bearer sk-..." / "Authorization: Basic ..." in an error text or an echoed header.
_AUTH_HEADER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}")


def redact(text: str | None, *secrets: str | None) -> str | None:
    """``text`` with credentials replaced by ``***``, for anything written or printed.

    Redacted: the user:password of every URL (``http://u:p@host`` -> ``http://***@host``), the value of
    credential-like query parameters (``api-key``, ``key``, ``token``, ``sig``, ``password``, ...; the
    other parameters are kept), ``Bearer``/``Basic`` tokens, and every occurrence of each of ``secrets``
    (e.g. the API key; strings shorter than 4 characters are not searched for). None stays None.
    """
    if text is None:
        return None
    text = str(text)
    for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    text = _USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    text = _QUERY_PARAM.sub(
        lambda m: f"{m.group(1)}{m.group(2)}={REDACTED}" if _SECRET_NAME.search(m.group(2)) else m.group(0),
        text,
    )
    return _AUTH_HEADER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)


def url_secrets(url: str) -> list[str]:
    """The credentials written in a URL (its user info and credential-like query values), to pass to
    `redact` for texts that hold them without the URL around them (e.g. a server's error message)."""
    parts = urlsplit(url)
    found = [parts.username, parts.password, unquote(parts.username or ""), unquote(parts.password or "")]
    found += [value for name, value in parse_qsl(parts.query) if _SECRET_NAME.search(name)]
    return [secret for secret in found if secret]


def is_local_url(url: str) -> bool:
    """True for loopback endpoints (localhost, 127.0.0.0/8, ::1), which may run without a key."""
    host = (urlparse(url).hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def default_api_key_env(base_url: str) -> str:
    """The key variable that belongs to an endpoint: known providers, none for loopback, else ""."""
    host = (urlparse(base_url).hostname or "").lower()
    return _KNOWN_KEY_ENVS.get(host, "")


# ---------------------------------------------------------------------------------------------------
# records


@dataclass(frozen=True)
class Verdict:
    value: bool | int | None  # True/False for knowledge, 1..5 for scores; None on error
    raw: str  # the judge's full reply (explanation)
    error: str | None = None  # "judge_error: <cause>" when timed out / failed / unparseable
    note: str | None = None  # what was cut to bound the exchange (a long prompt or reply), else None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class KnowledgeItem:
    question: str
    reference: str  # the answer (Answer_zh for the code-switched set, Answer for knowledge_en)
    response: str
    reference_en: str | None = None  # Answer_en: the zh prompt shows it as a second accepted answer
    qid: str | None = None  # only for error messages


@dataclass(frozen=True)
class OpenEndedItem:
    question: str
    reference: str | None  # the reference answer; its prompt line is dropped when None
    response: str
    qid: str | None = None


@dataclass(frozen=True)
class ConversationItem:
    question: str  # the user's query (text of the spoken question)
    response: str  # the response (text, or the ASR transcript of speech)
    reference: str | None = None
    qid: str | None = None


# ---------------------------------------------------------------------------------------------------
# prompts

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def load_prompt(name: str) -> str:
    """The text of ``cs3_tasks/prompts/<name>.txt`` (package data)."""
    path = resources.files("cs3_tasks.prompts").joinpath(f"{name}.txt")
    if not path.is_file():
        available = sorted(
            p.name[:-4] for p in resources.files("cs3_tasks.prompts").iterdir() if p.name.endswith(".txt")
        )
        raise FileNotFoundError(f"no judge prompt {name!r}; available: {available}")
    return path.read_text(encoding="utf-8")


def render_prompt(template: str, **values: str | None) -> str:
    """Fill ``{name}`` placeholders in one pass (inserted text is never re-read as a template).

    A line whose placeholder value is None is dropped, so optional fields (a missing reference answer)
    disappear with their label. A placeholder with no value given is an error (a template typo).
    """
    out = []
    for line in template.splitlines(keepends=True):
        names = _PLACEHOLDER.findall(line)
        missing = [n for n in names if n not in values]
        if missing:
            raise KeyError(f"prompt placeholder(s) {missing} have no value")
        if any(values[n] is None for n in names):
            continue
        out.append(_PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), line))
    return "".join(out).strip() + "\n"


# ---------------------------------------------------------------------------------------------------
# strict parsers

_VERDICT_TOKENS = {
    "zh": {"不正确": False, "正确": True, "错误": False},
    "en": {"true": True, "false": False},
}
_LABELS = {
    "zh": r"(?:最终)?(?:判断结果|判断|判定|结论|评估结果|评测结果|评估|评判|结果)",
    "en": r"(?:final\s+)?(?:verdict|judge?ment|conclusion|answer|result|decision|evaluation)",
}
_DECOR = r"[\s*_`#>\-\"'“”‘’「」『』【】\[\]()（）]*"
_AFTER_LABEL = {"zh": r"[\s*_`]*(?::|为|是)[\s*_`]*", "en": r"[\s*_`]*:[\s*_`]*"}


def parse_knowledge_verdict(reply: str, language: str = "zh") -> bool:
    """The verdict of a knowledge judge reply: 正确/错误 (zh) or True/False (en).

    Verdict positions: the reply's first word (after markdown decoration and an optional label such as
    "判断：" / "Verdict:"), a labelled verdict anywhere ("结论：错误", "Final answer: True"), a bracketed
    or bold verdict (【正确】, **False**), or a line holding only the verdict. Verdict words inside the
    explanation ("正确答案是…", "没有错误") do not count. No verdict, contradicting verdicts, or an
    echo of the format ("正确/错误") raise UnparseableReply.
    """
    if language not in _VERDICT_TOKENS:
        raise ValueError(
            f"knowledge judge language must be one of {sorted(_VERDICT_TOKENS)}, got {language!r}"
        )
    tokens = _VERDICT_TOKENS[language]
    text = unicodedata.normalize("NFKC", reply or "")
    flags = re.IGNORECASE if language == "en" else 0
    tok = "(" + "|".join(sorted(map(re.escape, tokens), key=len, reverse=True)) + r")(?!\w)"
    label, after = _LABELS[language], _AFTER_LABEL[language]

    def value(word: str) -> bool:
        return tokens[word.lower()]

    echo = re.search(tok.replace(r"(?!\w)", "") + r"\s*(?:/|\||或者?|or)\s*" + tok, text, flags)
    if echo and value(echo.group(1)) != value(echo.group(2)):
        raise UnparseableReply(f"the reply echoes the format ({echo.group(0)!r}) instead of a verdict")

    found: list[bool] = []
    lead = re.match(r"\s*" + _DECOR + r"(?:" + label + after + _DECOR + r")?" + tok, text, flags)
    if lead:
        found.append(value(lead.group(1)))
    found += [value(m.group(1)) for m in re.finditer(label + after + _DECOR + tok, text, flags)]
    bracketed = r"(?:【|\[|「|『|\*\*)\s*" + tok + r"\s*(?:】|\]|」|』|\*\*)"
    found += [value(m.group(1)) for m in re.finditer(bracketed, text, flags)]
    for line in text.splitlines():
        bare = line.strip(" \t*_`#>-\"'“”‘’「」『』【】[]()（）.。!！:：")
        if bare.lower() in tokens:
            found.append(value(bare))

    if not found:
        words = "正确/错误" if language == "zh" else "True/False"
        raise UnparseableReply(f"no {words} verdict found")
    if len(set(found)) > 1:
        raise UnparseableReply("contradicting verdicts in one reply")
    return found[0]


_SCORE_LABEL = r"(?:最终)?(?:得分|评分|分数|打分)|(?:final\s+)?(?:score|rating)"
_BRACKET_NUMBER = r"[\[【]\s*([+-]?\d+(?:\.\d+)?)\s*[\]】]"


def parse_score(reply: str, low: int = 1, high: int = 5) -> int:
    """The ``[n]`` score of a judge reply, an integer in [low, high].

    A labelled score ("得分：[4]", "Score: [4]") wins over bare bracketed numbers elsewhere; all
    candidates of the winning kind must agree. No score, different scores, a non-integer or an
    out-of-range score raise UnparseableReply.
    """
    text = unicodedata.normalize("NFKC", reply or "")
    labelled = re.findall(
        r"(?:" + _SCORE_LABEL + r")[\s*_`]*(?::|为|是)?[\s*_`]*" + _BRACKET_NUMBER, text, re.IGNORECASE
    )
    candidates = labelled or re.findall(_BRACKET_NUMBER, text)
    if not candidates:
        raise UnparseableReply("no [n] score found")
    if len({float(c) for c in candidates}) > 1:
        raise UnparseableReply(f"several different scores: {', '.join(f'[{c}]' for c in candidates)}")
    number = candidates[-1]
    if not re.fullmatch(r"[+-]?\d+", number):
        raise UnparseableReply(f"score [{number}] is not an integer")
    score = int(number)
    if not low <= score <= high:
        raise UnparseableReply(f"score [{score}] is out of range {low}-{high}")
    return score


# ---------------------------------------------------------------------------------------------------
# the client


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
) -> str:
    """One POST {base_url}/chat/completions, no retry: the assistant message text.

    ``config.timeout`` bounds the whole request (connect, headers and body), not each read; a reply body
    over MAX_REPLY_BYTES is not read. Raises chat_api.EndpointError (``retryable`` per the shared policy),
    its texts redacted (`redact`: URL credentials and the key); ``ask_batch`` turns it into retries and
    judge_error verdicts.
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
        return message_text(reply)
    except EndpointError as exc:  # error texts are written to records: no credentials
        secrets = (api_key, *url_secrets(config.base_url))
        exc.cause, exc.raw = redact(exc.cause, *secrets), redact(exc.raw, *secrets)
        raise


def complete(
    messages: Sequence[dict],
    config: JudgeConfig,
    *,
    api_key: str | None = None,
    session: requests.Session | None = None,
) -> str:
    """One chat completion with the client's transport retries (timeouts, connection errors, 408/429/5xx,
    malformed bodies; backoff as configured): the assistant text, unparsed and uncached.

    Raises chat_api.EndpointError after the last attempt, or at once for a non-retryable one. For callers
    with their own re-ask rule (the reference protocol); ``ask_batch`` is the engine for everything else.
    """
    return call_with_retries(
        lambda: chat_completion(messages, config, api_key=api_key, session=session), config.retry_policy
    )


def _cache_key(config: JudgeConfig, messages: Sequence[dict]) -> str:
    # base_url is part of the key: a model name means different weights on different servers.
    return stable_key(
        _CACHE_SCHEMA,
        config.base_url.rstrip("/"),
        config.model,
        list(messages),
        config.temperature,
        config.max_tokens,
    )


def _error_verdict(cause: str, raw: str = "", note: str | None = None) -> Verdict:
    return Verdict(value=None, raw=raw, error=f"{JUDGE_ERROR}: {cause}", note=note)


def bounded_reply(raw: str, *secrets: str | None) -> tuple[str, str | None]:
    """The reply as kept, parsed, cached and recorded: credentials redacted (a server may echo the key;
    ``secrets`` as in `redact`), at most MAX_REPLY_CHARS; and a note when it was cut."""
    raw = redact(raw, *secrets)
    if len(raw) <= MAX_REPLY_CHARS:
        return raw, None
    return raw[:MAX_REPLY_CHARS], f"judge reply cut to its first {MAX_REPLY_CHARS} of {len(raw)} characters"


def _join_notes(*notes: str | None) -> str | None:
    kept = [n for n in notes if n]
    return "; ".join(kept) if kept else None


def _ask_one(
    messages: Sequence[dict],
    parse: Callable[[str], Any],
    config: JudgeConfig,
    api_key: str | None,
    session: requests.Session,
) -> Verdict:
    attempts = 0
    messages, request_note = bounded_messages(messages)
    secrets = (api_key, *url_secrets(config.base_url))

    def attempt() -> Verdict:
        nonlocal attempts
        attempts += 1
        raw, reply_note = bounded_reply(
            chat_completion(messages, config, api_key=api_key, session=session), *secrets
        )
        try:
            return Verdict(value=parse(raw), raw=raw, note=_join_notes(request_note, reply_note))
        except UnparseableReply as exc:  # re-ask: the next sample may follow the format
            raise EndpointError(f"unparseable reply: {exc}", retryable=True, raw=raw) from exc

    try:
        return call_with_retries(attempt, config.retry_policy)
    except AuthenticationError as exc:
        key_hint = (
            f"the key in ${config.api_key_env}" if config.api_key_env else "no API key (api_key_env is '')"
        )
        raise JudgeAuthError(
            f"LLM judge {config.model} at {config.public_base_url} refused the credentials "
            f"({redact(exc.cause, *secrets)}); sent {key_hint}. Fix the key or the endpoint and re-run "
            "(finished records are kept)."
        ) from None
    except EndpointError as exc:
        if not exc.retryable:
            return _error_verdict(exc.cause, exc.raw, request_note)
        cause = f"{exc.cause} (after {attempts} attempt{'s' * (attempts > 1)})"
        return _error_verdict(cause, exc.raw, request_note)
    except Exception as exc:  # noqa: BLE001 - a bug must not sink the other items; recorded, not hidden
        return _error_verdict(
            f"unexpected {type(exc).__name__}: {snippet(redact(str(exc), *secrets))}", note=request_note
        )


def ask_batch(
    prompts: Sequence[str | Sequence[dict]],
    parse: Callable[[str], Any],
    config: JudgeConfig,
    *,
    progress: bool = False,
    desc: str = "judge",
) -> list[Verdict]:
    """Ask the model once per prompt; a Verdict per prompt, in order.

    A prompt is a str (sent as one user message, as the reference judge does) or a full chat message
    list. ``parse(reply)`` returns the value or raises UnparseableReply (the prompt is then re-asked).
    Other modules that need an LLM (the recipe's rewriter/checker) reuse this engine as is.

    Identical prompts are asked once. Cached replies are re-parsed with ``parse`` (a parser change
    never serves stale values); only replies that parse are cached. The API key is checked before the
    first request and only when something is not cached (so a fully cached re-run needs no key).
    """
    if not prompts:
        return []
    messages_list = [
        [{"role": "user", "content": p}] if isinstance(p, str) else [dict(m) for m in p] for p in prompts
    ]
    keys = [_cache_key(config, m) for m in messages_list]
    unique = dict(zip(keys, messages_list))  # insertion-ordered, one entry per distinct prompt
    cache = SqliteCache(config.resolved_cache_path()) if config.use_cache else None
    try:
        done: dict[str, Verdict] = {}
        if cache is not None:
            for key in unique:
                hit = cache.get(key)
                if hit is not None:
                    try:
                        done[key] = Verdict(value=parse(hit["raw"]), raw=hit["raw"], note=hit.get("note"))
                    except UnparseableReply:
                        pass
        pending = [k for k in unique if k not in done]
        if pending:
            done.update(_run_pending(pending, unique, parse, config, cache, progress, desc))
    finally:
        if cache is not None:
            cache.close()
    return [done[k] for k in keys]


def _run_pending(
    pending: list[str],
    unique: dict[str, list[dict]],
    parse: Callable[[str], Any],
    config: JudgeConfig,
    cache: SqliteCache | None,
    progress: bool,
    desc: str,
) -> dict[str, Verdict]:
    api_key = config.validate()
    local = threading.local()
    sessions: list[requests.Session] = []
    sessions_lock = threading.Lock()

    def work(key: str) -> Verdict:
        session = getattr(local, "session", None)
        if session is None:  # requests.Session is not guaranteed thread-safe: one per worker
            session = local.session = requests.Session()
            with sessions_lock:
                sessions.append(session)
        verdict = _ask_one(unique[key], parse, config, api_key, session)
        if verdict.ok and cache is not None:
            cache.put(key, {"raw": verdict.raw, "model": config.model, "note": verdict.note})
        return verdict

    results: dict[str, Verdict] = {}
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


# ---------------------------------------------------------------------------------------------------
# judge tasks


def _check_texts(item: Any, names: Sequence[str]) -> None:
    for name in names:
        if not isinstance(getattr(item, name), str):
            who = f"item {item.qid}" if getattr(item, "qid", None) else f"a {type(item).__name__}"
            raise TypeError(f"judge: {who} has {name}={getattr(item, name)!r}, expected a string")


def knowledge_prompt(item: KnowledgeItem, language: str = "zh") -> str:
    _check_texts(item, ("question", "reference", "response"))
    return render_prompt(
        load_prompt(f"knowledge_{language}"),
        question=item.question,
        reference=item.reference,
        reference_en=item.reference_en,
        response=item.response,
    )


def open_ended_prompt(item: OpenEndedItem, aspect: str, language: str = "zh") -> str:
    if aspect not in ("relevance", "semantic"):
        raise ValueError(f"open-ended aspect must be 'relevance' or 'semantic', got {aspect!r}")
    _check_texts(item, ("question", "response"))
    return render_prompt(
        load_prompt(f"open_{aspect}_{language}"),
        question=item.question,
        reference=item.reference,
        response=item.response,
    )


def conversation_prompt(
    item: ConversationItem,
    language: str = "en",
    target_language: str = "English",
    template: str | None = None,
) -> str:
    """``template``: the prompt text itself (e.g. a language pair's own prompt file); default: the package
    prompt ``conversation_<language>``."""
    _check_texts(item, ("question", "response"))
    return render_prompt(
        template if template is not None else load_prompt(f"conversation_{language}"),
        question=item.question,
        reference=item.reference,
        response=item.response,
        target_language=target_language,
    )


def judge_knowledge(
    items: Sequence[KnowledgeItem], config: JudgeConfig, *, language: str = "zh", progress: bool = False
) -> list[Verdict]:
    """Is each response consistent with the reference answer? value True/False (None on judge_error)."""
    prompts = [knowledge_prompt(item, language) for item in items]
    return ask_batch(
        prompts,
        lambda raw: parse_knowledge_verdict(raw, language),
        config,
        progress=progress,
        desc=f"judge knowledge ({language})",
    )


def judge_open_ended(
    items: Sequence[OpenEndedItem],
    config: JudgeConfig,
    *,
    aspect: str,
    language: str = "zh",
    progress: bool = False,
) -> list[Verdict]:
    """1-5 score of each response: aspect "relevance" (understood the question) or "semantic"."""
    prompts = [open_ended_prompt(item, aspect, language) for item in items]
    return ask_batch(prompts, parse_score, config, progress=progress, desc=f"judge {aspect}")


def judge_conversation(
    items: Sequence[ConversationItem],
    config: JudgeConfig,
    *,
    language: str = "en",
    target_language: str = "English",
    progress: bool = False,
    template: str | None = None,
) -> list[Verdict]:
    """1-5 helpfulness/correctness score of each response (the "GPT score" of spoken conversation).

    ``template`` overrides the package prompt (a language pair's ``prompts.conversation``)."""
    prompts = [conversation_prompt(item, language, target_language, template) for item in items]
    return ask_batch(prompts, parse_score, config, progress=progress, desc="judge conversation")


# ---------------------------------------------------------------------------------------------------
# command-line helpers


def add_judge_arguments(parser: argparse.ArgumentParser) -> None:
    """The judge options shared by every CLI that judges (``cs3-bench score``, ``eval``...)."""
    group = parser.add_argument_group(
        "LLM judge",
        f"Default: {DEFAULT_MODEL} at {DEFAULT_BASE_URL} with ${DEFAULT_API_KEY_ENV}. "
        f"Environment: ${ENV_BASE_URL}, ${ENV_MODEL}, ${ENV_API_KEY_ENV}.",
    )
    group.add_argument(
        "--judge-preset",
        choices=sorted(PRESETS),
        default=None,
        help="a named judge configuration (options below override it)",
    )
    group.add_argument("--judge-model", default=None, help=f"judge model name (default {DEFAULT_MODEL})")
    group.add_argument(
        "--judge-base-url", default=None, help="OpenAI-compatible base URL, e.g. http://localhost:8000/v1"
    )
    group.add_argument(
        "--judge-api-key-env",
        default=None,
        metavar="VAR",
        help="environment variable holding the API key (not the key itself)",
    )
    group.add_argument(
        "--judge-concurrency",
        type=int,
        default=None,
        metavar="N",
        help="requests in flight at once (default 8)",
    )
    group.add_argument(
        "--judge-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="bound of one whole request: connect, wait and read (default 60)",
    )
    group.add_argument(
        "--judge-cache",
        type=Path,
        default=None,
        metavar="PATH",
        help="sqlite cache file (default <cache dir>/judge.sqlite)",
    )
    group.add_argument(
        "--no-judge",
        action="store_true",
        help="no LLM judge: keyword-only accuracy, unresolved items are counted",
    )


def judge_config_from_args(args: argparse.Namespace) -> JudgeConfig | None:
    """None with --no-judge, else a validated JudgeConfig (JudgeConfigError before any work starts)."""
    if getattr(args, "no_judge", False):
        return None
    config = JudgeConfig.from_env(
        preset=getattr(args, "judge_preset", None),
        model=getattr(args, "judge_model", None),
        base_url=getattr(args, "judge_base_url", None),
        api_key_env=getattr(args, "judge_api_key_env", None),
        max_concurrency=getattr(args, "judge_concurrency", None),
        timeout=getattr(args, "judge_timeout", None),
        cache_path=getattr(args, "judge_cache", None),
    )
    config.validate()
    return config
