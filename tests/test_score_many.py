"""``cs3-bench score --outputs-root``: many models' outputs, a result dir each, the leaderboard, models.json.

Models are tiny output folders built here (ours, the authors' layout, a GBK file); the ASR is `fake_asr`, the
judge `--no-judge` or the loopback `judge_server`. Outputs and docs come from test_protocol_cli.
"""

from __future__ import annotations

import argparse
import csv
import json
import threading
from pathlib import Path

import numpy as np
import pytest
from judge_server import Reply
from test_protocol_cli import DOCS, EN_DOCS

from cs3_tasks.cli import score as score_cli
from cs3_tasks.cli import score_many
from cs3_tasks.core.audio import write_wav
from cs3_tasks.scoring import store as scoring_store

ANSWERS = {"k-000": "答案0", "k-001": "RIGHT 1", "k-002": "不知道", "k-003": "答案是3"}
EN_ANSWERS = {"e-000": "It is answer0.", "e-001": "no idea"}


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CS3_BENCH_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def asr(fake_asr):
    # a clip is heard as the text its file name asks for: <Qid>.wav -> "RIGHT spoken", broken-*.wav -> BROKEN
    return fake_asr(lambda audio, language: "BROKEN spoken" if "broken" in str(audio) else "RIGHT spoken")


