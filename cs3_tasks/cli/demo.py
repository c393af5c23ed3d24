"""``cs3-bench demo``: the offline main job. lm-eval (`evaluate.evaluate_outputs`) on the embedded demo set
for each bundled demo system through ``cs3-precomputed``, then the code-switched vs English table, the
leaderboard and the HTML report."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from cs3_tasks.cli import refusals_said
from cs3_tasks.cli.evaluate import DEMO_RESPONSES, cs_vs_en_markdown, evaluate_outputs
from cs3_tasks.core.cache import atomic_write
from cs3_tasks.report import leaderboard as report
from cs3_tasks.report.html import write_report_quietly
from cs3_tasks.scoring.options import DEMO, add_run_options, options_of
from cs3_tasks.scoring.run import failed_parts
from cs3_tasks.scoring.settings import settings_from_options
from cs3_tasks.scoring.store import read_records


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", type=Path, default=Path("cs3_demo"), help="output folder (default ./cs3_demo)"
    )
    parser.add_argument(
        "--responses",
        type=Path,
        default=DEMO_RESPONSES,
        help="folder with one sub-folder of pre-generated outputs per system",
    )
    parser.add_argument("--systems", nargs="*", default=None, help="sub-folders to run (default: all)")
    parser.add_argument("--tasks", default="cs3", help="lm-eval tasks or groups (default: cs3)")
    # the run options of lm-eval's --metadata, declared once (scoring/options.py); the demo's own defaults
    add_run_options(parser, DEMO, dataset="demo", judge="none")
    parser.add_argument("--limit", type=int, default=None, help="items per task (lm-eval --limit)")


@refusals_said
def run(args: argparse.Namespace) -> int:
    started = time.time()
    responses = Path(args.responses)
    systems = args.systems or (
        sorted(p.name for p in responses.iterdir() if p.is_dir()) if responses.is_dir() else []
    )
    if not systems:
        print(f"error: no demo systems found in {responses}", file=sys.stderr)
        return 2
    # every run option given on the command line reaches lm-eval's --metadata under its own key
    metadata: dict[str, Any] = {
        o.key: getattr(args, o.key) for o in options_of(DEMO) if getattr(args, o.key) not in (None, False)
    }
    named = {"judge_preset", "judge_model", "judge_base_url"} & set(metadata)
    if named and metadata.get("judge") == "none" and not args.no_judge:  # a judge was described: it runs
        metadata["judge"] = "env"
    # the run's settings, checked before anything is written (a GPU asked for is tried here): a refusal is
    # one line, exit 2 (cli.refusals_said)
    settings_from_options({**metadata, "dataset": args.dataset})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    per_model: dict[str, dict[str, dict]] = {}
    for system in systems:
        print(f"\n=== {system}: lm-eval, model cs3-precomputed, tasks {args.tasks} ===", flush=True)
        summaries = evaluate_outputs(
            responses / system,
            out / system,
            model=system,
            tasks=args.tasks,
            metadata=metadata,
            limit=args.limit,
        )
        per_model[system] = summaries
    print("\n=== code-switched vs English knowledge questions ===")
    comparison = cs_vs_en_markdown(per_model)
    print(comparison)
    atomic_write(out / "cs_vs_en.md", comparison)

    print("=== leaderboard ===")
    print(report.write_leaderboard(out, per_model))

    write_report_quietly(out / "report", [out / system for system in systems], args.dataset)
    print(f"demo finished in {time.time() - started:.0f} s; results in {out}")
    # a set that failed as a whole fails the run, as `cs3-bench score` says it (docs/reliability.md)
    failed = [f"{system}: {line}" for system in systems for line in failed_sets(out / system)]
    for line in failed:
        print(f"error: {line}", file=sys.stderr)
    return 3 if failed else 0


def failed_sets(result_dir: Path) -> list[str]:
    """The sets and channels of a scored result dir that failed as a whole (`run.failed_parts`)."""
    records = [
        record
        for path in sorted(result_dir.glob("*.records.jsonl"))
        for record in read_records(path).values()
    ]
    return failed_parts(records, result_dir)
