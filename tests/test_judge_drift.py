"""Judge drift guards: a judge named by an undated alias says so in its summary, its leaderboard row and
lm-eval's ``cs3`` block (the rule: cs3_tasks/judge/snapshots.py); open-ended scores asked k times
(``--judge-samples``) on a loopback judge that scores the same prompt differently each time."""

from __future__ import annotations

import csv
import json
import re
import threading
from collections import Counter
from pathlib import Path

import pytest
from judge_server import Reply, loopback_config

from cs3_tasks import cli
from cs3_tasks.judge import is_dated_snapshot
from cs3_tasks.judge.engine import ask_batch, strict_policy
from cs3_tasks.judge.parsing import parse_score
from cs3_tasks.report.leaderboard import leaderboard_markdown, leaderboard_rows, write_csv
from cs3_tasks.scoring.options import MetadataError, check_metadata
from cs3_tasks.scoring.records import sample_spread
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


# --- open-ended scores asked k times (--judge-samples)

SEQUENCE = (2, 5, 3, 4, 1)  # the n-th ask of a prompt is answered SEQUENCE[n % 5]


def changing_judge():
    """A loopback judge handler that scores the same prompt differently each time it is asked."""
    asked: Counter = Counter()
    lock = threading.Lock()

    def handler(request) -> str:
        with lock:
            n = asked[request.prompt]
            asked[request.prompt] += 1
        return f"Score: [{SEQUENCE[n % len(SEQUENCE)]}]"

    return handler


def test_each_sample_is_a_fresh_ask_and_the_median_is_the_score(judge_server, tmp_path):
    server = judge_server(changing_judge())
    config = loopback_config(server, tmp_path)
    prompts = ["rate answer A", "rate answer B", "rate answer A"]  # identical prompts are asked once
    policy = strict_policy(parse_score)
    three = ask_batch(prompts, policy, config, samples=3)
    assert server.request_count == 2 * 3  # two distinct prompts, three fresh samples each
    for verdict in three:  # the three asks of a prompt got 2, 5 and 3 in some order: the median is 3
        assert verdict.ok and verdict.value == 3
        assert sorted(v.value for v in verdict.samples) == [2, 3, 5]
        assert verdict.raw == "Score: [3]" and verdict.asks == 3 and verdict.model == "fake-judge"
    assert ask_batch(prompts, policy, config, samples=3) == three  # cached per sample: no new request
    assert server.request_count == 6
    one = ask_batch(prompts, policy, config)  # k = 1 is sample 0 of k: its cache entry, no request
    assert server.request_count == 6 and one[0].samples is None and one[0].value in (2, 3, 5)
    five = ask_batch(prompts, policy, config, samples=5)  # two more samples of each prompt, no more
    assert server.request_count == 10
    assert [v.value for v in five] == [3, 3, 3]  # median of 2, 5, 3, 4, 1
    one_at_a_time = loopback_config(server, tmp_path, max_concurrency=1)  # samples asked in order
    [even] = ask_batch(["rate answer D"], policy, one_at_a_time, samples=4)
    assert [v.value for v in even.samples] == [2, 5, 3, 4]
    assert even.value == 3.5 and even.raw == "Score: [3]"  # the lower middle sample's reply


def test_a_failed_sample_is_a_missing_verdict_retried_alone(judge_server, tmp_path):
    failing = {"on": True}
    inner = changing_judge()

    def handler(request):
        if failing["on"] and request.index == 1:
            return Reply.error(500)
        return inner(request)

    server = judge_server(handler)
    config = loopback_config(server, tmp_path, max_retries=0)
    [verdict] = ask_batch(["rate answer C"], strict_policy(parse_score), config, samples=3)
    assert verdict.value is None and verdict.error.startswith("judge_error: ")
    assert re.search(r"\(sample [123] of 3\)$", verdict.error)
    assert [v.ok for v in verdict.samples].count(False) == 1
    before = server.request_count
    failing["on"] = False
    [again] = ask_batch(["rate answer C"], strict_policy(parse_score), config, samples=3)
    assert again.ok and server.request_count == before + 1  # only the failed sample is asked again
    assert sample_spread(again.samples)["values"] == [v.value for v in again.samples]


def test_reference_policy_samples_each_reask_within_its_sample(judge_server, tmp_path):
    from cs3_tasks.scoring.protocols.reference import MAX_ASKS, reference_policy

    server = judge_server(changing_judge())
    config = loopback_config(server, tmp_path)
    policy = reference_policy("open_ended", "relevance")
    [verdict] = ask_batch(["rate answer E [0-5]"], policy, config, samples=3)
    assert verdict.value == 3 and verdict.asks == 3 and not verdict.fallback
    silent = judge_server("no score here")
    [fallen] = ask_batch(["rate answer F"], policy, loopback_config(silent, tmp_path), samples=3)
    # every sample asked MAX_ASKS times, then their fallback (1): most samples fell back
    assert silent.request_count == 3 * MAX_ASKS and fallen.asks == 3 * MAX_ASKS
    assert fallen.value == 1 and fallen.fallback


def _score(outputs: Path, out: Path, server, *extra: str) -> int:
    argv = ["score", "--outputs", str(outputs), "--out", str(out), "--dataset", "demo", "--set", "open_ended"]
    argv += ["--asr-model", "fake-asr", "--protocol", "cs3", "--no-progress", "--judge-base-url"]
    argv += [server.base_url, "--judge-api-key-env", "", "--judge-model", "judge-2025-01-25", *extra]
    return cli.main(argv)


