"""Judge drift guards (issue 32 item 3): a judge named by an undated alias says so in its summary, its
leaderboard row and lm-eval's ``cs3`` block (the rule: cs3_tasks/judge/snapshots.py)."""

from __future__ import annotations

import csv

import pytest

from cs3_tasks.judge import is_dated_snapshot
from cs3_tasks.report.leaderboard import leaderboard_markdown, leaderboard_rows, write_csv
from cs3_tasks.scoring.summary import add_comparability

DATED = [
    "qwen-max-2025-01-25",
    "gpt-4o-2024-08-06",
    "gpt-4o-mini-2024-07-18",
    "o1-2024-12-17",
    "claude-3-5-sonnet-20241022",
    "gpt-4-0613",
    "gpt-4-1106-preview",
    "gpt-3.5-turbo-0125",
    "glm-4-0520",
    "qwen-max-0919",
    "doubao-1-5-pro-32k-250115",
    "mistral-large-2407",
    "judges/qwen_max_2025_01_25",
]
UNDATED = [
    "qwen-max",
    "qwen-max-latest",
    "gpt-4o-mini",
    "chatgpt-4o-latest",
    "qwen-max-2025-01-25-latest",  # asks for whatever is newest, whatever else it says
    "deepseek-chat",
    "Qwen/Qwen2.5-7B-Instruct",
    "Qwen2.5-7B-Instruct-1M",
    "qwen2.5:7b",
    "gpt-4-32k",
    "yi-34b-200k",
    "gemini-1.5-pro-002",  # a version number, not a date
    "model-2048",  # no month 48
    "x-20251325",  # no month 13
    "qwen3-235b-a22b",
    "",
]


@pytest.mark.parametrize("name", DATED)
def test_a_dated_snapshot_pins_the_judge(name):
    assert is_dated_snapshot(name)


@pytest.mark.parametrize("name", UNDATED)
def test_an_undated_alias_does_not(name):
    assert not is_dated_snapshot(name)
    assert not is_dated_snapshot(None)


def _summary(judge_model: str | None, answered: dict | None = None) -> dict:
    settings = {
        "protocol": "cs3",
        "judge": None if judge_model is None else {"model": judge_model, "base_url": "http://127.0.0.1:9/v1"},
    }
    summary = {"set": "knowledge", "judge_answered_models": answered or {}, "settings": settings}
    return add_comparability(summary, settings)


def test_summary_notes_say_an_undated_judge():
    undated = _summary("qwen-max")
    assert any("qwen-max is an undated alias" in note for note in undated["notes"])
    assert undated["comparable_to_paper"] == {"text": False, "speech": False}
    for pinned in (_summary("qwen-max-2025-01-25"), _summary(None)):
        assert not any("undated alias" in note for note in pinned["notes"])
    drifted = _summary("qwen-max-2025-01-25", {"qwen-max-2025-04-28": 3})
    assert any("answered as qwen-max-2025-04-28" in note for note in drifted["notes"])


def test_leaderboard_rows_name_the_judge_and_its_drift(tmp_path):
    models = {
        "aliased": {"knowledge": _summary("gpt-4o-mini")},
        "pinned": {"knowledge": _summary("qwen-max-2025-01-25")},
        "redirected": {"knowledge": _summary("qwen-max-2025-01-25", {"qwen-max": 2, "unknown": 1})},
        "keywords": {"knowledge": _summary(None)},
        "two": {"knowledge": _summary("qwen-max"), "open_ended": _summary("gpt-4o-2024-08-06")},
    }
    rows = {row["model"]: row for row in leaderboard_rows(models)}
    assert (rows["aliased"]["judge"], rows["aliased"]["judge_drift"]) == ("gpt-4o-mini", "undated alias")
    assert (rows["pinned"]["judge"], rows["pinned"]["judge_drift"]) == ("qwen-max-2025-01-25", None)
    assert rows["redirected"]["judge_drift"] == "answered as qwen-max"
    assert (rows["keywords"]["judge"], rows["keywords"]["judge_drift"]) == ("none", None)
    assert rows["two"]["judge"] == "mixed: gpt-4o-2024-08-06 / qwen-max"
    assert rows["two"]["judge_drift"] == "undated alias qwen-max"
    markdown = leaderboard_markdown(list(rows.values()))
    header = markdown.splitlines()[0].split(" | ")
    assert header[-2:] == ["judge", "judge drift |"]
    line = next(line for line in markdown.splitlines() if line.startswith("| aliased |"))
    assert line.endswith("| gpt-4o-mini | undated alias |")
    line = next(line for line in markdown.splitlines() if line.startswith("| pinned |"))
    assert line.endswith("| qwen-max-2025-01-25 |  |")
    write_csv(tmp_path / "board.csv", list(rows.values()))
    table = {r["model"]: r for r in csv.DictReader((tmp_path / "board.csv").open(encoding="utf-8"))}
    assert (table["aliased"]["judge"], table["aliased"]["judge_drift"]) == ("gpt-4o-mini", "undated alias")
    assert table["pinned"]["judge_drift"] == ""
