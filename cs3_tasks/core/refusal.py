"""A run refused: one class, so every command and the lm-eval hook say it the same way."""

from __future__ import annotations


class Refusal(ValueError):
    """A run that cannot start or go on as asked (a bad option or metadata key, no judge key, few-shot on a
    zero-shot task, a dataset that cannot be reached, a launch that leaves a process without items, a result
    dir that is busy, another system's or not what it claims). Its message is one line naming the item and
    the cause; commands print it as ``error: <message>`` and exit with ``exit_code`` (2), with no
    traceback."""

    exit_code = 2