def test_judge_samples_record_the_spread_and_replay(judge_server, fake_asr, tmp_path, monkeypatch):
    from demo_results import DEMO

    fake_asr(lambda audio, language: "听到的回答")
    server = judge_server(changing_judge())
    cache = ["--judge-cache", str(tmp_path / "judge.sqlite")]
    outputs = DEMO / "demo-strong"
    assert _score(outputs, tmp_path / "k3", server, "--judge-samples", "3", *cache) == 0
    records = [json.loads(line) for line in (tmp_path / "k3" / "open_ended.records.jsonl").open()]
    settings = json.loads((tmp_path / "k3" / "open_ended.settings.json").read_text())
    assert settings["judge"]["samples"] == 3
    summary = json.loads((tmp_path / "k3" / "open_ended.summary.json").read_text())
    for ch in ("text", "speech"):
        spreads = []
        for record in records:
            for aspect in ("relevance", "semantic"):
                kept = record[f"{ch}_{aspect}_samples"]
                assert len(kept["values"]) == 3 and kept["models"] == ["judge-2025-01-25"] * 3
                assert record[f"{ch}_{aspect}"] == sorted(kept["values"])[1]  # the median
                assert (kept["min"], kept["max"]) == (min(kept["values"]), max(kept["values"]))
            spreads.append(
                record[f"{ch}_relevance_samples"]["max"] - record[f"{ch}_relevance_samples"]["min"]
            )
        sampled = summary[ch]["judge_samples"]
        assert sampled["k"] == 3
        assert sampled["mean_spread"]["relevance"]["value"] == pytest.approx(sum(spreads) / len(spreads))
    assert summary["judge_answered_models"] == {"judge-2025-01-25": 3 * 2 * 2 * len(records)}
    markdown = (tmp_path / "k3" / "open_ended.summary.md").read_text(encoding="utf-8")
    assert "speech: each score is the median of 3 asks; mean spread (max - min): relevance" in markdown
    # anyone can re-score it: the same records and summary from the records alone, no judge
    rescored = tmp_path / "rescored"
    monkeypatch.setenv("CS3_BENCH_CACHE", str(tmp_path / "other-cache"))
    argv = ["score", "--from-results", str(tmp_path / "k3"), "--out", str(rescored), "--dataset", "demo"]
    assert cli.main(argv) == 0
    for name in ("open_ended.records.jsonl", "open_ended.summary.json", "open_ended.summary.md"):
        assert (rescored / name).read_bytes() == (tmp_path / "k3" / name).read_bytes(), name


def test_one_sample_is_todays_run_byte_for_byte(judge_server, fake_asr, tmp_path):
    from demo_results import DEMO

    fake_asr(lambda audio, language: "听到的回答")
    server = judge_server(changing_judge())
    outputs = DEMO / "demo-strong"
    assert _score(outputs, tmp_path / "plain", server, "--judge-cache", str(tmp_path / "a.sqlite")) == 0
    server.handler = changing_judge()  # the same replies again, from a fresh cache
    assert (
        _score(
            outputs,
            tmp_path / "k1",
            server,
            "--judge-samples",
            "1",
            "--judge-cache",
            str(tmp_path / "b.sqlite"),
        )
        == 0
    )
    for name in ("open_ended.records.jsonl", "open_ended.settings.json", "open_ended.summary.json"):
        assert (tmp_path / "k1" / name).read_bytes() == (tmp_path / "plain" / name).read_bytes(), name
    assert "_samples" not in (tmp_path / "k1" / "open_ended.records.jsonl").read_text(encoding="utf-8")
    assert "judge_samples" not in (tmp_path / "k1" / "open_ended.summary.json").read_text(encoding="utf-8")


@pytest.mark.parametrize("value", [0, -1, 26, 2.5, "three", True])
def test_judge_samples_out_of_range_is_refused(value, capsys):
    with pytest.raises(MetadataError, match="'judge_samples' must be a whole number from 1 to 25"):
        check_metadata({"judge_samples": value})
    assert check_metadata({"judge_samples": 3}) == {"judge_samples": 3}
    with pytest.raises(SystemExit) as exited:
        cli.main(["score", "--outputs", "x", "--out", "y", "--judge-samples", str(value)])
    assert exited.value.code == 2
    assert "--judge-samples" in capsys.readouterr().err


def test_conversation_gpt_score_is_the_median_of_its_samples(judge_server, tmp_path):
    from cs3_tasks.scoring import conversation
    from cs3_tasks.scoring.outputs import ModelOutput

    server = judge_server(changing_judge())
    config = loopback_config(server, tmp_path, samples=5)
    docs = [{"id": "0", "text": "中国有多少个省？"}, {"id": "1", "text": "推荐一本书。"}]
    outputs = [ModelOutput("0", "China has 34 provinces.", None), ModelOutput("1", "Read Dune.", None)]
    records = conversation.score_conversation("belle_eval_s2s", docs, outputs, "zh2en", judge=config)
    for record in records:
        assert record["text_gpt_score"] == 3  # median of 2, 5, 3, 4, 1
        assert sorted(record["text_gpt_score_samples"]["values"]) == [1, 2, 3, 4, 5]
    summary = conversation.summarize_conversation(records)
    assert summary["text"]["judge_samples"]["k"] == 5
    assert summary["text"]["judge_samples"]["mean_spread"]["gpt_score"]["value"] == 4.0
    assert "text: each score is the median of 5 asks" in conversation.summary_markdown(summary)
