"""A run refused before it starts: one class, so every command and the lm-eval hook say it the same way."""

from __future__ import annotations


class Refusal(ValueError):
    """A run that cannot start as asked (a bad option or metadata key, no judge key, few-shot on a zero-shot
    task, a dataset that cannot be reached, a launch that leaves a process without items). Its message is one
    line naming the fix; commands print it as ``error: <message>`` and exit 2, with no traceback."""
