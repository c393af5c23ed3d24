"""What a scoring run depends on: protocol, ASR, judge, the authors' prompts; resolved once per run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cs3_tasks import asr as asr_module
from cs3_tasks.asr import (
    AsrConfig,
    AsrModelError,
    asr_device,
    check_asr_device,
    default_backend,
    default_device_note,
)
from cs3_tasks.asr.fingerprint import numerics_of
from cs3_tasks.core.refusal import Refusal
from cs3_tasks.judge import JudgeConfigError, judge_config_from_options, option_value
from cs3_tasks.scoring.protocols import Protocol, protocol_for, reference
from cs3_tasks.scoring.records import ASR_LANGUAGE_HINT, DEFAULT_PROTOCOL

if TYPE_CHECKING:  # pragma: no cover
    from cs3_tasks.asr import AsrConfig
    from cs3_tasks.judge import JudgeConfig


class ScoringError(Refusal):
    """A scoring run that cannot start or cannot go on (bad input, busy or foreign result dir, judge
    credentials refused): a `Refusal`, whose message names the cause; ``exit_code`` is the CLI's (2). What
    was scored before it is kept."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


def run_settings(
    asr: AsrConfig,
    asr_language: str | None,
    judge_config: JudgeConfig | None,
    protocol: Protocol,
    reference_scripts: Any = None,
    given_transcripts: bool = False,
) -> dict:
    """What the records of a run depend on (protocol, ASR, its language hint and decoding, the judge), and
    what the protocol adds (`Protocol.protocol_settings`: the reference protocol's scripts, comparability)."""

    resolved = asr.resolved()
    settings: dict[str, Any] = {
        "protocol": protocol.name,
        # what the transcripts depend on, by identity (asr.fingerprint): engine versions, model weights' hash
        "asr": {"source": "given transcripts (json_asr Response_hyp)"}
        if given_transcripts
        else asr_module.asr_fingerprint(resolved),
        "asr_language": asr_language,
        "judge": None if judge_config is None else judge_identity(judge_config),
        # where it ran, for the record: never part of a comparison (store.INFORMATIONAL_KEYS)
        "machine": asr_module.machine(),
    }
    settings.update(
        protocol.protocol_settings(
            reference_scripts,
            judge_config,
            None if given_transcripts else resolved.backend,
            None if given_transcripts else settings["asr"]["model"]["name"],
        )
    )
    return settings


def judge_identity(config: JudgeConfig) -> dict:
    """The judge of a run as results record it: the model asked for, the endpoint (credentials redacted) and
    its host, the sampling temperature, and ``samples`` when each open-ended score is the median of k > 1
    asks. The model that answered is recorded per verdict (records)."""
    from urllib.parse import urlparse

    identity = {
        "base_url": config.public_base_url,
        "host": urlparse(config.base_url).hostname,
        "model": config.model,
        "temperature": config.temperature,
    }
    if config.samples > 1:  # open-ended scores are medians of k samples (1: absent, as before it existed)
        identity["samples"] = config.samples
    return identity


def protocol_asr(asr: AsrConfig, protocol: Protocol, chosen: bool = False) -> AsrConfig:
    """The protocol's preferred ASR (the reference protocol's: transformers + openai/whisper-large-v3) where
    that model can be loaded and no ASR was chosen (options or environment); otherwise ``asr`` (the summary
    then says the speech channel is not comparable to the paper)."""
    import os
    from dataclasses import replace

    chosen = (
        chosen
        or bool(asr.model)
        or bool(os.environ.get(asr_module.MODEL_ENV) or os.environ.get(asr_module.BACKEND_ENV))
        or (asr.backend is not None and asr.backend != asr_module.default_backend())
    )
    preferred = None if chosen else protocol.preferred_asr()
    if preferred is None:
        return asr
    backend, model = preferred
    return replace(asr, backend=backend, model=model)


