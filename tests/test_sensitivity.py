"""Sensitivity views (cs3_tasks/report/sensitivity.py): one system's outputs scored twice, with another
stand-in ASR or another loopback judge, compared item by item by ``cs3-bench compare`` and ``cs3-bench report
--sensitivity``; the flips, kappa and McNemar p checked against what the records say, computed by hand; and
the runs that are refused, each naming what differs."""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
from pathlib import Path

import pytest
from demo_results import DEMO, heard_texts
from judge_server import Reply

from cs3_tasks import cli
from cs3_tasks.core.audio import content_hash
from cs3_tasks.report.comparable import settings_differences
from cs3_tasks.report.results import load_results
from cs3_tasks.report.sensitivity import (
    CELL_CHARACTERS,
    SensitivityView,
    sensitivity_markdown,
    sensitivity_or_refusal,
)

STRONG, WEAK = DEMO / "demo-strong", DEMO / "demo-weak"


def _score(outputs: Path, out: Path, *extra: str, sets: str = "all") -> Path:
    argv = ["score", "--outputs", str(outputs), "--out", str(out), "--dataset", "demo", "--set", sets]
    argv += ["--no-progress", *extra]
    assert cli.main(argv) == 0
    return out


def _records(result_dir: Path, set_name: str) -> dict[str, dict]:
    lines = (result_dir / f"{set_name}.records.jsonl").read_text(encoding="utf-8").splitlines()
    return {r["qid"]: r for r in map(json.loads, lines)}


def _view(a: Path, b: Path):
    (ra,), (rb,) = load_results([a]).values(), load_results([b]).values()
    return sensitivity_or_refusal(ra, rb)


@pytest.fixture
def asr_runs(tmp_path, fake_asr):
    """demo-strong scored twice with no judge: A by a stand-in ASR that drops English words from every third
    clip, B by one that hears every clip as its text."""
    heard = heard_texts()
    texts = {}
    for jsonl in STRONG.glob("*.jsonl"):
        for row in map(json.loads, jsonl.read_text(encoding="utf-8").splitlines()):
            texts[content_hash(str(STRONG / row["audio"]))] = row["text"]
    fake = fake_asr(lambda audio, language: heard[content_hash(audio)])
    no_judge = ("--protocol", "cs3", "--no-judge")
    a = _score(STRONG, tmp_path / "asr-a", "--asr-model", "fake-asr", *no_judge)
    fake.hear = lambda audio, language: texts[content_hash(audio)]
    b = _score(STRONG, tmp_path / "asr-b", "--asr-model", "fake-asr-b", *no_judge)
    return a, b


