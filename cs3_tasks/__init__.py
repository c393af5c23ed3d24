"""cs3-bench: CS3-Bench (Mandarin-English code-switching speech-to-speech) for lm-evaluation-harness.

The package, by pipeline stage (docs/architecture.md has the module table):

- ``cs3_tasks.core``     text, language pairs, metrics (pure), audio I/O, caches, the sets and their loading
- ``cs3_tasks.asr``      ``transcribe_batch`` over faster-whisper / openai-whisper / transformers, cached
- ``cs3_tasks.judge``    the LLM judge: config, the chat client, reply parsing, one engine
- ``cs3_tasks.scoring``  records, protocols (cs3, reference), the pipeline, the resumable store, summaries
- ``cs3_tasks.build``    the dataset build (TTS -> ASR QC -> parquet + card), offline voices and LLM
- ``cs3_tasks.report``   leaderboards and figures across scored result dirs
- ``cs3_tasks.harness``  the lm-eval glue: start-up hook, speech responses, data parallelism
- ``cs3_tasks.cli``      the ``cs3-bench`` command line (score, score --outputs-root, eval, demo, ...)
- ``cs3_tasks.models``, ``cs3_tasks.recipe``, ``cs3_tasks.demo``, ``cs3_tasks.task_configs``

What a user scripts with is re-exported here, as jiwer and whisper do; each name is imported on first use,
so ``import cs3_tasks`` (which the lm-eval start-up hook does in every Python process) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    "load_set": "cs3_tasks.core.data",
    "load_docs": "cs3_tasks.core.data",
    "SETS": "cs3_tasks.core.data",
    "transcribe_batch": "cs3_tasks.asr",
    "Transcript": "cs3_tasks.asr",
    "AsrConfig": "cs3_tasks.asr",
    "JudgeConfig": "cs3_tasks.judge",
    "read_outputs": "cs3_tasks.scoring.outputs",
    "ModelOutput": "cs3_tasks.scoring.outputs",
    "score_batch": "cs3_tasks.scoring.pipeline",
    "summarize": "cs3_tasks.scoring.summary",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'cs3_tasks' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
