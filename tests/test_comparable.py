"""`cs3-bench compare` and `report --baseline` refuse runs that were not scored alike (issue 31, item 4): the
same outputs on two datasets with the same Qids "differed" by 83 points with exit 0 before; reference vs cs3
compared without a word. The check is generic over settings.json: every recorded setting counts but the
system's name, where the run ran and derived flags. Failed on the code before the fix."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cs3_tasks import cli
from cs3_tasks.cli import score as score_cli
from cs3_tasks.report import comparable
from cs3_tasks.report.results import load_results
from cs3_tasks.scoring.store import INFORMATIONAL_KEYS, flat_settings

try:  # tests/ is on sys.path under pytest's default import mode
    from test_scoring import FakeASR, _args, _cli_fixture
except ImportError:  # pragma: no cover
    from tests.test_scoring import FakeASR, _args, _cli_fixture


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """One model's outputs scored four ways (keyword stage only): as they are, under another name, on a
    dataset with other answers and the same Qids, under the reference protocol."""
    tmp_path = tmp_path_factory.mktemp("runs")
    monkeypatch = pytest.MonkeyPatch()
    asr = FakeASR({})
    monkeypatch.setattr("cs3_tasks.asr.transcribe_batch", asr)
    monkeypatch.setenv("CS3_BENCH_CACHE", str(tmp_path / "cache"))
    outputs, dataset = _cli_fixture(tmp_path, asr)
    other = tmp_path / "other.json"
    docs = json.loads(dataset.read_text(encoding="utf-8"))
    other.write_text(json.dumps([{**d, "Answer_zh": "别的"} for d in docs], ensure_ascii=False), "utf-8")
    made = {}
    for name, data, extra in [
        ("base", dataset, {}),
        ("renamed", dataset, {"model_name": "model-b"}),
        ("other-dataset", other, {"model_name": "model-c"}),
        ("reference", dataset, {"model_name": "model-d", "protocol": "reference"}),
    ]:
        made[name] = tmp_path / name
        args = _args(outputs, made[name], data, no_judge=True, **extra)
        assert score_cli.run(args) == 0
    monkeypatch.undo()
    return made


def _compare(a: Path, b: Path, capsys) -> tuple[int, str]:
    code = cli.main(["compare", str(a), str(b)])
    return code, capsys.readouterr().err


def test_compare_refuses_another_dataset_or_protocol_naming_the_field(runs, capsys, tmp_path):
    code, err = _compare(runs["base"], runs["renamed"], capsys)
    assert (code, err) == (0, "")  # two systems scored alike: their names differ, as they should
    code, err = _compare(runs["base"], runs["other-dataset"], capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: model-a and model-c")
    assert "knowledge dataset_sha256: '" in err and "scoring settings differ" in err
    code, err = _compare(runs["base"], runs["reference"], capsys)
    assert code == 2 and err.count("\n") == 1
    # the same outputs under another protocol: refused by the sensitivity check, which names the field too
    assert "protocol: 'cs3' -> 'reference'" in err
    # report --baseline: the same check, the same one line, nothing written
    dirs = [str(runs[name]) for name in ("base", "renamed", "other-dataset")]
    board = tmp_path / "board"
    assert cli.main(["report", *dirs, "--out", str(board), "--baseline", "model-a"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model-a and model-c were not scored alike" in err
    assert not board.exists()
    assert cli.main(["report", *dirs[:2], "--out", str(board), "--baseline", "model-a"]) == 0


def _edited(run: Path, tmp_path: Path, edit) -> Path:
    copy = tmp_path / f"copy-{len(list(tmp_path.iterdir()))}"
    shutil.copytree(run, copy)
    path = copy / "knowledge.settings.json"
    settings = json.loads(path.read_text(encoding="utf-8"))
    edit(settings)
    path.write_text(json.dumps(settings), encoding="utf-8")
    return copy


def _set(settings: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        settings = settings[key]
    settings[last] = value


def test_every_recorded_setting_counts_but_the_systems_name(runs, tmp_path):
    (base,) = load_results([runs["base"]]).values()
    settings = json.loads((runs["base"] / "knowledge.settings.json").read_text(encoding="utf-8"))
    ignored = (*comparable.SYSTEM_KEYS, *INFORMATIONAL_KEYS, *comparable.DERIVED_KEYS)
    fields = list(flat_settings(settings)) + ["a_setting_added_later"]
    assert {"protocol", "dataset_sha256", "asr.model.name", "judge", "model"} <= set(fields)
    for field in fields:
        copy = _edited(runs["base"], tmp_path, lambda s, field=field: _set(s, field, "changed"))
        (other,) = load_results([copy]).values()
        differences = comparable.run_differences(base, other)
        if field.split(".")[0] in ignored:
            assert differences == [], field
            continue
        assert [(d.field, d.new) for d in differences] == [(field, "changed")], field
        kind = {"asr": "asr", "asr_language": "asr", "judge": "judge"}.get(field.split(".")[0], "scoring")
        assert differences[0].kind == kind
        # only the ASR or the judge differ: the case a sensitivity view will take (refused for now)
        assert comparable.measurement_only(differences) == (kind != "scoring")
        with pytest.raises(comparable.NotComparable, match=f"knowledge {field}: "):
            comparable.check_comparable(base, other)
    # a run without settings cannot be shown to be comparable
    copy = _edited(runs["base"], tmp_path, lambda s: None)
    (copy / "knowledge.settings.json").unlink()
    summary = json.loads((copy / "knowledge.summary.json").read_text(encoding="utf-8"))
    summary.pop("settings")
    (copy / "knowledge.summary.json").write_text(json.dumps(summary), encoding="utf-8")
    (other,) = load_results([copy]).values()
    with pytest.raises(
        comparable.NotComparable, match="knowledge settings: 'recorded' -> '<no settings.json>'"
    ):
        comparable.check_comparable(base, other)


def test_a_torn_last_line_is_read_alike_everywhere(runs, tmp_path, capsys, monkeypatch):
    """A killed re-run leaves a torn last line: report, compare and the leaderboard refused the folder while
    the scorer skipped it. Now every reader skips it and says so; a bad line elsewhere is refused by every
    reader, naming the file and line. The class: cut inside a key, a value, a multi-byte character, after a
    key."""
    records = (runs["base"] / "knowledge.records.jsonl").read_bytes()
    line = json.dumps(
        {"qid": "k-003", "text": "答案三", "text_status": "keyword"}, ensure_ascii=False
    ).encode()
    for cut in (3, line.index(b"text") + 2, line.index("三".encode()) + 1, line.index(b'"text":') + 7):
        torn = _edited(runs["base"], tmp_path, lambda s: None)
        (torn / "knowledge.records.jsonl").write_bytes(records + line[:cut])
        assert cli.main(["compare", str(runs["base"]), str(torn)]) == 0, cut
        report = ["report", str(torn), "--out", str(tmp_path / "board"), "--html", str(tmp_path / "r")]
        assert cli.main(report) == 0
        err = capsys.readouterr().err
        assert err.count(f"{torn / 'knowledge.records.jsonl'}: the last line (line 8) is torn") == 3, err
    # a bad line that is not the last one: refused by the scorer, compare and report alike, naming it
    bad = _edited(runs["base"], tmp_path, lambda s: None)
    lines = records.decode().splitlines(keepends=True)
    (bad / "knowledge.records.jsonl").write_text("".join([*lines[:2], "{not json\n", *lines[2:]]))
    named = f"{bad / 'knowledge.records.jsonl'}:3: not a JSON record"
    assert cli.main(["compare", str(runs["base"]), str(bad)]) == 2
    assert named in capsys.readouterr().err
    assert cli.main(["report", str(bad), "--out", str(tmp_path / "board")]) == 2
    assert named in capsys.readouterr().err
    outputs, dataset = runs["base"].parent / "model-a", runs["base"].parent / "cs_knowledge.json"
    monkeypatch.setattr("cs3_tasks.asr.transcribe_batch", FakeASR({}))
    monkeypatch.setenv("CS3_BENCH_CACHE", str(tmp_path / "cache"))
    assert score_cli.run(_args(outputs, bad, dataset, no_judge=True)) == 2
    assert named in capsys.readouterr().err
    # and the scorer resumes a dir with a torn last line, saying so
    assert score_cli.run(_args(outputs, torn, dataset, no_judge=True)) == 0
    assert "is torn, as a run killed while writing it leaves it: skipped" in capsys.readouterr().err
