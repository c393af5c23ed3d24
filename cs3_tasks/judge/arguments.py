"""The judge options shared by every CLI that judges, and the config they make."""

from __future__ import annotations

import argparse
from pathlib import Path

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
