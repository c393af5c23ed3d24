"""Makes a plain ``lm_eval`` see the cs3 tasks and models (lm-eval 0.4.x has no plugin mechanism).

How: ``pip install`` puts ``cs3_bench_lm_eval.pth`` into site-packages (see ``cs3_tasks/_build_hooks.py``).
Its one line calls ``install()`` at interpreter start-up, which only adds an import watcher to
``sys.meta_path``; nothing else is imported and nothing happens until ``lm_eval`` itself is imported.
Then, right after lm-eval's own modules have run:

* ``lm_eval.tasks.manager``: ``TaskManager`` gets our task folder appended to its ``include_path``, so
  ``lm_eval --tasks cs3_knowledge``, ``lm_eval ls tasks`` and ``TaskManager()`` know the cs3 tasks;
* ``lm_eval.config.evaluate_config``: a run whose ``--tasks`` are all names of our folder does not index
  lm-eval's own task files (most of its start-up time; our tasks and groups never refer to them);
* ``lm_eval.evaluator`` and ``lm_eval.utils``: the results of a run with cs3 tasks carry ``cs3`` (protocol,
  judge, comparable_to_paper, notes), in results_*.json and as a line under the printed table;
* ``lm_eval.api.registry``: a lookup of one of ``MODEL_MODULES`` (``--model cs3-precomputed``...) imports
  that wrapper module on first use; its ``@register_model`` does the registration. A wrapper whose
  module fails to import only breaks its own name, with an error saying which module and why;
* ``lm_eval.loggers.evaluation_tracker``: ``--log_samples`` writes a cs3 task's samples with every file named
  by its content (``sha256:<hex>``), never a HOME, clone or cache path (``cs3_tasks/harness/portable.py``);
* ``lm_eval.api.task``: its "Custom kwargs can be passed to --metadata" notice is dropped for our tasks,
  which read ``--metadata`` already (``cs3_tasks/harness/quiet.py``).

Switch it off with ``CS3_BENCH_NO_LM_EVAL_HOOK=1`` (then use ``--include_path`` or ``cs3-bench eval``).
Adding our folder is idempotent: a TaskManager given it explicitly (``--include_path``) gets it once.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Any

from cs3_tasks.core.refusal import Refusal

DISABLE_ENV = "CS3_BENCH_NO_LM_EVAL_HOOK"
PTH_NAME = "cs3_bench_lm_eval.pth"

# registered lm-eval model name -> the module whose import registers it
MODEL_MODULES: dict[str, str] = {
    "cs3-precomputed": "cs3_tasks.models.precomputed",
    "cs3-openai-audio": "cs3_tasks.models.openai_audio",
    "cs3-qwen2.5-omni": "cs3_tasks.models.qwen_omni",
    "cs3-vocalnet": "cs3_tasks.models.vocalnet",
    "cs3-cascade": "cs3_tasks.models.cascade",
    # the paper's other five models, each run by its official code in a worker process
    "cs3-glm-4-voice": "cs3_tasks.models.worker_models",
    "cs3-kimi-audio": "cs3_tasks.models.worker_models",
    "cs3-minicpm-o": "cs3_tasks.models.worker_models",
    "cs3-baichuan-omni": "cs3_tasks.models.worker_models",
    "cs3-vita-audio": "cs3_tasks.models.worker_models",
}


def disabled() -> bool:
    return os.environ.get(DISABLE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def task_dir() -> Path:
    """The folder of the cs3 lm-eval YAMLs (``task_configs/`` in a checkout, ``cs3_tasks/task_configs``
    in a wheel), found without importing anything heavy."""
    spec = importlib.util.find_spec("cs3_tasks.task_configs")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("cs3_tasks.task_configs is not installed: reinstall cs3-bench")
    return Path(next(iter(spec.submodule_search_locations)))


# ---------------------------------------------------------------------------------------------------------
# what happens once lm-eval's modules are loaded


def _patched(function: Any) -> bool:
    """Whether ``function`` is one of our wrappers already (each patch installs once)."""
    return getattr(function, "_cs3_patched", False)


def _install(owner: Any, name: str, wrapper: Any, original: Any) -> None:
    """``owner.<name>`` becomes ``wrapper``, marked as ours (`_patched`), with ``original`` as its
    ``__wrapped__`` and its docstring."""
    wrapper._cs3_patched = True
    wrapper.__wrapped__ = original
    wrapper.__doc__ = original.__doc__
    setattr(owner, name, wrapper)


def patch_task_manager(manager_module) -> None:
    """Append our task folder to every TaskManager's include_path (idempotent)."""
    cls = manager_module.TaskManager
    if _patched(cls.__init__):
        return
    original = cls.__init__

    def __init__(self, *args, **kwargs):
        import inspect

        bound = inspect.signature(original).bind(self, *args, **kwargs)
        if not disabled():
            bound.arguments["include_path"] = with_our_tasks(bound.arguments.get("include_path"))
            if _RUN.only_our_tasks and "include_defaults" not in bound.arguments:
                bound.arguments["include_defaults"] = False
        original(*bound.args, **bound.kwargs)

    _install(cls, "__init__", __init__, original)