@dataclass(frozen=True)
class ScoringSettings:
    """What every scored item of a run depends on besides its output, resolved and checked once per run,
    so that every set (and every model of ``--outputs-root``) is scored with the same settings. Built by
    `settings_from_options` from the command line or from lm-eval's ``--metadata``."""

    protocol: Protocol
    asr: AsrConfig
    judge: JudgeConfig | None
    templates: Any = None  # reference.ReferenceTemplates when the reference protocol has a judge, else None
    given_transcripts: bool = False
    dataset: str | None = None

    @property
    def reference_scripts(self) -> Any:
        return self.templates.scripts if self.templates is not None else None

    def record_settings(self, set_name: str) -> dict:
        """What the records of ``set_name`` depend on: ``<set>.settings.json`` (and comparability notes)."""
        return run_settings(
            self.asr,
            ASR_LANGUAGE_HINT[set_name],
            self.judge,
            self.protocol,
            self.reference_scripts,
            given_transcripts=self.given_transcripts,
        )


def asr_config_from_options(options: Mapping[str, Any]) -> AsrConfig:
    """The ASR of a run's options (``asr_backend``, ``asr_model``, ``asr_short_clips``, ``asr_device``: a
    command line's or lm-eval's ``--metadata``), resolved and checked once: an unknown backend or short-clip
    decoding, or a GPU that is not there, is a ValueError naming it before any work."""

    config = AsrConfig(
        backend=option_value(options, "asr_backend") or default_backend(),
        model=option_value(options, "asr_model") or None,
        short_clips=option_value(options, "asr_short_clips") or None,
        device=option_value(options, "asr_device") or None,
    )
    config.resolved()  # checks the backend and the short-clip decoding
    try:
        asr_device(config.device, str(config.backend))
    except AsrModelError as exc:
        raise ValueError(str(exc)) from None
    return config


def check_device(asr: AsrConfig) -> None:
    """The ASR engine tried once on a requested GPU before any work (`gpu.check_asr_device`: ScoringError
    naming the missing library and the ways out); on a GPU machine where none was requested, the note that
    ASR runs on the CPU (stderr, first process of a launch only)."""
    import os
    import sys

    try:
        check_asr_device(asr)
    except AsrModelError as exc:
        raise ScoringError(str(exc)) from None
    note = default_device_note(asr)
    if note and os.environ.get("RANK", "0") == "0" and note not in _NOTED:
        _NOTED.add(note)
        print(note, file=sys.stderr, flush=True)


_NOTED: set[str] = set()


def settings_from_options(options: Mapping[str, Any], *, reference_prompts: bool = True) -> ScoringSettings:
    """The one validator of a run's options, for ``cs3-bench score`` (its parsed options as a mapping) and
    for lm-eval's ``--metadata`` alike: the protocol, the ASR, the judge (`judge_config_from_options`, the one
    builder of a judge from options) and, for the reference protocol with a judge, the authors' prompts read
    from their scripts (not with ``reference_prompts=False``: a scorer that does not use them, e.g. BELLE's).
    ScoringError naming the cause before any work starts."""

    try:
        protocol = protocol_for(str(option_value(options, "protocol") or DEFAULT_PROTOCOL).lower())
        judge_config = judge_config_from_options(options)
        asr_config = asr_config_from_options(options)
        chosen = bool(option_value(options, "asr_backend") or option_value(options, "asr_model"))
        asr_config = protocol_asr(asr_config, protocol, chosen=chosen)
        if not options.get("use_given_transcripts"):  # the ASR's arithmetic variable, read where it applies
            backend = str(asr_config.resolved().backend)
            numerics_of(backend, asr_device(asr_config.device, backend))
    except (JudgeConfigError, ValueError) as exc:
        raise ScoringError(str(exc)) from None
    if not options.get("use_given_transcripts"):
        check_device(asr_config)
    templates = None
    if reference_prompts:
        try:  # the judge prompts are read now (reference): a missing copy fails before any ASR or judge work
            templates = protocol.judge_context(
                judge_config, option_value(options, "reference_scripts") or None
            )
        except reference.ReferenceScriptsError as exc:
            raise ScoringError(str(exc)) from None
    return ScoringSettings(
        protocol=protocol,
        asr=asr_config,
        judge=judge_config,
        templates=templates,
        given_transcripts=bool(options.get("use_given_transcripts")),
        dataset=option_value(options, "dataset") or None,
    )
