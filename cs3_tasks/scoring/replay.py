"""A scored run's ASR and judge, answered from its records: what ``cs3-bench score --from-results`` gives the
one scoring pipeline (`pipeline.score_batch`) in place of the models, so that nothing is heard or asked."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cs3_tasks.asr import Transcript

if TYPE_CHECKING:  # pragma: no cover
    from cs3_tasks.judge import Verdict
    from cs3_tasks.scoring.protocols import Protocol


@dataclass(frozen=True)
class RecordedTranscripts:
    """The ASR of a scored run, replayed from its records (by Qid): each item's transcript, language, error
    and note as recorded. Nothing is heard."""

    records: Mapping[str, Mapping]

    def transcript(self, qid: str):

        record = self.records.get(qid) or {}
        note = record.get("asr_note")
        if record.get("asr_error"):
            return Transcript("", None, error=record["asr_error"], note=note)
        if record.get("transcript") is None:
            return Transcript("", None, error="asr_error: no transcript in the records", note=note)
        return Transcript(record["transcript"], record.get("asr_language"), note=note)


@dataclass(frozen=True)
class RecordedVerdicts:
    """The judge of a scored run, replayed from its records (by Qid, channel and aspect): each verdict as
    recorded (`Protocol.recorded_verdict`). Nothing is asked; a verdict the records lack is a judge error."""

    records: Mapping[str, Mapping]

    def verdict(self, protocol: Protocol, qid: str, channel: str, aspect: str | None) -> Verdict:
        return protocol.recorded_verdict(self.records.get(qid) or {}, channel, aspect)