def with_our_tasks(include_path):
    """``include_path`` (None, a path, or a list of them) plus our task folder, once."""
    ours = task_dir()
    if include_path is None:
        paths = []
    elif isinstance(include_path, (list, tuple)):
        paths = list(include_path)
    else:
        paths = [include_path]
    if any(_same_path(p, ours) for p in paths):
        return include_path
    return [ours, *paths]  # user paths last: lm-eval lets later paths override earlier ones


def _same_path(a, b) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, TypeError):
        return False


class _RunState:
    """What the run being set up asked for (lm-eval builds its TaskManager inside ``process_tasks``)."""

    only_our_tasks = False


_RUN = _RunState()


def our_task_names() -> set[str]:
    """Every task, group and tag name our task folder defines (lm-eval's own indexer on that folder)."""
    from lm_eval.tasks._index import TaskIndex

    return set(TaskIndex.build([task_dir()]))


def only_our_tasks(tasks) -> bool:
    """Whether ``--tasks`` (a comma-separated string or a list of them) names only tasks of our folder."""
    if isinstance(tasks, str):
        tasks = [tasks]
    if not isinstance(tasks, (list, tuple)) or not all(isinstance(task, str) for task in tasks):
        return False  # inline configs, or anything lm-eval may add
    names = [name.strip() for task in tasks for name in task.split(",")]
    return bool(names) and set(names) <= our_task_names()


def patch_evaluate_config(config_module) -> None:
    """A run of our tasks only builds its TaskManager without indexing lm-eval's own task files."""
    cls = config_module.EvaluatorConfig
    original = cls.process_tasks
    if _patched(original):
        return

    def process_tasks(self, *args, **kwargs):
        try:
            _RUN.only_our_tasks = only_our_tasks(self.tasks)
        except Exception:  # noqa: BLE001 - e.g. lm-eval moved its indexer: index everything, as lm-eval does
            _RUN.only_our_tasks = False
        try:
            return original(self, *args, **kwargs)
        finally:
            _RUN.only_our_tasks = False

    _install(cls, "process_tasks", process_tasks, original)


def patch_model_registry(registry_module) -> None:
    """Import a cs3 wrapper module the first time its name is looked up (idempotent)."""
    registry = registry_module.model_registry
    if _patched(registry.get):
        return
    original_get = registry.get

    def get(alias, *args, **kwargs):
        if alias in MODEL_MODULES and alias not in registry:
            import_model_module(alias)
        return original_get(alias, *args, **kwargs)

    _install(registry, "get", get, original_get)  # instance attribute: shadows Registry.get for this registry


def import_model_module(name: str) -> None:
    """Import the module that registers model ``name``; a failure names the module and the cause."""
    module = MODEL_MODULES[name]
    try:
        importlib.import_module(module)
    except Exception as error:
        raise ImportError(
            f"lm-eval model {name!r} is provided by {module}, which failed to import: "
            f"{type(error).__name__}: {error}"
        ) from error


