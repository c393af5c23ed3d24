"""Our judge prompts (package data ``cs3_tasks/prompts/*.txt``) and the items they are filled from."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cs3_tasks.prompts import load_prompt


@dataclass(frozen=True)
class KnowledgeItem:
    question: str
    reference: str  # the answer (Answer_zh for the code-switched set, Answer for knowledge_en)
    response: str
    reference_en: str | None = None  # Answer_en: the zh prompt shows it as a second accepted answer
    qid: str | None = None  # only for error messages


@dataclass(frozen=True)
class OpenEndedItem:
    question: str
    reference: str | None  # the reference answer; its prompt line is dropped when None
    response: str
    qid: str | None = None


@dataclass(frozen=True)
class ConversationItem:
    question: str  # the user's query (text of the spoken question)
    response: str  # the response (text, or the ASR transcript of speech)
    reference: str | None = None
    qid: str | None = None


_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def render_prompt(template: str, **values: str | None) -> str:
    """Fill ``{name}`` placeholders in one pass (inserted text is never re-read as a template).

    A line whose placeholder value is None is dropped, so optional fields (a missing reference answer)
    disappear with their label. A placeholder with no value given is an error (a template typo).
    """
    out = []
    for line in template.splitlines(keepends=True):
        names = _PLACEHOLDER.findall(line)
        missing = [n for n in names if n not in values]
        if missing:
            raise KeyError(f"prompt placeholder(s) {missing} have no value")
        if any(values[n] is None for n in names):
            continue
        out.append(_PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), line))
    return "".join(out).strip() + "\n"


def _check_texts(item: Any, names: Sequence[str]) -> None:
    for name in names:
        if not isinstance(getattr(item, name), str):
            who = f"item {item.qid}" if getattr(item, "qid", None) else f"a {type(item).__name__}"
            raise TypeError(f"judge: {who} has {name}={getattr(item, name)!r}, expected a string")


def knowledge_prompt(item: KnowledgeItem, language: str = "zh") -> str:
    _check_texts(item, ("question", "reference", "response"))
    return render_prompt(
        load_prompt(f"knowledge_{language}"),
        question=item.question,
        reference=item.reference,
        reference_en=item.reference_en,
        response=item.response,
    )


def open_ended_prompt(item: OpenEndedItem, aspect: str, language: str = "zh") -> str:
    if aspect not in ("relevance", "semantic"):
        raise ValueError(f"open-ended aspect must be 'relevance' or 'semantic', got {aspect!r}")
    _check_texts(item, ("question", "response"))
    return render_prompt(
        load_prompt(f"open_{aspect}_{language}"),
        question=item.question,
        reference=item.reference,
        response=item.response,
    )


def conversation_prompt(
    item: ConversationItem,
    language: str = "en",
    target_language: str = "English",
    template: str | None = None,
) -> str:
    """``template``: the prompt text itself (e.g. a language pair's own prompt file); default: the package
    prompt ``conversation_<language>``."""
    _check_texts(item, ("question", "response"))
    return render_prompt(
        template if template is not None else load_prompt(f"conversation_{language}"),
        question=item.question,
        reference=item.reference,
        response=item.response,
        target_language=target_language,
    )
