"""The ASR command-line options shared by every CLI that transcribes, and their AsrConfig."""

from __future__ import annotations

import argparse

from cs3_tasks.asr.config import (
    BACKEND_ENV,
    BACKENDS,
    DECODING,
    DEFAULT_BACKEND,
    MODEL_ENV,
    PAPER_MODEL,
    SHORT_CLIP_DECODINGS,
    SHORT_CLIPS_ENV,
    AsrConfig,
    check_backend,
    default_backend,
)
from cs3_tasks.asr.device import DEVICE_ENV


def add_asr_arguments(parser: argparse.ArgumentParser) -> None:
    """The ASR options shared by every CLI that transcribes (score, score-conversation, build-dataset,
    recipe build-data)."""
    group = parser.add_argument_group(
        "ASR",
        f"Default: {DEFAULT_BACKEND} with the offline Whisper-base (else {PAPER_MODEL}). "
        f"Environment: ${BACKEND_ENV}, ${MODEL_ENV}, ${SHORT_CLIPS_ENV}, ${DEVICE_ENV}.",
    )
    group.add_argument(
        "--asr-model", default=None, help="ASR model name or path (default: cs3_tasks.asr.default_model())"
    )
    group.add_argument(
        "--asr-backend",
        default=None,
        choices=BACKENDS,
        help=f"ASR backend (default: ${BACKEND_ENV}, else {DEFAULT_BACKEND})",
    )
    group.add_argument(
        "--asr-short-clips",
        default=None,
        choices=SHORT_CLIP_DECODINGS,
        help=f"how faster-whisper decodes clips of at most 30 s (default: ${SHORT_CLIPS_ENV}, "
        f"else {DECODING.short_clip_decoding})",
    )
    group.add_argument(
        "--asr-device",
        default=None,
        help=f"cpu, cuda or cuda:N (default: ${DEVICE_ENV}, else this rank's GPU when CUDA is available, "
        "else cpu)",
    )


def asr_config_from_args(args: argparse.Namespace) -> AsrConfig:
    """The AsrConfig of parsed ``add_asr_arguments`` options, backend resolved (ValueError if unknown)."""
    backend = getattr(args, "asr_backend", None) or default_backend()
    check_backend(backend)
    return AsrConfig(
        backend=backend,
        model=getattr(args, "asr_model", None),
        short_clips=getattr(args, "asr_short_clips", None),
        device=getattr(args, "asr_device", None),
    )
