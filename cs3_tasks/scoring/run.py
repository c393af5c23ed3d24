"""Scoring one outputs dir into a result dir (``cs3-bench score --outputs``): every set, resumable."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cs3_tasks.core.data import SETS
from cs3_tasks.scoring.outputs import (
    ModelOutput,
    find_output_sets,
    join_problems,
    read_given_transcripts,
    read_outputs,
)

if TYPE_CHECKING:  # pragma: no cover
    pass
from cs3_tasks.scoring.pipeline import score_batch
from cs3_tasks.scoring.records import ASR_LANGUAGE_HINT, judge_failures
from cs3_tasks.scoring.settings import (
    ScoringError,
    ScoringSetup,
    run_settings,
    scoring_setup,
    system_identity,
)
from cs3_tasks.scoring.store import RecordsFile, ResultDirBusy, SettingsMismatchError, result_dir_lock


@dataclass(frozen=True)
class ScoreOutcome:
    """How `score_outputs` ended: exit code 0 (scored) or 3 (most judge verdicts failed, or most items of a
    set have no response on a channel: the summaries are written but incomplete, ``message`` says so), and
    the sets scored."""

    exit_code: int
    sets: tuple[str, ...]
    message: str | None = None


def score_outputs(
    args: argparse.Namespace, held, setup: ScoringSetup | None = None, *, echo: bool = True
) -> ScoreOutcome:
    """Score ``args.outputs`` into ``args.out`` (``args.set_name``: one set or "all"); ScoringError on bad
    input. ``held`` (an ExitStack) keeps the result dir's lock; ``setup`` defaults to `scoring_setup`;
    ``echo`` prints each summary (markdown) to stdout."""
    from cs3_tasks.scoring import summary

    setup = setup or scoring_setup(args)
    if args.set_name == "all":
        set_names = find_output_sets(args.outputs)
        if not set_names:
            raise ScoringError(
                f"no outputs of any set ({', '.join(SETS)}) in {args.outputs}: expected "
                "json/cs_<set>.json (authors' layout) or <set>.jsonl"
            )
    else:
        set_names = [args.set_name]
    out = Path(args.out)
    locked: list[bool] = []

    def lock() -> None:
        """One run at a time per result dir (a second waits with --wait, or is refused): taken once, when
        the first set's inputs are read, so a run that cannot start leaves no result dir behind."""
        if not locked:
            held.enter_context(result_dir_lock(out, wait=getattr(args, "wait", False)))
            locked.append(True)

    summaries: dict[str, dict] = {}
    records: list[dict] = []
    for set_name in set_names:
        summaries[set_name], final = _run_set(args, set_name, setup, lock)
        records += final
    model = system_identity(args)["model"]
    for other in summary.CS_EN_PAIR:  # the other knowledge set, when this result dir has it
        if other not in summaries and any(s in summary.CS_EN_PAIR for s in summaries):
            found = summary.read_summary(out, other)
            if found is not None and found.get("model") == model:  # never another system's (--restart)
                summaries[other] = found
    summary.attach_cs_vs_en(summaries)
    for set_name, result in summaries.items():
        markdown = summary.write_summary(out, result)
        if echo and set_name in set_names:
            print(markdown)
    failed, asked = judge_failures(records)
    if 2 * failed > asked:
        message = (
            f"{failed} of {asked} judge verdicts of this run failed (see the *_error fields of the "
            f"records in {out}); the summary is incomplete. Re-run to retry them."
        )
        return ScoreOutcome(3, tuple(set_names), message)
    for set_name in set_names:
        missing, items = summary.missing_responses(summaries[set_name])
        if 2 * missing > items:
            message = (
                f"{set_name}: {missing} of {items} items have no response on a channel (generation, TTS or "
                f"ASR failed: see the problem field of the records in {out}); the summary is incomplete."
            )
            return ScoreOutcome(3, tuple(set_names), message)
    return ScoreOutcome(0, tuple(set_names))


def _run_set(
    args: argparse.Namespace, set_name: str, setup: ScoringSetup, lock: Callable[[], None]
) -> tuple[dict, list[dict]]:
    """Score one set of ``args.outputs`` into ``args.out``: its summary and records; ScoringError on a
    setup error."""
    from cs3_tasks import judge
    from cs3_tasks.core import data
    from cs3_tasks.scoring import summary

    out = Path(args.out)
    protocol, asr_config, judge_config, templates = setup.protocol, setup.asr, setup.judge, setup.templates
    given = bool(getattr(args, "use_given_transcripts", False))
    try:
        docs = data.load_docs(set_name, args.dataset)
        outputs = read_outputs(args.outputs, set_name)
        if given:
            transcripts = read_given_transcripts(args.outputs, set_name)
            for qid, output in outputs.items():
                output.transcript = transcripts.get(qid)
                if output.transcript is None:
                    output.problem = join_problems(output.problem, "no given transcript (json_asr)")
    except (OSError, ValueError, RuntimeError) as exc:  # no dataset / no outputs: nothing to score
        raise ScoringError(str(exc)) from exc
    scripts = templates.scripts if templates is not None else None
    settings = run_settings(
        asr_config, ASR_LANGUAGE_HINT[set_name], judge_config, protocol, scripts, given_transcripts=given
    )
    settings.update(system_identity(args))
    store = RecordsFile(out, set_name)
    try:
        lock()
        store.open(settings, restart=args.restart)
    except (SettingsMismatchError, ResultDirBusy) as exc:
        raise ScoringError(str(exc)) from exc

    def score(pending_docs: list[Mapping], pending_outputs: list[ModelOutput], append) -> None:
        score_batch(
            set_name,
            pending_docs,
            pending_outputs,
            asr=asr_config,
            judge=judge_config,
            progress=not args.no_progress,
            on_record=append,
            protocol=protocol,
            templates=templates,
        )

    try:
        final = store.score_pending(docs, outputs, score, doc_id=lambda doc: str(doc["Qid"]), label=set_name)
    except judge.JudgeAuthError as exc:  # every request would fail the same way: stop, keep what is done
        raise ScoringError(str(exc)) from exc
    result = summary.summarize(set_name, final, protocol=protocol)
    result["model"] = args.model_name or Path(args.outputs).resolve().name
    result["settings"] = settings
    summary.add_comparability(result, settings)
    return result, final
