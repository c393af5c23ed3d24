"""One name, one number (issue 23.4): no lm-eval group row averages a code-switched metric with the English
twin's, and cs_vs_en.md says points where it means points."""

from __future__ import annotations

import pytest
from task_yaml import read_task_yaml

from cs3_tasks.cli import evaluate
from cs3_tasks.harness import lm_eval_hook

GROUPS = ("cs3.yaml", "cs3_text.yaml")


def _metrics_of(task: str) -> set[str]:
    config = read_task_yaml(lm_eval_hook.task_dir() / f"{task}.yaml")
    return {entry["metric"] for entry in config.get("metric_list") or []}


@pytest.mark.parametrize("group_file", GROUPS)
def test_no_group_row_mixes_code_switched_and_english_sets(group_file):
    group = read_task_yaml(lm_eval_hook.task_dir() / group_file)
    english = [task for task in group["task"] if "_en" in task]
    code_switched = [task for task in group["task"] if task not in english]
    assert english and code_switched
    for entry in group.get("aggregate_metric_list") or []:
        in_cs = [task for task in code_switched if entry["metric"] in _metrics_of(task)]
        in_en = [task for task in english if entry["metric"] in _metrics_of(task)]
        assert not (in_cs and in_en), f"{group_file}: {entry['metric']} averages {in_cs} with {in_en}"


def test_cs_vs_en_markdown_says_points_for_the_absolute_drop():
    comparison = {
        ch: {"acc_cs": 0.5, "acc_en": 0.75, "drop_abs": 0.25, "drop_rel": 1 / 3, "preserve": 2 / 3}
        for ch in ("text", "speech")
    }
    markdown = evaluate.cs_vs_en_markdown({"m": {"knowledge": {"cs_vs_en": comparison}}})
    header, _, row = markdown.splitlines()[:3]
    assert "drop (points)" in header and "drop (abs)" not in header
    assert row == "| m | text | 50.0% | 75.0% | 25.0 points | 33.3% | 66.7% |"
