"""Every run option declared once (cs3_tasks/scoring/options.py): the command line and lm-eval's --metadata
take the same keys with the same effect on ``<set>.settings.json``, and check their values alike."""

from __future__ import annotations

import argparse
import json
import math
import re

import pytest

from cs3_tasks import cli
from cs3_tasks.scoring import options
from cs3_tasks.scoring.settings import settings_from_options

LOOPBACK = "http://127.0.0.1:9/v1"  # a local judge needs no key; nothing is sent in these tests
# a value of each option, as a command line gives it (a string) and as JSON gives it
SAMPLES = {
    "dataset": "demo",
    "protocol": "cs3",
    "reference_scripts": "/nowhere/vocalbench-zh",
    "asr_model": "some-asr",
    "asr_backend": "openai-whisper",
    "asr_short_clips": "packed",
    "asr_device": "cpu",
    "judge": "env",
    "judge_preset": "vllm",
    "judge_model": "judge-x",
    "judge_base_url": LOOPBACK,
    "judge_api_key_env": "MY_JUDGE_KEY",
    "judge_concurrency": 3,
    "judge_timeout": 7.5,
    "judge_cache": "/tmp/j.sqlite",
    "judge_samples": 3,
    "no_judge": True,
}
# score's options that are not run options: what to score, where, and how the run goes
NOT_RUN_OPTIONS = {
    "--help",
    "--outputs",
    "--outputs-root",
    "--from-results",
    "--set",
    "--out",
    "--model-name",
}
NOT_RUN_OPTIONS |= {"--restart", "--no-progress", "--wait"}


def _parser(command: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    options.add_run_options(parser, command)
    return parser


def _argv(key: str, value) -> list[str]:
    flag = options.OPTIONS[key].flag
    return [flag] if value is True else [flag, str(value)]


def test_the_table_covers_every_option_score_shows(capsys):
    with pytest.raises(SystemExit):
        cli.main(["score", "--help"])
    shown = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", capsys.readouterr().out))
    run_options = {o.flag for o in options.options_of(options.SCORE)}
    assert shown - NOT_RUN_OPTIONS == run_options
    assert set(SAMPLES) | {"use_given_transcripts"} == set(options.OPTIONS)


@pytest.mark.parametrize("key", [k for k in SAMPLES if k != "no_judge"])
def test_each_key_has_the_same_effect_from_the_command_line_and_from_metadata(key, monkeypatch):
    """The settings.json a run would write, from ``--key value`` and from ``{"key": value}``."""
    for name in ("CS3_ASR_BACKEND", "CS3_ASR_MODEL", "CS3_JUDGE_BASE_URL", "CS3_JUDGE_MODEL"):
        monkeypatch.delenv(name, raising=False)
    base = {"judge_base_url": LOOPBACK, "judge_model": "m"}  # a local judge: no key needed
    if key in base:
        base.pop(key)
    argv = [arg for k, v in base.items() for arg in _argv(k, v)] + _argv(key, SAMPLES[key])
    from_cli = vars(_parser(options.SCORE).parse_args(argv))
    from_metadata = options.check_metadata({**base, key: SAMPLES[key]})
    a = settings_from_options(from_cli, reference_prompts=False)
    b = settings_from_options(from_metadata, reference_prompts=False)
    assert a == b
    assert json.dumps(a.record_settings("knowledge"), default=str) == json.dumps(
        b.record_settings("knowledge"), default=str
    )


def test_no_judge_means_no_judge_in_both():
    from_cli = vars(_parser(options.SCORE).parse_args(["--no-judge"]))
    assert settings_from_options(from_cli, reference_prompts=False).judge is None
    for metadata in ({"no_judge": True}, {"judge": "none"}, {"judge": False}):
        assert settings_from_options(options.check_metadata(metadata), reference_prompts=False).judge is None


NUMERIC = [o for o in options.RUN_OPTIONS if o.key in ("judge_concurrency", "judge_timeout", "judge_samples")]
BAD_NUMBERS = ["inf", "-inf", "nan", "0", "-1", "1e9", "many", "1.5e", ""]


@pytest.mark.parametrize("option", NUMERIC, ids=lambda o: o.key)
@pytest.mark.parametrize("bad", BAD_NUMBERS)
def test_a_number_out_of_its_range_is_refused_where_it_enters(option, bad, capsys):
    """Non-finite, zero, negative, huge or not a number: refused at parse time by the command line (exit 2,
    one line naming the option) and by the metadata check alike."""
    with pytest.raises(SystemExit) as exit_:
        _parser(options.SCORE).parse_args([f"{option.flag}={bad}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert option.flag in err and "must be" in err
    values = [bad] + ([float(bad)] if re.fullmatch(r"-?(inf|nan|\d+(e\d+)?)", bad) else [])
    for value in values:
        with pytest.raises(options.MetadataError, match=f"'{option.key}' must be"):
            options.check_metadata({option.key: value})
    assert math.isfinite(option.value("5"))


def test_lm_eval_refuses_an_option_it_cannot_use_with_the_reason():
    with pytest.raises(options.MetadataError, match="'use_given_transcripts' cannot be used under lm-eval"):
        options.check_metadata({"use_given_transcripts": True})


def test_refusals_for_the_command_line_read_in_metadata_words():
    message = "set --judge-base-url or run with --no-judge (or --judge-timeout), or --protocol cs3"
    expected = 'set "judge_base_url" or run with \'{"judge": "none"}\' (or "judge_timeout"), or '
    assert options.in_metadata_words(message) == expected + '\'{"protocol": "cs3"}\''


@pytest.mark.parametrize(
    ("key", "field", "bounds"),
    [
        ("judge_samples", "samples", "SAMPLES_RANGE"),
        ("judge_concurrency", "max_concurrency", "CONCURRENCY_RANGE"),
    ],
)
def test_a_judge_number_has_one_range_for_the_command_line_and_the_config(key, field, bounds):
    """The option table's range is the judge config's: neither accepts what the other refuses."""
    from cs3_tasks.judge import config
    from cs3_tasks.judge.config import JudgeConfig, JudgeConfigError

    low, high = getattr(config, bounds)
    option = next(o for o in options.RUN_OPTIONS if o.key == key)
    for inside in (low, high):
        assert option.value(inside) == inside
        JudgeConfig(api_key_env="", base_url="http://127.0.0.1:9/v1", **{field: inside}).validate()
    for outside in (low - 1, high + 1):
        with pytest.raises(options.OptionError):
            option.value(outside)
        with pytest.raises(JudgeConfigError):
            JudgeConfig(api_key_env="", base_url="http://127.0.0.1:9/v1", **{field: outside}).validate()
