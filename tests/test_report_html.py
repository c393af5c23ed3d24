"""The HTML report's files without a browser (tests/test_report_browser.py opens them in Chromium), the
`cs3-bench report --html` / `compare` commands, and the per-item pieces (PSR word marks, audio paths)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from urllib.parse import quote, unquote

import pytest
from demo_results import read_items, score_demo

from cs3_tasks import cli
from cs3_tasks.report import items
from cs3_tasks.report.html import ReportSettings, write_html_report
from cs3_tasks.scoring.records import blank_record
from cs3_tasks.scoring.summary import summarize, write_summary


@pytest.fixture
def results(tmp_path, fake_asr) -> Path:
    return score_demo(fake_asr, tmp_path / "results")


def test_score_outputs_root_writes_a_self_contained_report(results):
    report = results / "report"
    page = (report / "index.html").read_text(encoding="utf-8")
    # nothing from the network: no external script, style, font or image
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert "<link" not in page and 'src="items.js"' not in page and 'CS3_ITEMS_FILE = "items.js"' in page
    data = read_items(report)
    assert data["models"] == ["demo-strong", "demo-weak"]
    assert data["sets"] == ["knowledge", "knowledge_en", "open_ended"]
    for set_name in data["sets"]:
        questions = data["questions"][set_name]
        assert len(questions) == (12 if set_name == "open_ended" else 24)
        for q in questions.values():  # the demo dataset has question audio: written next to the report
            assert (report / q["audio_url"]).is_file() and q["question"]
        for model in data["models"]:
            for row in data["answers"][model][set_name]:
                assert (report / row["audio_url"]).resolve().is_file(), row["qid"]
    knowledge = data["questions"]["knowledge"]["demo_knowledge-000"]
    assert knowledge["answers"] == {"Answer_zh": "坦桑尼亚", "Answer_en": "Tanzania"}


def test_report_command_baseline_marks_and_errors(results, tmp_path, capsys):
    out = tmp_path / "html"
    dirs = [str(results / "demo-strong"), str(results / "demo-weak")]
    argv = ["report", *dirs, "--html", str(out), "--dataset", "demo", "--baseline", "demo-weak"]
    assert cli.main([*argv, "--out", str(tmp_path / "board")]) == 0
    board = (tmp_path / "board" / "leaderboard.md").read_text(encoding="utf-8")
    assert "Differences to the baseline demo-weak" in board and "- demo-strong: knowledge text" in board
    page = (out / "index.html").read_text(encoding="utf-8")
    assert 'id="baseline"' in page and 'class="vs"' in page
    assert cli.main(["report", *dirs]) == 2  # nowhere to write
    assert cli.main([*argv[:-1], "nobody"]) == 2
    assert "'nobody' is not among the models" in capsys.readouterr().err
    assert cli.main(["report", str(tmp_path / "missing"), "--html", str(out)]) == 2
    capsys.readouterr()


@pytest.mark.parametrize("target", ["--out", "--html"])
def test_report_onto_a_file_or_a_read_only_folder_is_one_line(results, tmp_path, capsys, monkeypatch, target):
    """Issue 31, item 8: a traceback and exit 1 before; one line naming the path, exit 2, as score --out."""
    import errno
    import tempfile

    a_file = tmp_path / "a-file"
    a_file.write_text("mine", encoding="utf-8")
    dirs = [str(results / "demo-strong"), str(results / "demo-weak")]
    for where, cause in [(a_file, "a file is there"), (a_file / "below", "Not a directory")]:
        assert cli.main(["report", *dirs, target, str(where)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"error: {a_file}") and cause in err, err
    assert a_file.read_text(encoding="utf-8") == "mine"
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    real = tempfile.mkstemp
    for code in (errno.EACCES, errno.EROFS):  # root ignores permissions: the write fails as it would

        def refuse(*args, dir=None, code=code, **kwargs):
            if dir is not None and str(dir).startswith(str(read_only)):
                raise OSError(code, os.strerror(code), str(dir))
            return real(*args, dir=dir, **kwargs)

        monkeypatch.setattr(tempfile, "mkstemp", refuse)
        assert cli.main(["report", *dirs, target, str(read_only)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"error: {read_only}" in err and os.strerror(code) in err, err
        monkeypatch.setattr(tempfile, "mkstemp", real)


def test_compare_prints_difference_ci_mcnemar(results, capsys):
    assert cli.main(["compare", str(results / "demo-strong"), str(results / "demo-weak")]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if line.startswith("| knowledge")]
    assert len(rows) == 4  # knowledge and knowledge_en, text and speech
    assert lines[0].startswith("demo-strong - demo-weak")
    assert cli.main(["compare", str(results / "demo-strong"), str(results / "nowhere")]) == 2


def test_the_report_finds_the_dataset_the_runs_were_scored_on(results, tmp_path, monkeypatch):
    """No --dataset: the demo set is found by the identity the settings recorded; a dataset that cannot be
    found, or one given that is not the runs', is said in the Items view, with what to pass."""
    monkeypatch.delenv("CS3_BENCH_DATASET", raising=False)
    dirs = [str(results / "demo-strong"), str(results / "demo-weak")]
    assert cli.main(["report", *dirs, "--html", str(tmp_path / "found")]) == 0
    found = read_items(tmp_path / "found")
    assert found["question_notes"] == {}
    assert found["questions"]["knowledge"]["demo_knowledge-000"]["answers"]["Answer_en"] == "Tanzania"

    elsewhere = tmp_path / "elsewhere"  # scored on a dataset this machine does not have
    settings = results / "demo-strong" / "knowledge.settings.json"
    recorded = json.loads(settings.read_text(encoding="utf-8"))
    settings.write_text(json.dumps({**recorded, "dataset_sha256": "f" * 64}), encoding="utf-8")
    assert cli.main(["report", str(results / "demo-strong"), "--html", str(elsewhere)]) == 0
    note = read_items(elsewhere)["question_notes"]["knowledge"]
    assert note.startswith("knowledge: questions not shown") and "ffffffffffff" in note
    assert "--dataset" in note
    assert read_items(elsewhere)["questions"]["knowledge"] == {}
    assert 'id="items-note"' in (elsewhere / "index.html").read_text(encoding="utf-8")

    given = tmp_path / "given"  # the demo given for runs scored on another dataset: shown, and said
    assert cli.main(["report", str(results / "demo-strong"), "--html", str(given), "--dataset", "demo"]) == 0
    assert "not the dataset these runs were scored on" in read_items(given)["question_notes"]["knowledge"]


