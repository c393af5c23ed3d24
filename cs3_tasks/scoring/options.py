"""Every run option, declared once: name, type and range, default, environment variable, help, and which
``cs3-bench`` subcommands and whether lm-eval's ``--metadata`` take it.

The table (`RUN_OPTIONS`) makes the argparse groups of every subcommand that scores or transcribes
(`add_run_options`) and is the check of lm-eval's ``--metadata`` (`check_metadata`): a key means the same
in both, ``--judge-timeout 30`` and ``{"judge_timeout": 30}`` alike, and both reach the one validator of a
run, `settings.settings_from_options`. A value is checked where it enters, with one message: a number must be
finite and in its range, a name one of its choices.
"""

from __future__ import annotations

import argparse
import difflib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cs3_tasks.asr.config import (
    BACKEND_ENV,
    BACKENDS,
    DEFAULT_BACKEND,
    MODEL_ENV,
    SHORT_CLIP_DECODINGS,
    SHORT_CLIPS_ENV,
)
from cs3_tasks.asr.device import DEVICE_ENV
from cs3_tasks.core.refusal import Refusal
from cs3_tasks.judge.config import (
    CONCURRENCY_RANGE,
    DEFAULT_API_KEY_ENV,
    DEFAULT_MODEL,
    ENV_BASE_URL,
    ENV_MODEL,
    PRESETS,
    SAMPLES_RANGE,
    TIMEOUT_RANGE,
)
from cs3_tasks.scoring.records import PROTOCOLS

# the subcommands that score, transcribe or judge
SCORE, CONVERSATION, BUILD, BUILD_DATA, DEMO = (
    "score",
    "score-conversation",
    "build-dataset",
    "recipe build-data",
    "demo",
)
TRANSCRIBING = (SCORE, CONVERSATION, BUILD, BUILD_DATA, DEMO)
JUDGING = (SCORE, CONVERSATION, DEMO)
GROUPS = ("scoring", "ASR", "LLM judge")


class OptionError(ValueError):
    """A run option's value is of the wrong type or out of its range (the message says which and why)."""


