"""The LLM judge: configuration, our prompts, strict reply parsing and ONE cached, concurrent engine.

Modules: `config` (JudgeConfig, presets, environment, validation), `redaction` (credentials out of
everything written), `prompts` (our prompt templates and items), `parsing` (strict verdict and score
readers), `engine` (`ask_batch` under an `AskPolicy`: cache, concurrency, retries, bounds, per-item
judge_error), `tasks` (the cs3 protocol's knowledge / open-ended / conversation judges), `arguments` (the
``--judge-*`` options). The reference protocol's policy lives with the protocol
(``cs3_tasks.scoring.protocols.reference``) and asks through the same engine.
"""

from __future__ import annotations

from cs3_tasks.judge.arguments import (
    judge_config_from_options,
    option_value,
)
from cs3_tasks.judge.config import (
    CACHE_FILE,
    DEFAULT_API_KEY_ENV,
    DEFAULT_BASE_URL,
    DEFAULT_MODEL,
    ENV_API_KEY_ENV,
    ENV_BASE_URL,
    ENV_MODEL,
    PRESETS,
    JudgeAuthError,
    JudgeConfig,
    JudgeConfigError,
    default_api_key_env,
    is_local_url,
)
from cs3_tasks.judge.engine import (
    JUDGE_ERROR,
    MAX_MESSAGE_CHARS,
    MAX_REPLY_BYTES,
    MAX_REPLY_CHARS,
    AskPolicy,
    Verdict,
    ask_batch,
    bounded_messages,
    bounded_reply,
    chat_completion,
    strict_policy,
)
from cs3_tasks.judge.parsing import UnparseableReply, parse_knowledge_verdict, parse_score
from cs3_tasks.judge.prompts import (
    ConversationItem,
    KnowledgeItem,
    OpenEndedItem,
    conversation_prompt,
    knowledge_prompt,
    load_prompt,
    open_ended_prompt,
    render_prompt,
)
from cs3_tasks.judge.redaction import REDACTED, redact, url_secrets
from cs3_tasks.judge.tasks import judge_conversation, judge_knowledge, judge_open_ended

__all__ = [
    "CACHE_FILE",
    "DEFAULT_API_KEY_ENV",
    "DEFAULT_BASE_URL",
    "DEFAULT_MODEL",
    "ENV_API_KEY_ENV",
    "ENV_BASE_URL",
    "ENV_MODEL",
    "JUDGE_ERROR",
    "MAX_MESSAGE_CHARS",
    "MAX_REPLY_BYTES",
    "MAX_REPLY_CHARS",
    "PRESETS",
    "REDACTED",
    "AskPolicy",
    "ConversationItem",
    "JudgeAuthError",
    "JudgeConfig",
    "JudgeConfigError",
    "KnowledgeItem",
    "OpenEndedItem",
    "UnparseableReply",
    "Verdict",
    "ask_batch",
    "bounded_messages",
    "bounded_reply",
    "chat_completion",
    "conversation_prompt",
    "default_api_key_env",
    "is_local_url",
    "judge_config_from_options",
    "option_value",
    "judge_conversation",
    "judge_knowledge",
    "judge_open_ended",
    "knowledge_prompt",
    "load_prompt",
    "open_ended_prompt",
    "parse_knowledge_verdict",
    "parse_score",
    "redact",
    "render_prompt",
    "strict_policy",
    "url_secrets",
]
