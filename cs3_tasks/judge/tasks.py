"""The cs3 protocol's judge tasks: our prompts, strict parsing, one ask (`engine.strict_policy`)."""

from __future__ import annotations

from collections.abc import Sequence

from cs3_tasks.judge.config import JudgeConfig
from cs3_tasks.judge.engine import Verdict, ask_batch, strict_policy
from cs3_tasks.judge.parsing import parse_knowledge_verdict, parse_score
from cs3_tasks.judge.prompts import (
    ConversationItem,
    KnowledgeItem,
    OpenEndedItem,
    conversation_prompt,
    knowledge_prompt,
    open_ended_prompt,
)


def judge_knowledge(
    items: Sequence[KnowledgeItem], config: JudgeConfig, *, language: str = "zh", progress: bool = False
) -> list[Verdict]:
    """Is each response consistent with the reference answer? value True/False (None on judge_error)."""
    prompts = [knowledge_prompt(item, language) for item in items]
    return ask_batch(
        prompts,
        strict_policy(lambda raw: parse_knowledge_verdict(raw, language)),
        config,
        progress=progress,
        desc=f"judge knowledge ({language})",
    )


def judge_open_ended(
    items: Sequence[OpenEndedItem],
    config: JudgeConfig,
    *,
    aspect: str,
    language: str = "zh",
    progress: bool = False,
) -> list[Verdict]:
    """1-5 score of each response: aspect "relevance" (understood the question) or "semantic"; the median
    of ``config.samples`` fresh asks when it is above 1."""
    prompts = [open_ended_prompt(item, aspect, language) for item in items]
    return ask_batch(
        prompts,
        strict_policy(parse_score),
        config,
        progress=progress,
        desc=f"judge {aspect}",
        samples=config.samples,
    )


def judge_conversation(
    items: Sequence[ConversationItem],
    config: JudgeConfig,
    *,
    language: str = "en",
    target_language: str = "English",
    progress: bool = False,
    template: str | None = None,
) -> list[Verdict]:
    """1-5 helpfulness/correctness score of each response (the "GPT score" of spoken conversation); the
    median of ``config.samples`` fresh asks when it is above 1.

    ``template`` overrides the package prompt (a language pair's ``prompts.conversation``)."""
    prompts = [conversation_prompt(item, language, target_language, template) for item in items]
    return ask_batch(
        prompts,
        strict_policy(parse_score),
        config,
        progress=progress,
        desc="judge conversation",
        samples=config.samples,
    )
