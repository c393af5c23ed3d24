"""setuptools commands that ship ``cs3_bench_lm_eval.pth`` (the lm-eval start-up hook) at the top of
site-packages, for both ``pip install .`` (a wheel) and ``pip install -e .`` (a PEP 660 editable wheel).

pyproject.toml names these classes under ``[tool.setuptools.cmdclass]``; setuptools loads this file by
path at build time, so it imports nothing from cs3_tasks. Files at the root of a wheel land in
site-packages, and pip records them, so ``pip uninstall cs3-bench`` removes the .pth too.
"""

from __future__ import annotations

from pathlib import Path

from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH_NAME = "cs3_bench_lm_eval.pth"
# One line; site.py executes .pth lines that start with "import". It does nothing when the switch is
# set or cs3_tasks is gone, and cs3_tasks.harness.lm_eval_hook.install() only adds an import watcher.
PTH_CONTENT = (
    "import os; os.environ.get('CS3_BENCH_NO_LM_EVAL_HOOK', '').strip().lower() in ('', '0', 'false', 'no') "
    "and __import__('importlib.util').util.find_spec('cs3_tasks') is not None "
    "and __import__('cs3_tasks.harness.lm_eval_hook').harness.lm_eval_hook.install()\n"
)


class BuildPyWithPth(build_py):
    """build_py that also writes the .pth at the root of build_lib (the root of a regular wheel)."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib, PTH_NAME)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(PTH_CONTENT, encoding="utf-8")

    def get_outputs(self, *args, **kwargs):
        return [*super().get_outputs(*args, **kwargs), str(Path(self.build_lib, PTH_NAME))]


class EditableWheelWithPth(editable_wheel):
    """editable_wheel whose wheel also carries the .pth (an editable wheel ignores build_lib)."""

    def _select_strategy(self, *args, **kwargs):
        return _AddPth(super()._select_strategy(*args, **kwargs))


class _AddPth:
    """Wraps setuptools' editable strategy: same behaviour, plus our .pth in the wheel (with RECORD)."""

    def __init__(self, strategy):
        self._strategy = strategy

    def __call__(self, wheel, files, mapping):
        self._strategy(wheel, files, mapping)
        wheel.writestr(PTH_NAME, PTH_CONTENT.encode("utf-8"))

    def __enter__(self):
        self._strategy.__enter__()
        return self

    def __exit__(self, *exc):
        return self._strategy.__exit__(*exc)
