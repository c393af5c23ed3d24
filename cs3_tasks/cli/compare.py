"""``cs3-bench compare A B``: two result dirs. Two systems scored alike: the accuracy difference with its
paired 95% CI and the exact McNemar p per set and channel (`cs3_tasks.report.compare`). One system's outputs
scored twice with other ASR or judge settings: the sensitivity view (`cs3_tasks.report.sensitivity`).
Anything else is refused, naming what differs."""

from __future__ import annotations

import argparse
from pathlib import Path

from cs3_tasks.cli import refusals_said, refusing
from cs3_tasks.core.refusal import Refusal
from cs3_tasks.report.comparable import NotComparable, check_comparable
from cs3_tasks.report.compare import compare_systems, comparison_markdown
from cs3_tasks.report.results import load_results
from cs3_tasks.report.sensitivity import sensitivity_markdown, sensitivity_or_refusal


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("system_a", type=Path, help="result dir of system A (`cs3-bench score --out`)")
    parser.add_argument("system_b", type=Path, help="result dir of system B, scored on the same set(s)")


@refusals_said
def run(args: argparse.Namespace) -> int:
    with refusing(FileNotFoundError, ValueError):  # RecordsError is a ValueError
        a, b = (load_results([d]) for d in (args.system_a, args.system_b))
    if len(a) != 1 or len(b) != 1:
        raise Refusal("each result dir must hold one system")
    (name_a, results_a), (name_b, results_b) = next(iter(a.items())), next(iter(b.items()))
    # the same outputs under other ASR or judge settings: the sensitivity view; a refusal (Refusal: one line,
    # exit 2) for what is neither that nor two systems scored alike
    view = sensitivity_or_refusal(results_a, results_b)
    if view is not None:
        print(sensitivity_markdown(view, str(args.system_a), str(args.system_b)), end="")
        return 0
    with refusing(NotComparable):  # two systems scored otherwise (dataset, protocol, any setting): each field
        check_comparable(results_a, results_b)
    rows = compare_systems(results_a, results_b)
    if not rows:
        raise Refusal(f"{args.system_a} and {args.system_b} share no scored knowledge set")
    print(comparison_markdown(name_a, name_b, rows), end="")
    return 0
