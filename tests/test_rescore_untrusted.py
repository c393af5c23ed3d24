"""``cs3-bench score --from-results``: a published bundle is untrusted input, re-scored by the one run.

One bundle (the demo systems scored under the cs3 protocol by a stand-in ASR and a loopback judge that always
answers) is made once per session; each test copies it, tampers with it as a hostile publisher would, and
re-scores it. Every refusal is one line naming the file and the field (or line), exit 2, no traceback, and
nothing of OUT is replaced; a re-score whose numbers differ from the bundle's summaries says so and exits 4.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from demo_results import DEMO, heard_texts

from cs3_tasks import cli
from cs3_tasks.core.audio import content_hash
from cs3_tasks.scoring.records import CHANNELS, OPEN_ENDED_ASPECTS
from cs3_tasks.scoring.run import NOT_REPRODUCED
from cs3_tasks.scoring.store import LOCK_FILE, result_dir_lock

SETS_SCORED = ("knowledge", "knowledge_en", "open_ended")


def judge_reply(request) -> str:
    """Always a verdict (no error, nothing unparsed): correct or wrong, or a score 1-5, by the prompt."""
    h = int(hashlib.sha256(request.prompt.encode("utf-8")).hexdigest()[:8], 16)
    if "评分标准" in request.prompt or "[" in request.prompt:  # an open-ended score
        return f"Score: [{1 + h % 5}]"
    if "True" in request.prompt and "False" in request.prompt:
        return ("True, consistent", "False, not consistent")[h % 2]
    if "正确" in request.prompt and "错误" in request.prompt:
        return ("正确", "错误")[h % 2]
    return f"Score: [{1 + h % 5}]"


@pytest.fixture
def bundle(tmp_path_factory, tmp_path, judge_server, fake_asr, monkeypatch) -> Path:
    """A fresh copy of the session's bundle: ``<copy>/demo-strong``, ``<copy>/demo-weak``, leaderboard."""
    monkeypatch.setenv("CS3_BENCH_CACHE", str(tmp_path / "cache"))
    made = tmp_path_factory.getbasetemp() / "untrusted-bundle"
    if not made.is_dir():
        heard = heard_texts()
        fake_asr(lambda audio, language: heard.get(content_hash(audio), "<unknown clip>"))
        server = judge_server(judge_reply)
        scoring = tmp_path_factory.mktemp("scoring")
        argv = ["score", "--outputs-root", str(DEMO), "--out", str(scoring / "results"), "--dataset", "demo"]
        argv += ["--asr-model", "fake-asr", "--protocol", "cs3", "--no-progress", "--judge-api-key-env", ""]
        argv += ["--judge-base-url", server.base_url, "--judge-model", "judge-2025-01-25"]
        argv += ["--judge-cache", str(scoring / "judge.sqlite")]
        assert cli.main(argv) == 0
        shutil.copytree(scoring / "results", made, ignore=shutil.ignore_patterns(".cs3-bench*", "report"))
    copy = tmp_path / "bundle"
    shutil.copytree(made, copy)
    return copy


def rescore(source: Path, out: Path, capsys, dataset: str = "demo") -> tuple[int, str]:
    """The exit code and stderr of re-scoring ``source`` into ``out``."""
    code = cli.main(["score", "--from-results", str(source), "--out", str(out), "--dataset", dataset])
    return code, capsys.readouterr().err


def refused(code: int, err: str, *named: str) -> str:
    """The refusal's line: exit 2, one line, no traceback, naming every one of ``named``."""
    assert code == 2, err
    assert "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: "), err
    for name in named:
        assert name in line, (name, line)
    return line


def records_of(folder: Path, set_name: str) -> list[dict]:
    path = folder / f"{set_name}.records.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def write_records(folder: Path, set_name: str, records: list[dict]) -> None:
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    (folder / f"{set_name}.records.jsonl").write_text(lines, encoding="utf-8")


def settings_path(folder: Path, set_name: str = "knowledge") -> Path:
    return folder / f"{set_name}.settings.json"


def edit_settings(folder: Path, set_name: str = "knowledge", **fields) -> None:
    path = settings_path(folder, set_name)
    settings = json.loads(path.read_text(encoding="utf-8"))
    for key, value in fields.items():
        if value is KeyError:
            del settings[key]
        else:
            settings[key] = value
    path.write_text(json.dumps(settings), encoding="utf-8")


