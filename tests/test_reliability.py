"""Issue 12 (reliability) at the level of whole runs: hostile outputs files, judge failures, a shared
``--out``, lm-eval metadata. Each test failed on the code before its fix. Fakes from test_scoring."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cs3_tasks.cli import score as score_cli
from cs3_tasks.scoring import pipeline as scoring
from cs3_tasks.scoring import records as scoring_records
from cs3_tasks.scoring import store as scoring_store

try:  # tests/ is on sys.path under pytest's default import mode
    from test_scoring import FakeASR, FakeJudge, _args, _cli_fixture
except ImportError:  # pragma: no cover
    from tests.test_scoring import FakeASR, FakeJudge, _args, _cli_fixture


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CS3_BENCH_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def fakes(monkeypatch):
    asr = FakeASR({})
    judge = FakeJudge()
    monkeypatch.setattr("cs3_tasks.asr.transcribe_batch", asr)
    monkeypatch.setattr("cs3_tasks.judge.judge_knowledge", judge.knowledge)
    monkeypatch.setattr("cs3_tasks.judge.judge_open_ended", judge.open_ended)
    return asr, judge


def _records(out: Path, set_name: str = "knowledge") -> dict[str, dict]:
    return scoring_store.read_records(out / f"{set_name}.records.jsonl")


# ---------------------------------------------------------------------------------------------
# 1. lone surrogates in a response


def test_lone_surrogate_in_a_response_is_a_per_item_problem(tmp_path, fakes):
    asr, _ = fakes
    outputs, dataset = _cli_fixture(tmp_path, asr)
    path = outputs / "json" / "knowledge.json"
    lines = path.read_text(encoding="utf-8").splitlines()
    # valid JSON (ASCII escapes), half an emoji in k-001's response
    lines[1] = json.dumps({"Qid": "k-001", "Response": "RIGHT \ud83d half an emoji"})
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "result"
    for _ in range(2):  # the re-run reads the records written by the first run
        assert score_cli.run(_args(outputs, out, dataset)) == 0
        records = _records(out)
        scored = [r for q, r in records.items() if q != "k-999"]
        assert len(records) == 7 and all(r["text_status"] != "missing" for r in scored)
        record = records["k-001"]
        assert record["text"] == "RIGHT \ufffd half an emoji"
        assert "text response has 1 lone surrogates, replaced by U+FFFD" in record["problem"]
        assert record["text_correct"] is True


def test_lm_eval_model_output_repairs_lone_surrogates():
    from cs3_tasks.task_configs import utils

    output = utils.model_output({"Qid": "k-1"}, ["abc \udc00"])
    assert output.text == "abc \ufffd" and "1 lone surrogates" in output.problem
    json.dumps(output.text, ensure_ascii=False).encode("utf-8")


def test_records_carry_asr_and_judge_notes(tmp_path, monkeypatch):
    from cs3_tasks.asr import Transcript
    from cs3_tasks.judge import Verdict
    from cs3_tasks.scoring.outputs import ModelOutput

    monkeypatch.setattr(
        "cs3_tasks.asr.transcribe_batch",
        lambda audios, language=None, **kw: [Transcript("x", "zh", note="audio cut") for _ in audios],
    )
    monkeypatch.setattr(
        "cs3_tasks.judge.judge_knowledge",
        lambda items, config, **kw: [Verdict(True, "ok", note="judge request cut") for _ in items],
    )
    wav = tmp_path / "a.wav"
    wav.write_bytes(b"RIFF")
    docs = [{"Qid": "k-0", "Question": "q", "Answer_zh": "答", "Answer_en": "ans", "Category": "Acoustic"}]
    from test_scoring import JUDGE

    (record,) = scoring.score_batch(
        "knowledge", docs, [ModelOutput("k-0", "nope", str(wav))], judge=JUDGE, progress=False, protocol="cs3"
    )
    assert record["asr_note"] == "audio cut"
    assert record["text_judge_note"] == record["speech_judge_note"] == "judge request cut"


def test_settings_and_summary_never_hold_url_credentials(tmp_path, fakes):
    asr, _ = fakes
    outputs, dataset = _cli_fixture(tmp_path, asr)
    out = tmp_path / "result"
    args = _args(
        outputs, out, dataset, judge_base_url="http://user:s3cretpw@127.0.0.1:9/v1?api-key=k3yk3y&v=1"
    )
    assert score_cli.run(args) == 0
    for name in ("knowledge.settings.json", "knowledge.summary.json", "knowledge.summary.md"):
        written = (out / name).read_text(encoding="utf-8")
        assert "s3cretpw" not in written and "k3yk3y" not in written, name
    assert "v=1" in (out / "knowledge.settings.json").read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# 2. outputs files that are not UTF-8


def _gbk_fixture(tmp_path: Path, asr: FakeASR, gbk_lines: set[int]) -> tuple[Path, Path]:
    outputs, dataset = _cli_fixture(tmp_path, asr)
    path = outputs / "json" / "knowledge.json"
    lines = [line.replace("RIGHT", "对RIGHT") for line in path.read_text(encoding="utf-8").splitlines()]
    encoded = [line.encode("gbk") if i in gbk_lines else line.encode("utf-8") for i, line in enumerate(lines)]
    path.write_bytes(b"\xef\xbb\xbf" + b"\n".join(encoded) + b"\n")  # a BOM is fine
    return outputs, dataset


def test_a_gbk_line_is_a_per_item_problem_naming_file_line_and_encoding(tmp_path, fakes):
    asr, _ = fakes
    outputs, dataset = _gbk_fixture(tmp_path, asr, gbk_lines={0})  # k-000: "答案0" in GBK
    out = tmp_path / "result"
    assert score_cli.run(_args(outputs, out, dataset)) == 0
    records = _records(out)
    record = records["k-000"]
    assert "knowledge.json line 1 is not UTF-8" in record["problem"]
    assert "looks like GBK" in record["problem"] and "expected UTF-8" in record["problem"]
    assert record["text"] is None and record["text_status"] == "missing"
    assert records["k-002"]["text_status"] == "keyword"  # the UTF-8 lines (and the BOM) read as before


def test_a_gbk_file_is_a_clear_error_not_a_score(tmp_path, fakes, capsys):
    asr, _ = fakes
    outputs, dataset = _gbk_fixture(tmp_path, asr, gbk_lines=set(range(7)))
    out = tmp_path / "result"
    assert score_cli.run(_args(outputs, out, dataset)) == 2
    err = capsys.readouterr().err
    assert "knowledge.json" in err and "not UTF-8" in err and "GBK" in err and "expected UTF-8" in err
    assert not (out / "knowledge.summary.json").exists()


# ---------------------------------------------------------------------------------------------
# 3. missing verdicts: bounds, not a biased headline; 401 stops the run; mostly failed -> exit 3


def test_judge_errors_give_bounds_not_a_bare_rate(tmp_path, fakes):
    from cs3_tasks.report import leaderboard as report

    asr, _ = fakes
    outputs, dataset = _cli_fixture(tmp_path, asr)
    # speech: 6 judged, k-001 and k-003 break (judge_error); the rest RIGHT
    asr.transcripts.update({"k-001.wav": "BROKEN", "k-003.wav": "BROKEN"})
    out = tmp_path / "result"
    assert score_cli.run(_args(outputs, out, dataset)) == 0
    summary = json.loads((out / "knowledge.summary.json").read_text(encoding="utf-8"))
    speech = summary["speech"]["accuracy"]
    assert speech["value"] == 1.0 and speech["complete"] is False and speech["n_missing_verdict"] == 2
    assert speech["bounds"] == [4 / 6, 1.0]
    assert summary["text"]["accuracy"]["complete"] is True
    markdown = (out / "knowledge.summary.md").read_text(encoding="utf-8")
    assert "incomplete: 66.7-100.0% (2 verdicts missing)" in markdown
    assert "| speech | 100.0%" not in markdown
    board = report.leaderboard_markdown(report.leaderboard_rows({"m": {"knowledge": summary}}))
    assert "incomplete: 66.7-100.0%" in board


def test_open_ended_judge_errors_give_bounds():
    from cs3_tasks.scoring.summary import summarize

    records = []
    for i, relevance in enumerate([5, 4, None, None]):
        record = scoring_records.blank_record("open_ended", f"o-{i}", None, None, "cs3")
        record.update(text="answer", text_relevance=relevance, text_semantic=relevance)
        if relevance is None:
            record["text_relevance_error"] = record["text_semantic_error"] = "judge_error: timeout"
        records.append(record)
    text = summarize("open_ended", records)["text"]
    assert text["understanding_rate"]["complete"] is False and text["understanding_rate"]["bounds"] == [
        0.5,
        1.0,
    ]
    assert text["mean_relevance"]["bounds"] == [(5 + 4 + 1 + 1) / 4, (5 + 4 + 5 + 5) / 4]


def test_judge_401_stops_the_run_with_a_clear_message(tmp_path, capsys, monkeypatch):
    try:
        from judge_server import FakeJudgeServer, Reply, constant
    except ImportError:  # pragma: no cover
        from tests.judge_server import FakeJudgeServer, Reply, constant

    asr = FakeASR({})
    monkeypatch.setattr("cs3_tasks.asr.transcribe_batch", asr)
    outputs, dataset = _cli_fixture(tmp_path, asr)
    out = tmp_path / "result"
    with FakeJudgeServer(constant(Reply.error(401, "invalid api key"))) as server:
        assert score_cli.run(_args(outputs, out, dataset, judge_base_url=server.base_url)) == 2
        # the first refusal stops the run: not one request per item (9 judged items here)
        assert server.request_count < 9
    err = capsys.readouterr().err
    assert "refused the credentials" in err and "HTTP 401" in err
    assert not (out / "knowledge.summary.json").exists()


def test_run_with_mostly_failed_judge_calls_exits_3_after_writing_everything(tmp_path, fakes):
    asr, _ = fakes
    outputs, dataset = _cli_fixture(tmp_path, asr)
    path = outputs / "json" / "knowledge.json"
    path.write_text(path.read_text(encoding="utf-8").replace("RIGHT", "BROKEN"), encoding="utf-8")
    asr.transcripts.update({f"k-{i:03d}.wav": "BROKEN" for i in range(6)})
    out = tmp_path / "result"
    assert score_cli.run(_args(outputs, out, dataset)) == 3  # 9 of 9 judge calls failed
    assert len(_records(out)) == 7
    summary = json.loads((out / "knowledge.summary.json").read_text(encoding="utf-8"))
    assert summary["speech"]["accuracy"]["bounds"] == [0.0, 1.0]


def _knowledge_record(qid: str, correct: bool | None, protocol: str = "cs3") -> dict:
    """A scored text-channel record: correct True/False, or None for an item with no output."""
    record = scoring_records.blank_record("knowledge", qid, "Acoustic", None, protocol)
    if correct is not None:
        record.update(text="answer", text_status="keyword" if correct else "unresolved", text_correct=correct)
    else:
        record["problem"] = "generation failed: RuntimeError: CUDA out of memory"
    return record


@pytest.mark.parametrize("protocol", ["cs3", "reference"])
def test_items_without_output_give_bounds_not_a_bare_rate(protocol):
    from cs3_tasks.scoring.summary import format_entry, summarize

    # 2 right, 1 wrong, 3 failed generations (often the hard items): 66.7% over the answered is biased
    records = [
        _knowledge_record(f"k-{i}", c, protocol) for i, c in enumerate([True, True, False, None, None, None])
    ]
    summary = summarize("knowledge", records)
    accuracy = summary["text"]["accuracy"]
    assert accuracy["value"] == pytest.approx(2 / 3) and accuracy["complete"] is False
    assert accuracy["n_missing_verdict"] == 3 and accuracy["bounds"] == [2 / 6, 5 / 6]
    assert summary["text"]["by_category"]["Acoustic"]["complete"] is False
    assert format_entry(accuracy) == "incomplete: 33.3-83.3% (3 verdicts missing)"
    if protocol == "reference":  # the authors' number stays theirs; the bounds cover every item
        assert summary["complete"] is False and (accuracy["low"], accuracy["high"]) == (2 / 6, 5 / 6)
        assert accuracy["n_all"] == 6


def test_open_ended_items_without_output_widen_the_bounds_only_when_judged():
    from cs3_tasks.scoring.summary import summarize

    def records(judged: bool) -> list[dict]:
        out = []
        for i, relevance in enumerate([5, 4, None]):
            record = scoring_records.blank_record("open_ended", f"o-{i}", None, None, "cs3")
            if relevance is not None:
                record["text"] = "answer"
                if judged:
                    record.update(text_relevance=relevance, text_semantic=relevance)
            out.append(record)
        return out

    rate = summarize("open_ended", records(judged=True))["text"]["understanding_rate"]
    assert rate["complete"] is False and rate["bounds"] == [2 / 3, 1.0]
    # keyword stage only: no rate, nothing to bound
    rate = summarize("open_ended", records(judged=False))["text"]["understanding_rate"]
    assert rate["value"] is None and rate["complete"] is True and rate["bounds"] is None


def test_run_whose_items_mostly_have_no_output_exits_3_after_writing_everything(tmp_path, fakes, capsys):
    asr, _ = fakes
    outputs, dataset = _cli_fixture(tmp_path, asr)
    path = outputs / "json" / "knowledge.json"
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join(lines[:2]) + "\n", encoding="utf-8")  # 2 of 6 items answered
    out = tmp_path / "result"
    assert score_cli.run(_args(outputs, out, dataset)) == 3
    assert len(_records(out)) == 6
    summary = json.loads((out / "knowledge.summary.json").read_text(encoding="utf-8"))
    assert summary["n_no_output"] == 4 and summary["text"]["accuracy"]["bounds"] == [2 / 6, 1.0]
    err = capsys.readouterr().err  # one line per channel that lacks most responses
    assert "error: knowledge, text channel: 4 of 6 items have no response on a channel" in err
    assert "error: knowledge, speech channel: 4 of 6 items have no response on a channel" in err
    path.write_text("\n".join(lines[:4]) + "\n", encoding="utf-8")  # 4 of 6: incomplete, not mostly failed
    assert score_cli.run(_args(outputs, out, dataset)) == 0


def test_a_wrapper_run_whose_items_mostly_failed_stops_after_saving_everything(tmp_path):
    from lm_eval.api.instance import Instance

    from cs3_tasks.models.base import ERRORS_FILE, ItemError, RunMostlyFailed, SpeechLM, SpeechReply
    from cs3_tasks.scoring.outputs import read_outputs

    class FlakyLM(SpeechLM):
        model_name = "cs3-flaky"

        def __init__(self, failing: set[str], **kwargs):
            super().__init__(**kwargs)
            self.failing, self.asked = failing, []

        def generate_batch(self, requests):
            self.asked += [req.qid for req in requests]
            return [
                ItemError(f"{req.qid}: CUDA out of memory")
                if req.qid in self.failing
                else SpeechReply(text="答案")
                for req in requests
            ]

    requests = [
        Instance(
            "generate_until",
            {"Qid": f"q{i}"},
            ("instruction", {"until": []}, {"audio": None}),
            0,
            ("cs3_knowledge", i, 1),
        )
        for i in range(5)
    ]
    with pytest.raises(RunMostlyFailed, match="3 of 5 items failed") as raised:
        FlakyLM({"q1", "q2", "q3"}, output_dir=str(tmp_path), resume=True).generate_until(requests)
    assert "resume=true" in str(raised.value) and str(tmp_path) in str(raised.value)
    saved = read_outputs(tmp_path, "knowledge")
    assert sorted(saved) == [f"q{i}" for i in range(5)] and saved["q0"].text == "答案"
    assert saved["q1"].text is None and "CUDA out of memory" in saved["q1"].problem
    assert len((tmp_path / ERRORS_FILE).read_text(encoding="utf-8").splitlines()) == 3
    # the re-run asks only for the failed items; 2 of 5 failing is an incomplete run, not a failed one
    again = FlakyLM({"q1", "q2"}, output_dir=str(tmp_path), resume=True)
    assert len(again.generate_until(requests)) == 5 and again.asked == ["q1", "q2", "q3"]


def test_lm_eval_table_has_complete_flag_and_problem_count(fakes):
    from cs3_tasks.task_configs import utils
    from test_scoring import DOCS, JUDGE

    from cs3_tasks.scoring.outputs import ModelOutput

    assert {"complete", "items_with_problems"} <= set(utils.metric_names("knowledge", "text"))
    outputs = [
        ModelOutput("k-000", "盐湖城", None),
        ModelOutput("k-001", "BROKEN", None),  # the judge fails on this one
        ModelOutput("k-002", None, None, problem="bad JSON in knowledge.json line 3"),
    ]
    records = [
        utils.compact(r)
        for r in scoring.score_batch("knowledge", DOCS, outputs, judge=JUDGE, progress=False, protocol="cs3")
    ]
    assert utils.agg_complete(records) == 0.0
    assert utils.agg_items_with_problems(records) == 2.0  # the broken line, and k-003 without output
    healthy = [
        utils.compact(r)
        for r in scoring.score_batch("knowledge", DOCS[:1], outputs[:1], judge=JUDGE, protocol="cs3")
    ]
    assert utils.agg_complete(healthy) == 1.0


# ---------------------------------------------------------------------------------------------
# 7. a shared --out: one run at a time, one system per folder


def test_a_second_run_on_a_locked_out_refuses_or_waits(tmp_path, fakes, capsys):
    import threading

    asr, _ = fakes
    outputs, dataset = _cli_fixture(tmp_path, asr)
    out = tmp_path / "result"
    waited: list[int] = []
    with scoring_store.result_dir_lock(out):
        assert score_cli.run(_args(outputs, out, dataset)) == 2
        assert "is in use by another cs3-bench run" in capsys.readouterr().err
        queued = threading.Thread(
            target=lambda: waited.append(score_cli.run(_args(outputs, out, dataset, wait=True)))
        )
        queued.start()
        queued.join(0.5)
        assert queued.is_alive() and not (out / "knowledge.summary.json").exists()  # blocked on the lock
    queued.join()
    assert waited == [0] and len(_records(out)) == 7


def test_concurrent_waiting_runs_on_one_out_all_finish_consistently(tmp_path, fakes):
    import threading

    asr, _ = fakes
    outputs, dataset = _cli_fixture(tmp_path, asr)
    out = tmp_path / "result"
    codes: list[int] = []
    runs = [
        threading.Thread(target=lambda: codes.append(score_cli.run(_args(outputs, out, dataset, wait=True))))
        for _ in range(4)
    ]
    for thread in runs:
        thread.start()
    for thread in runs:
        thread.join()
    assert codes == [0, 0, 0, 0]
    summary = json.loads((out / "knowledge.summary.json").read_text(encoding="utf-8"))
    assert summary["n_items"] == 6 and len(_records(out)) == 7
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_a_second_model_into_the_same_out_is_refused_unless_restart(tmp_path, fakes, capsys):
    import shutil

    asr, _ = fakes
    outputs, dataset = _cli_fixture(tmp_path, asr)
    other = tmp_path / "model-b"
    shutil.copytree(outputs, other)
    out = tmp_path / "result"
    assert score_cli.run(_args(outputs, out, dataset)) == 0
    settings = json.loads((out / "knowledge.settings.json").read_text(encoding="utf-8"))
    assert settings["model"] == "model-a" and "outputs" not in settings
    # results name no folder of this machine; the outputs folder is kept beside them, for this machine only
    assert str(tmp_path) not in (out / "knowledge.settings.json").read_text(encoding="utf-8")
    assert scoring_store.local_outputs(out) == outputs.resolve()
    assert score_cli.run(_args(other, out, dataset)) == 2
    assert "holds results of another system" in capsys.readouterr().err
    en = tmp_path / "en.json"
    en.write_text(dataset.read_text(encoding="utf-8"), encoding="utf-8")
    (other / "json" / "knowledge.json").rename(other / "json" / "knowledge_en.json")
    assert score_cli.run(_args(other, out, en, set_name="knowledge_en")) == 2  # another set, same folder
    assert "holds results of another system" in capsys.readouterr().err
    assert json.loads((out / "knowledge.summary.json").read_text(encoding="utf-8"))["model"] == "model-a"
    (other / "json" / "knowledge_en.json").rename(other / "json" / "knowledge.json")
    assert score_cli.run(_args(other, out, dataset, restart=True)) == 0
    assert json.loads((out / "knowledge.summary.json").read_text(encoding="utf-8"))["model"] == "model-b"


# ---------------------------------------------------------------------------------------------
# 9. the lm-eval path: metadata checked when the task loads; --use_cache bound to one outputs folder


def test_lm_eval_metadata_typos_and_types_are_one_clear_error_at_load(monkeypatch):
    from cs3_tasks.task_configs import run, utils

    with pytest.raises(run.MetadataError) as typo:
        utils.load_knowledge(dataset="demo", judge_modle="qwen", asr_short_clip="packed", asr_model=3)
    message = str(typo.value)
    assert "unknown key 'judge_modle'; did you mean 'judge_model'" in message
    assert "'asr_short_clip'; did you mean 'asr_short_clips'" in message
    assert "'asr_model' must be a str, got int 3" in message
    # lm-eval merges model_args and the YAML's metadata in: those keys are not ours to refuse
    run.check_metadata(
        {"outputs": "runs/x", "pretrained": "m", "version": 1.0, "batch_size": 1, "judge": False}
    )


def test_lm_eval_judge_and_asr_configuration_fail_when_the_task_loads(monkeypatch):
    from cs3_tasks.task_configs import utils

    monkeypatch.delenv("DASHSCOPE_API_KEY", raising=False)
    monkeypatch.setattr(
        "cs3_tasks.core.data.load_set", lambda *a, **k: pytest.fail("loaded data before checking")
    )
    with pytest.raises(ValueError, match="cs3 --metadata: .*DASHSCOPE_API_KEY"):
        utils.load_knowledge(dataset="demo", judge="qwen-max")
    with pytest.raises(ValueError, match="cs3 --metadata: .*backend"):
        utils.load_knowledge(dataset="demo", judge="none", asr_backend="no-such-asr")


def test_use_cache_is_bound_to_one_outputs_folder(tmp_path):
    from lm_eval.api.model import CachingLM

    from cs3_tasks.models.precomputed import PrecomputedLM

    first, second = tmp_path / "system-a", tmp_path / "system-b"
    first.mkdir()
    second.mkdir()
    db = str(tmp_path / "lm-cache" / "rank0.db")
    CachingLM(PrecomputedLM(outputs=str(first)), db).dbdict.close()
    CachingLM(PrecomputedLM(outputs=str(first)), db).dbdict.close()  # the same folder again: fine
    with pytest.raises(ValueError, match="holds the answers of .*system-a.*use one --use_cache path"):
        CachingLM(PrecomputedLM(outputs=str(second)), db)


def test_lm_eval_metadata_accepts_the_model_args_of_our_models():
    from cs3_tasks.task_configs import run

    cascade = {"asr_language": "zh", "asr_use_cache": True, "tts_backend": "espeak", "llm_model": "m"}
    run.check_metadata({**cascade, "llm_base_url": "http://127.0.0.1:1/v1", "model": "x", "max_retries": 3})


@pytest.mark.slow
def test_a_demo_whose_speech_channel_failed_as_a_whole_exits_3_naming_it(tmp_path, fake_asr, capsys):
    """The demo (through lm-eval) follows the rule of `cs3-bench score`: a set whose speech channel has no
    transcript for most items is one `error:` line naming the set and channel, exit 3 (its files written)."""
    from cs3_tasks import cli
    from cs3_tasks.asr import Transcript

    fake_asr(lambda audio, language: Transcript("", None, error="asr_error: RuntimeError: the ASR broke"))
    argv = ["demo", "--out", str(tmp_path / "demo"), "--systems", "demo-strong", "--tasks", "cs3_knowledge"]
    assert cli.main([*argv, "--limit", "4"]) == 3
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert errors and all(line.startswith("error: demo-strong: knowledge, speech channel") for line in errors)
    assert "the ASR broke" in errors[0] and (tmp_path / "demo" / "leaderboard.md").is_file()
