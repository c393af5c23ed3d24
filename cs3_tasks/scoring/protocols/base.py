"""The scoring protocol interface: what differs between the authors' scoring and ours, in one object.

`scoring.pipeline` (pair -> ASR -> keyword -> judge) and `scoring.summary` call a `Protocol` and never test
its name: the keyword rule, whether an empty response is a wrong answer, how the judge is asked (an
`AskPolicy` of the one judge engine) and how its verdict fills a record, what "understood" means, the
aggregation added to a summary and what the summary says about comparability with the paper.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from cs3_tasks.core import metrics
from cs3_tasks.judge.engine import JUDGE_ERROR, Verdict
from cs3_tasks.scoring.records import SCORE_RANGE, UNDERSTOOD, sample_spread, score_value

if TYPE_CHECKING:  # pragma: no cover
    from cs3_tasks.judge import JudgeConfig, Verdict


def recorded_samples(kept: Mapping | None) -> tuple[Verdict, ...] | None:
    """The samples `sample_spread` kept, as verdicts again (to replay a scored run)."""
    if not isinstance(kept, Mapping):
        return None
    models = list(kept.get("models") or [])
    values = list(kept.get("values") or [])
    models += [None] * (len(values) - len(models))
    return tuple(
        Verdict(value=value, raw=None, error=None if value is not None else JUDGE_ERROR, model=model)
        for value, model in zip(values, models)
    )


class Protocol(ABC):
    """One way of scoring CS3-Bench; `protocols.protocol_for(name)` gives the object."""

    name: ClassVar[str]
    # an empty response: True = the item's status is "empty", counted wrong without a keyword test or
    # judge; False = it goes through the keyword stage and the judge like any text (the authors' code)
    empty_response_is_wrong: ClassVar[bool]

    @property
    def score_range(self) -> tuple[int, int]:
        """(lowest, highest) judge score: the bounds of a missing score."""
        return SCORE_RANGE[self.name]

    @abstractmethod
    def keyword_hit(self, set_name: str, doc: Mapping, response: str) -> bool:
        """The keyword stage of a knowledge set: True accepts the response without the judge."""

    def preferred_asr(self) -> tuple[str, str] | None:
        """(backend, model) of the ASR this protocol scores speech with when none was chosen and it can be
        loaded here; None: the package's default ASR."""
        return None

    def protocol_settings(
        self, scripts: Any, judge: JudgeConfig | None, asr_backend: str | None, asr_model: str | None
    ) -> dict:
        """What ``<set>.settings.json`` records about this protocol beyond its name (e.g. the reference
        protocol's scripts and comparability flags)."""
        return {}

    def judge_context(self, judge: JudgeConfig | None, reference_scripts: Any = None, templates: Any = None):
        """What the judge needs beyond its config (the reference protocol: the authors' templates), loaded
        before any ASR or judge work so that a setup error comes first; None when nothing is."""
        return None

    @abstractmethod
    def judge(
        self,
        set_name: str,
        aspect: str | None,
        pairs: Sequence[tuple[Mapping, str]],
        config: JudgeConfig,
        context: Any,
        progress: bool = False,
    ) -> list[Verdict]:
        """A verdict per (doc, response): correctness (``aspect`` None) or an open-ended score."""

    def understood(self, relevance: int | None) -> bool | None:
        """An open-ended item understood: relevance > UNDERSTOOD (None stays None)."""
        return None if relevance is None else relevance > UNDERSTOOD

    def fill_verdict(self, record: dict, ch: str, aspect: str | None, verdict: Verdict) -> None:
        """Write one judge verdict into a record (knowledge correctness, or one open-ended aspect)."""
        record[f"{ch}_judge_note" if aspect is None else f"{ch}_{aspect}_note"] = verdict.note
        # the model id the API answered with: an alias or another model than asked is visible per item
        record[f"{ch}_judge_model" if aspect is None else f"{ch}_{aspect}_model"] = verdict.model
        if aspect is None:
            record[f"{ch}_judge_raw"] = verdict.raw
            self.record_asks(record, f"{ch}_judge", verdict, with_fallback=False)
            self.fill_correctness(record, ch, verdict)
            return
        record[f"{ch}_{aspect}_raw"] = verdict.raw
        self.record_asks(record, f"{ch}_{aspect}", verdict, with_fallback=True)
        if verdict.samples is not None:  # the median of k asks: each ask's score, and their spread
            record[f"{ch}_{aspect}_samples"] = sample_spread(verdict.samples)
        if verdict.error or verdict.value is None:
            record[f"{ch}_{aspect}_error"] = verdict.error or "judge_error: no score"
        else:
            record[f"{ch}_{aspect}"] = score_value(verdict.value)
        if aspect == "relevance":
            record[f"{ch}_understood"] = self.understood(record[f"{ch}_relevance"])

    def recorded_verdict(self, record: Mapping, ch: str, aspect: str | None) -> Verdict:
        """The verdict `fill_verdict` wrote into ``record`` (the inverse of it), to replay a scored run; a
        judge error when the record holds none."""

        prefix = f"{ch}_judge" if aspect is None else f"{ch}_{aspect}"
        judged = f"{prefix}_model" in record or record.get(f"{prefix}_raw") is not None
        if not judged and not record.get(f"{prefix}_error"):
            return Verdict(value=None, raw=None, error=f"{JUDGE_ERROR}: no verdict in the records")
        if aspect is None:
            value = record.get(f"{ch}_judge")
            fallback = record.get(f"{ch}_status") == "judge_unparsed"
        else:
            value = record.get(prefix)
            fallback = bool(record.get(f"{prefix}_fallback"))
        return Verdict(
            value=value,
            raw=record.get(f"{prefix}_raw"),
            error=record.get(f"{prefix}_error"),
            note=record.get(f"{prefix}_note"),
            asks=record.get(f"{prefix}_asks", 1),
            fallback=fallback,
            model=record.get(f"{prefix}_model"),
            samples=recorded_samples(record.get(f"{prefix}_samples")),
        )

    def record_asks(self, record: dict, prefix: str, verdict: Verdict, *, with_fallback: bool) -> None:
        """Record how many asks a verdict took (only protocols that re-ask do)."""
        return None

    def fill_correctness(self, record: dict, ch: str, verdict: Verdict) -> None:
        if verdict.error or verdict.value is None:
            record[f"{ch}_judge_error"] = verdict.error or "judge_error: no verdict"
            record[f"{ch}_status"], record[f"{ch}_correct"] = "judge_error", None
        else:
            record[f"{ch}_judge"] = bool(verdict.value)
            record[f"{ch}_status"] = "judge_correct" if verdict.value else "judge_wrong"
            record[f"{ch}_correct"] = bool(verdict.value)

    def understanding_rate(self, relevance: Sequence[int | None]) -> dict:
        """The understanding rate entry (`metrics.rate`) of a channel's relevance scores."""

        return metrics.rate([self.understood(v) for v in relevance])

    def finish_channel(self, set_name: str, records: Sequence[dict], ch: str, channel: dict | None) -> None:
        """Add the protocol's own aggregation to a channel summary (in place)."""
        return None

    def summary_fields(self, channels: Mapping[str, dict | None]) -> dict:
        """Keys a set summary adds after "protocol" (e.g. whether it is complete)."""
        return {}

    @abstractmethod
    def add_comparability(self, summary: dict, settings: Mapping) -> dict:
        """Say in ``summary`` whether its numbers are comparable with the paper (``comparable_to_paper``,
        ``notes``), from the run's settings."""
