"""A clone off GitHub has no ../shared: every test that reads it, or checks what happens without it, passes or
skips with its reason there too. This runs those tests (marked ``shared``) once more with ../shared hidden
(tests/shared_data.py), so that the suite proves it on a machine that has the data."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import shared_data

TESTS = Path(__file__).resolve().parent


@pytest.mark.slow
def test_what_depends_on_the_shared_data_passes_without_it(tmp_path):
    files = sorted(str(p) for p in TESTS.glob("test_*.py") if "shared_data" in p.read_text(encoding="utf-8"))
    assert len(files) >= 10  # the files that import tests/shared_data.py
    # the inner run gets its own cache and none of this run's pytest-xdist worker settings
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "CS3_BENCH_TEST"))}
    environment.pop("CS3_BENCH_CACHE", None)
    environment[shared_data.HIDE_ENV] = "1"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-m", "shared", "-p", "no:cacheprovider"]
        + ["--basetemp", str(tmp_path / "inner"), *files],
        cwd=TESTS.parent,
        env=environment,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    print(result.stdout[-6000:], result.stderr[-3000:], sep="\n")  # shown when it fails
    assert result.returncode == 0
    assert " passed" in result.stdout and "failed" not in result.stdout
