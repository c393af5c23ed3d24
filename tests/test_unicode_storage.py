"""Text that Python can hold but UTF-8 cannot (issue 31, items 1-3): a lone surrogate (half an emoji sent
as "\\ud83d" in JSON, a byte of a folder name that is not UTF-8, decoded with surrogateescape) in an outputs
row's Qid, audio path or text, a judge reply, a dataset field or a folder name. Every such text is stored
with U+FFFD for each lone surrogate (`text.valid_text`), the record says what was replaced, every file
written is UTF-8, nothing decided is lost and a re-run does not crash: it reuses every record and cached
reply.

The class: every kind of lone surrogate (high, low, the edges of both ranges, a byte that is not UTF-8, a
reversed pair) at the start, in the middle and at the end of the text, one kind per item of a run, in each
field, under both protocols. Failed on the code before the fix (a UnicodeEncodeError traceback, 0 records).
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile
from judge_server import Reply
from shared_data import AUTHORS

from cs3_tasks.cli import main
from cs3_tasks.core.text import valid_unicode

PROTOCOLS = [
    "cs3",
    pytest.param(
        "reference",
        marks=[
            pytest.mark.shared,
            pytest.mark.skipif(not AUTHORS.is_dir(), reason=f"the authors' scripts are not at {AUTHORS}"),
        ],
    ),
]
KINDS = ["\ud83d", "\ud800", "\udbff", "\udc00", "\udfff", "\udce9", "\ude00\ud83d"]  # last: a reversed pair
PLACES = ["start", "middle", "end"]
# every kind at every place (one item each); a folder name can only hold bytes that are not UTF-8
VARIANTS = [(kind, place) for kind in KINDS for place in PLACES]
FOLDER_VARIANTS = [(kind, place) for kind in ("\udc80", "\udce9", "\udcff") for place in PLACES]
WAV = io.BytesIO()
soundfile.write(WAV, np.zeros(1600, dtype="float32"), 16000, format="WAV")


def _place(text: str, kind: str, place: str) -> str:
    return {"start": kind + text, "middle": text[:1] + kind + text[1:], "end": text + kind}[place]


def _write(path: Path, data: bytes) -> bool:
    """False when the file system cannot name ``path`` (a high surrogate is no byte of any file name)."""
    try:
        os.fsencode(path)
    except UnicodeEncodeError:
        return False
    with open(path, "wb") as handle:
        handle.write(data)
    return True


def _hostile_run(tmp_path: Path, field: str, variants=VARIANTS) -> tuple[Path, Path, list[str]]:
    """A dataset and our layout's outputs of one model, item i holding variant i in ``field``; the Qids as
    the dataset (``qids``) holds them."""
    docs, rows = [], []
    outputs = tmp_path / "model"
    outputs.mkdir()
    for i, (kind, place) in enumerate(variants):
        qid = f"k-{i:03d}"
        doc = {"Qid": qid, "Question": f"问题{i}", "Answer_zh": "盐湖城", "Answer_en": "Salt Lake City"}
        doc["Category"] = "Acoustic"
        row = {"Qid": qid, "text": f"我不确定 {i}", "audio": f"{qid}.wav"}
        if field == "dataset Qid":
            doc["Qid"] = row["Qid"] = _place(qid, kind, place)
        elif field == "outputs Qid":
            row["Qid"] = _place(qid, kind, place)
        elif field == "dataset field":
            doc["Answer_en"] = _place("Salt Lake City", kind, place)
        elif field == "audio path":
            row["audio"] = _place(f"{qid}.wav", kind, place)
        elif field == "text":
            row["text"] = _place(row["text"], kind, place)
        docs.append(doc)
        rows.append(row)
        _write(outputs / row["audio"], WAV.getvalue())
    dataset = tmp_path / "cs_knowledge.json"
    dataset.write_text(json.dumps(docs), encoding="ascii")  # JSON escapes: "\ud83d" as the probe sent it
    (outputs / "knowledge.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="ascii")
    return outputs, dataset, [d["Qid"] for d in docs]


def _score(outputs: Path, out: Path, dataset: Path, protocol: str, server, *more: str) -> int:
    return main(
        [
            "score",
            *(("--outputs-root", str(outputs)) if "--root" in more else ("--outputs", str(outputs))),
            "--set",
            "knowledge",
            "--out",
            str(out),
            "--dataset",
            str(dataset),
            "--protocol",
            protocol,
            "--reference-scripts",
            str(AUTHORS),
            "--asr-model",
            "fake-asr",
            "--judge-base-url",
            server.base_url,
            "--judge-model",
            "fake",
            "--judge-api-key-env",
            "",
            "--no-progress",
        ]
    )


def _all_written_files_are_utf8(out: Path) -> None:
    for path in out.rglob("*"):
        os.fsencode(path).decode("utf-8")  # every name the run made is UTF-8 too
        if path.is_file() and path.suffix in (".json", ".jsonl", ".md", ".csv", ".js", ".html"):
            path.read_bytes().decode("utf-8")


def _records(out: Path) -> dict[str, dict]:
    lines = (out / "knowledge.records.jsonl").read_text(encoding="utf-8").splitlines()
    return {record["qid"]: record for record in map(json.loads, lines)}


def _reply_for(field: str):
    """The judge's handler: 正确 with, for the judge reply field, item i's variant in its explanation (the
    item is the number in the prompt's question), as JSON escapes ("\\ud83d") in a raw body."""

    def handler(request):
        found = re.search(r"问题(\d+)", request.prompt)
        content = "正确 一致"
        if field == "judge reply" and found:
            kind, place = VARIANTS[int(found.group(1))]
            content = "正确 " + _place("理由", kind, place)
        body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}
        return Reply(body=json.dumps(body))  # ensure_ascii: the lone surrogate as an escape

    return handler


