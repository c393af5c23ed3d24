"""openai-whisper's text normalisers (EnglishTextNormalizer, BasicTextNormalizer), without importing torch.

``whisper.normalizers`` is plain Python (re, regex, more_itertools), but ``import whisper.normalizers``
runs ``whisper/__init__.py`` first, which imports torch (~10 s): every pure text or metric call would pay
for it. This module executes the installed ``whisper/normalizers`` package under its own module name,
without its parent package, so the code that runs is openai-whisper's own, byte for byte, and the
normalised text is the one the benchmark has always used.

Why not the ``whisper-normalizer`` package (a torch-free copy on PyPI): every release of it (0.1.8 to
0.1.15 checked) adds rules of its own to EnglishTextNormalizer ("kinda" -> "kind of", "sorta", "dunno",
and "cause" -> "because", so "the main cause" would read "the main because"), which would change scores.
tests/test_english_normalizer.py proves equality with ``whisper.normalizers`` on every English answer of
CS3-Bench and on the demo responses.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

# The name the normalisers' package is executed under (not "whisper.normalizers": that name would make a
# later `import whisper` believe its subpackage is loaded from a parent that never ran).
_MODULE_NAME = "cs3_tasks.core.english_normalizer.whisper_normalizers"
_lock = threading.Lock()
_instances: dict[str, Callable[[str], str]] = {}


def _whisper_normalizers() -> ModuleType:
    """The ``whisper.normalizers`` package: the one already imported, else its files run on their own."""
    loaded = sys.modules.get("whisper.normalizers") or sys.modules.get(_MODULE_NAME)
    if loaded is not None:
        return loaded
    whisper = importlib.util.find_spec("whisper")  # locates the package without running its __init__
    if whisper is None or not whisper.submodule_search_locations:
        raise ImportError(
            "openai-whisper is not installed (its text normalisers are used): pip install openai-whisper"
        )
    folder = Path(next(iter(whisper.submodule_search_locations))) / "normalizers"
    spec = importlib.util.spec_from_file_location(
        _MODULE_NAME, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"openai-whisper's normalizers not found in {folder}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_MODULE_NAME] = module  # its files import each other relatively (from .basic import ...)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(_MODULE_NAME, None)
        raise
    return module


def _instance(kind: str) -> Callable[[str], str]:
    normalizer = _instances.get(kind)
    if normalizer is None:
        with _lock:
            normalizer = _instances.get(kind)
            if normalizer is None:
                module = _whisper_normalizers()
                if kind == "english":
                    normalizer = module.EnglishTextNormalizer()
                else:
                    normalizer = module.BasicTextNormalizer(remove_diacritics=True)
                _instances[kind] = normalizer
    return normalizer


def english_normalizer() -> Callable[[str], str]:
    """The process-wide ``whisper.normalizers.EnglishTextNormalizer()`` (built once: it reads a JSON
    spelling table)."""
    return _instance("english")


def basic_normalizer() -> Callable[[str], str]:
    """The process-wide ``whisper.normalizers.BasicTextNormalizer(remove_diacritics=True)``."""
    return _instance("basic")