def register_all_models() -> list[str]:
    """Import every cs3 wrapper module that imports cleanly; returns the registered names."""
    registered = []
    for name in MODEL_MODULES:
        try:
            import_model_module(name)
            registered.append(name)
        except ImportError as error:
            print(f"cs3-bench: {error}", file=sys.stderr)
    return registered


OUR_TASK_PREFIXES = ("cs3", "belle")  # every task (and group) name of ours starts so


def is_our_task(name: str) -> bool:
    """Whether a task (or group) name is one of ours, by its prefix."""
    return str(name).startswith(OUR_TASK_PREFIXES)


RESULTS_KEY = "cs3"  # the key of lm-eval's results (and results_*.json) that says how cs3 tasks were scored


def scoring_note() -> dict | None:
    """How this process's cs3 run was scored (protocol, judge, comparable_to_paper, notes), None if none."""
    run_module = sys.modules.get("cs3_tasks.task_configs.run")
    return getattr(getattr(run_module, "RUN", None), "note", None)


def scoring_line(note: dict) -> str:
    """The line printed under lm-eval's table: how the cs3 numbers above were scored."""
    judge = note.get("judge")
    judged = (
        f"judge {judge['model']} at {judge['base_url']}" if judge else "no judge (keyword-only lower bounds)"
    )
    comparable = note.get("comparable_to_paper") or {}
    verdict = ", ".join(f"{ch} {'yes' if ok else 'no'}" for ch, ok in comparable.items()) or "no"
    reasons = "; ".join(note.get("notes") or [])
    return f"cs3: protocol {note.get('protocol')}, {judged}; comparable to the paper: {verdict}" + (
        f" ({reasons})" if reasons else ""
    )


def refuse_a_rank_without_docs(tasks, limit) -> None:
    """Stop, with the ways out, a launch in which a rank would get no doc of a cs3 task.

    lm-eval gives doc i to rank i % world_size, and a rank that gets none stops with a traceback ("did not
    find any docs!") while its peers wait: ``--limit 1`` under two processes. A fractional limit is let by.
    """
    # deferred: this module is loaded by the .pth hook in every Python process, so it imports little at start
    from cs3_tasks.harness.distributed import launch_world_size

    ranks = launch_world_size()
    if ranks <= 1 or isinstance(limit, bool) or not isinstance(limit, (int, float)) or not 1 <= limit < ranks:
        return
    names = tasks if isinstance(tasks, (list, tuple)) else [tasks]
    if any(isinstance(name, str) and name.startswith(OUR_TASK_PREFIXES) for name in names):
        raise Refusal(
            f"--limit {limit:g} under {ranks} processes leaves a process with no item of a task "
            f"(lm-eval gives item i to process i % {ranks}). Use --limit {ranks} or more, or launch no more "
            f"processes than items."
        )


def patch_evaluator(evaluator_module) -> None:
    """``simple_evaluate``'s results (and so results_*.json) carry ``cs3``: how the cs3 tasks were scored."""
    original = evaluator_module.simple_evaluate
    if _patched(original):
        return

    def simple_evaluate(*args, **kwargs):
        import inspect

        bound = inspect.signature(original).bind_partial(*args, **kwargs).arguments
        refuse_a_rank_without_docs(bound.get("tasks"), bound.get("limit"))
        results = original(*args, **kwargs)
        note = scoring_note()
        tasks = results.get("results", {}) if isinstance(results, dict) else {}
        if note is not None and any(is_our_task(task) for task in tasks):
            results[RESULTS_KEY] = note
        return results

    _install(evaluator_module, "simple_evaluate", simple_evaluate, original)


class MarkedValue(float):
    """A metric value of a cs3 task that lacks verdicts: the number lm-eval keeps (results, JSON), with the
    ``mark`` its printed table shows beside it, as the summary shows it ("incomplete: 20.0-80.0% (12
    verdicts missing)"): a bare number would hide that the missing verdicts may all be wrong."""

    mark: str

    def __new__(cls, value: float, mark: str) -> MarkedValue:
        marked = super().__new__(cls, value)
        marked.mark = mark
        return marked

    def __reduce__(self):  # pickled (gathered across ranks) as what it is
        return (MarkedValue, (float(self), self.mark))


