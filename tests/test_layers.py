"""The package's layering (docs/architecture.md): no import circle, no import that points up a layer, no
module using another module's private names. Reads the source with ast; imports nothing of the package.

The lm-eval task folder (task_configs/, shipped as cs3_tasks.task_configs) is walked too, and so are the
modules named by string (``"cs3_tasks.models.precomputed"``): the start-up hook reaches lm-eval's plugins that
way (imported when asked for, so they make no circle)."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "cs3_tasks"
TASK_CONFIGS = PACKAGE.parent / "task_configs"  # shipped as cs3_tasks.task_configs
MODULE_NAME = re.compile(r"cs3_tasks(\.[A-Za-z_]\w*)+")
# The one place allowed to name a higher layer's modules, by string only: the start-up hook is lm-eval's
# plugin registry (our models and task folder), imported only when lm-eval asks for them, never at start-up.
STRING_ONLY = {"cs3_tasks.harness.lm_eval_hook": ("cs3_tasks.models", "cs3_tasks.task_configs")}
# a package may import its own layer's packages and those below it, never one above
LAYER = {
    "prompts": 0,
    "core": 0,
    "asr": 1,
    "judge": 1,
    "harness": 1,
    "build": 2,
    "scoring": 2,
    "report": 3,
    "models": 3,
    "recipe": 3,
    "demo": 4,
    "task_configs": 4,
    "cli": 5,
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if "workers" in path.relative_to(PACKAGE).parts[:2] and path.parent.name == "workers":
            continue  # the worker scripts run inside the models' own environments
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    for path in TASK_CONFIGS.rglob("*.py"):
        parts = ("cs3_tasks", "task_configs", *path.relative_to(TASK_CONFIGS).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _string_imports(path: Path) -> list[tuple[str, int]]:
    """(module, line) of every string in the file that names one of our modules (imported by name)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and MODULE_NAME.fullmatch(node.value)
        ):
            found.append((node.value, node.lineno))
    return found


def _imports(path: Path) -> list[tuple[str, list[str], int]]:
    """(imported module, imported names, line) for every import of cs3_tasks in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("cs3_tasks"):
            found.append((node.module, [a.name for a in node.names], node.lineno))
        elif isinstance(node, ast.Import):
            found += [(a.name, [], node.lineno) for a in node.names if a.name.startswith("cs3_tasks")]
    return found


def _package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_modules_named_by_string_exist_and_only_the_hook_names_a_higher_layer():
    modules, named, upward = _modules(), [], []
    for name, path in modules.items():
        for module, line in _string_imports(path):
            named.append(module)
            if module not in modules and importlib.util.find_spec(module.rsplit(".", 1)[0]) is None:
                upward.append(
                    f"{path.relative_to(PACKAGE.parent)}:{line} names {module}, which does not exist"
                )
            source, target = _package(name), _package(module)
            if source in LAYER and target in LAYER and LAYER[target] > LAYER[source]:
                if not module.startswith(STRING_ONLY.get(name, ())):
                    upward.append(f"{path.relative_to(PACKAGE.parent)}:{line} names {module} ({target})")
    assert not upward, "\n".join(upward)
    assert "cs3_tasks.models.precomputed" in named and "cs3_tasks.task_configs.run" in named


def test_no_import_points_up_a_layer():
    upward = []
    for name, path in _modules().items():
        source = _package(name)
        for module, names, line in _imports(path):
            targets = [_package(module)] if _package(module) else names  # `from cs3_tasks import x`
            for target in targets:
                if source in LAYER and target in LAYER and LAYER[target] > LAYER[source]:
                    upward.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {module} ({target})")
    assert not upward, "\n".join(upward)


def test_no_import_circle():
    modules = _modules()
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for module, names, _ in _imports(path):
            for target in [module, *(f"{module}.{n}" for n in names)]:
                if target in modules and target != name:
                    edges[name].add(target)
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                return [*path, node, nxt]
            if nxt not in state and (cycle := visit(nxt, [*path, node])):
                return cycle
        state[node] = 2
        return None

    for start in sorted(modules):
        if start not in state:
            cycle = visit(start, [])
            assert cycle is None, " -> ".join(cycle)


def test_no_module_uses_another_modules_private_names():
    used = []
    for _, path in _modules().items():
        for module, names, line in _imports(path):
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private:
                used.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {private} from {module}")
    assert not used, "\n".join(used)
