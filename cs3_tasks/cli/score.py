"""``cs3-bench score``: the command line over `cs3_tasks.scoring.run` and `cs3_tasks.cli.score_many`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cs3_tasks.cli import score_many as many
from cs3_tasks.core.data import SETS
from cs3_tasks.report import leaderboard as report
from cs3_tasks.report.html import write_report_quietly
from cs3_tasks.scoring.options import SCORE, add_run_options
from cs3_tasks.scoring.rescore import rescore_dir, scored_sets
from cs3_tasks.scoring.run import ScoreJob, file_system_error, score_outputs
from cs3_tasks.scoring.settings import ScoringError, settings_from_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    inputs = parser.add_mutually_exclusive_group(required=True)
    inputs.add_argument(
        "--outputs",
        type=Path,
        help="outputs dir: json/<set>.json + wav/<Qid>.wav (authors) or <set>.jsonl (ours)",
    )
    inputs.add_argument(
        "--outputs-root",
        type=Path,
        help="a folder of outputs dirs, one per model (named by its folder): each is scored into "
        "OUT/<model> as --outputs would be, then OUT gets the leaderboard and models.json; resumable per "
        "model. Exit code: 0 every model scored, 1 some failed or are incomplete, 3 most did, 2 bad input "
        "(no model folder, OUT busy)",
    )
    inputs.add_argument(
        "--from-results",
        type=Path,
        metavar="RESULTS",
        help="a result dir (or a folder of them with a leaderboard, as --outputs-root writes) scored again "
        "from its own records: transcripts and judge verdicts as recorded, no ASR, no judge, no key; "
        "summaries, leaderboard and report equal the originals'. Its settings are the run's own; --dataset "
        "must be the dataset it was scored against",
    )
    parser.add_argument(
        "--set",
        choices=(*SETS, "all"),
        dest="set_name",
        help="the set to score (required with --outputs); all: every set found in the outputs dir (one "
        "summary each + cs-vs-en); the default with --outputs-root",
    )
    parser.add_argument(
        "--out",
        required=True,
        type=Path,
        help="result dir (records, summary); with --outputs-root: one result dir per model + the leaderboard",
    )
    parser.add_argument(
        "--model-name",
        default=None,
        help="name of the scored model (default: outputs dir name; not with --outputs-root)",
    )
    parser.add_argument(
        "--restart", action="store_true", help="discard existing records (caches still make the re-run cheap)"
    )
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument(
        "--wait", action="store_true", help="wait for another run on the same --out (default: refuse)"
    )
    add_run_options(parser, SCORE)  # the run options, declared once (scoring/options.py)


def run(args: argparse.Namespace) -> int:
    """``cs3-bench score``: one outputs dir (holding its result dir's lock until every file of the run is
    written), or with ``--outputs-root`` every model folder under it (`cs3_tasks.cli.score_many`). The run's
    settings are built and checked first, by the same validator as lm-eval's ``--metadata``."""
    from contextlib import ExitStack

    if args.from_results is not None:
        return run_from_results(args.from_results, args.out, args.dataset)
    if args.outputs_root is not None and args.model_name:
        print(
            "error: --model-name names one model: with --outputs-root each model is named by its folder",
            file=sys.stderr,
        )
        return 2
    if args.outputs_root is None and args.set_name is None:
        print("error: --set is required with --outputs", file=sys.stderr)
        return 2
    try:
        settings = settings_from_options(vars(args))  # fails before any work starts
    except ScoringError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # e.g. $CS3_BENCH_CACHE is a file: one line naming it, no traceback
        print(f"error: {file_system_error(exc)}", file=sys.stderr)
        return 2
    common = {"restart": args.restart, "wait": args.wait, "progress": not args.no_progress}
    if args.outputs_root is not None:
        job = many.ModelsJob(args.outputs_root, args.out, set_name=args.set_name or "all", **common)
        return many.score_root(job, settings)
    with ExitStack() as held:
        try:
            outcome = score_outputs(
                ScoreJob(args.outputs, args.out, args.set_name, model_name=args.model_name, **common),
                settings,
                held,
            )
        except ScoringError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return exc.exit_code
    for line in outcome.error_lines():
        print(line, file=sys.stderr)
    return outcome.exit_code


def run_from_results(source: Path, out: Path, dataset: str | None) -> int:
    """``cs3-bench score --from-results``: every result dir in ``source`` (itself, or its model folders)
    re-scored from its records into ``out`` (one folder per model for a folder of them, then the leaderboard
    and the HTML report as ``--outputs-root`` writes them); the exit codes of the run that made them."""

    source, out = Path(source), Path(out)
    if not source.is_dir():
        print(f"error: --from-results {source} is not a folder", file=sys.stderr)
        return 2
    if scored_sets(source):
        dirs = {None: source}
    else:
        dirs = {d.name: d for d in sorted(source.iterdir()) if d.is_dir() and scored_sets(d)}
    if not dirs:
        print(f"error: {source} holds no result dir (<set>.records.jsonl files)", file=sys.stderr)
        return 2
    summaries: dict[str, dict] = {}
    statuses: dict[str, many.ModelStatus] = {}
    try:
        for name, result_dir in dirs.items():
            target = out if name is None else out / name
            found, outcome = rescore_dir(result_dir, target, dataset)
            model = next(iter(found.values())).get("model") or name or result_dir.name
            summaries[model] = found
            status = statuses[model] = many.ModelStatus(outputs=result_dir.name, result_dir=target.name)
            status.status = "scored" if outcome.exit_code == 0 else "incomplete"
            status.exit_code, status.sets, status.error = (
                outcome.exit_code,
                list(outcome.sets),
                outcome.message,
            )
            print(f"re-scored {result_dir.name}: {', '.join(found)} -> {target}", file=sys.stderr)
            for line in outcome.error_lines():
                print(line, file=sys.stderr)
    except ScoringError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        print(f"error: {file_system_error(exc)}", file=sys.stderr)
        return 2
    if None in dirs:
        return next(iter(statuses.values())).exit_code or 0
    print(report.write_leaderboard(out, summaries, many.leaderboard_notes(statuses, {})))
    write_report_quietly(out / many.REPORT_FOLDER, [out / name for name in dirs], dataset)
    return many.overall_exit_code(statuses)
