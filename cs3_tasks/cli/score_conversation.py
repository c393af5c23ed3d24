"""``cs3-bench score-conversation``: score pre-generated outputs of a spoken-conversation set (BELLE zh->en)
with the conversation scorer (`cs3_tasks.scoring.conversation`), resumable like ``cs3-bench score``."""

from __future__ import annotations

import json
from pathlib import Path

from cs3_tasks import judge
from cs3_tasks.build.conversation_data import load_conversation_set
from cs3_tasks.cli import refusals_said, refusing
from cs3_tasks.core.cache import atomic_write
from cs3_tasks.core.languages import load_pair
from cs3_tasks.scoring.conversation import (
    BELLE_PAIR,
    BELLE_SET,
    RETRYABLE_ERRORS,
    doc_id,
    score_conversation,
    summarize_conversation,
    summary_markdown,
)
from cs3_tasks.scoring.options import CONVERSATION, add_run_options
from cs3_tasks.scoring.outputs import read_outputs
from cs3_tasks.scoring.protocols import protocol_for
from cs3_tasks.scoring.settings import asr_config_from_options, run_settings
from cs3_tasks.scoring.store import RecordsFile, SettingsMismatchError


def add_arguments(parser) -> None:

    parser.add_argument(
        "--outputs",
        required=True,
        type=Path,
        help="outputs dir: <set>.jsonl ({Qid, text, audio}) or json/<set>.json + wav/<Qid>.wav",
    )
    parser.add_argument(
        "--set", default=BELLE_SET, dest="set_name", help=f"conversation config (default {BELLE_SET})"
    )
    parser.add_argument(
        "--pair", default=None, help=f"language pair name or YAML (default {BELLE_PAIR} for {BELLE_SET})"
    )
    parser.add_argument(
        "--out", required=True, type=Path, help="result dir: <set>.records.jsonl, .summary.json/.md"
    )
    parser.add_argument("--model-name", default=None)
    parser.add_argument(
        "--restart", action="store_true", help="discard existing records (caches still make the re-run cheap)"
    )
    parser.add_argument("--no-progress", action="store_true")
    add_run_options(parser, CONVERSATION)  # dataset, ASR, judge: declared once (scoring/options.py)


@refusals_said
def run(args) -> int:
    """``cs3-bench score-conversation``: resumable like ``cs3-bench score`` (records appended as they are
    final, re-runs score only what is missing, failed or changed; other settings need ``--restart``)."""

    with refusing(judge.JudgeConfigError, ValueError, OSError):  # fails before any work starts
        judge_config = judge.judge_config_from_options(vars(args))
        asr_config = asr_config_from_options(vars(args))
        pair = load_pair(args.pair or (BELLE_PAIR if args.set_name == BELLE_SET else None))
    with refusing(OSError, ValueError, RuntimeError):  # no dataset / no outputs: nothing to score
        docs = [
            {k: v for k, v in row.items() if k != "audio"}
            for row in load_conversation_set(args.set_name, args.dataset)
        ]
        outputs = read_outputs(args.outputs, args.set_name, known_sets=(args.set_name,))
    # the conversation scorer has its own judge prompt: recorded as our audit protocol, as before
    settings = run_settings(
        asr_config, pair.asr_language_of(args.set_name), judge_config, protocol_for("cs3")
    )
    settings["pair"] = pair.name
    store = RecordsFile(args.out, args.set_name)
    with refusing(SettingsMismatchError):
        store.open(settings, restart=args.restart)

    def score(pending_docs, pending_outputs, append) -> None:
        score_conversation(
            args.set_name,
            pending_docs,
            pending_outputs,
            pair,
            asr=asr_config,
            judge=judge_config,
            progress=not args.no_progress,
            on_record=append,
        )

    final = store.score_pending(
        docs, outputs, score, doc_id=doc_id, retryable=RETRYABLE_ERRORS, label=args.set_name
    )
    summary = summarize_conversation(final)
    summary["model"] = args.model_name or Path(args.outputs).resolve().name
    summary["settings"] = settings
    out = Path(args.out)
    atomic_write(
        out / f"{args.set_name}.summary.json", json.dumps(summary, indent=2, ensure_ascii=False) + "\n"
    )
    markdown = summary_markdown(summary, summary["model"])
    atomic_write(out / f"{args.set_name}.summary.md", markdown)
    print(markdown)
    return 0
