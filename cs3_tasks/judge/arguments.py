"""The judge of a run's options (a command line's, or lm-eval's ``--metadata``; declared in
cs3_tasks/scoring/options.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cs3_tasks.core.data import HUB_DATASET
from cs3_tasks.judge.config import (
    DEFAULT_API_KEY_ENV,
    DEFAULT_MODEL,
    JudgeConfig,
)

NO_JUDGE = ("none", "no", "false", "0", "off")  # `judge` option values that mean "no judge"
ENV_JUDGE = ("env", "yes", "true", "1", "on")  # ... that mean "the judge of the environment / defaults"


def score_command(outputs: str, dataset: str | None = None) -> str:
    """The ``cs3-bench score`` command of a folder of outputs, printed as a next step, and what it needs: the
    default judge's key (its run refuses without one), or the options that do without it."""
    command = f"cs3-bench score --outputs {outputs} --set all --out RESULTS" + (
        f" --dataset {dataset}" if dataset else ""
    )
    needs = [
        f"needs ${DEFAULT_API_KEY_ENV} for the default judge, {DEFAULT_MODEL}",
        "another judge: --judge-preset or --judge-base-url",
        "keyword-only lower bounds, no key: add --no-judge",
    ]
    if not dataset:  # the questions may be another dataset's: scoring on the Hub's would refuse or mislead
        needs.append(f"questions not from {HUB_DATASET}: add --dataset DIR or --dataset demo")
    return f"{command}  ({'; '.join(needs)})"


def option_value(options: Mapping[str, Any], key: str) -> Any:
    """``options[key]`` (None when absent), a string stripped: an option from a command line or JSON."""
    value = options.get(key)
    return value.strip() if isinstance(value, str) else value


def judge_config_from_options(options: Mapping[str, Any]) -> JudgeConfig | None:
    """The judge of a run: None when asked for none (``no_judge``, or ``judge`` "none"), else a validated
    JudgeConfig from the options (``judge`` a preset name or "env", ``judge_preset``, ``judge_model``,
    ``judge_base_url``, ``judge_api_key_env``, ``judge_concurrency``, ``judge_timeout``, ``judge_cache``,
    ``judge_samples``)
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
        cache_path=Path(options["judge_cache"]) if options.get("judge_cache") else None,
        samples=options.get("judge_samples"),
    )
    config.validate()
    return config
