"""The LLM judge: configuration, our prompts, strict reply parsing and ONE cached, concurrent engine.

Modules: `config` (JudgeConfig, presets, environment, validation), `redaction` (credentials out of
everything written), `prompts` (our prompt templates and items), `parsing` (strict verdict and score
readers), `engine` (`ask_batch` under an `AskPolicy`: cache, concurrency, retries, bounds, per-item
judge_error), `tasks` (the cs3 protocol's knowledge / open-ended / conversation judges), `arguments` (the
``--judge-*`` options). The reference protocol's policy lives with the protocol
(``cs3_tasks.scoring.protocols.reference``) and asks through the same engine. `snapshots`: whether a judge's
name pins its weights (a dated snapshot) or is an undated alias."""

from __future__ import annotations

from cs3_tasks.judge.arguments import judge_config_from_options, option_value
from cs3_tasks.judge.config import JudgeAuthError, JudgeConfig, JudgeConfigError, JudgeUnreachableError
from cs3_tasks.judge.engine import Verdict, ask_batch
from cs3_tasks.judge.parsing import UnparseableReply
from cs3_tasks.judge.prompts import ConversationItem, KnowledgeItem, OpenEndedItem, load_prompt, render_prompt
from cs3_tasks.judge.redaction import redact
from cs3_tasks.judge.snapshots import is_dated_snapshot, undated_judge_note
from cs3_tasks.judge.tasks import judge_conversation, judge_knowledge, judge_open_ended

# what the other packages use (each module's own names are imported from the module)
__all__ = [
    "ConversationItem",
    "JudgeAuthError",
    "JudgeUnreachableError",
    "JudgeConfig",
    "JudgeConfigError",
    "KnowledgeItem",
    "OpenEndedItem",
    "UnparseableReply",
    "Verdict",
    "ask_batch",
    "judge_config_from_options",
    "judge_conversation",
    "judge_knowledge",
    "judge_open_ended",
    "is_dated_snapshot",
    "load_prompt",
    "option_value",
    "redact",
    "render_prompt",
    "undated_judge_note",
]