def test_another_asr_lists_the_transcripts_that_differ_and_what_flipped(asr_runs, capsys):
    a, b = asr_runs
    assert cli.main(["compare", str(a), str(b)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("Sensitivity of demo-strong: the same outputs scored twice")
    assert "Settings that differ (A -> B): asr.model.name: 'fake-asr' -> 'fake-asr-b'\n" in printed
    view = _view(a, b)
    for row in view.rows:
        ra, rb = _records(a, row["set"]), _records(b, row["set"])
        ch = row["channel"]
        if ch == "text":  # the text channel is not heard: nothing changes there
            assert (row["right_to_wrong"], row["wrong_to_right"], row["transcripts_differ"]) == (0, 0, None)
            continue
        differ = sorted(q for q in ra if ra[q]["transcript"] != rb[q]["transcript"])
        assert row["transcripts_differ"] == len(differ) > 0
        listed = [i["qid"] for i in view.items if i["set"] == row["set"] and i["channel"] == "speech"]
        assert sorted(listed) == differ  # no judge: only transcripts change the verdicts
        if row["set"] != "open_ended":
            up = [q for q in ra if ra[q]["speech_correct"] is False and rb[q]["speech_correct"] is True]
            down = [q for q in ra if ra[q]["speech_correct"] is True and rb[q]["speech_correct"] is False]
            assert (row["wrong_to_right"], row["right_to_wrong"]) == (len(up), len(down))
            assert row["paired"]["difference"] == pytest.approx((len(up) - len(down)) / len(ra))
        for qid in differ:  # each changed item is a line with both transcripts
            line = next(x for x in printed.splitlines() if f"| {row['set']} | {qid} | speech |" in x)
            assert ra[qid]["transcript"].replace("|", "\\|") in line
            assert rb[qid]["transcript"].replace("|", "\\|") in line
    assert re.search(r"\| knowledge \| speech \| 24 \| \d+ \|", printed)


def _judge(divisor: int):
    """A loopback judge whose replies are a function of the prompt: right when its digest is divisible, a
    score from the digest for the open-ended prompts (our prompts: cs3 protocol)."""

    def reply(request) -> Reply | str:
        prompt = request.prompt
        digest = int(hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:8], 16)
        if "评分标准" in prompt or "Scoring" in prompt:
            return f"Score: [{(digest // divisor) % 5 + 1}]"
        if "True" in prompt and "False" in prompt:
            return "True, consistent" if digest % divisor == 0 else "False, not consistent"
        return "正确 与参考答案一致" if digest % divisor == 0 else "错误 不一致"

    return reply


def test_two_judges_flips_kappa_and_mcnemar_are_those_of_the_records(tmp_path, fake_asr, judge_server):
    heard = heard_texts()
    fake_asr(lambda audio, language: heard[content_hash(audio)])
    runs = {}
    for name, divisor in (("judge-a", 2), ("judge-b", 3)):
        server = judge_server(_judge(divisor))
        judge = [
            "--judge-base-url",
            server.base_url,
            "--judge-api-key-env",
            "",
            "--judge-model",
            f"{name}-0125",
        ]
        judge += [
            "--judge-cache",
            str(tmp_path / f"{name}.sqlite"),
            "--protocol",
            "cs3",
            "--asr-model",
            "fake",
        ]
        runs[name] = _score(WEAK, tmp_path / name, *judge)
    view = _view(runs["judge-a"], runs["judge-b"])
    assert any("judge.model: 'judge-a-0125' -> 'judge-b-0125'" in d for d in view.differences)
    disagreeing = 0
    for row in view.rows:
        set_name, ch = row["set"], row["channel"]
        ra, rb = _records(runs["judge-a"], set_name), _records(runs["judge-b"], set_name)
        verdict = f"{ch}_correct" if set_name != "open_ended" else f"{ch}_understood"  # relevance > 3
        pairs = [(ra[q][verdict], rb[q][verdict]) for q in ra]
        n11, n10 = pairs.count((True, True)), pairs.count((True, False))
        n01, n00 = pairs.count((False, True)), pairs.count((False, False))
        n = n11 + n10 + n01 + n00
        assert n == len(ra) and (row["right_to_wrong"], row["wrong_to_right"]) == (n10, n01)
        assert row["transcripts_differ"] in (None, 0)  # one ASR: only the judge moved
        disagreeing += n10 + n01
        observed = (n11 + n00) / n
        expected = ((n11 + n10) * (n11 + n01) + (n01 + n00) * (n10 + n00)) / n**2
        assert row["kappa"]["kappa"] == pytest.approx((observed - expected) / (1 - expected))
        k = min(n10, n01)
        p = min(1.0, 2 * sum(math.comb(n10 + n01, i) for i in range(k + 1)) / 2 ** (n10 + n01))
        assert row["paired"]["mcnemar_p"] == pytest.approx(p)
        assert (row["paired"]["a_only"], row["paired"]["b_only"]) == (n01, n10)  # a = run B: B - A
        assert row["paired"]["difference"] == pytest.approx((n01 - n10) / n)
        listed = {
            i["qid"] for i in view.items if i["set"] == set_name and i["channel"] == ch and i["flipped"]
        }
        assert listed == {q for q in ra if ra[q][verdict] != rb[q][verdict]}
    assert disagreeing >= 10, "the two judges disagree on a set of items"


def test_what_is_not_one_system_scored_twice_is_refused_naming_it(asr_runs, tmp_path, fake_asr, capsys):
    a, b = asr_runs
    fake_asr(lambda audio, language: "听到")
    # the same outputs under another protocol
    other = _score(
        STRONG, tmp_path / "reference", "--asr-model", "fake-asr", "--protocol", "reference", "--no-judge"
    )
    capsys.readouterr()
    assert cli.main(["compare", str(a), str(other)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: the two runs hold the same outputs of demo-strong") and "\n" not in err
    assert "protocol: 'cs3' -> 'reference'" in err
    # the same outputs against another dataset
    moved = tmp_path / "moved"
    shutil.copytree(b, moved)
    settings = json.loads((moved / "knowledge.settings.json").read_text(encoding="utf-8"))
    (moved / "knowledge.settings.json").write_text(json.dumps({**settings, "dataset_sha256": "0" * 64}))
    assert cli.main(["compare", str(a), str(moved)]) == 2
    assert "dataset_sha256" in capsys.readouterr().err
    # other outputs under another ASR: named by Qid
    weak = _score(WEAK, tmp_path / "weak", "--asr-model", "fake-asr-b", "--protocol", "cs3", "--no-judge")
    capsys.readouterr()
    assert cli.main(["compare", str(a), str(weak)]) == 2
    err = capsys.readouterr().err
    assert "but so do the outputs scored" in err and "knowledge: 24 (demo_knowledge-000" in err
    # other outputs under the same settings: two systems, the paired comparison
    same = _score(WEAK, tmp_path / "weak-a", "--asr-model", "fake-asr", "--protocol", "cs3", "--no-judge")
    capsys.readouterr()
    assert cli.main(["compare", str(a), str(same)]) == 0
    assert capsys.readouterr().out.startswith("demo-strong - demo-weak: accuracy difference")
    # records without an input_key (older runs) are matched by their text and audio
    bare = tmp_path / "bare"
    shutil.copytree(b, bare)
    for path in bare.glob("*.records.jsonl"):
        rows = [{k: v for k, v in json.loads(x).items() if k != "input_key"} for x in path.open()]
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    assert _view(a, bare).rows == _view(a, b).rows


def test_report_sensitivity_lists_the_items_with_audio(asr_runs, tmp_path, capsys):
    a, b = asr_runs
    out = tmp_path / "sensitivity"
    assert cli.main(["report", str(a), str(b), "--sensitivity", "--html", str(out)]) == 0
    page = (out / "index.html").read_text(encoding="utf-8")
    view = _view(a, b)
    assert page.count("<tr data-set=") == len(view.rows) == 6
    assert "asr.model.name: &#x27;fake-asr&#x27; -&gt; &#x27;fake-asr-b&#x27;" in page
    items = page.split('id="sensitivity-items"')[1]
    assert items.count("<tr") == len(view.items) + 1  # the head and one row per changed item
    sources = re.findall(r'<audio controls preload="none" src="([^"]+)"', items)
    assert len(sources) == len(view.items) and all((out / s).is_file() for s in sources)
    for item in view.items:
        assert item["verdict_a"] in page and item["transcript_b"] in page
    assert str(tmp_path) not in page  # no folder of this machine
    # refusals: nothing else with --sensitivity; two systems; the plain report of one system twice says how
    assert cli.main(["report", str(a), str(b), "--sensitivity"]) == 2
    weak = tmp_path / "weak"
    shutil.copytree(a, weak)
    for path in weak.glob("*.records.jsonl"):  # other outputs, the same settings
        path.write_text(path.read_text(encoding="utf-8").replace('"input_key": "', '"input_key": "x'))
    assert cli.main(["report", str(a), str(weak), "--sensitivity", "--html", str(tmp_path / "x")]) == 2
    assert "two systems, not one system scored twice" in capsys.readouterr().err
    assert cli.main(["report", str(a), str(b), "--html", str(tmp_path / "y")]) == 2
    assert "--sensitivity" in capsys.readouterr().err


def test_the_judges_prompts_follow_the_judge():
    """The reference protocol reads its judge prompts only for a judge: no judge vs a judge differs in the
    judge, not in the protocol; two judges with other scripts do differ in the protocol's scripts."""

    def kinds(old: dict, new: dict) -> dict[str, str]:
        return {d.field.split(".")[0]: d.kind for d in settings_differences("knowledge", old, new)}

    scripts = {"pinned": True, "sha256": {"cs_knowledge.py": "a"}}
    none = {"protocol": "reference", "judge": None, "reference_scripts": None, "dataset_sha256": "d"}
    judged = {**none, "judge": {"model": "qwen-max-2025-01-25"}, "reference_scripts": scripts}
    assert kinds(none, judged) == {"judge": "judge", "reference_scripts": "judge"}
    other = {**judged, "reference_scripts": {**scripts, "pinned": False}}
    assert kinds(judged, other) == {"reference_scripts": "scoring"}
    older = {k: v for k, v in judged.items() if k != "dataset_sha256"}  # a run from before the field
    assert kinds(older, judged) == {}


def test_a_long_transcript_is_cut_in_the_markdown_view():
    """An ASR loop (or a huge response) does not flood the printed view: cut, with its length said."""
    loop = "Paris, " * 1000
    view = SensitivityView("m", "m", ["asr.backend: 'a' -> 'b'"])
    view.items.append(
        {
            "set": "knowledge",
            "qid": "q|1",
            "channel": "speech",
            "transcript_a": "Paris.",
            "transcript_b": loop,
            "verdict_a": "right (keyword)",
            "verdict_b": "wrong (unresolved)",
        }
    )
    printed = sensitivity_markdown(view)
    row = next(line for line in printed.splitlines() if line.startswith("| knowledge | q\\|1 |"))
    assert f"... ({len(loop):,} characters)" in row and len(row) < CELL_CHARACTERS + 200