def marked_results(result_dict: dict, column: str) -> dict:
    """A copy of ``result_dict`` whose marked values (`MarkedValue`) of ``column`` are text: ``0.4000
    (incomplete: ...)``, which lm-eval's table prints as it is."""
    rows = result_dict.get(column)
    if not isinstance(rows, dict) or not any(
        isinstance(v, MarkedValue) for row in rows.values() if isinstance(row, dict) for v in row.values()
    ):
        return result_dict
    shown = {
        task: {k: f"{v:.4f} ({v.mark})" if isinstance(v, MarkedValue) else v for k, v in row.items()}
        if isinstance(row, dict)
        else row
        for task, row in rows.items()
    }
    return {**result_dict, column: shown}


def patch_table(utils_module) -> None:
    """lm-eval's printed results table marks an incomplete value with its bounds (`MarkedValue`) and ends
    with `scoring_line` when the results carry ``cs3``."""
    original = utils_module.make_table
    if _patched(original):
        return

    def make_table(result_dict, column: str = "results", *args, **kwargs):
        if isinstance(result_dict, dict):
            result_dict = marked_results(result_dict, column)
        table = original(result_dict, column, *args, **kwargs)
        note = result_dict.get(RESULTS_KEY) if isinstance(result_dict, dict) else None
        if column == "results" and note:
            table = f"{table}\n{scoring_line(note)}\n"
        return table

    _install(utils_module, "make_table", make_table, original)


def failed_tasks() -> list[str]:
    """The cs3 tasks of this process's lm-eval run that failed as a whole on a channel, one line each
    (``task_configs.run.LmEvalRun.failed_tasks``), none when no cs3 task ran."""
    run_module = sys.modules.get("cs3_tasks.task_configs.run")
    run = getattr(run_module, "RUN", None)
    return run.failed_tasks() if run is not None else []


