"""Tests of the BELLE-eval-S2S Chinese-to-English conversation task: scoring, dataset config, lm-eval task.

Tests that need ../shared/data/belle_eval_s2s skip with the reason when it is absent. Slowest test: the
lm_eval run on 3 items (~30-50 s here, Whisper-base on 3 real clips).
"""

from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path

import pytest
from shared_data import BELLE, need

from cs3_tasks.asr import Transcript
from cs3_tasks.core import metrics
from cs3_tasks.judge import JudgeConfig
from cs3_tasks.scoring import conversation
from cs3_tasks.scoring.outputs import ModelOutput

sys.path.insert(0, str(Path(__file__).resolve().parent))
from judge_server import FakeJudgeServer, Reply
from lm_eval_runner import run_lm_eval

REPO = Path(__file__).resolve().parents[1]
SET = "belle_eval_s2s"
DOCS = [
    {"id": "0", "text": "中国有多少个省？"},
    {"id": "1", "text": "什么是机器学习？"},
    {"id": "2", "text": "人类存在的意义是什么？"},
    {"id": "3", "text": "推荐一本书。"},
]


def shared_belle() -> Path:
    need(BELLE / "test.tsv")
    return BELLE


# ---------------------------------------------------------------------------------------------------------
# scoring


def test_text_only_outputs_no_judge():
    outputs = [
        ModelOutput("0", "China has 34 provincial-level divisions.", None),
        ModelOutput("1", "机器学习是人工智能的一个分支。", None),
        ModelOutput("2", None, None, problem="empty text response"),
        ModelOutput("99", "stray", None),
    ]
    records = conversation.score_conversation(SET, DOCS, outputs, "zh2en", judge=None, progress=False)
    assert [r["qid"] for r in records] == ["0", "1", "2", "3", "99"]
    assert [r["text_off_target"] for r in records[:4]] == [False, True, None, None]
    assert records[0]["text_language"] == "en" and records[1]["text_language"] == "zh"
    assert records[3]["problem"] == "no output for this id"
    assert records[4]["problem"].startswith("unknown id: 99")
    assert all(r["speech_off_target"] is None and r["asr_error_rate"] is None for r in records)
    summary = conversation.summarize_conversation(records)
    assert summary["speech"] is None  # text-only model: not applicable, not 0
    assert summary["text"]["off_target"]["value"] == 0.5 and summary["text"]["off_target"]["n"] == 2
    assert summary["text"]["gpt_score"]["value"] is None and summary["text"]["n_unjudged"] == 2
    assert (summary["n_items"], summary["n_unknown_id"], summary["n_no_output"]) == (4, 1, 2)
    assert summary["expected_language"] == "en" and summary["pair"] == "zh2en"
    assert "n/a" in conversation.summary_markdown(summary)


def test_speech_outputs_with_judge(tmp_path, monkeypatch):
    heard = {
        "a0.wav": Transcript("China has thirty four provincial level divisions", "en"),
        "a1.wav": Transcript("机器学习是人工智能的一个分支", "zh"),
        "a2.wav": Transcript("", None, error="AudioError: empty audio"),
    }
    calls = []

    def fake_transcribe(audios, language=None, **kwargs):
        calls.append(language)
        return [heard[Path(a).name] for a in audios]

    monkeypatch.setattr("cs3_tasks.asr.transcribe_batch", fake_transcribe)
    outputs = [
        ModelOutput("0", "China has 34 provincial-level divisions.", str(tmp_path / "a0.wav")),
        ModelOutput("1", "Machine learning is a branch of AI.", str(tmp_path / "a1.wav")),
        ModelOutput("2", "The meaning of life is what you make of it.", str(tmp_path / "a2.wav")),
    ]

    def judge(request):
        if "Machine learning" in request.prompt:
            return Reply.garbage()  # -> judge_error after retries, excluded and counted
        return Reply.text(
            "Correct and helpful. Score: [5]"
            if "34" in request.prompt or "thirty" in request.prompt
            else "Score: [2]"
        )

    with FakeJudgeServer(judge) as server:
        config = JudgeConfig(
            base_url=server.base_url,
            model="fake",
            api_key_env="",
            max_retries=1,
            backoff_initial=0.01,
            cache_path=tmp_path / "judge.sqlite",
        )
        records = conversation.score_conversation(
            SET, DOCS[:3], outputs, "zh2en", judge=config, progress=False
        )
        assert all("in English" in r.prompt for r in server.requests)  # target language from the pair
    assert calls == [None]  # zh2en: ASR auto-detection (an off-target spoken answer must stay visible)
    r0, r1, r2 = records
    assert (r0["text_gpt_score"], r0["speech_gpt_score"]) == (5, 5)
    assert r1["text_gpt_score"] is None and r1["text_gpt_score_error"].startswith("judge_error")
    assert r1["speech_off_target"] is True and r1["speech_language"] == "zh"
    assert r0["asr_error_rate"] == pytest.approx(
        metrics.mixed_error_rate(r0["text"], r0["transcript"], "zh2en")
    )
    assert r2["asr_error"] and r2["transcript"] is None and r2["speech_gpt_score"] is None
    summary = conversation.summarize_conversation(records)
    assert summary["text"]["gpt_score"]["value"] == pytest.approx(
        3.5
    )  # (5 + 2) / 2, the judge error excluded
    assert summary["text"]["n_judge_error"] == 1
    assert summary["speech"]["gpt_score"]["value"] == pytest.approx(3.5)  # r0: 5, r1: 2
    assert summary["speech"]["off_target"]["value"] == 0.5 and summary["n_asr_error"] == 1
    assert summary["asr_error_rate"]["n"] == 2