FIELDS = {  # field -> what the record's problem (or judge note) says
    "outputs Qid": "Qid has 1 lone surrogates, replaced by U+FFFD",
    "dataset Qid": "dataset field Qid has 1 lone surrogates, replaced by U+FFFD",
    "dataset field": "dataset field Answer_en has 1 lone surrogates, replaced by U+FFFD",
    "audio path": "audio path has 1 lone surrogates, replaced by U+FFFD",
    "text": "text response has 1 lone surrogates, replaced by U+FFFD",
    "judge reply": "judge reply has 1 lone surrogates, replaced by U+FFFD",
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("field", list(FIELDS))
def test_every_lone_surrogate_in_every_field_is_stored_and_said(
    tmp_path, field, protocol, fake_asr, judge_server
):
    fake_asr(lambda audio, language: "我不确定")
    server = judge_server(_reply_for(field))
    outputs, dataset, qids = _hostile_run(tmp_path, field)
    out = tmp_path / "result"
    # a file name cannot hold most of the kinds: those items' speech is missing, so most of the set's (exit 3)
    code = 3 if field == "audio path" else 0
    assert _score(outputs, out, dataset, protocol, server) == code
    _all_written_files_are_utf8(out)
    records = _records(out)
    expected = [valid_unicode(q) for q in qids]
    if field == "outputs Qid":  # unknown Qids, kept for the audit under their written names
        expected += [valid_unicode(_place(q, *variant)) for q, variant in zip(qids, VARIANTS)]
    assert list(records) == expected
    said = FIELDS[field].replace("1 lone", "2 lone")  # the reversed pair is two lone surrogates
    for (kind, _), qid in zip(VARIANTS, expected[-len(VARIANTS) :]):
        record = records[qid]
        where = " ".join(str(record.get(k)) for k in ("problem", "text_judge_note", "speech_judge_note"))
        assert (said if len(kind) == 2 else FIELDS[field]) in where, (field, qid, where)
        if field != "outputs Qid":  # scored: the judge's verdicts are kept
            assert record["text_status"] == "judge_correct", record
            named = field != "audio path" or kind == "\udce9"  # a byte that is not UTF-8 can name a file
            assert record["speech_status"] == ("judge_correct" if named else "missing"), record
    if field == "judge reply":
        assert records["k-000"]["text_judge_raw"] == "正确 \ufffd理由"
    asked = server.request_count
    assert asked > 0 or field == "outputs Qid"
    # a re-run reads every record back and asks nothing: the replies reached the cache, nothing is re-scored
    assert _score(outputs, out, dataset, protocol, server) == code
    assert server.request_count == asked
    assert _records(out) == records


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_folder_name_that_is_not_utf8_is_scored_under_a_printable_name(
    tmp_path, protocol, fake_asr, judge_server
):
    fake_asr(lambda audio, language: "我不确定")
    server = judge_server(_reply_for("none"))
    source, dataset, _ = _hostile_run(tmp_path, "none", variants=VARIANTS[:2])
    root = tmp_path / "root"
    root.mkdir()
    names = ["good"] + [_place(f"m{k}", kind, place) for k, (kind, place) in enumerate(FOLDER_VARIANTS)]
    names += ["twin\udc80", "twin\udc81"]  # written alike: the first is scored, the second fails, saying why
    for name in names:
        (root / name).mkdir()
        for file in source.iterdir():
            (root / name / file.name).write_bytes(file.read_bytes())
    out = tmp_path / "results"
    assert _score(root, out, dataset, protocol, server, "--root") == 1  # one model of 12 failed
    _all_written_files_are_utf8(out)
    models = json.loads((out / "models.json").read_text(encoding="utf-8"))["models"]
    scored = [valid_unicode(name) for name in names[:-1]]
    assert sorted(models) == sorted([*scored, "twin\\x81"])
    assert [name for name, entry in models.items() if entry["status"] != "scored"] == ["twin\\x81"]
    assert "model twin\ufffd's: rename one" in models["twin\\x81"]["error"]
    for name in scored[1:]:
        assert "folder name (not UTF-8) has 1 lone surrogates" in models[name]["note"], models[name]
        settings = json.loads((out / name / "knowledge.settings.json").read_text(encoding="utf-8"))
        assert settings["model"] == name
    leaderboard = (out / "leaderboard.md").read_text(encoding="utf-8")
    assert all(name in leaderboard for name in [*scored, "twin\\x81"])
    # one outputs folder (--outputs), named by its folder, resumed under the same name
    single = root / names[1]
    for _ in range(2):
        assert _score(single, tmp_path / "single", dataset, protocol, server) == 0
    settings = json.loads((tmp_path / "single" / "knowledge.settings.json").read_text(encoding="utf-8"))
    assert settings["model"] == valid_unicode(names[1])