def _silence(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_wav(path, np.zeros(1600, dtype=np.float32))


def _authors(folder: Path) -> Path:
    """The authors' layout: json/cs_<set>.json (one JSON array, as they write it), wav/cs_<set>/<Qid>.wav."""
    (folder / "json").mkdir(parents=True)
    for set_name, rows in (("knowledge", ANSWERS), ("knowledge_en", EN_ANSWERS)):
        array = [{"Qid": qid, "Response": text} for qid, text in rows.items()]
        (folder / "json" / f"cs_{set_name}.json").write_text(
            json.dumps(array, ensure_ascii=False, indent=4), "utf-8"
        )
        for qid in rows:
            _silence(folder / "wav" / f"cs_{set_name}" / f"{qid}.wav")
    return folder


def _ours(
    folder: Path, answers: dict[str, str] = ANSWERS, en: dict[str, str] = EN_ANSWERS, wav: str = ""
) -> Path:
    """Our layout: <set>.jsonl ({Qid, text, audio}) + <set>/<wav><Qid>.wav."""
    for set_name, rows in (("knowledge", answers), ("knowledge_en", en)):
        lines = []
        for qid, text in rows.items():
            _silence(folder / set_name / f"{wav}{qid}.wav")
            lines.append(json.dumps({"Qid": qid, "text": text, "audio": f"{set_name}/{wav}{qid}.wav"}))
        (folder / f"{set_name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def _gbk(folder: Path) -> Path:
    """A text-only model whose knowledge.jsonl was saved as GBK."""
    folder.mkdir(parents=True)
    rows = [json.dumps({"Qid": q, "text": f"回答：{t}"}, ensure_ascii=False) for q, t in ANSWERS.items()]
    (folder / "knowledge.jsonl").write_bytes(("\n".join(rows) + "\n").encode("gbk"))
    return folder


def _dataset(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    folder.mkdir(exist_ok=True)
    for name, docs in (("cs_knowledge.json", DOCS), ("cs_knowledge_en.json", EN_DOCS)):
        (folder / name).write_text(json.dumps(docs, ensure_ascii=False), encoding="utf-8")
    return folder


def _args(
    tmp_path: Path, *extra: str, root: Path | None = None, out: Path | None = None
) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    score_cli.add_arguments(parser)
    given = ["--outputs-root", str(root or tmp_path / "models")] if "--outputs" not in extra else []
    return parser.parse_args(
        [
            *given,
            "--out",
            str(out or tmp_path / "results"),
            "--dataset",
            str(_dataset(tmp_path)),
            "--asr-model",
            "fake-asr",
            "--protocol",
            "cs3",
            "--no-progress",
            *extra,
        ]
    )


def _judge(server) -> list[str]:
    return ["--judge-base-url", server.base_url, "--judge-api-key-env", "", "--judge-model", "fake-judge"]


def judge_reply(request) -> Reply | str:
    """RIGHT in the response: correct; BROKEN: HTTP 400 (a failed verdict); else wrong. In the language of
    the prompt (the English set's prompt asks for True/False)."""
    if "BROKEN" in request.prompt:
        return Reply.error(400, "bad request")
    right = "RIGHT" in request.prompt
    if "正确" in request.prompt:
        return "正确 与答案一致" if right else "错误 不一致"
    return "True, consistent" if right else "False, not consistent"


def _files(out: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != scoring_store.LOCK_FILE
    }


def _models(out: Path) -> dict:
    return json.loads((out / score_many.MODELS_FILE).read_text(encoding="utf-8"))


def _board(out: Path) -> list[dict]:
    return list(csv.DictReader((out / "leaderboard.csv").read_text(encoding="utf-8").splitlines()))


def test_a_bad_model_does_not_stop_the_others(tmp_path, asr, capsys):
    root = tmp_path / "models"
    _ours(root / "alpha")
    _authors(root / "beta")
    _gbk(root / "gamma")
    _ours(root / ".hidden")  # passed over
    (root / "notes").mkdir()  # no outputs: skipped and listed
    (root / "notes" / "README.txt").write_text("not a model", encoding="utf-8")
    out = tmp_path / "results"
    assert score_cli.run(_args(tmp_path, "--no-judge")) == 1  # some (1 of 3) failed
    err = capsys.readouterr().err
    assert "error: model gamma: failed (exit 2)" in err and "looks like GBK" in err
    assert "skipped" in err and "notes" in err and ".hidden" not in err

    models = _models(out)
    assert list(models["models"]) == ["alpha", "beta", "gamma"] and models["exit_code"] == 1
    assert models["skipped"] == {"notes": "no outputs of any set (json/cs_<set>.json or <set>.jsonl)"}
    alpha, beta, gamma = (models["models"][m] for m in ("alpha", "beta", "gamma"))
    assert alpha["status"] == beta["status"] == "scored" and alpha["exit_code"] == 0
    assert alpha["sets"] == beta["sets"] == ["knowledge", "knowledge_en"]
    assert gamma["status"] == "failed" and gamma["exit_code"] == 2 and "looks like GBK" in gamma["error"]
    assert gamma["sets"] == [] and not (out / "gamma" / "knowledge.summary.json").exists()
    assert not (out / ".hidden").exists()

    assert [r["model"] for r in _board(out)] == ["alpha", "beta"]
    markdown = (out / "leaderboard.md").read_text(encoding="utf-8")
    assert (
        "- gamma:" in markdown
        and "looks like GBK" in markdown
        and "Skipped folders (no outputs): notes" in markdown
    )
    assert (out / "accuracy.png").read_bytes().startswith(b"\x89PNG")
    # each result dir is what `cs3-bench score --outputs ROOT/<model> --model-name <model>` writes
    summary = json.loads((out / "beta" / "knowledge.summary.json").read_text(encoding="utf-8"))
    assert summary["model"] == "beta" and "outputs" not in summary["settings"]
    assert scoring_store.local_outputs(out / "beta") == (root / "beta").resolve()
    assert summary["cs_vs_en"]["text"]["acc_en"] == 0.5

    # the fixed file is picked up on the re-run; the finished models cost no ASR
    (root / "gamma" / "knowledge.jsonl").write_text(
        (root / "gamma" / "knowledge.jsonl").read_bytes().decode("gbk"), encoding="utf-8"
    )
    asr.calls.clear()
    assert score_cli.run(_args(tmp_path, "--no-judge")) == 0
    assert asr.calls == []  # gamma is text-only; alpha and beta are done
    assert _models(out)["models"]["gamma"] == {
        "outputs": "gamma",  # names, never a folder of this machine
        "result_dir": "gamma",
        "status": "scored",
        "exit_code": 0,
        "sets": ["knowledge"],
        "error": None,
    }
    assert [r["model"] for r in _board(out)] == ["alpha", "beta", "gamma"]
    assert "- gamma:" not in (out / "leaderboard.md").read_text(encoding="utf-8")


def test_resume_rescores_only_what_failed_and_gives_identical_files(tmp_path, asr, judge_server, monkeypatch):
    root = tmp_path / "models"
    _ours(root / "alpha")
    _authors(root / "beta")
    # delta: every judge request fails (HTTP 400): its summaries are incomplete, the model too
    _ours(
        root / "delta", {q: f"BROKEN {q}" for q in ANSWERS}, {q: f"BROKEN {q}" for q in EN_ANSWERS}, "broken-"
    )
    server = judge_server(judge_reply)
    out = tmp_path / "results"
    assert score_cli.run(_args(tmp_path, *_judge(server))) == 1  # 1 of 3 incomplete
    models = _models(out)["models"]
    assert models["delta"]["status"] == "incomplete" and models["delta"]["exit_code"] == 3
    assert "judge verdicts of this run failed" in models["delta"]["error"]
    assert models["alpha"]["status"] == models["beta"]["status"] == "scored"
    assert [r["model"] for r in _board(out)][2:] == ["delta"]  # sorted by accuracy: delta has none
    markdown = (out / "leaderboard.md").read_text(encoding="utf-8")
    assert (
        "Incomplete (most judge verdicts failed, or most items have no response; see models.json): delta."
        in markdown
    )
    assert "incomplete:" in markdown  # delta's accuracies are bounds, as `report` shows them
    first = _files(out)
    assert server.request_count > 0 and len(asr.calls) == 6  # 3 models x 2 sets

    # a fresh cache: a finished model that were judged or transcribed again would show here
    monkeypatch.setenv("CS3_BENCH_CACHE", str(tmp_path / "cache2"))
    server.reset()
    asr.calls.clear()
    assert score_cli.run(_args(tmp_path, *_judge(server))) == 1
    # only delta's items are scored again (the fake ASR has no cache; the real one's would answer)
    assert asr.calls and all("/delta/" in audio for call in asr.calls for audio in call["audios"])
    prompts = [r.prompt for r in server.requests]
    assert prompts and all("BROKEN" in p for p in prompts)  # only delta's failed verdicts are retried
    assert _files(out) == first


def test_results_do_not_depend_on_the_other_models_or_their_order(tmp_path, asr, judge_server, monkeypatch):
    root = tmp_path / "models"
    _ours(root / "alpha")
    server = judge_server(judge_reply)
    alone = tmp_path / "alone"  # alpha before beta was there
    assert score_cli.run(_args(tmp_path, *_judge(server), out=alone)) == 0
    _authors(root / "beta")
    together = tmp_path / "together"
    assert score_cli.run(_args(tmp_path, *_judge(server), out=together)) == 0

    # one at a time, in the other order, with `score --outputs` and `report`
    apart = tmp_path / "apart"
    for name in ("beta", "alpha"):
        extra = ("--outputs", str(root / name), "--set", "all", "--model-name", name, *_judge(server))
        assert score_cli.run(_args(tmp_path, *extra, out=apart / name)) == 0
    from cs3_tasks import cli

    assert cli.main(["report", str(apart / "alpha"), str(apart / "beta"), "--out", str(apart)]) == 0

    for name in ("alpha", "beta"):
        for set_name in ("knowledge", "knowledge_en"):
            for suffix in ("records.jsonl", "summary.json"):
                file = f"{set_name}.{suffix}"
                assert (together / name / file).read_bytes() == (apart / name / file).read_bytes(), file
    for file in ("knowledge.records.jsonl", "knowledge_en.records.jsonl", "knowledge.summary.json"):
        assert (together / "alpha" / file).read_bytes() == (alone / "alpha" / file).read_bytes(), file
    assert _board(together) == _board(apart)

    # a finished run costs no ASR and no judge call, even with an empty cache, and changes no file
    before = _files(together)
    monkeypatch.setenv("CS3_BENCH_CACHE", str(tmp_path / "cache2"))
    server.reset()
    asr.calls.clear()
    assert score_cli.run(_args(tmp_path, *_judge(server), out=together)) == 0
    assert server.request_count == 0 and asr.calls == [] and _files(together) == before
    assert _board(alone) == [r for r in _board(together) if r["model"] == "alpha"]


def test_a_crash_of_one_model_is_reported_redacted(tmp_path, fake_asr):
    root = tmp_path / "models"
    _ours(root / "alpha")
    _ours(root / "beta", wav="broken-")

    def hear(audio, language):
        if "broken" in str(audio):
            raise RuntimeError("decoder crashed at http://user:hunter2@asr.example/v1?token=abcdef123")
        return "RIGHT spoken"

    fake_asr(hear)
    assert score_cli.run(_args(tmp_path, "--no-judge")) == 1
    beta = _models(tmp_path / "results")["models"]["beta"]
    assert beta["status"] == "failed" and beta["exit_code"] == score_many.CRASHED
    assert beta["error"].startswith("RuntimeError: decoder crashed")
    assert "hunter2" not in beta["error"] and "abcdef123" not in beta["error"]
    assert "hunter2" not in (tmp_path / "results" / "leaderboard.md").read_text(encoding="utf-8")
    assert [r["model"] for r in _board(tmp_path / "results")] == ["alpha"]


def test_an_empty_root_and_bad_options_are_clear_errors(tmp_path, asr, capsys):
    root = tmp_path / "models"
    root.mkdir()
    out = tmp_path / "results"
    assert score_cli.run(_args(tmp_path, "--no-judge")) == 2
    assert "no model folder in" in capsys.readouterr().err and not out.exists()
    (root / "empty").mkdir()
    assert score_cli.run(_args(tmp_path, "--no-judge")) == 2
    assert "(skipped: empty)" in capsys.readouterr().err and not out.exists()
    assert score_cli.run(_args(tmp_path, "--no-judge", root=tmp_path / "nowhere")) == 2
    assert "is not a folder" in capsys.readouterr().err
    _ours(root / "alpha")
    assert score_cli.run(_args(tmp_path, "--no-judge", "--model-name", "x")) == 2
    assert "--model-name names one model" in capsys.readouterr().err
    assert score_cli.run(_args(tmp_path, "--no-judge", out=root)) == 2
    assert "choose another --out" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # --outputs and --outputs-root exclude each other
        _args(tmp_path, "--no-judge", "--outputs", str(root / "alpha"), "--outputs-root", str(root))
    assert score_cli.run(_args(tmp_path, "--no-judge", "--outputs", str(root / "alpha"))) == 2
    assert "--set is required with --outputs" in capsys.readouterr().err
    # --set knowledge: a model without that set fails, the others are scored
    (root / "only-en").mkdir()
    (root / "only-en" / "knowledge_en.jsonl").write_text('{"Qid": "e-000", "text": "answer0"}\n', "utf-8")
    assert score_cli.run(_args(tmp_path, "--no-judge", "--set", "knowledge")) == 1
    models = _models(out)["models"]
    assert (
        models["alpha"]["sets"] == ["knowledge"]
        and "no outputs for set 'knowledge'" in models["only-en"]["error"]
    )
    assert asr.calls and not (out / "alpha" / "knowledge_en.records.jsonl").exists()


def test_a_second_run_on_the_same_results_refuses_or_waits(tmp_path, asr, capsys):
    _ours(tmp_path / "models" / "alpha")
    out = tmp_path / "results"
    waited: list[int] = []
    with scoring_store.result_dir_lock(out):
        assert score_cli.run(_args(tmp_path, "--no-judge")) == 2
        assert "is in use by another cs3-bench run" in capsys.readouterr().err
        assert not (out / "alpha").exists()
        queued = threading.Thread(
            target=lambda: waited.append(score_cli.run(_args(tmp_path, "--no-judge", "--wait")))
        )
        queued.start()
        queued.join(0.5)
        assert queued.is_alive() and not (out / "alpha").exists()  # blocked on the lock
    queued.join()
    assert waited == [0] and _models(out)["models"]["alpha"]["status"] == "scored"
    with scoring_store.result_dir_lock(
        out / "alpha"
    ):  # a `score --out RESULTS/alpha` run holds the model's dir
        assert score_cli.run(_args(tmp_path, "--no-judge")) == 3  # the one model failed
    assert "is in use by another cs3-bench run" in _models(out)["models"]["alpha"]["error"]


def test_overall_exit_code_rule():
    def statuses(*names: str) -> dict:
        return {str(i): score_many.ModelStatus("o", "r", status=s) for i, s in enumerate(names)}

    assert score_many.overall_exit_code(statuses("scored", "scored")) == 0
    assert score_many.overall_exit_code(statuses("scored", "failed", "scored")) == 1
    assert score_many.overall_exit_code(statuses("scored", "incomplete")) == 1  # half is not most
    assert score_many.overall_exit_code(statuses("failed", "incomplete", "scored")) == 3
    assert score_many.overall_exit_code(statuses("failed")) == 3
