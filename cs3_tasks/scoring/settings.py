"""What a scoring run depends on: protocol, ASR, judge, the authors' prompts; resolved once per run."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from cs3_tasks.asr import AsrConfig
    from cs3_tasks.judge import JudgeConfig


class ScoringError(Exception):
    """A scoring run that cannot start or cannot go on (bad input, busy or foreign result dir, judge
    credentials refused): the message names the cause; ``exit_code`` is the CLI's (2). What was scored
    before it is kept."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


def run_settings(
    asr: AsrConfig,
    asr_language: str | None,
    judge_config: JudgeConfig | None,
    protocol: str = "cs3",
    reference_scripts: Any = None,
    given_transcripts: bool = False,
) -> dict:
    """What the records of a run depend on (protocol, ASR, its language hint and decoding, the judge); a
    reference run adds `reference.protocol_settings` (scripts, comparability with the paper)."""
    from dataclasses import asdict

    from cs3_tasks import asr as asr_module

    resolved = asr.resolved()
    settings: dict[str, Any] = {"protocol": protocol}
    settings.update(
        {
            "asr_model": "given transcripts (json_asr Response_hyp)" if given_transcripts else resolved.model,
            "asr_backend": None if given_transcripts else resolved.backend,
            "asr_language": asr_language,
            "asr_decoding": None
            if given_transcripts
            else asdict(asr_module.decoding_options(resolved.short_clips)),
            "judge": None
            if judge_config is None
            else {
                "base_url": judge_config.public_base_url,
                "model": judge_config.model,
                "temperature": judge_config.temperature,
            },
        }
    )
    if protocol == "reference":
        from cs3_tasks.scoring import reference

        settings.update(
            reference.protocol_settings(
                reference_scripts, judge_config, settings["asr_backend"], resolved.model
            )
        )
    return settings


def protocol_asr(asr: AsrConfig, protocol: str, chosen: bool = False) -> AsrConfig:
    """The reference protocol's default ASR (transformers + openai/whisper-large-v3) where that model can be
    loaded and no ASR was chosen (options or environment); otherwise ``asr`` (the summary then says the speech
    channel is not comparable to the paper)."""
    import os
    from dataclasses import replace

    from cs3_tasks import asr as asr_module
    from cs3_tasks.scoring import reference

    chosen = (
        chosen
        or bool(asr.model)
        or bool(os.environ.get(asr_module.MODEL_ENV) or os.environ.get(asr_module.BACKEND_ENV))
        or (asr.backend is not None and asr.backend != asr_module.default_backend())
    )
    if protocol != "reference" or chosen:
        return asr
    if not reference.reference_asr_available():
        return asr
    return replace(asr, backend=reference.REFERENCE_ASR_BACKEND, model=reference.REFERENCE_ASR_MODEL)


def system_identity(args: argparse.Namespace) -> dict:
    """The scored system as <set>.settings.json records it (`IDENTITY_KEYS`)."""
    return {
        "model": args.model_name or Path(args.outputs).resolve().name,
        "outputs": str(Path(args.outputs).resolve()),
    }


@dataclass(frozen=True)
class ScoringSetup:
    """What every scored item of a run depends on besides its output: resolved once per run, so that
    every set (and every model of ``--outputs-root``) is scored with the same settings."""

    protocol: str
    asr: AsrConfig
    judge: JudgeConfig | None
    templates: Any  # reference.ReferenceTemplates when the reference protocol has a judge, else None


def scoring_setup(args: argparse.Namespace) -> ScoringSetup:
    """The run's protocol, ASR, judge and (reference protocol with a judge) the authors' prompts, checked
    before any work starts: ScoringError when they cannot be used."""
    from cs3_tasks import asr, judge
    from cs3_tasks.scoring import reference

    protocol = getattr(args, "protocol", "cs3")
    try:
        judge_config = judge.judge_config_from_args(args)  # fails before any work starts
        chosen = bool(getattr(args, "asr_backend", None) or getattr(args, "asr_model", None))
        asr_config = protocol_asr(asr.asr_config_from_args(args), protocol, chosen)
    except (judge.JudgeConfigError, ValueError) as exc:
        raise ScoringError(str(exc)) from exc
    templates = None
    if protocol == "reference" and judge_config is not None:
        try:  # the judge prompts are read now: a missing copy fails before any ASR or judge work
            templates = reference.load_templates(getattr(args, "reference_scripts", None))
        except reference.ReferenceScriptsError as exc:
            raise ScoringError(str(exc)) from exc
    return ScoringSetup(protocol, asr_config, judge_config, templates)
