"""``cs3-bench report``: the leaderboard (``--out``: markdown, CSV, figure) and/or the HTML report
(``--html``) across scored result dirs; ``--baseline MODEL`` marks every other model's differences to it;
``--sensitivity``: two runs of one system's outputs scored with other ASR or judge settings, item by item."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from cs3_tasks.cli import refusals_said, refusing
from cs3_tasks.core.data import DATASET_ENV
from cs3_tasks.core.refusal import Refusal
from cs3_tasks.report import html
from cs3_tasks.report.compare import baseline_notes
from cs3_tasks.report.leaderboard import write_leaderboard
from cs3_tasks.report.results import load_results, result_dirs_in, summaries_of
from cs3_tasks.report.sensitivity_html import write_sensitivity_report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "result_dirs",
        nargs="+",
        type=Path,
        help="dirs written by `cs3-bench score`, or a folder of them (as `score --outputs-root` writes)",
    )
    parser.add_argument("--out", type=Path, default=None, help="where to write the leaderboard and figure")
    add_html_arguments(parser)


@refusals_said
def run(args: argparse.Namespace) -> int:
    if args.sensitivity:
        return run_sensitivity(args)
    if args.out is None and args.html is None:
        raise Refusal("say where to write: --out DIR (leaderboard) and/or --html DIR (report)")
    # RecordsError is a ValueError; --out / --html a file, read-only or full: one line naming the path
    with refusing(ValueError, OSError):
        result_dirs = result_dirs_in(args.result_dirs)
        results = load_results(result_dirs)
        notes = baseline_notes(results, args.baseline) if args.baseline else []
        if args.out is not None:
            print(write_leaderboard(Path(args.out), summaries_of(results), notes))
        if args.html is not None:
            index = html.write_html_report(args.html, result_dirs, settings_from_args(args))
            print(f"wrote the HTML report {index} (open it in a browser; no server needed)", file=sys.stderr)
    return 0


def run_sensitivity(args: argparse.Namespace) -> int:
    """The sensitivity page of two runs (a refusal, `SensitivityRefusal`, reaches the command's one line)."""
    if len(args.result_dirs) != 2 or args.html is None or args.out is not None or args.baseline:
        raise Refusal("--sensitivity takes two result dirs and --html DIR (nothing else)")
    # RecordsError and a Refusal are ValueErrors; --html a file, read-only or full: one line naming the path
    with refusing(ValueError, OSError):
        index = write_sensitivity_report(args.html, *args.result_dirs)
    print(f"wrote the sensitivity report {index} (open it in a browser; no server needed)", file=sys.stderr)
    return 0


def add_html_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--html", type=Path, default=None, help="write the HTML report folder here (open its index.html)"
    )
    parser.add_argument(
        "--dataset",
        default=None,
        help="dataset for the questions, answers and question audio in the HTML report: a build dir, "
        "'demo' or a Hub id (default $CS3_BENCH_DATASET; none: the report shows Qids only)",
    )
    parser.add_argument("--baseline", default=None, help="model to mark the others' differences against")
    parser.add_argument(
        "--sensitivity",
        action="store_true",
        help="two result dirs of the same outputs scored with other ASR or judge settings: write (--html) "
        "the items whose transcript or verdict changed, the flips, kappa and the paired difference",
    )


def settings_from_args(args: argparse.Namespace) -> html.ReportSettings:
    return html.ReportSettings(
        dataset=args.dataset or os.environ.get(DATASET_ENV) or None, baseline=args.baseline
    )
