"""The ASR's configuration error, below every ASR module (the model files are checked where they are made)."""

from __future__ import annotations

from cs3_tasks.core.refusal import Refusal


class AsrModelError(Refusal, RuntimeError):
    """The ASR model cannot be found or loaded (a configuration problem, not a per-item one): one line naming
    the model or folder and what is wrong; the commands and the lm-eval hook print it and exit 2."""
