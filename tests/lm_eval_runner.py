"""Run `python -m lm_eval ...` in a subprocess, the way a user runs it, for tests that go through lm-eval."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

# A developer's judge settings must not make a test call a remote judge: tests configure their own.
JUDGE_ENV = ("CS3_JUDGE_MODEL", "CS3_JUDGE_BASE_URL")


def run_lm_eval(
    *args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """`python -m lm_eval ARGS` with ``env`` added to this process's environment (judge variables removed)."""
    child_env = {k: v for k, v in os.environ.items() if k not in JUDGE_ENV}
    child_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "lm_eval", *args],
        env=child_env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
