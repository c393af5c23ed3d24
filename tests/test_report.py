"""`cs3-bench report`: leaderboard (markdown + CSV) and figure from `cs3-bench score` summaries."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from cs3_tasks.scoring import records as scoring_records
from cs3_tasks.scoring.summary import summarize


def _knowledge_records(set_name: str, correct: list[bool], speech: list[bool] | None) -> list[dict]:
    records = []
    for i, ok in enumerate(correct):
        record = scoring_records.blank_record(
            set_name, f"k-{i:03d}", ("Acoustic", "Semantic")[i % 2], None, "cs3"
        )
        record.update(
            text="答" if ok else "错",
            text_status="keyword" if ok else "judge_wrong",
            text_correct=ok,
            text_lsa=True,
        )
        if speech is not None:
            record.update(
                audio=f"/x/{i}.wav",
                transcript="t",
                speech_correct=speech[i],
                speech_lsa=i % 2 == 0,
                speech_status="keyword" if speech[i] else "judge_wrong",
                psr_recognised=1,
                psr_total=2,
            )
        records.append(record)
    return records


def _open_records(relevance: list[int]) -> list[dict]:
    records = []
    for i, score in enumerate(relevance):
        record = scoring_records.blank_record("open_ended", f"o-{i:03d}", None, None, "cs3")
        record.update(
            text="答",
            text_relevance=score,
            text_semantic=3,
            text_understood=score > 3,
            text_lsa=True,
            audio=f"/x/{i}.wav",
            transcript="t",
            speech_relevance=score,
            speech_semantic=2,
            speech_understood=score > 3,
            speech_lsa=True,
            psr_recognised=3,
            psr_total=4,
        )
        records.append(record)
    return records


def _write(result_dir: Path, model: str, set_name: str, records: list[dict]) -> None:
    result_dir.mkdir(parents=True, exist_ok=True)
    summary = summarize(set_name, records)
    summary["model"] = model
    (result_dir / f"{set_name}.summary.json").write_text(json.dumps(summary), encoding="utf-8")


@pytest.fixture
def result_dirs(tmp_path) -> list[Path]:
    speech_model, text_model = tmp_path / "speechy", tmp_path / "texty"
    _write(
        speech_model,
        "speechy",
        "knowledge",
        _knowledge_records("knowledge", [True, False, True, False], [True, False, False, False]),
    )
    _write(
        speech_model,
        "speechy",
        "knowledge_en",
        _knowledge_records("knowledge_en", [True, True, True, False], [True, True, False, False]),
    )
    _write(speech_model, "speechy", "open_ended", _open_records([5, 4, 2, 1]))
    _write(text_model, "texty", "knowledge", _knowledge_records("knowledge", [True, True, True, False], None))
    return [speech_model, text_model]


def _run(dirs: list[Path], out: Path) -> int:
    from cs3_tasks import cli

    return cli.main(["report", *map(str, dirs), "--out", str(out)])


def test_report_writes_leaderboard_csv_and_png(result_dirs, tmp_path):
    out = tmp_path / "board"
    assert _run(result_dirs, out) == 0
    rows = list(csv.DictReader((out / "leaderboard.csv").read_text(encoding="utf-8").splitlines()))
    assert [r["model"] for r in rows] == ["speechy", "texty"]  # sorted by speech accuracy (cs)
    speechy, texty = rows
    assert float(speechy["acc_text_cs"]) == pytest.approx(0.5)
    assert float(speechy["acc_text_en"]) == pytest.approx(0.75)
    assert float(speechy["drop_text"]) == pytest.approx(0.25)
    assert float(speechy["preserve_text"]) == pytest.approx(0.5 / 0.75)
    assert float(speechy["preserve_speech"]) == pytest.approx(0.25 / 0.5)
    # PSR pooled over knowledge (4 x 1/2) and open_ended (4 x 3/4): (4 + 12) / (8 + 16)
    assert float(speechy["psr"]) == pytest.approx(16 / 24)
    # LSA speech pooled: knowledge 2/4 + open_ended 4/4
    assert float(speechy["lsa_speech"]) == pytest.approx(6 / 8)
    assert float(speechy["understanding_text"]) == pytest.approx(0.5)
    assert texty["acc_speech_cs"] == "" and texty["acc_text_en"] == "" and texty["preserve_text"] == ""
    markdown = (out / "leaderboard.md").read_text(encoding="utf-8")
    assert "| speechy | 50.0 | 25.0 | 75.0 | 50.0 | 25.0 | 25.0 |" in markdown
    assert "| texty | 75.0 | n/a |" in markdown
    png = (out / "accuracy.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000


def test_report_rejects_empty_dirs_and_duplicate_models(result_dirs, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _run([empty], tmp_path / "o1") == 2
    assert "run `cs3-bench score` first" in capsys.readouterr().err
    assert _run([result_dirs[0], result_dirs[0]], tmp_path / "o2") == 2
    assert "two knowledge summaries for model 'speechy'" in capsys.readouterr().err
    assert not (tmp_path / "o2").exists()