# ---------------------------------------------------------------------------------------------------------
# dataset config


@pytest.mark.shared
def test_belle_builds_as_a_16khz_config_of_our_dataset(tmp_path):
    folder = shared_belle()
    from cs3_tasks.build.conversation_data import build_conversation_set, load_conversation_set, read_belle
    from cs3_tasks.core.data import demo_dataset_dir

    out = tmp_path / "build"
    shutil.copytree(demo_dataset_dir(), out)  # an existing CS3-Bench build: its configs must stay
    items = read_belle(folder)
    result = build_conversation_set(items, out, SET, "zh2en", progress=False)
    assert result.complete and result.rows == 250
    ds = load_conversation_set(SET, str(out))
    assert len(ds) == 250 and ds.column_names == ["id", "audio", "text"]
    assert ds[0]["id"] == "0" and ds[0]["text"] == "中国有多少个省？"
    import soundfile as sf

    rates = {sf.info(io.BytesIO(row["audio"]["bytes"])).samplerate for row in ds.select(range(0, 250, 25))}
    assert rates == {16_000}
    card = (out / "README.md").read_text(encoding="utf-8")
    for config in ("knowledge", "knowledge_en", "open_ended", SET):
        assert f"config_name: {config}" in card
    from cs3_tasks.core import data

    assert len(data.load_set("knowledge", str(out))) > 0  # the CS3 sets still load
    # a re-build replaces the config's card entries instead of adding more
    build_conversation_set(items[:3], out, SET, "zh2en", progress=False)
    card = (out / "README.md").read_text(encoding="utf-8")
    assert card.count(f"config_name: {SET}") == 2 and card.count(f"<!-- config:{SET} -->") == 1


def test_read_belle_names_the_broken_items(tmp_path):
    from cs3_tasks.build.conversation_data import ConversationSourceError, read_belle

    (tmp_path / "wav").mkdir()
    (tmp_path / "test.tsv").write_text("id\ttext\n0\t你好\n1\t\n2\t再见\n2\t再见\n", encoding="utf-8")
    (tmp_path / "wav" / "0.wav").write_bytes(b"")
    (tmp_path / "wav" / "2.wav").write_bytes(b"")
    with pytest.raises(ConversationSourceError) as info:
        read_belle(tmp_path)
    assert "line 3: empty id or text" in str(info.value) and "id 2: duplicate" in str(info.value)


# ---------------------------------------------------------------------------------------------------------
# the lm-eval task


def test_task_yaml_declares_directions():
    from lm_eval.tasks._yaml_loader import load_yaml

    config = load_yaml(REPO / "task_configs" / "belle_s2s_zh2en.yaml", resolve_func=False)
    directions = {m["metric"]: m["higher_is_better"] for m in config["metric_list"]}
    assert directions == {
        "gpt_score_text": True,
        "gpt_score_speech": True,
        "asr_error_rate": False,
        "off_target_text": False,
        "off_target_speech": False,
        "judge_errors": False,
        "asr_errors": False,
    }
    assert config["dataset_kwargs"] == {"config": SET, "pair": "zh2en"}


