"""``cs3-bench score``: the command line over `cs3_tasks.scoring.run` and `cs3_tasks.cli.score_many`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cs3_tasks.cli import refusals_said
from cs3_tasks.cli import score_many as many
from cs3_tasks.core.data import SETS
from cs3_tasks.scoring.options import SCORE, add_run_options, options_of
from cs3_tasks.scoring.recorded import RecordedEngines
from cs3_tasks.scoring.run import Engines, LiveEngines, ScoreJob, file_system_error, score_outputs
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
        "must be the dataset it names (dataset_sha256). Every field is checked and nothing outside RESULTS "
        "is read (a refusal: exit 2); a set whose summary the records do not reproduce is named, exit 4",
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


@refusals_said
def run(args: argparse.Namespace) -> int:
    """``cs3-bench score``: one outputs dir (holding its result dir's lock until every file of the run is
    written), or with ``--outputs-root`` every model folder under it (`cs3_tasks.cli.score_many`). The run's
    settings are built and checked first, by the same validator as lm-eval's ``--metadata``. With
    ``--from-results`` the same run scores result dirs again, with their recorded transcripts and verdicts
    (`recorded.RecordedEngines`) in place of the live ASR and judge. A refusal (`ScoringError`, a `Refusal`)
    reaches the command line's one handler (`cli.main`): one line, exit 2."""
    from contextlib import ExitStack

    if args.model_name and args.outputs is None:
        raise ScoringError(
            "--model-name names one model (of --outputs): with --outputs-root each model is named by its "
            "folder, with --from-results by its settings"
        )
    if args.outputs is not None and args.set_name is None:
        raise ScoringError("--set is required with --outputs")
    engines, folder, many_models = _engines(args)
    common = {"restart": args.restart, "wait": args.wait, "progress": not args.no_progress}
    if many_models:
        return many.score_root(
            many.ModelsJob(folder, args.out, set_name=args.set_name or "all", **common), engines
        )
    with ExitStack() as held:
        try:
            engines.check_systems([folder])
            outcome = score_outputs(
                ScoreJob(folder, args.out, args.set_name or "all", model_name=args.model_name, **common),
                engines,
                held,
            )
        except OSError as exc:  # e.g. $CS3_BENCH_CACHE is a file: one line naming it, no traceback
            raise file_system_error(exc) from None
    for line in outcome.error_lines():
        print(line, file=sys.stderr)
    return outcome.exit_code


def _engines(args: argparse.Namespace) -> tuple[Engines, Path, bool]:
    """The run's engines (live: the ASR and judge of the options, checked before any work; recorded: the
    result dirs' own), the folder they score, and whether it is a folder of one folder per model."""
    if args.from_results is not None:
        given = [
            o.flag
            for o in options_of(SCORE)
            if o.key != "dataset" and getattr(args, o.key) not in (None, False)
        ]
        if given:  # the bundle's own settings are the run's: an option that would not count is refused
            raise ScoringError(
                f"--from-results scores with the settings the results were made with: {', '.join(given)} "
                "would not be used (drop it; to score under other settings, score the outputs again)"
            )
        source = Path(args.from_results)
        if not source.is_dir():
            raise ScoringError(f"--from-results {source} is not a folder")
        engines = RecordedEngines(source, args.dataset)
        return engines, source, not engines.sets(source)
    try:
        settings = settings_from_options(vars(args))  # fails before any work starts
    except OSError as exc:  # e.g. $CS3_BENCH_CACHE is a file: one line naming it, no traceback
        raise file_system_error(exc) from None
    if args.outputs_root is not None:
        return LiveEngines(settings), Path(args.outputs_root), True
    return LiveEngines(settings), Path(args.outputs), False
