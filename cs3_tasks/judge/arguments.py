"""The judge options shared by every CLI that judges, and the config they make."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cs3_tasks.judge.config import (
    DEFAULT_API_KEY_ENV,
    DEFAULT_BASE_URL,
    DEFAULT_MODEL,
    ENV_API_KEY_ENV,
    ENV_BASE_URL,
    ENV_MODEL,
    PRESETS,
    JudgeConfig,
)

NO_JUDGE = ("none", "no", "false", "0", "off")  # `judge` option values that mean "no judge"
ENV_JUDGE = ("env", "yes", "true", "1", "on")  # ... that mean "the judge of the environment / defaults"


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
    return judge_config_from_options(vars(args))


def option_value(options: Mapping[str, Any], key: str) -> Any:
    """``options[key]`` (None when absent), a string stripped: an option from a command line or JSON."""
    value = options.get(key)
    return value.strip() if isinstance(value, str) else value


def judge_config_from_options(options: Mapping[str, Any]) -> JudgeConfig | None:
    """The judge of a run: None when asked for none (``no_judge``, or ``judge`` "none"), else a validated
    JudgeConfig from the options (``judge`` a preset name or "env", ``judge_preset``, ``judge_model``,
    ``judge_base_url``, ``judge_api_key_env``, ``judge_concurrency``, ``judge_timeout``, ``judge_cache``)
    over $CS3_JUDGE_* and the defaults. JudgeConfigError (with the fix) when it cannot run (no API key)."""
    choice = str(option_value(options, "judge") or "")
    if options.get("no_judge") or choice.lower() in NO_JUDGE:
        return None
    preset = option_value(options, "judge_preset") or (
        choice if choice and choice.lower() not in ENV_JUDGE else None
    )
    config = JudgeConfig.from_env(
        preset=preset,
        model=option_value(options, "judge_model") or None,
        base_url=option_value(options, "judge_base_url") or None,
        api_key_env=option_value(options, "judge_api_key_env"),
        max_concurrency=options.get("judge_concurrency"),
        timeout=options.get("judge_timeout"),
        cache_path=options.get("judge_cache"),
    )
    config.validate()
    return config