@pytest.mark.slow
@pytest.mark.shared
def test_belle_task_through_lm_eval_echo_system(tmp_path):
    """An "echo" system (answers with the question's text and its own recording) is 100% off target."""
    folder = shared_belle()
    outputs = tmp_path / "echo"
    outputs.mkdir()
    rows = [line.split("\t") for line in (folder / "test.tsv").read_text(encoding="utf-8").splitlines()[1:4]]
    with open(outputs / f"{SET}.jsonl", "w", encoding="utf-8") as handle:
        handle.writelines(
            json.dumps(
                {"Qid": qid, "text": question, "audio": str(folder / "wav" / f"{qid}.wav")},
                ensure_ascii=False,
            )
            + "\n"
            for qid, question in rows
        )
    results = tmp_path / "results"
    run = run_lm_eval(
        "--model",
        "cs3-precomputed",
        "--model_args",
        f"outputs={outputs}",
        "--tasks",
        "belle_s2s_zh2en",
        "--limit",
        "3",
        "--metadata",
        json.dumps({"dataset": str(folder), "judge": "none"}),
        "--output_path",
        str(results),
        "--log_samples",
        env={"CS3_BENCH_CACHE": str(tmp_path / "cache")},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    values = json.loads(next(results.rglob("results_*.json")).read_text())["results"]["belle_s2s_zh2en"]
    assert values["off_target_text,cs3"] == 1.0 and values["off_target_speech,cs3"] == 1.0
    assert 0 <= values["asr_error_rate,cs3"] < 1  # Whisper-base on real Mandarin speech vs its own text
    assert values["gpt_score_text,cs3"] != values["gpt_score_text,cs3"]  # NaN: no judge, not 0
    samples = next(results.rglob("samples_belle_s2s_zh2en_*.jsonl")).read_text().splitlines()
    record = json.loads(json.loads(samples[0])["filtered_resps"][0])
    assert (record["pair"], record["expected_language"], record["asr_language_hint"]) == ("zh2en", "en", None)
    assert record["speech_language"] == "zh" and record["transcript"]


def _belle_style_folder(tmp_path: Path) -> Path:
    """A two-item BELLE-eval-S2S folder as distributed (test.tsv + wav/)."""
    import numpy as np

    from cs3_tasks.core import audio

    folder = tmp_path / "belle"
    (folder / "wav").mkdir(parents=True)
    (folder / "test.tsv").write_text("id\ttext\n0\t你好吗？\n1\t今天天气怎么样？\n", encoding="utf-8")
    for qid in ("0", "1"):
        audio.write_wav(folder / "wav" / f"{qid}.wav", np.zeros(1600, dtype=np.float32))
    return folder


def test_score_cli_on_a_belle_style_folder_text_only(tmp_path):
    from cs3_tasks.cli.score_conversation import add_arguments, run

    folder = _belle_style_folder(tmp_path)
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    (outputs / f"{SET}.jsonl").write_text(
        json.dumps({"Qid": "0", "text": "I am fine, thank you.", "audio": None})
        + "\n"
        + json.dumps({"Qid": "1", "text": "今天天气很好。", "audio": None}, ensure_ascii=False)
        + "\n",
        encoding="utf-8",
    )
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out = tmp_path / "result"
    args = parser.parse_args(
        [
            "--outputs",
            str(outputs),
            "--dataset",
            str(folder),
            "--out",
            str(out),
            "--no-judge",
            "--no-progress",
        ]
    )
    assert run(args) == 0
    summary = json.loads((out / f"{SET}.summary.json").read_text(encoding="utf-8"))
    assert summary["text"]["off_target"]["value"] == 0.5 and summary["speech"] is None
    assert len((out / f"{SET}.records.jsonl").read_text(encoding="utf-8").splitlines()) == 2
    assert "| T |" in (out / f"{SET}.summary.md").read_text(encoding="utf-8")


def test_score_conversation_cli_resumes_and_refuses_other_settings(tmp_path, monkeypatch, capsys):
    """score-conversation is resumable like score: a re-run scores only what is missing or changed."""
    import argparse

    from cs3_tasks.cli.score_conversation import add_arguments, run

    folder = _belle_style_folder(tmp_path)
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    rows = [{"Qid": "0", "text": "I am fine.", "audio": None}, {"Qid": "1", "text": "Sunny.", "audio": None}]
    (outputs / f"{SET}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "result"

    def args(*extra: str) -> argparse.Namespace:
        parser = argparse.ArgumentParser()
        add_arguments(parser)
        base = ["--outputs", str(outputs), "--dataset", str(folder), "--out", str(out), "--no-progress"]
        return parser.parse_args([*base, *extra])

    assert run(args("--no-judge")) == 0
    scored: list[list[str]] = []
    real = conversation.score_conversation

    def counting(set_name, docs, *a, **k):
        scored.append([d["id"] for d in docs])
        return real(set_name, docs, *a, **k)

    from cs3_tasks.cli import score_conversation as command

    monkeypatch.setattr(command, "score_conversation", counting)
    assert run(args("--no-judge")) == 0 and scored == []  # nothing to redo
    rows[1]["text"] = "It is sunny today."
    (outputs / f"{SET}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert run(args("--no-judge")) == 0 and scored == [["1"]]  # the changed output only
    records = [json.loads(line) for line in (out / f"{SET}.records.jsonl").read_text().splitlines()]
    assert [r["qid"] for r in records] == ["0", "1"] and records[1]["text"] == "It is sunny today."
    capsys.readouterr()
    assert run(args("--judge-base-url", "http://127.0.0.1:9/v1", "--judge-api-key-env", "")) == 2
    assert "--restart" in capsys.readouterr().err
    assert run(args("--no-judge", "--outputs", str(tmp_path / "nowhere"))) == 2
