"""The cs3 and BELLE tasks are zero-shot: ``--num_fewshot N`` (N > 0) is refused before any generation.

lm-eval draws few-shot examples from a task's test docs when it has no training split (ours have none): the
prompt of an item would hold other items' questions and answers, even its own (issue 22.6: item 000's prompt
held "坦桑尼亚 / Tanzania"). Every cs3 task (``_default_template_yaml``) and every conversation task names
this sampler in ``fewshot_config``; lm-eval asks it for examples only when num_fewshot > 0, while it builds
the requests, so the run stops before the model is asked anything. A YAML outside this folder refers to it
as ``!function cs3_tasks.task_configs.zero_shot.ZeroShotOnly``.
"""

from __future__ import annotations

from typing import Any

from lm_eval.api.samplers import ContextSampler

from cs3_tasks.core.refusal import Refusal


class FewShotRefused(Refusal):
    """--num_fewshot > 0 on a zero-shot benchmark task."""


class ZeroShotOnly(ContextSampler):
    """A few-shot sampler that refuses to give examples."""

    def sample(self, n: int, eval_doc: Any = None, df: Any = None, **kwargs: Any) -> list:
        if n <= 0:
            return []
        raise FewShotRefused(
            f"--num_fewshot {n}: the CS3-Bench and BELLE tasks are zero-shot. lm-eval would take the "
            "examples from the test questions themselves (their answers would be in the prompt). Run "
            "without --num_fewshot (or with --num_fewshot 0)."
        )
