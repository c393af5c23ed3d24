"""Issue 22 (reliability), items 1, 7, 8, 9, 10: results keyed by the content they came from, an empty outputs
file, one bad row, faults of the file system named in one line, the leaderboard table and the settings
mismatch message. Each test failed on the code before its fix. Models and datasets from test_score_many."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import numpy as np
import pytest
from test_protocol_cli import DOCS
from test_score_many import ANSWERS, _args, _models, _ours, _silence

from cs3_tasks.cli import score as score_cli
from cs3_tasks.core import cache as cache_module
from cs3_tasks.core.audio import write_wav
from cs3_tasks.scoring import store as scoring_store


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CS3_BENCH_CACHE", str(tmp_path / "cache"))


def _hear_by_content(audio, language) -> str:
    """A clip of silence is heard as "不知道"; any other clip as the answer of its Qid (its file name)."""
    import soundfile

    samples, _rate = soundfile.read(str(audio))
    if not np.any(samples):
        return "不知道"
    return f"答案{int(Path(audio).stem.split('-')[-1])}"


@pytest.fixture
def asr(fake_asr):
    return fake_asr(_hear_by_content)


def _one(tmp_path: Path, folder: Path, *extra: str, out: Path | None = None):
    return _args(tmp_path, "--outputs", str(folder), "--set", "knowledge", "--no-judge", *extra, out=out)


def _records(out: Path, set_name: str = "knowledge") -> dict[str, dict]:
    return scoring_store.read_records(out / f"{set_name}.records.jsonl")


# ---------------------------------------------------------------------------------------------
# 1. results keyed by content


def test_replaced_wavs_at_the_same_paths_are_transcribed_again(tmp_path, asr):
    model = _ours(tmp_path / "models" / "alpha")
    out = tmp_path / "results"
    assert score_cli.run(_one(tmp_path, model, out=out)) == 0
    assert {r["transcript"] for r in _records(out).values()} == {"不知道"}
    assert all(r.get("input_key") for r in _records(out).values())
    for qid in ANSWERS:  # the same paths, other audio
        write_wav(model / "knowledge" / f"{qid}.wav", np.full(1600, 0.1, dtype=np.float32))
    asr.calls.clear()
    assert score_cli.run(_one(tmp_path, model, out=out)) == 0
    assert len(asr.calls[0]["audios"]) == len(ANSWERS)
    assert {q: r["transcript"] for q, r in _records(out).items()} == {q: f"答案{int(q[-1])}" for q in ANSWERS}
    assert all(r["speech_correct"] for r in _records(out).values())
    # one wav back to silence: only that item is transcribed again
    _silence(model / "knowledge" / "k-002.wav")
    asr.calls.clear()
    assert score_cli.run(_one(tmp_path, model, out=out)) == 0
    assert [Path(a).name for a in asr.calls[0]["audios"]] == ["k-002.wav"]
    assert _records(out)["k-002"]["transcript"] == "不知道"


def test_records_without_an_input_key_are_scored_again(tmp_path, asr):
    model = _ours(tmp_path / "models" / "alpha")
    out = tmp_path / "results"
    assert score_cli.run(_one(tmp_path, model, out=out)) == 0
    path = out / "knowledge.records.jsonl"
    old = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    path.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "input_key"}) + "\n" for r in old))
    settings_path = out / "knowledge.settings.json"  # a result dir written before the dataset was recorded
    settings = json.loads(settings_path.read_text(encoding="utf-8"))
    settings_path.write_text(json.dumps({k: v for k, v in settings.items() if k != "dataset_sha256"}))
    asr.calls.clear()
    assert score_cli.run(_one(tmp_path, model, out=out)) == 0
    assert len(asr.calls[0]["audios"]) == len(ANSWERS)
    assert [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] == old
    assert json.loads(settings_path.read_text(encoding="utf-8")) == settings


def test_another_dataset_into_the_same_out_is_refused_naming_it(tmp_path, asr, capsys):
    model = _ours(tmp_path / "models" / "alpha")
    out = tmp_path / "results"
    assert score_cli.run(_one(tmp_path, model, out=out)) == 0
    assert _records(out)["k-000"]["text_correct"] is True  # "答案0"
    other = tmp_path / "other-data"
    other.mkdir()
    docs = [{**doc, "Answer_zh": f"别的{i}", "Answer_en": f"other{i}"} for i, doc in enumerate(DOCS)]
    (other / "cs_knowledge.json").write_text(json.dumps(docs, ensure_ascii=False), encoding="utf-8")
    before = (out / "knowledge.records.jsonl").read_bytes()
    args = _one(tmp_path, model, out=out)
    args.dataset = str(other)
    assert score_cli.run(args) == 2
    err = capsys.readouterr().err
    assert "dataset_sha256" in err and "--restart" in err and "Traceback" not in err
    assert (out / "knowledge.records.jsonl").read_bytes() == before
    args.restart = True
    assert score_cli.run(args) == 0
    assert _records(out)["k-000"]["text_correct"] is not True
    # the same dataset content at another path is the same dataset
    moved = tmp_path / "moved-data"
    other.rename(moved)
    args.dataset, args.restart = str(moved), False
    asr.calls.clear()
    assert score_cli.run(args) == 0 and asr.calls == []


def test_a_changed_doc_rescores_that_item(tmp_path, asr):
    from cs3_tasks.scoring.outputs import ModelOutput

    store = scoring_store.RecordsFile(tmp_path / "out", "knowledge")
    store.open({"protocol": "cs3"})
    scored: list[list[str]] = []

    def score(docs, outputs, append):
        scored.append([d["Qid"] for d in docs])
        for doc in docs:
            append({"qid": doc["Qid"], "text": "x", "audio": None})

    docs = [dict(d) for d in DOCS]
    outputs = {d["Qid"]: ModelOutput(d["Qid"], "x", None) for d in docs}
    kwargs = {"doc_id": lambda d: d["Qid"], "doc_fields": scoring_store.SCORED_DOC_FIELDS}
    store.score_pending(docs, outputs, score, **kwargs)
    docs[1]["Answer_zh"] = "改了"
    docs[2]["Source"] = "not read by scoring"
    store.score_pending(docs, outputs, score, **kwargs)
    assert scored == [[d["Qid"] for d in DOCS], ["k-001"]]


# ---------------------------------------------------------------------------------------------
# 7. an outputs file without rows


def test_an_empty_outputs_file_is_an_error_for_its_set(tmp_path, asr, capsys):
    root = tmp_path / "models"
    _ours(root / "alpha")
    _ours(root / "beta")
    (root / "beta" / "knowledge.jsonl").write_bytes(b"")
    out = tmp_path / "results"
    assert score_cli.run(_args(tmp_path, "--no-judge")) != 0
    err = capsys.readouterr().err
    beta = _models(out)["models"]["beta"]
    assert beta["status"] in ("incomplete", "failed") and beta["exit_code"] not in (0, None)
    assert "knowledge.jsonl" in beta["error"] and "no rows" in beta["error"]
    assert "knowledge.jsonl" in err
    assert "beta" in (out / "leaderboard.md").read_text(encoding="utf-8").split("Incomplete")[-1]
    assert _models(out)["models"]["alpha"]["status"] == "scored"

    single = tmp_path / "single"
    assert score_cli.run(_one(tmp_path, root / "beta", out=single)) == 2
    err = capsys.readouterr().err
    assert "knowledge.jsonl" in err and "no rows" in err and "Traceback" not in err


# ---------------------------------------------------------------------------------------------
# 8. one bad row is that item's problem


def test_a_qid_or_audio_name_too_long_for_the_file_system_is_one_items_problem(tmp_path, asr, capsys):
    model = _ours(tmp_path / "models" / "alpha")
    long_name = "k" * 300
    with open(model / "knowledge.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"Qid": "k-009", "text": "x", "audio": f"knowledge/{long_name}.wav"}) + "\n")
    authors = tmp_path / "models" / "beta"
    (authors / "json").mkdir(parents=True)
    rows = [{"Qid": q, "Response": t} for q, t in ANSWERS.items()] + [{"Qid": long_name, "Response": "x"}]
    (authors / "json" / "cs_knowledge.json").write_text(json.dumps(rows, ensure_ascii=False), "utf-8")
    for qid in ANSWERS:
        _silence(authors / "wav" / "cs_knowledge" / f"{qid}.wav")
    for folder in (model, authors):
        out = tmp_path / f"results-{folder.name}"
        assert score_cli.run(_one(tmp_path, folder, out=out)) == 0, capsys.readouterr().err
        records = _records(out)
        assert "Traceback" not in capsys.readouterr().err
        assert {"k-000", "k-001", "k-002"} <= set(records)
        bad = [r for r in records.values() if r["problem"] and "name too long" in r["problem"].lower()]
        assert len(bad) == 1, [r["problem"] for r in records.values()]


def test_a_json_line_nested_too_deep_is_one_items_problem_naming_file_and_line(tmp_path, asr, capsys):
    model = _ours(tmp_path / "models" / "alpha")
    lines = (model / "knowledge.jsonl").read_text(encoding="utf-8").splitlines()
    lines.insert(1, '{"Qid": "k-009", "text": ' + "[" * 200_000 + "]" * 200_000 + "}")
    (model / "knowledge.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "results"
    assert score_cli.run(_one(tmp_path, model, out=out)) == 0
    assert "Traceback" not in capsys.readouterr().err
    records = _records(out)
    assert "knowledge.jsonl line 2" in records["k-009"]["problem"]
    assert "nested too deep" in records["k-009"]["problem"]
    assert all(records[q]["speech_status"] != "missing" for q in ANSWERS)


# ---------------------------------------------------------------------------------------------
# 9. the file system's faults: one line naming the path and the cause, exit 2, nothing lost


def _one_error_line(err: str, *needles: str) -> None:
    print(err)  # shown with -s: the messages as a user sees them
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert errors and all(needle in errors[0] for needle in needles), err


def _failing_writes(monkeypatch, code: int, after: int = 0) -> None:
    """atomic_write raises OSError(code) from its ``after``-th call on."""
    real = cache_module.atomic_write
    calls = [0]

    def write(path, data):
        calls[0] += 1
        if calls[0] > after:
            raise OSError(code, __import__("os").strerror(code), str(path))
        real(path, data)

    from cs3_tasks.scoring import store, summary

    for module in (cache_module, store, summary):  # every writer of a scoring run's files
        monkeypatch.setattr(module, "atomic_write", write)


def test_a_read_only_out_is_one_line_naming_it(tmp_path, asr, capsys, monkeypatch):
    model = _ours(tmp_path / "models" / "alpha")
    out = tmp_path / "results"
    _failing_writes(monkeypatch, errno.EROFS)
    assert score_cli.run(_one(tmp_path, model, out=out)) == 2
    _one_error_line(capsys.readouterr().err, str(out), "Read-only file system")


def test_a_full_disk_is_one_line_and_the_resume_is_identical(tmp_path, asr, capsys, monkeypatch):
    model = _ours(tmp_path / "models" / "alpha")
    fresh = tmp_path / "fresh"
    assert score_cli.run(_one(tmp_path, model, out=fresh)) == 0
    out = tmp_path / "results"
    with monkeypatch.context() as patch:
        _failing_writes(patch, errno.ENOSPC, after=2)  # settings.json and the records, then the disk is full
        assert score_cli.run(_one(tmp_path, model, out=out)) == 2
    _one_error_line(capsys.readouterr().err, str(out), "No space left on device")
    assert len(_records(out)) == len(ANSWERS)  # the records written are kept
    assert score_cli.run(_one(tmp_path, model, out=out)) == 0
    for name in ("knowledge.records.jsonl", "knowledge.summary.json"):
        assert (out / name).read_bytes() == (fresh / name).read_bytes()


def test_a_cache_dir_that_is_a_file_is_one_line_naming_it(tmp_path, asr, capsys, monkeypatch, judge_server):
    from test_score_many import _judge, judge_reply

    model = _ours(tmp_path / "models" / "alpha")
    not_a_dir = tmp_path / "cache-file"
    not_a_dir.write_text("x", encoding="utf-8")
    monkeypatch.setenv("CS3_BENCH_CACHE", str(not_a_dir))
    args = _args(tmp_path, "--outputs", str(model), "--set", "knowledge", *_judge(judge_server(judge_reply)))
    assert score_cli.run(args) == 2
    _one_error_line(capsys.readouterr().err, str(not_a_dir))


def test_an_unwritable_judge_cache_is_one_line_naming_it(tmp_path, asr, capsys, judge_server):
    from test_score_many import _judge, judge_reply

    model = _ours(tmp_path / "models" / "alpha")
    blocker = tmp_path / "blocker"
    blocker.write_text("x", encoding="utf-8")
    cache = blocker / "judge.sqlite"  # its folder is a file
    extra = ("--judge-cache", str(cache), *_judge(judge_server(judge_reply)))
    args = _args(tmp_path, "--outputs", str(model), "--set", "knowledge", *extra)
    assert score_cli.run(args) == 2
    _one_error_line(capsys.readouterr().err, str(cache))


@pytest.mark.parametrize("name", ["leaderboard.md", "models.json"])
def test_a_model_folder_named_like_a_file_of_the_results_is_refused(tmp_path, asr, capsys, name):
    root = tmp_path / "models"
    _ours(root / "alpha")
    _ours(root / name)
    out = tmp_path / "results"
    assert score_cli.run(_args(tmp_path, "--no-judge")) == 2
    _one_error_line(capsys.readouterr().err, str(root / name), str(out / name))


# ---------------------------------------------------------------------------------------------
# 10. the leaderboard table and the settings mismatch message


def test_a_bar_or_newline_in_a_model_name_keeps_the_leaderboard_table(tmp_path, asr):
    root = tmp_path / "models"
    _ours(root / "a|b")
    _ours(root / "c\nd")
    out = tmp_path / "results"
    assert score_cli.run(_args(tmp_path, "--no-judge")) == 0
    markdown = (out / "leaderboard.md").read_text(encoding="utf-8")
    table = [line for line in markdown.splitlines() if "|" in line]
    header_cells = table[0].count("|") - table[0].count("\\|")
    assert len(table) == 4  # header, rule, two models
    for row in table[2:]:
        assert row.count("|") - row.count("\\|") == header_cells, row
    assert any("a\\|b" in row for row in table) and any("c d" in row for row in table)
    (root / "e\nf").mkdir()  # no outputs: listed under the table on one line
    (root / "c\nd" / "knowledge.jsonl").write_bytes(b"")  # incomplete: named under the table on one line
    assert score_cli.run(_args(tmp_path, "--no-judge")) == 1
    markdown = (out / "leaderboard.md").read_text(encoding="utf-8")
    assert "): c d." in markdown and "Skipped folders (no outputs): e f." in markdown


def test_a_settings_mismatch_names_the_key_that_differs(tmp_path, asr, capsys):
    model = _ours(tmp_path / "models" / "alpha")
    out = tmp_path / "results"
    assert score_cli.run(_one(tmp_path, model, out=out)) == 0
    args = _one(tmp_path, model, out=out)
    args.asr_model = "another-asr"
    assert score_cli.run(args) == 2
    err = capsys.readouterr().err
    _one_error_line(err, "asr.model.name: 'fake-asr' -> 'another-asr'", "--restart")
    assert "'protocol':" not in err  # the keys that agree are not printed


def test_outputs_root_stops_at_an_unwritable_judge_cache(tmp_path, asr, capsys, judge_server):
    from test_score_many import _judge, judge_reply

    root = tmp_path / "models"
    _ours(root / "alpha")
    _ours(root / "beta")
    blocker = tmp_path / "blocker"
    blocker.write_text("x", encoding="utf-8")
    cache = blocker / "judge.sqlite"
    args = _args(tmp_path, "--judge-cache", str(cache), *_judge(judge_server(judge_reply)))
    assert score_cli.run(args) == 2
    _one_error_line(capsys.readouterr().err, str(cache))
    assert _models(tmp_path / "results")["models"]["beta"]["status"] == "pending"  # not tried: same fault


def test_a_cache_file_met_while_reading_the_reference_prompts_is_one_line(
    tmp_path, asr, capsys, monkeypatch, judge_server
):
    from test_score_many import _judge, judge_reply

    not_a_dir = tmp_path / "cache-file"
    not_a_dir.write_text("x", encoding="utf-8")
    monkeypatch.setenv("CS3_BENCH_CACHE", str(not_a_dir))
    monkeypatch.delenv("CS3_REFERENCE_SCRIPTS", raising=False)
    model = _ours(tmp_path / "models" / "alpha")
    args = _args(tmp_path, "--outputs", str(model), "--set", "knowledge", *_judge(judge_server(judge_reply)))
    args.protocol = "reference"
    assert score_cli.run(args) == 2
    _one_error_line(capsys.readouterr().err, str(not_a_dir))


def test_a_directory_or_fifo_given_as_audio_is_said_as_such(tmp_path):
    """Issue 22 item 10: a directory or a FIFO where a wav should be is named as what it is, not "missing"
    (and the FIFO is never opened: reading it would block the run)."""
    import os

    from cs3_tasks.scoring.outputs import read_outputs

    folder = tmp_path / "model"
    (folder / "knowledge" / "k-000.wav").mkdir(parents=True)
    os.mkfifo(folder / "knowledge" / "k-001.wav")
    rows = [{"Qid": f"k-00{i}", "text": "答案", "audio": f"knowledge/k-00{i}.wav"} for i in range(2)]
    (folder / "knowledge.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    outputs = read_outputs(folder, "knowledge")
    # the item's speech all the same: the ASR names what is there instead, without opening it
    assert [outputs[q].audio for q in ("k-000", "k-001")] == [str(folder / r["audio"]) for r in rows]
    from cs3_tasks.asr import transcribe_batch

    audios = [outputs["k-000"].audio, outputs["k-001"].audio]
    transcripts = transcribe_batch(audios, use_cache=False, progress=False)
    assert "is a directory" in transcripts[0].error and "FIFO" in transcripts[1].error
