"""docs/models.md documents every model_arg of every wrapper, in one table (issue 23.3)."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

from cs3_tasks.harness.lm_eval_hook import MODEL_MODULES

DOC = Path(__file__).resolve().parents[1] / "docs" / "models.md"
# lm-eval's own arguments (--batch_size, --device) and the ones a wrapper passes on to its base class
NOT_MODEL_ARGS = {"self", "args", "kwargs", "lm_eval_kwargs", "unknown", "max_batch_size", "device"}


def _rows(wrapper: str) -> str:
    """The table rows naming ``wrapper`` (a worker's rows also cover the five workers' shared arguments)."""
    rows = [line for line in DOC.read_text(encoding="utf-8").splitlines() if line.startswith("|")]
    shared = "(the five workers)" if wrapper in MODEL_MODULES and "worker" in MODEL_MODULES[wrapper] else None
    mine = [r for r in rows if wrapper in r.split("|")[1] or (shared and shared in r.split("|")[1])]
    return "\n".join(mine + [r for r in rows if "every `SpeechLM`" in r])


def _arguments(cls) -> set[str]:
    names = set()
    for klass in cls.__mro__:
        if "__init__" in vars(klass):
            names |= set(inspect.signature(vars(klass)["__init__"]).parameters)
    worker = getattr(cls, "worker", "")
    if worker:
        names |= set(importlib.import_module(f"cs3_tasks.models.workers.{worker}").DEFAULTS)
    return names - NOT_MODEL_ARGS


@pytest.mark.parametrize("wrapper", sorted(MODEL_MODULES))
def test_every_model_arg_is_in_the_table(wrapper):
    from lm_eval.api import registry

    importlib.import_module(MODEL_MODULES[wrapper])
    cls = registry.get_model(wrapper)
    rows = _rows(wrapper)
    missing = sorted(name for name in _arguments(cls) if f"`{name}`" not in rows)
    assert not missing, f"docs/models.md lacks {wrapper}'s model_args {missing}"