def test_hostile_text_stays_text_and_missing_audio_is_named(tmp_path):
    record = blank_record("knowledge", "q-1", "Acoustic", None, "cs3")
    record.update(
        text="</script><img src=x onerror=alert(1)> Tanzania",
        text_correct=True,
        text_status="keyword",
        audio=str(tmp_path / "gone.wav"),
        transcript="坦桑尼亚",
        speech_correct=False,
        speech_status="unresolved",
        psr_recognised=0,
        psr_total=1,
    )
    result = tmp_path / "evil<model>"
    result.mkdir()
    (result / "knowledge.records.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    summary = summarize("knowledge", [record])
    summary["model"] = "evil<b>model</b>"
    write_summary(result, summary)
    index = write_html_report(tmp_path / "report", [result], ReportSettings(dataset=None))
    page = index.read_text(encoding="utf-8")
    assert "<b>model</b>" not in page and "evil&lt;b&gt;model&lt;/b&gt;" in page
    assert "questions not shown: these results do not say which dataset" in page
    (row,) = read_items(tmp_path / "report")["answers"]["evil<b>model</b>"]["knowledge"]
    assert row["audio_label"].endswith("gone.wav") and "audio_url" not in row
    assert row["psr_words"][-1] == ["tanzania", 0]  # "Tanzania" was written, not heard


def test_psr_words_follow_the_count_aware_overlap():
    assert items.psr_words("Python and python, then Java", "我学 python 和 C") == [
        ["python", 1],
        ["and", 0],
        ["python", 0],
        ["then", 0],
        ["java", 0],
    ]
    assert items.psr_words("", "anything") == []


def test_audio_suffix_and_response_audio_placed_in_the_report(tmp_path):
    assert items.audio_suffix(b"fLaC....", None) == ".flac"
    assert items.audio_suffix(b"RIFF....", "x.flac") == ".wav"
    assert items.audio_suffix(b"\x00\x01", "clip.mp3") == ".mp3"
    outputs, report = tmp_path / "outputs", tmp_path / "report"
    clip = outputs / "a" / "b c#?.WAV"
    clip.parent.mkdir(parents=True)
    clip.write_bytes(b"RIFF")
    record = {"qid": "q/1:x", "audio": "a/b c#?.WAV"}  # as records name it: relative to the outputs
    url = items.place_response_audio(record, outputs, report, "my model", "knowledge")
    # inside the report, in safe characters (a changed name carries its hash: distinct names stay distinct):
    # no folder of this machine, playable from any copy of it
    assert re.fullmatch(r"audio/responses/my_model-[0-9a-f]{12}/knowledge/q_1_x-[0-9a-f]{12}\.wav", url)
    assert items.safe_name("q/1?x") != items.safe_name("q/1:x") and items.safe_name("Qid-7") == "Qid-7"
    assert (report / url).read_bytes() == b"RIFF"
    assert items.place_response_audio(record, outputs, report, "my model", "knowledge") == url  # again: same
    assert items.place_response_audio(record, tmp_path / "elsewhere", report, "m", "knowledge") is None
    row = items.item_row(record, None)
    assert row["audio_label"] == "a/b c#?.WAV" and "audio_url" not in row


# Any string is a Qid or a model name, any character a file name's (issue 31, items 6 and 7): the static side
# of tests/test_report_browser.py's check in Chromium.
RESERVED = ["constructor", "toString", "__proto__", "hasOwnProperty", "valueOf", "prototype"]
URL_SPECIAL = ["a#b", "a?b", "a%20b", "a%b", "a b", "a_b", "name:x", "javascript:x", "C:x", "a&b=c", ".."]


def test_the_page_script_never_looks_data_up_in_a_plain_object():
    """A Qid or model name as a property of a plain object ("constructor", "__proto__") is not the item: every
    lookup by what the data names goes through a Map; items.js is parsed as JSON, not as an object literal."""
    script = (Path(items.__file__).parent / "assets" / "report.js").read_text(encoding="utf-8")
    # data[qid], index[it.qid], r.by[m], D.answers[...]; own keys from Object.keys (k) are the exception
    by_data_key = re.compile(r"\[\s*(?:\w+\.)?(?:qid|model|m|set|name)\s*\]|D\.(?:questions|answers)\s*[\[.]")
    assert not by_data_key.findall(script)
    assert "new Map()" in script and "Q.get(" in script and "A.get(" in script


def test_any_name_gets_its_own_percent_encoded_audio_url(tmp_path):
    outputs, report = tmp_path / "outputs", tmp_path / "report"
    outputs.mkdir()
    urls = {}
    for model in ("__proto__", "my model", "my_model"):
        for k, qid in enumerate([*RESERVED, *URL_SPECIAL]):
            (outputs / f"{qid}.wav").write_bytes(b"RIFF" + f"{model}/{k}".encode())
            record = {"qid": qid, "audio": f"{qid}.wav"}
            url = items.place_response_audio(record, outputs, report, model, "knowledge")
            assert url == quote(unquote(url)) and not re.search(r"[#?% :]", url), url
            assert (report / unquote(url)).read_bytes() == b"RIFF" + f"{model}/{k}".encode(), (model, qid)
            urls[(model, qid)] = url
    assert len(set(urls.values())) == len(urls)  # two names never share one file
    record = blank_record("knowledge", "__proto__", "Acoustic", None, "cs3")
    result = tmp_path / "result"
    result.mkdir()
    (result / "knowledge.records.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    summary = summarize("knowledge", [record])
    summary["model"] = "constructor"
    write_summary(result, summary)
    write_html_report(report, [result], ReportSettings(dataset=None))
    assert read_items(report)["answers"]["constructor"]["knowledge"][0]["qid"] == "__proto__"