def _number(kind: type, low: float, high: float, what: str) -> Callable[[Any], Any]:
    """A parser of a finite ``kind`` number in [low, high] (from a command line's string or a JSON value)."""

    def parse(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise OptionError(f"must be {what}, not {value!r}")
        try:
            number = float(value) if kind is float else int(str(value).strip())
        except ValueError:
            raise OptionError(f"must be {what}, not {value!r}") from None
        if not (math.isfinite(number) and low <= number <= high) or (kind is int and number != float(value)):
            raise OptionError(f"must be {what}, not {value!r}")
        return number

    parse.__name__ = what
    return parse


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise OptionError(f"must be a str, got {type(value).__name__} {value!r}")
    return value


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise OptionError(f"must be true or false, got {type(value).__name__} {value!r}")
    return value


def _judge_choice(value: Any) -> str | bool:
    if isinstance(value, bool):  # lm-eval's JSON: {"judge": false} is no judge, true the default one
        return "env" if value else "none"
    return _text(value)


@dataclass(frozen=True)
class RunOption:
    """One run option. ``key`` is the lm-eval metadata key and the argparse dest; its flag is ``--key`` with
    dashes. ``parse`` turns a command line's string or a JSON value into the value (OptionError otherwise).
    ``lm_eval``: True, or why lm-eval's ``--metadata`` refuses it."""

    key: str
    group: str
    help: str
    parse: Callable[[Any], Any] = _text
    choices: tuple[str, ...] | None = None
    env: str | None = None
    flag_only: bool = False  # a switch (store_true)
    commands: tuple[str, ...] = (SCORE,)
    lm_eval: bool | str = True
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")

    def value(self, raw: Any) -> Any:
        """The checked value of ``raw`` (None stays None); OptionError naming the rule."""
        if raw is None:
            return None
        value = self.parse(raw)
        if self.choices is not None and value not in self.choices:
            raise OptionError(f"must be one of {', '.join(self.choices)}, not {raw!r}")
        return value


RUN_OPTIONS: tuple[RunOption, ...] = (
    RunOption(
        "dataset",
        "scoring",
        "dataset: a Hub id, a local build dir, 'demo', or a source JSON file of the set (default "
        "$CS3_BENCH_DATASET, else the Hub's VocalNet/CS3-Bench)",
        commands=(SCORE, CONVERSATION, DEMO),
    ),
    RunOption(
        "protocol",
        "scoring",
        "reference (default): the authors' scoring, comparable with the paper; cs3: our stricter audit "
        "protocol (normalised keywords, strict parsing, judge errors excluded and counted)",
        choices=PROTOCOLS,
        commands=(SCORE, DEMO),
    ),
    RunOption(
        "reference_scripts",
        "scoring",
        "the authors' VocalBench-zh checkout (or its utils/) for the reference judge prompts (default: "
        "$CS3_REFERENCE_SCRIPTS, else the pinned download from GitHub, cached)",
        env="CS3_REFERENCE_SCRIPTS",
        commands=(SCORE, DEMO),
        metavar="DIR",
    ),
    RunOption(
        "use_given_transcripts",
        "scoring",
        "score the speech channel on json_asr/cs_<set>.json's Response_hyp instead of running ASR",
        parse=_flag,
        flag_only=True,
        lm_eval="under lm-eval the model answers and its speech is transcribed: there are no given "
        "transcripts (score saved outputs with `cs3-bench score --use-given-transcripts`)",
    ),
    RunOption(
        "asr_model",
        "ASR",
        f"ASR model name or path (default: ${MODEL_ENV}, else the offline Whisper-base, else large-v3)",
        env=MODEL_ENV,
        commands=TRANSCRIBING,
    ),
    RunOption(
        "asr_backend",
        "ASR",
        f"ASR backend (default: ${BACKEND_ENV}, else {DEFAULT_BACKEND})",
        choices=BACKENDS,
        env=BACKEND_ENV,
        commands=TRANSCRIBING,
    ),
    RunOption(
        "asr_short_clips",
        "ASR",
        f"how faster-whisper decodes clips of at most 30 s (default: ${SHORT_CLIPS_ENV}, else batched)",
        choices=SHORT_CLIP_DECODINGS,
        env=SHORT_CLIPS_ENV,
        commands=TRANSCRIBING,
    ),
    RunOption(
        "asr_device",
        "ASR",
        f"cpu, cuda or cuda:N (default: ${DEVICE_ENV}, else cpu, whose transcripts are README's; cuda is "
        "this rank's GPU: docs/gpu.md)",
        env=DEVICE_ENV,
        commands=TRANSCRIBING,
    ),
    RunOption(
        "judge",
        "LLM judge",
        "the judge: a preset name, 'env' (the default judge over $CS3_JUDGE_*), or 'none' (no judge: "
        "keyword-only accuracy, a lower bound of the benchmark's number)",
        parse=_judge_choice,
        commands=JUDGING,
        metavar="PRESET|env|none",
    ),
    RunOption(
        "judge_preset",
        "LLM judge",
        "a named judge configuration (the options below override it)",
        choices=tuple(sorted(PRESETS)),
        commands=JUDGING,
    ),
    RunOption(
        "judge_model",
        "LLM judge",
        f"judge model name (default ${ENV_MODEL}, else {DEFAULT_MODEL})",
        env=ENV_MODEL,
        commands=JUDGING,
    ),
    RunOption(
        "judge_base_url",
        "LLM judge",
        f"OpenAI-compatible base URL, e.g. http://localhost:8000/v1 (default ${ENV_BASE_URL})",
        env=ENV_BASE_URL,
        commands=JUDGING,
    ),
    RunOption(
        "judge_api_key_env",
        "LLM judge",
        f"environment variable holding the API key, not the key itself (default for DashScope "
        f"{DEFAULT_API_KEY_ENV})",
        commands=JUDGING,
        metavar="VAR",
    ),
    RunOption(
        "judge_concurrency",
        "LLM judge",
        "requests in flight at once (default 8)",
        parse=_number(int, *CONCURRENCY_RANGE, "a whole number from {} to {}".format(*CONCURRENCY_RANGE)),
        commands=JUDGING,
        metavar="N",
    ),
    RunOption(
        "judge_timeout",
        "LLM judge",
        "bound of one whole request in seconds: connect, wait and read (default 60)",
        parse=_number(
            float,
            0.001,
            TIMEOUT_RANGE[1],
            "a finite number of seconds, above {} and at most {}".format(*TIMEOUT_RANGE),
        ),
        commands=JUDGING,
        metavar="SECONDS",
    ),
    RunOption(
        "judge_samples",
        "LLM judge",
        "ask the judge for each open-ended score this many times, each a fresh sample, and score the median "
        "(the spread is recorded per item; default 1: one ask)",
        parse=_number(int, *SAMPLES_RANGE, "a whole number from {} to {}".format(*SAMPLES_RANGE)),
        commands=JUDGING,
        metavar="K",
    ),
    RunOption(
        "judge_cache",
        "LLM judge",
        "sqlite cache file of the judge's replies (default <cache dir>/judge.sqlite)",
        commands=JUDGING,
        metavar="PATH",
    ),
    RunOption(
        "no_judge",
        "LLM judge",
        "no LLM judge: keyword-only accuracy (a lower bound), unresolved items counted; same as judge none",
        parse=_flag,
        flag_only=True,
        commands=JUDGING,
    ),
)
OPTIONS = {option.key: option for option in RUN_OPTIONS}
# what lm-eval's --metadata takes (the model's model_args and the task YAML's metadata are merged into it too)
METADATA_KEYS = tuple(o.key for o in RUN_OPTIONS if o.lm_eval is True)
# a key that looks like ours (judge_*, or a near miss of one) is a typo, not a model_arg. Not "asr_*":
# cs3-cascade has model_args asr_language / asr_use_cache; a cutoff of 0.85 keeps tts_backend (0.82 to
# asr_backend) out.
OUR_PREFIXES = ("judge_",)


def options_of(command: str) -> list[RunOption]:
    return [o for o in RUN_OPTIONS if command in o.commands]


def add_run_options(parser: argparse.ArgumentParser, command: str, **defaults: Any) -> None:
    """The argparse groups of ``command``'s run options, from the table; ``defaults``: the command's own
    defaults where they differ (e.g. the demo's ``judge="none"``)."""
    for group in GROUPS:
        mine = [o for o in options_of(command) if o.group == group]
        if not mine:
            continue
        section = parser.add_argument_group(group) if group != "scoring" else parser
        for option in mine:
            help_text = option.help
            if option.key in defaults:
                help_text += f" (here: {defaults[option.key]})"
            if option.flag_only:
                section.add_argument(option.flag, dest=option.key, action="store_true", help=help_text)
                continue
            section.add_argument(
                option.flag,
                dest=option.key,
                default=defaults.get(option.key),
                type=_for_argparse(option),
                metavar=option.metavar or ("{" + ",".join(option.choices) + "}" if option.choices else None),
                help=help_text,
            )


def _for_argparse(option: RunOption) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            return option.value(text)
        except OptionError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = option.key
    return parse


class MetadataError(Refusal):
    """lm-eval's ``--metadata`` holds a misspelled cs3 key, a value of the wrong type or out of range, or a
    key lm-eval cannot take (raised when a task loads, before any generation)."""


def check_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The cs3 run settings of lm-eval's ``--metadata``, each checked as the command line checks it;
    MetadataError listing every misspelled key (with the nearest known ones), every bad value and every key
    lm-eval cannot take."""
    problems, settings = [], {}
    for key, value in metadata.items():
        option = OPTIONS.get(key)
        if option is not None and option.lm_eval is not True:
            problems.append(f"{key!r} cannot be used under lm-eval: {option.lm_eval}")
        elif option is not None:
            try:
                settings[key] = option.value(value)
            except OptionError as exc:
                problems.append(f"{key!r} {exc}")
        else:
            near = difflib.get_close_matches(str(key), METADATA_KEYS, n=3, cutoff=0.85)
            if near or str(key).startswith(OUR_PREFIXES):
                hint = f"; did you mean {' or '.join(repr(n) for n in near)}?" if near else ""
                problems.append(f"unknown key {key!r}{hint}")
    if problems:
        raise MetadataError(
            "cs3 --metadata: " + "; ".join(problems) + f". Known keys: {', '.join(METADATA_KEYS)}."
        )
    return settings


def in_metadata_words(message: str) -> str:
    """A refusal written for the command line (``--no-judge``, ``--protocol cs3``, ``--judge-base-url``...)
    in the words of lm-eval's ``--metadata`` (``{"judge": "none"}``, ``{"protocol": "cs3"}``,
    ``"judge_base_url"``), for a user who ran lm_eval."""
    message = message.replace("--no-judge", '\'{"judge": "none"}\'')
    for option in sorted(RUN_OPTIONS, key=lambda o: -len(o.flag)):
        if option.choices:
            choices = "|".join(re.escape(c) for c in option.choices)
            pattern = rf"{re.escape(option.flag)} ({choices})\b"
            message = re.sub(pattern, lambda m, key=option.key: f'\'{{"{key}": "{m[1]}"}}\'', message)
        message = message.replace(option.flag, f'"{option.key}"')
    return message
