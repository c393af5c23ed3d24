"""The judge's configuration: endpoint, model, key variable, bounds; presets, environment, validation.

The default configuration mirrors the CS3-Bench authors' reference judge (qwen-max-2025-01-25 at
temperature 0 through DashScope's OpenAI-compatible endpoint); any other endpoint is one option away
(``JudgeConfig.from_env``, ``CS3_JUDGE_*`` variables, ``--judge-*`` options, presets).
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from cs3_tasks.core.cache import cache_dir
from cs3_tasks.core.chat_api import RetryPolicy, chat_url
from cs3_tasks.core.refusal import Refusal
from cs3_tasks.judge.redaction import redact

DEFAULT_BASE_URL = "https://dashscope.aliyuncs.com/compatible-mode/v1"
DEFAULT_MODEL = "qwen-max-2025-01-25"
DEFAULT_API_KEY_ENV = "DASHSCOPE_API_KEY"

ENV_BASE_URL = "CS3_JUDGE_BASE_URL"
ENV_MODEL = "CS3_JUDGE_MODEL"
ENV_API_KEY_ENV = "CS3_JUDGE_API_KEY_ENV"

CACHE_FILE = "judge.sqlite"


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


class JudgeUnreachableError(JudgeAuthError, Refusal):
    """Nothing accepts connections at the judge's URL (checked before the first request): the run stops as
    for refused credentials, in one line naming the URL (redacted); what was scored before is kept."""


# the ranges of a judge's numbers, one home for the config's check and the command line's (scoring/options.py)
CONCURRENCY_RANGE = (1, 256)  # requests in flight at once
TIMEOUT_RANGE = (0, 3600)  # seconds of one whole request: above the first, at most the second
SAMPLES_RANGE = (1, 25)  # asks per open-ended score: more is cost, not information


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
    samples: int = 1  # open-ended scores: fresh samples asked per score, whose median is the score

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
        from_env = {name for name, value in env.items() if value and name not in given}
        given.update({name: env[name] for name in from_env})
        if "base_url" in from_env and not _is_http_url(env["base_url"]):
            raise JudgeConfigError(
                f"${ENV_BASE_URL}={redact(env['base_url'])!r} is not an http(s) URL (or unset it)"
            )
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
        if not _is_http_url(self.base_url):
            raise JudgeConfigError(f"judge base_url {self.public_base_url!r} is not an http(s) URL")
        if not self.model:
            raise JudgeConfigError("judge model is empty: set --judge-model or $CS3_JUDGE_MODEL")
        low, high = CONCURRENCY_RANGE
        if not low <= self.max_concurrency <= high:
            raise JudgeConfigError(
                f"judge max_concurrency must be from {low} to {high}, got {self.max_concurrency}"
            )
        low, high = TIMEOUT_RANGE
        if not (
            math.isfinite(self.timeout) and low < self.timeout <= high
        ):  # inf: no bound; nan: always late
            raise JudgeConfigError(
                f"judge timeout must be a finite number of seconds in ({low}, {high}], got {self.timeout}"
            )
        if self.max_retries < 0:
            raise JudgeConfigError(f"judge max_retries must be >= 0, got {self.max_retries}")
        low, high = SAMPLES_RANGE
        if (
            isinstance(self.samples, bool)
            or not isinstance(self.samples, int)
            or not low <= self.samples <= high
        ):
            raise JudgeConfigError(
                f"judge samples must be a whole number from {low} to {high}, got {self.samples!r}"
            )
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
                f"--judge-base-url, --judge-model or ${ENV_BASE_URL}, ${ENV_MODEL}), or run with --no-judge "
                "(keyword-only accuracy: a lower bound of the benchmark's number, not the paper's)."
            )
        return key


# What an environment variable holding a key is called (DASHSCOPE_API_KEY); anything else is not printed.
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,63}")


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


def _is_http_url(url: str | None) -> bool:
    parsed = urlparse(url or "")
    return parsed.scheme in ("http", "https") and bool(parsed.netloc)
