"""The cs3 protocol: our stricter audit scoring (normalised keywords within punctuation-separated spans, our
prompts with strict parsing and one ask, an empty response counted wrong, judge errors excluded and
counted)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cs3_tasks import judge
from cs3_tasks.core import metrics
from cs3_tasks.scoring.protocols.base import Protocol

if TYPE_CHECKING:  # pragma: no cover
    from cs3_tasks.judge import JudgeConfig, Verdict


def judge_item(set_name: str, doc: Mapping, response: str, aspect: str | None):
    """The judge module's item for one (doc, response): KnowledgeItem or OpenEndedItem."""

    qid, question = str(doc["Qid"]), doc.get("Question") or ""
    if aspect is not None:
        return judge.OpenEndedItem(question=question, reference=doc.get("Answer"), response=response, qid=qid)
    if set_name == "knowledge":
        return judge.KnowledgeItem(
            question=question,
            reference=doc.get("Answer_zh") or "",
            response=response,
            reference_en=doc.get("Answer_en"),
            qid=qid,
        )
    return judge.KnowledgeItem(
        question=question, reference=doc.get("Answer") or "", response=response, qid=qid
    )


class Cs3Protocol(Protocol):
    name = "cs3"
    empty_response_is_wrong = True  # else silence would raise accuracy

    def keyword_hit(self, set_name: str, doc: Mapping, response: str) -> bool:

        if set_name == "knowledge":
            return bool(
                metrics.knowledge_keyword_hit(
                    response, doc.get("Answer_zh") or "", doc.get("Answer_en") or ""
                )
            )
        return bool(metrics.english_keyword_hit(response, doc.get("Answer") or ""))

    def judge(
        self,
        set_name: str,
        aspect: str | None,
        pairs: Sequence[tuple[Mapping, str]],
        config: JudgeConfig,
        context: Any,
        progress: bool = False,
    ) -> list[Verdict]:

        items = [judge_item(set_name, doc, response, aspect) for doc, response in pairs]
        if aspect is None:
            language = "en" if set_name == "knowledge_en" else "zh"
            return judge.judge_knowledge(items, config, language=language, progress=progress)
        return judge.judge_open_ended(items, config, aspect=aspect, progress=progress)

    def understood(self, relevance: int | None) -> bool | None:

        return metrics.understood(relevance)  # also checks the 1-5 range

    def add_comparability(self, summary: dict, settings: Mapping) -> dict:
        summary["comparable_to_paper"] = {"text": False, "speech": False}
        summary["notes"] = [
            "cs3 protocol (our audit scoring): not the authors' numbers; quote --protocol reference"
        ]
        return summary
