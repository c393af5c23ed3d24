"""`pip install .` (not editable) gives a working package: tasks, demo data, hook, models ship in the wheel.

The wheel is installed with --target into a fresh folder; a child interpreter started with -S sees that
folder (its .pth files processed, so our lm-eval hook runs) plus the dependencies' site-packages without
their .pth files, so the editable install of this checkout cannot shadow the wheel.
"""

from __future__ import annotations

import json
import site
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CHECK = textwrap.dedent(
    """
    import json, site, sys
    target, deps = sys.argv[1], json.loads(sys.argv[2])
    sys.path[:0] = [target]
    site.addsitedir(target)          # processes cs3_bench_lm_eval.pth from the wheel
    sys.path.extend(deps)            # dependencies, without their .pth files (no editable finder)
    import cs3_tasks, cs3_tasks.task_configs
    from cs3_tasks.core import data
    assert cs3_tasks.__file__.startswith(target), cs3_tasks.__file__
    from lm_eval.tasks import TaskManager
    from lm_eval.api.registry import get_model
    tasks = TaskManager().all_tasks   # no include_path: the hook adds ours
    ds = data.load_set("knowledge", "demo")
    print(json.dumps({
        "module": cs3_tasks.__file__,
        "task_configs": cs3_tasks.task_configs.__file__,
        "tasks": sorted(t for t in tasks if t.startswith(("cs3", "belle"))),
        "model": get_model("cs3-precomputed").__name__,
        "demo_rows": len(ds),
    }))
    """
)


@pytest.mark.slow
def test_pip_install_dot_gives_a_working_package(tmp_path, built_wheel):
    target = tmp_path / "site"
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(built_wheel),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert install.returncode == 0, install.stderr[-3000:]

    deps = [p for p in site.getsitepackages() if Path(p).is_dir()]
    run = subprocess.run(
        [sys.executable, "-S", "-c", CHECK, str(target), json.dumps(deps)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        check=False,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(Path.home()),
            "HF_DATASETS_OFFLINE": "1",
            "HF_HUB_OFFLINE": "1",
        },
    )
    assert run.returncode == 0, run.stderr[-4000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found["module"].startswith(str(target))
    assert found["task_configs"].startswith(str(target))
    for task in ("cs3", "cs3_knowledge", "cs3_knowledge_en", "cs3_open_ended", "belle_s2s_zh2en"):
        assert task in found["tasks"]
    assert found["model"] == "PrecomputedLM"
    assert found["demo_rows"] >= 24


def test_every_package_folder_is_listed_for_the_wheel():
    """pyproject.toml lists the packages by hand (task_configs/ ships as cs3_tasks.task_configs): a package
    folder missing from the list would be missing from every installed copy."""
    import tomllib

    repo = Path(__file__).resolve().parents[1]
    config = tomllib.loads((repo / "pyproject.toml").read_text("utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    folders = {
        ".".join(init.parent.relative_to(repo).parts) for init in (repo / "cs3_tasks").rglob("__init__.py")
    }
    assert folders - listed == set()
