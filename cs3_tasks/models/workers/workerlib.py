"""The worker side of the cs3 model-worker protocol (standard library only).

A worker runs in the model's own Python environment, started by ``cs3_tasks.models.worker`` as
``<python> -u <this directory>/<model>.py``. It talks JSON lines: one object per line on stdin (requests)
and on its original stdout (responses); everything the model code prints is sent to stderr, so a stray
``print`` can never corrupt the protocol.

    worker  -> {"event": "hello", "protocol": 1, "worker": "<name>", "python": "3.10.14"}
    client  -> {"id": 1, "op": "init", "options": {...}}
    worker  -> {"id": 1, "ok": true, "result": {"sample_rate": 22050, "max_batch": 1, ...}}
    client  -> {"id": 2, "op": "generate",
                "items": [{"key": "...", "audio": "/in/q.wav", "out": "/out/q.npy"}]}
    worker  -> {"id": 2, "ok": true, "results": [{"key": "...", "ok": true, "text": "...",
                                               "audio": "/out/q.npy", "sample_rate": 22050}]}
    client  -> {"id": 3, "op": "shutdown"}

A failed request is
``{"id": n, "ok": false, "kind": "missing" | "error", "error": "...", "traceback": "..."}``;
``kind == "missing"`` means the model's code could not be imported (the message says what to install).
A failed item inside a generate request is ``{"key": ..., "ok": false, "error": "..."}``:
its neighbours go on.
The spoken answer is saved as a float32 ``.npy`` at the path the client chose (lossless, any rate).

``run_definitions`` executes selected top-level definitions of an official script whose module level cannot
be imported (a demo that loads the model and starts a UI on import, a script that runs its examples): the
authors' functions run as they are, without copying them.
"""

from __future__ import annotations

import ast
import json
import os
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

PROTOCOL_VERSION = 1


class ModelCodeMissing(ImportError):
    """The model's official code (or a dependency of it) cannot be imported in this environment."""


def add_paths(paths: Iterable[str | os.PathLike]) -> None:
    """Put ``paths`` first on sys.path (in the given order), once each."""
    for path in reversed([str(p) for p in paths if p]):
        if path in sys.path:
            sys.path.remove(path)
        sys.path.insert(0, path)


def import_official(what: str, install_help: str, importer: Callable[[], Any]) -> Any:
    """Run ``importer``; an ImportError becomes ModelCodeMissing naming ``what`` and how to install it."""
    try:
        return importer()
    except ImportError as error:
        raise ModelCodeMissing(
            f"{what} is not importable here ({type(error).__name__}: {error}).\n{install_help}"
        ) from error


def require_file(path: str | os.PathLike, what: str, install_help: str) -> Path:
    path = Path(path)
    if not path.is_file():
        raise ModelCodeMissing(f"{what}: {path} does not exist.\n{install_help}")
    return path


# -- reading official scripts -----------------------------------------------------------------------------


def _assigned_names(node: ast.AST) -> set[str]:
    names: set[str] = set()
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    for target in targets:
        for sub in ast.walk(target):
            if isinstance(sub, ast.Name):
                names.add(sub.id)
    return names


def run_definitions(
    path: str | os.PathLike,
    names: Iterable[str],
    namespace: dict,
    overrides: Mapping[str, Any] | None = None,
    skip_modules: Iterable[str] = (),
) -> dict:
    """Execute the top-level imports of the script at ``path``, then ``overrides``, then (in source order)
    only its top-level functions, classes and assignments named in ``names``; returns ``namespace``.

    Imports of ``skip_modules`` (e.g. a UI toolkit the selected code never uses) are left out.
    """
    path = Path(path)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    wanted, skip = set(names), set(skip_modules)
    imports, definitions, found = [], [], set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = (
                [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            )
            if not any(module.split(".")[0] in skip for module in modules):
                imports.append(node)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in wanted:
            definitions.append(node)
            found.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and _assigned_names(node) & wanted:
            definitions.append(node)
            found |= _assigned_names(node) & wanted
    missing = wanted - found
    if missing:
        raise ModelCodeMissing(
            f"{path} does not define {sorted(missing)} at its top level: "
            "a different version of the official code?"
        )
    namespace.setdefault("__name__", f"cs3_official_{path.stem}")
    namespace.setdefault("__file__", str(path))
    exec(compile(ast.Module(body=imports, type_ignores=[]), str(path), "exec"), namespace)  # noqa: S102
    namespace.update(overrides or {})
    exec(compile(ast.Module(body=definitions, type_ignores=[]), str(path), "exec"), namespace)  # noqa: S102
    return namespace


def string_assigned(path: str | os.PathLike, name: str, containing: str = "") -> str:
    """The first string literal (in source order, at any depth) assigned to ``name`` in the script at
    ``path`` that contains ``containing``: how a prompt is read from the authors' script at run time."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"), filename=str(path))
    hits = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and name in _assigned_names(node)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        and containing in node.value.value
    ]
    if not hits:
        raise ModelCodeMissing(
            f"{path} assigns no string containing {containing!r} to {name}: "
            "a different version of the official code? Pass system_prompt=..."
        )
    return min(hits, key=lambda node: (node.lineno, node.col_offset)).value.value


def keyword_string(path: str | os.PathLike, keyword: str, where: Mapping[str, str]) -> str:
    """The string given as ``keyword=`` to the first call in ``path`` whose other keywords match ``where``
    (e.g. a UI text box's default value, by its label)."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"), filename=str(path))
    for node in sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call)), key=lambda n: n.lineno):
        values = {
            k.arg: k.value.value
            for k in node.keywords
            if k.arg and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)
        }
        if keyword in values and all(values.get(k) == v for k, v in where.items()):
            return values[keyword]
    raise ModelCodeMissing(
        f"{path} has no call with {dict(where)} and a string {keyword}=: "
        "a different version of the official code? Pass system_prompt=..."
    )