def patch_cli(harness_module) -> None:
    """``lm_eval`` (the command, under any launcher): a run we refuse (`Refusal`: bad metadata, no judge key,
    few-shot, an unreachable dataset, a process left without items) ends with one line naming the fix and
    exit code 2, no traceback; a run with a cs3 task that failed as a whole (`failed_tasks`) ends, its results
    written, with one line per such task and channel and exit code 3, as ``cs3-bench score`` does (lines
    printed by the first process only, when several run). Python API callers of ``simple_evaluate`` still
    get the exception, and the results."""
    cli = harness_module.HarnessCLI
    original = cli.execute
    if _patched(original):
        return

    def execute(self, args):
        first = os.environ.get("RANK", "0") == "0"
        try:
            result = original(self, args)
        except Refusal as refusal:
            if first:
                print(f"error: {refusal}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None
        failed = failed_tasks()
        for line in failed if first else ():
            print(f"error: {line}", file=sys.stderr, flush=True)
        # under a launcher: every rank ends together, without a C++ teardown (imported here: the start-up
        # hook stays light for every Python process)
        from cs3_tasks.harness.distributed import end_of_launch

        end_of_launch(exit_code=3 if failed else 0)
        if failed:
            raise SystemExit(3)
        return result

    _install(cli, "execute", execute, original)


# an argument that names a cs3 task or model: "cs3", "cs3-precomputed", "--tasks=cs3_knowledge,mmlu"
_CS3_ARGUMENT = re.compile(r"(?:^|[=,])cs3(?:[-_][\w.\-]*)?(?:$|,)")


def is_cs3_launch(arguments: Any) -> bool:
    """Whether a launched program's arguments name a cs3 task or model (``--model cs3-...``, ``--tasks
    cs3``...): only such launches are ours to change."""
    return any(isinstance(a, str) and _CS3_ARGUMENT.search(a) for a in arguments or ())


def patch_launcher(launcher_module) -> None:
    """torchrun and ``accelerate launch`` (torch's elastic launcher), for a launch of a cs3 task or model
    only (`is_cs3_launch`; any other launch is left as torch runs it): when the first process to end refused
    the run (exit code 2, having said why) or found a set failed as a whole (exit code 3, `patch_cli`), and
    the others ended the same way or were stopped by the launcher, the launcher exits with that code too,
    without its own traceback."""
    original = launcher_module.launch_agent
    if _patched(original):
        return

    def launch_agent(*args, **kwargs):
        if not is_cs3_launch(kwargs.get("args", args[2] if len(args) > 2 else ())):
            return original(*args, **kwargs)
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

        try:
            return original(*args, **kwargs)
        except ChildFailedError as failed:
            _, first = failed.get_first_failure()
            # the others ended with it or were stopped by the launcher (a signal: a negative exit code)
            # 2: refused, 3: a set failed as a whole; the first process has said why in one line each
            said = first.exitcode if first.exitcode in (2, 3) else None
            others = {failure.exitcode for failure in failed.failures.values()} - {said}
            if said is not None and all(code < 0 for code in others):
                raise SystemExit(said) from None
            raise

    _install(launcher_module, "launch_agent", launch_agent, original)


def patch_sample_logging(tracker_module) -> None:
    """``--log_samples``: a sample of a cs3 task is written with its files named by content, not by a local
    path (``cs3_tasks/harness/portable.py``); other tasks' samples are written as lm-eval writes them."""
    tracker = tracker_module.EvaluationTracker
    original = tracker.save_results_samples
    if _patched(original):
        return

    def save_results_samples(self, task_name, samples, *args, **kwargs):
        if is_our_task(task_name):
            from cs3_tasks.harness.portable import portable

            samples = portable(samples)
        return original(self, task_name, samples, *args, **kwargs)

    _install(tracker, "save_results_samples", save_results_samples, original)


def patch_task_notice(task_module) -> None:
    """``lm_eval.api.task``: its custom-kwargs notice, about its own tasks, is dropped for ours."""
    from cs3_tasks.harness.quiet import install_log_filter

    install_log_filter(is_our_task)


_POST_IMPORT = {
    "lm_eval._cli.harness": patch_cli,
    "lm_eval.api.task": patch_task_notice,
    "lm_eval.loggers.evaluation_tracker": patch_sample_logging,
    "torch.distributed.launcher.api": patch_launcher,
    "lm_eval.tasks.manager": patch_task_manager,
    "lm_eval.config.evaluate_config": patch_evaluate_config,
    "lm_eval.api.registry": patch_model_registry,
    "lm_eval.evaluator": patch_evaluator,
    "lm_eval.utils": patch_table,
}


# ---------------------------------------------------------------------------------------------------------
# the import watcher


class _PostImportLoader(importlib.abc.Loader):
    """Runs the real loader, then our patch for that module."""

    def __init__(self, loader, patch):
        self._loader = loader
        self._patch = patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            self._patch(module)
        except Exception as error:  # noqa: BLE001  (never break lm-eval because of us)
            print(
                f"cs3-bench: lm-eval hook failed on {module.__name__}: {error} "
                f"(set {DISABLE_ENV}=1 to switch the hook off)",
                file=sys.stderr,
            )

    def __getattr__(self, name):  # get_source, get_filename... for tracebacks and inspect
        return getattr(self._loader, name)


class _LmEvalWatcher(importlib.abc.MetaPathFinder):
    """A meta-path finder that only wraps the loaders of the modules in ``_POST_IMPORT``."""

    def find_spec(self, fullname, path=None, target=None):
        patch = _POST_IMPORT.get(fullname)
        if patch is None or disabled():
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _PostImportLoader(spec.loader, patch)
        return spec


def install() -> None:
    """Called from the .pth file at start-up: watch for lm-eval's imports (cheap; idempotent)."""
    if disabled():
        return
    if not any(isinstance(finder, _LmEvalWatcher) for finder in sys.meta_path):
        sys.meta_path.insert(0, _LmEvalWatcher())
    # lm-eval imported before us (e.g. install() called by hand): patch right away
    for name, patch in _POST_IMPORT.items():
        module = sys.modules.get(name)
        if module is not None:
            patch(module)