def test_an_untampered_bundle_is_reproduced_by_the_one_run(bundle, tmp_path, capsys):
    out = tmp_path / "rescored"
    code, err = rescore(bundle, out, capsys)
    assert code == 0, err
    for path in sorted(bundle.rglob("*")):
        name = path.relative_to(bundle)
        if path.is_file() and name.name not in ("models.json",):
            assert (out / name).read_bytes() == path.read_bytes(), name
    assert (out / "cs_vs_en.md").is_file() and (out / "demo-strong" / LOCK_FILE).is_file()  # the run's lock
    again = {p: p.read_bytes() for p in out.rglob("*.json*")}
    assert (
        rescore(bundle, out, capsys)[0] == 0
    )  # once more into the same OUT: the same system, the same files
    assert {p: p.read_bytes() for p in out.rglob("*.json*")} == again


def test_out_holding_another_systems_results_is_refused_and_kept(bundle, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(bundle / "demo-weak", out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    line = refused(*rescore(bundle / "demo-strong", out, capsys), "another system", "demo-weak")
    assert "demo-strong" in line
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name in before} == before


def test_a_busy_out_is_refused(bundle, tmp_path, capsys):
    out = tmp_path / "out"
    with result_dir_lock(out):
        refused(*rescore(bundle / "demo-strong", out, capsys), "in use by another cs3-bench run")
    assert not list(out.glob("*.records.jsonl"))


@pytest.mark.parametrize("label", ["{secret}", "../../secret.pem", "wav/../../../secret.pem"])
def test_audio_outside_the_bundle_is_refused_and_never_read(bundle, tmp_path, capsys, label):
    secret = tmp_path / "secret.pem"
    secret.write_text("-----BEGIN PRIVATE KEY----- hunter2", encoding="utf-8")
    records = records_of(bundle / "demo-strong", "knowledge")
    records[3]["audio"] = label.format(secret=secret)
    write_records(bundle / "demo-strong", "knowledge", records)
    out = tmp_path / "out"
    refused(*rescore(bundle, out, capsys), "knowledge.records.jsonl", "audio", records[3]["qid"], "outside")
    copied = (
        [p for p in out.rglob("*") if p.is_file() and b"hunter2" in p.read_bytes()] if out.exists() else []
    )
    assert copied == []


def test_a_settings_file_linking_outside_the_bundle_is_refused(bundle, tmp_path, capsys):
    outside = tmp_path / "token.json"
    settings = json.loads(settings_path(bundle / "demo-strong").read_text(encoding="utf-8"))
    outside.write_text(json.dumps({**settings, "asr": {"token": "sk-hunter2"}}), encoding="utf-8")
    settings_path(bundle / "demo-strong").unlink()
    settings_path(bundle / "demo-strong").symlink_to(outside)
    out = tmp_path / "out"
    refused(*rescore(bundle, out, capsys), "knowledge.settings.json", "outside")
    assert not out.exists() or not [p for p in out.rglob("*") if p.is_file() and b"hunter2" in p.read_bytes()]


def test_a_model_folder_linking_outside_the_bundle_is_refused(bundle, tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    shutil.move(bundle / "demo-weak", elsewhere)
    (bundle / "demo-weak").symlink_to(elsewhere, target_is_directory=True)
    refused(*rescore(bundle, tmp_path / "out", capsys), "demo-weak", "outside")


def wrong_values(field: str, value) -> list:
    """Values of the wrong type (or out of range) for a record field whose right value is ``value``."""
    wrong: list = [[1, 2], {"a": 1}]
    if field.endswith(("_judge", "_keyword_hit", "_correct", "_understood", "_lsa", "_fallback")):
        wrong += ["false", 0, 1]
    elif field.endswith(tuple(f"_{aspect}" for aspect in OPEN_ENDED_ASPECTS)):
        wrong += [99, float("inf"), -1, True, "abc"]
    elif field.endswith("_status"):
        wrong += ["bogus", 1]
    elif field in ("psr_recognised", "psr_total"):
        wrong += [-1, 1.5, True, "3"]
    elif field in ("english_wer", "mixed_error_rate"):
        wrong += [-0.5, float("inf"), "0.1", True]
    elif field.endswith("_samples"):
        wrong += [{"values": [99], "min": 1, "max": 99, "models": ["m"]}, {"values": "4"}]
    elif field.endswith("_asks"):
        wrong += [0, "1", True]
    elif field == "set":
        wrong += ["bogus", 5]
    else:  # texts: the Qid, responses, transcripts, notes, errors, model ids, the audio label
        wrong += [5, 123, True]
    return wrong


def record_cases() -> list:
    """(set, field, wrong value) for every field of a record of each set."""
    from cs3_tasks.scoring.bundle import record_checks

    cases = []
    for set_name in SETS_SCORED:
        for field in record_checks(set_name, "cs3"):
            sample = None if not field.endswith("_samples") else {}
            for value in wrong_values(field, sample):
                cases.append(pytest.param(set_name, field, value, id=f"{set_name}-{field}-{value!r}"[:80]))
    return cases


@pytest.mark.parametrize(("set_name", "field", "value"), record_cases())
def test_every_record_field_of_the_wrong_type_or_range_is_refused(
    bundle, tmp_path, capsys, set_name, field, value
):
    records = records_of(bundle / "demo-strong", set_name)
    records[1][field] = value
    write_records(bundle / "demo-strong", set_name, records)
    line = refused(*rescore(bundle / "demo-strong", tmp_path / "out", capsys), f"{set_name}.records.jsonl")
    assert field in line or (field == "qid" and "needs a 'qid'" in line)


def test_every_field_a_bundle_record_holds_is_checked(bundle):
    """The checks know every field a scored record has (so the test above covers each of them)."""
    from cs3_tasks.scoring.bundle import record_checks

    for set_name in SETS_SCORED:
        fields = {k for record in records_of(bundle / "demo-strong", set_name) for k in record}
        assert fields <= set(record_checks(set_name, "cs3")), fields - set(record_checks(set_name, "cs3"))


SETTINGS_CASES = {
    "protocol": ["bogus", 5, [1]],
    "model": [["a"], 5, "", None],
    "dataset_sha256": [123, "abc", None],
    "asr": [[1, 2], "whisper", None],
    "asr_language": [5, ["zh"]],
    "judge": ["qwen", [1], {"model": 5}, {"model": "m", "samples": 0}, {"model": "m", "temperature": "0"}],
    "machine": [[1, 2], 5],
}


@pytest.mark.parametrize(
    ("field", "value"), [(f, v) for f, values in SETTINGS_CASES.items() for v in values], ids=repr
)
def test_every_settings_field_of_the_wrong_type_is_refused(bundle, tmp_path, capsys, field, value):
    edit_settings(bundle / "demo-strong", **{field: value})
    refused(*rescore(bundle / "demo-strong", tmp_path / "out", capsys), "knowledge.settings.json", field)


def test_the_settings_cases_cover_every_field_of_a_bundles_settings(bundle):
    settings = json.loads(settings_path(bundle / "demo-strong").read_text(encoding="utf-8"))
    assert set(settings) == set(SETTINGS_CASES)


@pytest.mark.parametrize("content", ["[1, 2]", "{not json", '"text"'])
def test_a_settings_file_that_is_not_an_object_is_refused(bundle, tmp_path, capsys, content):
    settings_path(bundle / "demo-strong").write_text(content, encoding="utf-8")
    refused(*rescore(bundle / "demo-strong", tmp_path / "out", capsys), "knowledge.settings.json")


@pytest.mark.parametrize(
    ("line", "why"), [("{not json", "not a JSON record"), ('{"qid": 5}', "needs a 'qid'")]
)
def test_a_records_line_that_is_not_a_record_is_refused_naming_the_line(bundle, tmp_path, capsys, line, why):
    path = bundle / "demo-strong" / "knowledge.records.jsonl"
    path.write_text(line + "\n" + path.read_text(encoding="utf-8"), encoding="utf-8")
    refused(*rescore(bundle / "demo-strong", tmp_path / "out", capsys), "knowledge.records.jsonl:1", why)


def test_a_bundle_that_does_not_name_its_dataset_is_refused(bundle, tmp_path, capsys):
    edit_settings(bundle / "demo-strong", dataset_sha256=KeyError)
    refused(
        *rescore(bundle / "demo-strong", tmp_path / "out", capsys),
        "knowledge.settings.json",
        "dataset_sha256",
    )


def test_another_dataset_than_the_one_named_is_refused(bundle, tmp_path, capsys):
    other = tmp_path / "other.json"
    other.write_text(json.dumps([{"Qid": "demo_knowledge-000", "Question": "?", "Answer": "x"}]), "utf-8")
    only = tmp_path / "only"
    shutil.copytree(bundle / "demo-strong", only, ignore=shutil.ignore_patterns("knowledge_en*", "open*"))
    line = refused(*rescore(only, tmp_path / "out", capsys, dataset=str(other)), "dataset_sha256")
    assert "another dataset" in line


def test_two_results_of_one_system_are_refused_naming_both(bundle, tmp_path, capsys):
    shutil.copytree(bundle / "demo-strong", bundle / "demo-strong-again")
    out = tmp_path / "out"
    refused(*rescore(bundle, out, capsys), "demo-strong", "demo-strong-again", "one system")
    assert not (out / "leaderboard.md").exists()


@pytest.mark.parametrize("said", ["cs3", None])
def test_settings_and_records_that_disagree_on_the_protocol_are_refused(bundle, tmp_path, capsys, said):
    edit_settings(bundle / "demo-strong", protocol=said)
    records = records_of(bundle / "demo-strong", "knowledge")
    write_records(bundle / "demo-strong", "knowledge", [{**r, "protocol": "reference"} for r in records])
    refused(*rescore(bundle / "demo-strong", tmp_path / "out", capsys), "knowledge.records.jsonl", "protocol")


def test_a_record_of_another_set_is_refused(bundle, tmp_path, capsys):
    records = records_of(bundle / "demo-strong", "knowledge")
    records[0]["set"] = "knowledge_en"
    write_records(bundle / "demo-strong", "knowledge", records)
    refused(*rescore(bundle / "demo-strong", tmp_path / "out", capsys), "knowledge.records.jsonl", "set")


def test_a_qid_the_dataset_lacks_is_refused_unless_the_record_says_so(bundle, tmp_path, capsys):
    records = records_of(bundle / "demo-strong", "knowledge")
    records.append({**records[0], "qid": "invented-001"})
    write_records(bundle / "demo-strong", "knowledge", records)
    refused(
        *rescore(bundle / "demo-strong", tmp_path / "out", capsys), "knowledge.records.jsonl", "invented-001"
    )


@pytest.mark.parametrize("channel", CHANNELS)
def test_a_flipped_verdict_is_said_per_set_and_exits_non_zero(bundle, tmp_path, capsys, channel):
    records = records_of(bundle / "demo-strong", "knowledge")
    judged = next(r for r in records if r[f"{channel}_status"] in ("judge_correct", "judge_wrong"))
    judged[f"{channel}_judge"] = not judged[f"{channel}_judge"]
    write_records(bundle / "demo-strong", "knowledge", records)
    code, err = rescore(bundle / "demo-strong", tmp_path / "out", capsys)
    assert code == NOT_REPRODUCED, err
    line = err.strip().splitlines()[-1]
    assert "does not reproduce" in line and "(knowledge: " in line and f"{channel}.accuracy" in line
    assert "open_ended: " not in line  # the sets that are reproduced are not named


def test_a_tampered_model_of_a_folder_is_not_reproduced_and_the_run_says_which(bundle, tmp_path, capsys):
    records = records_of(bundle / "demo-weak", "open_ended")
    scored = next(r for r in records if r["text_relevance"] is not None)
    scored["text_relevance"] = 5 if scored["text_relevance"] != 5 else 1
    write_records(bundle / "demo-weak", "open_ended", records)
    code, err = rescore(bundle, tmp_path / "out", capsys)
    assert code == NOT_REPRODUCED, err
    models = json.loads((tmp_path / "out" / "models.json").read_text(encoding="utf-8"))["models"]
    assert (
        models["demo-weak"]["exit_code"] == NOT_REPRODUCED and "open_ended: " in models["demo-weak"]["error"]
    )
    assert models["demo-strong"]["exit_code"] == 0


def test_records_without_an_input_key_are_reproduced_as_they_are(bundle, tmp_path, capsys):
    """Records written by lm-eval (``cs3-bench demo``) carry no input_key and a variant: kept as recorded."""
    for set_name in SETS_SCORED:
        records = records_of(bundle / "demo-strong", set_name)
        for record in records:
            del record["input_key"]
            record["variant"] = "audio"
        write_records(bundle / "demo-strong", set_name, records)
    code, err = rescore(bundle / "demo-strong", tmp_path / "out", capsys)
    assert code == 0, err
    for set_name in SETS_SCORED:
        name = f"{set_name}.records.jsonl"
        assert (tmp_path / "out" / name).read_bytes() == (bundle / "demo-strong" / name).read_bytes()


@pytest.mark.parametrize("option", [["--asr-model", "large-v3"], ["--protocol", "reference"], ["--no-judge"]])
def test_a_run_option_that_would_not_count_is_refused(bundle, tmp_path, capsys, option):
    """A re-score uses the bundle's own settings: an ASR, judge or protocol option is refused, not ignored."""
    argv = [
        "score",
        "--from-results",
        str(bundle),
        "--out",
        str(tmp_path / "out"),
        "--dataset",
        "demo",
        *option,
    ]
    line = refused(cli.main(argv), capsys.readouterr().err, option[0], "would not be used")
    assert "--dataset" not in line and not (tmp_path / "out").exists()
