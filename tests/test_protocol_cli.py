"""``--protocol {reference,cs3}`` wired through ``cs3-bench score``, lm-eval's ``--metadata`` and the report.

The reference protocol reads its judge prompts from the authors' scripts (../shared/reference/vocalbench-zh;
tests needing them skip with a printed reason when absent); a loopback judge serves scripted replies.
"""

from __future__ import annotations

import argparse
import json
import wave
from pathlib import Path

import pytest
from conftest import FakeASR
from judge_server import Reply, by_keyword
from shared_data import AUTHORS

from cs3_tasks.cli import score as score_cli
from cs3_tasks.report import leaderboard as report
from cs3_tasks.scoring import settings as scoring_settings
from cs3_tasks.scoring import store as scoring_store
from cs3_tasks.scoring.outputs import read_outputs
from cs3_tasks.scoring.protocols import reference

DOCS = [
    {"Qid": f"k-{i:03d}", "Question": f"问题{i}", "Answer_zh": f"答案{i}", "Answer_en": f"answer{i}"}
    for i in range(4)
]
for _i, _doc in enumerate(DOCS):
    _doc["Category"] = ("Acoustic", "Semantic", "Integrated")[_i % 3]
    _doc["Source"] = "test"
EN_DOCS = [
    {
        "Qid": f"e-{i:03d}",
        "Question": f"question {i}",
        "Answer": f"answer{i}",
        "Category": "Acoustic",
        "Source": "test",
    }
    for i in range(2)
]


def _need_authors() -> Path:
    if not (AUTHORS / "utils").is_dir():
        reason = f"authors' scripts not found ({AUTHORS / 'utils'}): reference-judge CLI tests skipped"
        print(reason)
        pytest.skip(reason)
    return AUTHORS


