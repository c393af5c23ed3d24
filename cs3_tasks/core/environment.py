"""Environment variables read with the values they allow: a value we cannot use is a `Refusal` naming the
variable, its value and what is allowed (the commands and the lm-eval hook print it as one line, exit 2),
never a traceback and never a silent default.

Each module that names a variable reads it here, where it reads it (docs/architecture.md), so that a bad
value is refused exactly when the run would use it: a variable a run does not use is not evaluated for it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from cs3_tasks.core.refusal import Refusal

TRUE_VALUES = ("1", "true", "yes", "on")
FALSE_VALUES = ("", "0", "false", "no", "off")
SHOWN_CHARS = 60  # of a refused value (a value can be long; none of these variables holds a secret)


class EnvironmentValueError(Refusal):
    """An environment variable holds a value that is not one of those allowed."""


def _environ(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def refused(name: str, value: str, allowed: str) -> EnvironmentValueError:
    """The refusal of ``$name=value``: the variable, its value (cut) and the values allowed."""
    shown = value if len(value) <= SHOWN_CHARS else value[:SHOWN_CHARS] + "..."
    return EnvironmentValueError(f"${name}={shown!r} is not allowed: {allowed} (or unset it)")


def env_choice(
    name: str, choices: Sequence[str], default: str | None = None, environ: Mapping[str, str] | None = None
) -> str | None:
    """``$name`` as one of ``choices`` (compared without case or surrounding blanks), ``default`` when unset
    or empty; any other value is refused naming the choices."""
    raw = _environ(environ).get(name)
    if raw is None or not raw.strip():
        return default
    value = raw.strip().lower()
    if value not in choices:
        raise refused(name, raw, f"choose one of {', '.join(choices)}")
    return value


def env_flag(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """``$name`` as a switch: true for 1/true/yes/on, false when unset or 0/false/no/off/empty."""
    allowed = (*TRUE_VALUES, *FALSE_VALUES[1:])
    return env_choice(name, allowed, "0", environ) in TRUE_VALUES


def env_int(name: str, default: int, minimum: int = 0, environ: Mapping[str, str] | None = None) -> int:
    """``$name`` as a whole number >= ``minimum`` (``default`` when unset or empty)."""
    raw = _environ(environ).get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise refused(name, raw, f"a whole number >= {minimum}")
    return value
