"""cs3_tasks.core.data: source validation, dataset location, loading sets without audio decoding."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest
from shared_data import CS3_SOURCE as SHARED_SOURCE
from shared_data import need

from cs3_tasks.core import data

DEMO_SOURCE = Path(data.__file__).resolve().parents[1] / "demo" / "source"


def _with(item: dict, overrides: dict) -> dict:
    """``item`` with ``overrides`` applied; an override of ``...`` removes the field."""
    item.update(overrides)
    return {k: v for k, v in item.items() if v is not ...}


def _knowledge(qid: str, **overrides) -> dict:
    item = {
        "Qid": qid,
        "Question": "Kilimanjaro位于哪个非洲国家？",
        "Question_zh": "乞力马扎罗山位于哪个非洲国家？",
        "Question_en": "In which African country is Kilimanjaro located?",
        "Answer_zh": "坦桑尼亚",
        "Answer_en": "Tanzania",
        "Source": "test",
        "Category": "Acoustic",
    }
    return _with(item, overrides)


def _twin(qid: str, **overrides) -> dict:
    item = {
        "Qid": qid,
        "Question": "In which African country is Kilimanjaro located?",
        "Answer": "Tanzania",
        "Category": "Acoustic",
    }
    return _with(item, overrides)


def _open(qid: str, **overrides) -> dict:
    item = {"Qid": qid, "Question": "怎么提高English口语？", "Answer": "多练习speaking。", "Source": "test"}
    return _with(item, overrides)


def write_source(folder: Path, knowledge: list, knowledge_en: list, open_ended: list) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, items in (("knowledge", knowledge), ("knowledge_en", knowledge_en), ("open_ended", open_ended)):
        (folder / data.SOURCE_FILES[name]).write_text(json.dumps(items, ensure_ascii=False), encoding="utf-8")
    return folder


def test_demo_source_is_valid_and_balanced():
    source = data.load_source(DEMO_SOURCE)
    assert {k: len(v) for k, v in source.items()} == {"knowledge": 24, "knowledge_en": 24, "open_ended": 12}
    assert collections.Counter(r["Category"] for r in source["knowledge"]) == {
        "Acoustic": 8,
        "Semantic": 8,
        "Integrated": 8,
    }
    assert all(r["Source"] == "cs3-bench-demo" for r in source["knowledge"] + source["open_ended"])
    assert [r["Qid"] for r in source["knowledge"]] == [r["Qid"] for r in source["knowledge_en"]]
    # every knowledge question really mixes the two languages
    assert all(any(c.isascii() and c.isalpha() for c in r["Question"]) for r in source["knowledge"])


@pytest.mark.shared
def test_shared_source_loads_with_optional_question_zh():
    need(SHARED_SOURCE)
    source = data.load_source(SHARED_SOURCE)
    assert {k: len(v) for k, v in source.items()} == {
        "knowledge": 362,
        "knowledge_en": 362,
        "open_ended": 200,
    }
    # 2 published items have no Question_zh key and 6 have null: both load as None
    assert sum(r["Question_zh"] is None for r in source["knowledge"]) == 8
    assert list(source["knowledge"][0]) == list(data.set_columns("knowledge"))


def test_load_source_subset_of_sets(tmp_path):
    folder = write_source(tmp_path, [_knowledge("q1")], [_twin("q1")], [_open("o1")])
    (folder / data.SOURCE_FILES["knowledge_en"]).unlink()
    source = data.load_source(folder, sets=("knowledge", "open_ended"))
    assert set(source) == {"knowledge", "open_ended"}
    with pytest.raises(data.SourceError, match="file not found"):
        data.load_source(folder)


@pytest.mark.parametrize(
    ("knowledge", "knowledge_en", "open_ended", "qid", "cause"),
    [
        ([_knowledge("q1", Answer_en=...)], [_twin("q1")], [_open("o1")], "q1", "missing field 'Answer_en'"),
        ([_knowledge("q1"), _knowledge("q1")], [_twin("q1")], [_open("o1")], "q1", "duplicate Qid"),
        (
            [_knowledge("q1", Question="  ")],
            [_twin("q1")],
            [_open("o1")],
            "q1",
            "empty text in field 'Question'",
        ),
        ([_knowledge("q1")], [_twin("q1")], [_open("o7", Answer="")], "o7", "empty text in field 'Answer'"),
        ([_knowledge("q1")], [_twin("q2")], [_open("o1")], "q1", "no twin in knowledge_en"),
        ([_knowledge("q1")], [_twin("q1", Category="Semantic")], [_open("o1")], "q1", "Category differs"),
        (
            [_knowledge("q1")],
            [_twin("q1", Answer="Kenya")],
            [_open("o1")],
            "q1",
            "differs from knowledge_en Answer",
        ),
        ([_knowledge("q1", Category="Lexical")], [_twin("q1")], [_open("o1")], "q1", "unknown Category"),
        ([_knowledge("q1", Answer_zh=3)], [_twin("q1")], [_open("o1")], "q1", "must be a string"),
    ],
)
def test_bad_source_names_qid_and_cause(tmp_path, knowledge, knowledge_en, open_ended, qid, cause):
    folder = write_source(tmp_path, knowledge, knowledge_en, open_ended)
    with pytest.raises(data.SourceError) as excinfo:
        data.load_source(folder)
    message = str(excinfo.value)
    assert any(qid in p and cause in p for p in excinfo.value.problems), message
    assert qid in message and cause in message


def test_all_problems_reported_together(tmp_path):
    folder = write_source(
        tmp_path,
        [_knowledge("q1", Answer_zh=...), _knowledge("q2"), _knowledge("q2")],
        [_twin("q1"), _twin("q2"), _twin("q3")],
        [_open("o1", Question="")],
    )
    with pytest.raises(data.SourceError) as excinfo:
        data.load_source(folder)
    problems = excinfo.value.problems
    assert len(problems) == 4, problems
    assert any("q1" in p and "Answer_zh" in p for p in problems)
    assert any("q2" in p and "duplicate" in p for p in problems)
    assert any("q3" in p and "no twin in knowledge" in p for p in problems)
    assert any("o1" in p and "empty text" in p for p in problems)


def test_unreadable_source_files(tmp_path):
    folder = write_source(tmp_path, [_knowledge("q1")], [_twin("q1")], [_open("o1")])
    (folder / data.SOURCE_FILES["knowledge"]).write_text("[{", encoding="utf-8")
    (folder / data.SOURCE_FILES["open_ended"]).write_text('{"Qid": "o1"}', encoding="utf-8")
    with pytest.raises(data.SourceError) as excinfo:
        data.load_source(folder)
    assert len(excinfo.value.problems) == 2
    text = str(excinfo.value)
    assert "cs_knowledge.json: not valid JSON" in text and "cs_open_ended.json: expected a JSON list" in text


def test_item_without_qid_is_named_by_position(tmp_path):
    folder = write_source(tmp_path, [_knowledge("q1"), {"Question": "x"}], [_twin("q1")], [_open("o1")])
    with pytest.raises(data.SourceError, match=r"cs_knowledge.json item #1: missing or empty field 'Qid'"):
        data.load_source(folder)


def test_dataset_location_precedence(monkeypatch, tmp_path):
    monkeypatch.delenv(data.DATASET_ENV, raising=False)
    assert data.dataset_location() == data.HUB_DATASET
    monkeypatch.setenv(data.DATASET_ENV, str(tmp_path))
    assert data.dataset_location() == str(tmp_path)
    assert data.dataset_location("demo") == str(data.demo_dataset_dir())
    monkeypatch.setenv(data.DATASET_ENV, "demo")
    assert data.dataset_location() == str(data.demo_dataset_dir())
    assert data.dataset_location("someone/other-copy") == "someone/other-copy"


def test_load_demo_set_without_decoding():
    from cs3_tasks.core.audio import load_audio

    ds = data.load_set("knowledge", "demo")
    assert len(ds) == 24
    assert ds.column_names[:2] == ["Qid", "audio"]
    assert ds.features["audio"].decode is False
    row = ds[0]
    assert set(row["audio"]) == {"bytes", "path"} and row["audio"]["bytes"][:4] == b"fLaC"
    wave = load_audio(row["audio"])
    assert wave.ndim == 1 and wave.size > 16_000 * 0.5
    assert len(data.load_set("knowledge_en", "demo")) == 24
    assert len(data.load_set("open_ended", "demo")) == 12


def test_env_override_selects_demo(monkeypatch):
    monkeypatch.setenv(data.DATASET_ENV, "demo")
    assert len(data.load_set("open_ended")) == 12


def test_unreachable_hub_names_the_override(monkeypatch):
    monkeypatch.delenv(data.DATASET_ENV, raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(data, "_hub_reachable", lambda timeout=5.0: False)
    with pytest.raises(data.DatasetUnavailableError) as excinfo:
        data.load_set("knowledge")
    message = str(excinfo.value)
    assert data.HUB_DATASET in message
    assert data.DATASET_ENV in message and "--metadata" in message and '"dataset"' in message


def test_hub_load_failure_is_wrapped(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'VocalNet/CS3-Bench' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(data, "_hub_reachable", lambda timeout=5.0: True)
    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(data.DatasetUnavailableError, match=data.DATASET_ENV):
        data.load_set("knowledge", data.HUB_DATASET)


def test_missing_local_dir_and_bad_names(tmp_path):
    with pytest.raises(data.DatasetUnavailableError, match="does not exist"):
        data.load_set("knowledge", str(tmp_path / "nope" / "build"))
    with pytest.raises(data.DatasetUnavailableError, match="not a CS3-Bench build"):
        data.load_set("knowledge", str(tmp_path))
    with pytest.raises(ValueError, match="unknown set"):
        data.load_set("knowledge_fr", "demo")
