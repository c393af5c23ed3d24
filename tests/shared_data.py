"""Where the tests find what lies beside the clone in ../shared, which a public clone does not have.

- ``DATA``: the benchmark's source texts (``cs3bench/``) and BELLE-eval-S2S (``belle_eval_s2s/``):
  ``$CS3_SHARED_DATA``, else ``../shared/data``.
- ``AUTHORS``: the authors' VocalBench-zh scripts: ``$CS3_REFERENCE_SCRIPTS``, else
  ``../shared/reference/vocalbench-zh``.

A test that reads them, or checks what happens without them, is marked ``shared``. With
``CS3_TESTS_WITHOUT_SHARED=1`` both point at a folder that does not exist, and ``tests/conftest.py`` sets the
environment the same way for the scripts and commands the tests start: ``python -m pytest -m shared`` then
runs as in a clone without ../shared (tests/test_public_clone.py does that on every run of the suite).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HIDE_ENV = "CS3_TESTS_WITHOUT_SHARED"
HIDDEN = os.environ.get(HIDE_ENV) == "1"
# a folder no machine has: what a public clone sees in place of ../shared
NOWHERE = Path("/nonexistent/cs3-bench-tests-without-shared")

if HIDDEN:
    DATA = NOWHERE / "data"
    AUTHORS = NOWHERE / "reference" / "vocalbench-zh"
else:
    DATA = Path(os.environ.get("CS3_SHARED_DATA") or REPO.parent / "shared" / "data")
    AUTHORS = Path(
        os.environ.get("CS3_REFERENCE_SCRIPTS") or REPO.parent / "shared" / "reference" / "vocalbench-zh"
    )
CS3_SOURCE = DATA / "cs3bench"
BELLE = DATA / "belle_eval_s2s"


def hide_from_commands() -> None:
    """In the hidden pass, the scripts and commands the tests start do not find ../shared either."""
    if HIDDEN:
        os.environ["CS3_SHARED_DATA"] = str(DATA)
        os.environ.pop("CS3_REFERENCE_SCRIPTS", None)


def need(*paths: Path) -> None:
    """Skip, saying why, unless every path exists."""
    for path in paths:
        if not path.exists():
            hidden = f" ({HIDE_ENV}=1)" if HIDDEN else ""
            pytest.skip(f"{path} is absent{hidden}: the shared data beside the clone (set CS3_SHARED_DATA)")