# -- results ----------------------------------------------------------------------------------------------


def save_samples(path: str, samples: Any) -> str:
    """Save a waveform (torch tensor, numpy array or list) as float32 ``.npy`` at ``path``."""
    import numpy as np

    if hasattr(samples, "detach"):
        samples = samples.detach().float().cpu().numpy()
    array = np.asarray(samples, dtype=np.float32).reshape(-1)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        np.save(f, array)
    return path


def safe_key(key: str) -> str:
    """A file-system-safe form of an item key."""
    import re

    return re.sub(r"[^\w.\-]+", "_", key).strip("._") or "item"


def seed_everything(seed: int) -> None:
    """Seed the RNGs the model code may sample from, before each item: a sampled answer depends on the
    item and the settings only, never on the items run before it."""
    import random

    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:
        pass
    try:
        import torch

        torch.manual_seed(seed)
    except ImportError:
        pass


def item_seed(base: int, key: str) -> int:
    """A per-item seed from the run's seed and the item key (stable across processes, unlike hash())."""
    import zlib

    return (int(base) * 1_000_003 + zlib.crc32(key.encode("utf-8"))) % 2**31


# -- the serving loop -------------------------------------------------------------------------------------


def _error_reply(request_id: Any, error: BaseException) -> dict:
    return {
        "id": request_id,
        "ok": False,
        "kind": "missing" if isinstance(error, ModelCodeMissing) else "error",
        "error": f"{type(error).__name__}: {error}",
        "traceback": "".join(traceback.format_exception(type(error), error, error.__traceback__))[-6000:],
    }


def generate_items(backend: Any, items: list[dict]) -> list[dict]:
    """``backend.generate_one(item) -> {"text", "audio", "sample_rate"}`` for each item; a failing item
    becomes ``{"key", "ok": False, "error"}`` and the others go on."""
    results = []
    for item in items:
        try:
            result = dict(backend.generate_one(item))
            result.update(key=item["key"], ok=True)
        except Exception as error:  # noqa: BLE001 - reported for this item only
            result = {
                "key": item["key"],
                "ok": False,
                "error": f"{type(error).__name__}: {error}",
                "traceback": "".join(traceback.format_exception(type(error), error, error.__traceback__))[
                    -4000:
                ],
            }
        results.append(result)
    return results


def serve(worker_name: str, backend_factory: Callable[[dict], Any]) -> None:
    """Answer requests on stdin until ``shutdown`` or end of input."""
    protocol_out = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # the model code's prints (and C-level) go to stderr
    sys.stdout = sys.stderr

    def send(message: dict) -> None:
        protocol_out.write(json.dumps(message, ensure_ascii=False) + "\n")
        protocol_out.flush()

    send(
        {
            "event": "hello",
            "protocol": PROTOCOL_VERSION,
            "worker": worker_name,
            "python": sys.version.split()[0],
            "pid": os.getpid(),
        }
    )
    backend = None
    for line in sys.stdin:
        if not line.strip():
            continue
        request_id = None
        try:
            request = json.loads(line)
            request_id, op = request.get("id"), request.get("op")
            if op == "shutdown":
                send({"id": request_id, "ok": True, "result": {}})
                break
            if op == "init":
                backend = backend_factory(dict(request.get("options") or {}))
                send({"id": request_id, "ok": True, "result": dict(backend.info)})
            elif op == "generate":
                if backend is None:
                    raise RuntimeError("generate before init")
                send(
                    {"id": request_id, "ok": True, "results": generate_items(backend, list(request["items"]))}
                )
            else:
                raise ValueError(f"unknown op {op!r}")
        except Exception as error:  # noqa: BLE001 - reported to the client, the worker stays up
            send(_error_reply(request_id, error))
    protocol_out.close()
