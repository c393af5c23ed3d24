"""`cs3-bench export-questions` (issue 23.5b): the demo set's questions as wav + jsonl, answered by a user's
own loop into our outputs layout, which `cs3-bench score --no-judge` accepts."""

from __future__ import annotations

import json
import shutil

import pytest
import soundfile as sf

from cs3_tasks import cli
from cs3_tasks.cli.export_questions import MANIFEST
from cs3_tasks.core import data

pytestmark = pytest.mark.skipif(
    not (data.demo_dataset_dir() / "README.md").is_file(), reason="embedded demo dataset not built"
)


def test_export_then_score_own_answers(tmp_path, fake_asr, capsys, monkeypatch):
    questions = tmp_path / "questions"
    assert cli.main(["export-questions", "--out", str(questions), "--dataset", "demo"]) == 0
    printed = capsys.readouterr().out.splitlines()[-1].strip()
    command, needs = printed.split("  (", 1)  # the next step as printed, and what it needs
    for set_name in data.SETS:
        rows = [json.loads(line) for line in (questions / f"{set_name}.jsonl").read_text().splitlines()]
        assert [row["Qid"] for row in rows] == [d["Qid"] for d in data.load_docs(set_name, "demo")]
        assert all(row["question"] and (questions / row["audio"]).is_file() for row in rows)
        samples, rate = sf.read(questions / rows[0]["audio"])
        assert rate >= 16_000 and len(samples) > rate // 4

    # a user's own loop: answer each question (here: its text, spoken as the question's own audio)
    answers = tmp_path / "my-model"
    for set_name in data.SETS:
        lines = []
        for line in (questions / f"{set_name}.jsonl").read_text().splitlines():
            row = json.loads(line)
            wav = answers / set_name / f"{row['Qid']}.wav"
            wav.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(questions / row["audio"], wav)
            answer = {"Qid": row["Qid"], "text": row["question"], "audio": f"{set_name}/{wav.name}"}
            lines.append(json.dumps(answer, ensure_ascii=False) + "\n")
        (answers / f"{set_name}.jsonl").write_text("".join(lines), encoding="utf-8")

    fake = fake_asr(lambda audio, language: "heard")
    results = tmp_path / "results"
    places = {"FOLDER": str(answers), "RESULTS": str(results)}
    argv = [places.get(word, word) for word in command.split()[1:]]
    assert argv == [
        "score",
        "--outputs",
        str(answers),
        "--set",
        "all",
        "--out",
        str(results),
        "--dataset",
        "demo",
    ]
    # as printed, without a key: refused, naming the key it needs, as the hint said
    monkeypatch.delenv("DASHSCOPE_API_KEY", raising=False)
    assert "$DASHSCOPE_API_KEY" in needs and "--no-judge" in needs
    assert cli.main([*argv, "--asr-model", "fake-asr", "--no-progress"]) == 2
    assert "DASHSCOPE_API_KEY" in capsys.readouterr().err
    assert cli.main([*argv, "--asr-model", "fake-asr", "--no-judge", "--no-progress"]) == 0
    for set_name in data.SETS:
        summary = json.loads((results / f"{set_name}.summary.json").read_text())
        assert summary["n_items"] == len(data.load_docs(set_name, "demo")), set_name
    assert sum(len(call["audios"]) for call in fake.calls) == sum(
        len(data.load_docs(s, "demo")) for s in data.SETS
    )


def test_export_one_set_and_a_missing_dataset(tmp_path, capsys):
    out = tmp_path / "q"
    argv = ["export-questions", "--out", str(out), "--dataset", "demo", "--set", "knowledge_en"]
    assert cli.main(argv) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        ".cs3-questions.json",
        "knowledge_en",
        "knowledge_en.jsonl",
    ]
    assert cli.main(["export-questions", "--out", str(out), "--dataset", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_export_never_replaces_a_file_it_did_not_write(tmp_path, capsys):
    """Issue 31, item 5: pointed at a model's outputs folder (the same layout), an export replaced its answers
    and response audio. Every file it would write that is there and not its own is refused, before anything
    is written, naming the file: an answers folder, a file it wrote and someone changed since, a folder in the
    place of a wav; its own files are replaced by a re-export; --overwrite replaces any."""
    out = tmp_path / "q"
    argv = ["export-questions", "--out", str(out), "--dataset", "demo", "--set", "knowledge_en"]
    assert cli.main(argv) == 0
    assert cli.main(argv) == 0  # its own files, as it wrote them: replaced
    wavs = sorted((out / "knowledge_en").iterdir())
    own = {path: path.read_bytes() for path in [out / "knowledge_en.jsonl", *wavs]}
    capsys.readouterr()
    changes = {
        "answers": lambda: (out / "knowledge_en.jsonl").write_text('{"Qid": "x", "text": "mine"}\n'),
        "audio": lambda: wavs[3].write_bytes(b"RIFF my answer"),
        "manifest gone": lambda: (out / MANIFEST).unlink(),
        "folder": lambda: (wavs[5].unlink(), wavs[5].mkdir()),
    }
    for what, change in changes.items():
        change()
        before = {path: path.read_bytes() for path in own if path.is_file()}
        assert cli.main(argv) == 2, what
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "was not written by export-questions" in err and "--overwrite" in err
        assert {path: path.read_bytes() for path in own if path.is_file()} == before, what  # nothing written
        if what == "folder":  # --overwrite replaces files, never a folder: one line naming it
            assert cli.main([*argv, "--overwrite"]) == 2
            assert str(wavs[5]) in capsys.readouterr().err
            wavs[5].rmdir()
        assert cli.main([*argv, "--overwrite"]) == 0, what
        assert {path: path.read_bytes() for path in own} == own, what
    # a model's outputs folder in our layout (the layout it writes): refused, naming the answers file
    answers = tmp_path / "my-model"
    (answers / "knowledge_en").mkdir(parents=True)
    (answers / "knowledge_en.jsonl").write_text('{"Qid": "a", "text": "t", "audio": "knowledge_en/a.wav"}\n')
    assert (
        cli.main(["export-questions", "--out", str(answers), "--dataset", "demo", "--set", "knowledge_en"])
        == 2
    )
    assert f"{answers / 'knowledge_en.jsonl'} exists" in capsys.readouterr().err
    assert sorted(p.name for p in answers.iterdir()) == ["knowledge_en", "knowledge_en.jsonl"]
