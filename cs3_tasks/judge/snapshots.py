"""Whether a judge model's name pins its weights: a dated snapshot (``qwen-max-2025-01-25``,
``gpt-4o-2024-08-06``, ``claude-3-5-sonnet-20241022``, ``gpt-4-0613``, ``mistral-large-2407``) or an undated
alias (``qwen-max``, ``gpt-4o-mini``, ``qwen-max-latest``), which its provider moves to other weights when it
likes, so that the same name judges differently from one month to the next. The one rule,
`is_dated_snapshot`; the note results carry, `undated_judge_note`."""

from __future__ import annotations

import re

_MONTH = r"(?:0[1-9]|1[0-2])"
_DAY = r"(?:0[1-9]|[12]\d|3[01])"
# a date in a model name, as providers write it: 2025-01-25, 2025_01_25, 20250125; 250125 (YYMMDD), 0125
# (MMDD) and 2407 (YYMM) only as a whole part of the name (after - _ . : / or @), never inside a longer number
# or word
_DATED = re.compile(
    rf"(?<![0-9])20\d\d[-_.]?{_MONTH}[-_.]?{_DAY}(?![0-9])"
    rf"|(?<=[-_.:/@])(?:(?:2\d)?{_MONTH}{_DAY}|2\d{_MONTH})(?![0-9A-Za-z])"
)
# a part of the name that asks for whatever is newest, whatever else the name says
_MOVING = re.compile(r"(?:^|[-_.:/@])latest(?:$|[-_.:/@])", re.IGNORECASE)


def is_dated_snapshot(model: str | None) -> bool:
    """True when the model's name carries a date (see the module docstring) and does not ask for the latest;
    False for an undated alias and for no name."""
    if not model:
        return False
    return bool(_DATED.search(model)) and not _MOVING.search(model)


def undated_judge_note(model: str) -> str:
    """What a result says about a judge whose name is an undated alias."""
    return (
        f"the judge {model} is an undated alias (no date in its name): the provider can move the name to "
        "other weights at any time, so these verdicts may not be reproducible later; name a dated snapshot "
        "(e.g. qwen-max-2025-01-25) to pin the judge"
    )
