"""``cs3-bench eval``: ``lm_eval run`` with the cs3 tasks on its include path and our model names resolvable,
whether or not the start-up hook is on."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence

from cs3_tasks.cli.evaluate import task_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "lm_eval_args",
        nargs=argparse.REMAINDER,
        help="arguments for `lm_eval run` (e.g. --model cs3-precomputed --model_args "
        'outputs=DIR --tasks cs3 --metadata \'{"dataset": "demo"}\')',
    )
    parser.epilog = "Runs `lm_eval run --include_path <cs3 tasks> ARGS` (works with the start-up hook off)."
    parse_known = parser.parse_known_args

    def pass_everything_through(args=None, namespace=None):
        # argparse would reject lm_eval's options (--model...) as unknown: hand them all to lm_eval
        args = list(args or [])
        if args[:1] in (["-h"], ["--help"]):
            return parse_known(args, namespace)
        namespace, _ = parse_known([], namespace)
        namespace.lm_eval_args = args
        return namespace, []

    parser.parse_known_args = pass_everything_through  # type: ignore[method-assign]


def eval_command(lm_eval_args: Sequence[str]) -> list[str]:
    """The lm_eval command line run by ``cs3-bench eval``."""
    args = list(lm_eval_args)
    if args and args[0] == "--":
        args = args[1:]
    if args and args[0] == "run":
        args = args[1:]
    return [sys.executable, "-c", _LM_EVAL_SHIM, "run", "--include_path", str(task_dir()), *args]


# `lm_eval` with our model names resolvable (and results that say how cs3 tasks were scored) even when
# the start-up hook is switched off
_LM_EVAL_SHIM = (
    "import sys, lm_eval.api.registry as r, lm_eval.evaluator as e, lm_eval.utils as u, "
    "lm_eval._cli.harness as c; from cs3_tasks.harness import lm_eval_hook as h; "
    "h.patch_model_registry(r); h.patch_evaluator(e); h.patch_table(u); h.patch_cli(c); "
    "from lm_eval.__main__ import cli_evaluate; sys.argv[0] = 'lm_eval'; cli_evaluate()"
)


def run(args: argparse.Namespace) -> int:
    # works with the start-up hook on or off: the include path brings the tasks (added once either way)
    # and the shim makes our model names resolve
    return subprocess.call(eval_command(args.lm_eval_args))