def _silence(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(16000)
        handle.writeframes(b"\0\0" * 1600)


def _outputs(root: Path, as_array: bool = True) -> Path:
    """The authors' layout: json/cs_knowledge.json (a JSON array, their writer), wav/cs_knowledge/<Qid>.wav,
    json/cs_knowledge_en.json as JSON lines with wav/<Qid>.wav, and json_asr transcripts."""
    rows = [
        {"Qid": "k-000", "Response": "答案0"},  # keyword hit
        {"Qid": "k-001", "Response": "RIGHT 1"},  # judge: 正确
        {"Qid": "k-002", "Response": "UNSURE 2"},  # judge: never a verdict -> unparsed, counted wrong
        {"Qid": "k-003", "Response": "答，案3"},  # cs3 spans: no hit; reference: raw substring no hit either
    ]
    (root / "json").mkdir(parents=True, exist_ok=True)
    text = (
        json.dumps(rows, ensure_ascii=False, indent=4)
        if as_array
        else "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    )
    (root / "json" / "cs_knowledge.json").write_text(text, encoding="utf-8")
    for row in rows:
        _silence(root / "wav" / "cs_knowledge" / f"{row['Qid']}.wav")
    en_rows = [{"Qid": "e-000", "Response": "It is ANSWER0."}, {"Qid": "e-001", "Response": "RIGHT"}]
    (root / "json" / "cs_knowledge_en.json").write_text(
        "".join(json.dumps(r) + "\n" for r in en_rows), encoding="utf-8"
    )
    for row in en_rows:
        _silence(root / "wav" / f"{row['Qid']}.wav")
    (root / "json_asr").mkdir(exist_ok=True)
    given = [
        {"Qid": r["Qid"], "Response": r["Response"], "Response_hyp": f"答案{i}"} for i, r in enumerate(rows)
    ]
    (root / "json_asr" / "cs_knowledge.json").write_text(json.dumps(given, ensure_ascii=False), "utf-8")
    return root


def _datasets(tmp_path: Path) -> dict[str, Path]:
    paths = {}
    for name, docs in (("knowledge", DOCS), ("knowledge_en", EN_DOCS)):
        paths[name] = tmp_path / f"cs_{name}.json"
        paths[name].write_text(json.dumps(docs, ensure_ascii=False), encoding="utf-8")
    return paths


def _args(
    outputs: Path, out: Path, dataset: Path, *extra: str, set_name: str = "knowledge"
) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    score_cli.add_arguments(parser)
    return parser.parse_args(
        [
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
            *extra,
        ]
    )


@pytest.fixture
def asr(fake_asr) -> FakeASR:
    return fake_asr(lambda audio, language: "RIGHT spoken")


JUDGE_RULES = {"RIGHT": "正确 与答案一致", "UNSURE": "我认为答案大概是正确的", "答，案3": "错误 不一致"}


def _judge_args(server) -> list[str]:
    return ["--judge-base-url", server.base_url, "--judge-api-key-env", "", "--judge-model", "fake-judge"]


def test_authors_array_layout_is_read(tmp_path):
    root = _outputs(tmp_path / "model")
    outputs = read_outputs(root, "knowledge")
    assert sorted(outputs) == ["k-000", "k-001", "k-002", "k-003"]
    assert outputs["k-001"].text == "RIGHT 1" and outputs["k-001"].problem is None
    assert outputs["k-001"].audio.endswith("wav/cs_knowledge/k-001.wav")
    en = read_outputs(root, "knowledge_en")  # JSON lines, flat wav/<Qid>.wav
    assert en["e-000"].audio.endswith("wav/e-000.wav") and en["e-000"].text == "It is ANSWER0."


def test_array_file_no_longer_scores_nothing(tmp_path, asr):
    root = _outputs(tmp_path / "model")
    out = tmp_path / "r"
    assert score_cli.run(_args(root, out, _datasets(tmp_path)["knowledge"], "--no-judge")) == 0
    records = scoring_store.read_records(out / "knowledge.records.jsonl")
    assert len(records) == 4 and records["k-000"]["text_status"] == "keyword"
    assert all(r["problem"] is None for r in records.values())


@pytest.mark.shared
def test_reference_default_and_cs3_on_the_same_outputs(tmp_path, asr, judge_server):
    scripts = _need_authors()
    root = _outputs(tmp_path / "model")
    dataset = _datasets(tmp_path)["knowledge"]
    server = judge_server(by_keyword(JUDGE_RULES, default="错误 不一致"))
    ref_out, cs3_out = tmp_path / "ref", tmp_path / "cs3"
    # the default protocol is reference
    assert (
        score_cli.run(
            _args(root, ref_out, dataset, "--reference-scripts", str(scripts), *_judge_args(server))
        )
        == 0
    )
    settings = json.loads((ref_out / "knowledge.settings.json").read_text())
    assert settings["protocol"] == "reference" and settings["reference_scripts"]["pinned"] is True
    summary = json.loads((ref_out / "knowledge.summary.json").read_text())
    assert summary["protocol"] == "reference" and summary["complete"] is True
    assert summary["comparable_to_paper"]["speech"] is False
    assert any("not Whisper-large-v3" in note for note in summary["notes"])
    records = scoring_store.read_records(ref_out / "knowledge.records.jsonl")
    assert records["k-002"]["text_status"] == "judge_unparsed" and records["k-002"]["text_correct"] is False
    assert records["k-002"]["text_judge_asks"] == reference.MAX_ASKS
    assert summary["text"]["status_counts"]["judge_unparsed"] == 1
    # every item in the denominator: 答案0 keyword, RIGHT 正确, UNSURE unparsed (wrong), 答，案3 错误
    assert summary["text"]["accuracy"]["value"] == 0.5 and summary["text"]["accuracy"]["n_all"] == 4
    # the prompt is the authors' template, filled as their code fills it
    templates = reference.load_templates(scripts)
    sent = {r.prompt for r in server.requests}
    assert reference.build_prompt(templates, "knowledge", DOCS[1], "RIGHT 1") in sent

    server.reset()
    assert score_cli.run(_args(root, cs3_out, dataset, "--protocol", "cs3", *_judge_args(server))) == 0
    cs3 = json.loads((cs3_out / "knowledge.summary.json").read_text())
    assert cs3["protocol"] == "cs3" and "complete" not in cs3
    cs3_records = scoring_store.read_records(cs3_out / "knowledge.records.jsonl")
    assert {r["protocol"] for r in cs3_records.values()} == {"cs3"}
    assert cs3_records["k-002"]["text_status"] != "judge_unparsed"
    assert reference.build_prompt(templates, "knowledge", DOCS[1], "RIGHT 1") not in {
        r.prompt for r in server.requests
    }
    rows = report.leaderboard_rows({"ref": {"knowledge": summary}, "ours": {"knowledge": cs3}})
    assert {r["model"]: r["protocol"] for r in rows} == {"ref": "reference", "ours": "cs3"}
    assert "| reference |" in report.leaderboard_markdown(rows)


@pytest.mark.shared
def test_reference_judge_errors_are_missing_with_bounds(tmp_path, asr, judge_server):
    scripts = _need_authors()
    root = _outputs(tmp_path / "model")
    rules = {**JUDGE_RULES, "UNSURE": Reply.error(400, "bad request")}
    server = judge_server(by_keyword(rules, default="错误 不一致"))
    out = tmp_path / "ref"
    args = _args(
        root, out, _datasets(tmp_path)["knowledge"], "--reference-scripts", str(scripts), *_judge_args(server)
    )
    assert score_cli.run(args) == 0
    summary = json.loads((out / "knowledge.summary.json").read_text())
    accuracy = summary["text"]["accuracy"]
    assert summary["complete"] is False and accuracy["complete"] is False
    assert (accuracy["low"], accuracy["high"]) == (0.5, 0.75)  # 2 of 4 known right, 1 unknown
    assert "INCOMPLETE" in (out / "knowledge.summary.md").read_text()


def test_offline_without_scripts_is_a_clear_error_before_any_work(tmp_path, asr, monkeypatch, capsys):
    monkeypatch.setenv(reference.SCRIPTS_ENV, str(tmp_path / "nowhere"))
    root = _outputs(tmp_path / "model")
    args = _args(
        root,
        tmp_path / "r",
        _datasets(tmp_path)["knowledge"],
        "--judge-base-url",
        "http://127.0.0.1:9/v1",
        "--judge-api-key-env",
        "",
        "--judge-model",
        "fake",
    )
    assert score_cli.run(args) == 2
    err = capsys.readouterr().err
    assert "--reference-scripts" in err and reference.SCRIPTS_ENV in err and "--protocol cs3" in err
    assert asr.calls == [] and not (tmp_path / "r").exists()
    # the keyword stage needs no scripts
    assert score_cli.run(_args(root, tmp_path / "r2", _datasets(tmp_path)["knowledge"], "--no-judge")) == 0


def test_set_all_scores_every_set_and_compares_cs_en(tmp_path, asr):
    root = _outputs(tmp_path / "model")
    datasets = _datasets(tmp_path)
    out = tmp_path / "r"
    folder = tmp_path / "data"
    folder.mkdir()
    for path in datasets.values():
        path.rename(folder / path.name)
    assert score_cli.run(_args(root, out, folder, "--no-judge", set_name="all")) == 0
    for name in ("knowledge", "knowledge_en"):
        summary = json.loads((out / f"{name}.summary.json").read_text())
        assert summary["cs_vs_en"]["text"]["acc_cs"] == 0.25 and summary["cs_vs_en"]["text"]["acc_en"] == 0.5
    assert not (out / "open_ended.summary.json").exists()


def test_use_given_transcripts_replaces_the_asr(tmp_path, asr):
    root = _outputs(tmp_path / "model")
    out = tmp_path / "r"
    dataset = _datasets(tmp_path)["knowledge"]
    assert score_cli.run(_args(root, out, dataset, "--no-judge", "--use-given-transcripts")) == 0
    assert asr.calls == []
    records = scoring_store.read_records(out / "knowledge.records.jsonl")
    assert [records[q]["transcript"] for q in sorted(records)] == ["答案0", "答案1", "答案2", "答案3"]
    assert all(r["speech_status"] == "keyword" for r in records.values())
    settings = json.loads((out / "knowledge.settings.json").read_text())
    assert "given transcripts" in settings["asr"]["source"] and settings["asr_is_reference"] is False


def test_lm_eval_metadata_protocol(monkeypatch, tmp_path):
    pytest.importorskip("lm_eval")
    from cs3_tasks.task_configs.run import LmEvalRun
    from lm_eval.tasks._yaml_loader import _load_module_with_cache

    from cs3_tasks.harness import lm_eval_hook
    from cs3_tasks.scoring.outputs import ModelOutput

    utils = _load_module_with_cache(lm_eval_hook.task_dir() / "utils.py")
    none = {"judge": "none"}
    assert utils.protocol(none) == "reference" and utils.protocol({**none, "protocol": "cs3"}) == "cs3"
    with pytest.raises(ValueError, match="unknown protocol"):
        utils.protocol({**none, "protocol": "nope"})
    monkeypatch.setenv(reference.SCRIPTS_ENV, str(tmp_path / "nowhere"))
    local_judge = {"judge_base_url": "http://127.0.0.1:9/v1", "judge_api_key_env": ""}  # a judge is set
    with pytest.raises(ValueError, match='\'{"protocol": "cs3"}\''):
        utils.protocol(local_judge)
    monkeypatch.undo()
    assert LmEvalRun().load_task({"protocol": "cs3", "reference_scripts": "x", "other": 1}) == {
        "protocol": "cs3",
        "reference_scripts": "x",
    }
    docs = [dict(d) for d in DOCS]
    utils = _load_module_with_cache(lm_eval_hook.task_dir() / "utils.py")
    for name, expected in (("cs3", "cs3"), (None, "reference")):
        settings = {"judge": "none", **({"protocol": name} if name else {})}
        monkeypatch.setattr(utils, "RUN", LmEvalRun(settings))
        monkeypatch.setattr(utils, "model_output", lambda doc, r: ModelOutput(str(doc["Qid"]), r[0], None))
        filtered = utils.ScoreResponses("knowledge").apply([["答，案0"], ["x"], ["y"], ["z"]], docs)
        record = json.loads(filtered[0])
        assert record["protocol"] == expected
        # 答，案0: the cs3 keyword spans do not join across the comma, nor does the raw substring test
        assert record["text_status"] == "unresolved"


def test_reference_default_asr_is_large_v3_where_it_can_be_loaded(monkeypatch):
    from cs3_tasks.asr import AsrConfig
    from cs3_tasks.scoring.protocols import protocol_for

    monkeypatch.delenv("CS3_ASR_MODEL", raising=False)
    monkeypatch.delenv("CS3_ASR_BACKEND", raising=False)
    monkeypatch.setattr(reference, "reference_asr_available", lambda: True)
    config = scoring_settings.protocol_asr(AsrConfig(), protocol_for("reference"))
    assert (config.backend, config.model) == ("transformers", "openai/whisper-large-v3")
    assert reference.is_reference_asr(config.backend, config.model)
    assert scoring_settings.protocol_asr(AsrConfig(), protocol_for("cs3")) == AsrConfig()
    assert scoring_settings.protocol_asr(AsrConfig(model="tiny"), protocol_for("reference")) == AsrConfig(
        model="tiny"
    )
    assert scoring_settings.protocol_asr(AsrConfig(), protocol_for("reference"), chosen=True) == AsrConfig()
    monkeypatch.setattr(reference, "reference_asr_available", lambda: False)  # not cached: our default
    assert scoring_settings.protocol_asr(AsrConfig(), protocol_for("reference")) == AsrConfig()
