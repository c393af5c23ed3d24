"""A value that lacks verdicts is marked "incomplete" with its bounds wherever it is shown (issue 31): the
summary's cs-vs-en table, the demo's cs-vs-en table, the leaderboard (markdown and CSV), the HTML report and
lm-eval's printed table. Before, only the summary and the leaderboard's accuracies said it: a model with most
clips missing showed 40.0% and LSA 0.0 as plain numbers. Failed on the code before the fix."""

from __future__ import annotations

import csv
import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
from judge_server import Reply

from cs3_tasks import cli
from cs3_tasks.report.leaderboard import COLUMNS
from cs3_tasks.scoring.cs_vs_en import cs_vs_en_markdown, gap_entry
from cs3_tasks.scoring.formatting import format_entry

DEMO = Path(cli.__file__).resolve().parents[1] / "demo" / "responses"
# with its bounds, or without when one is unbounded (a preserve rate whose English accuracy may be 0)
INCOMPLETE = re.compile(
    r"^incomplete(: -?\d+\.\d+(-| to )-?\d+\.\d+(%| points)?)? \(\d+ verdicts? missing(; a ratio: [^)]*)?\)$"
)


def lacking(summaries: dict[str, dict]) -> set[str]:
    """The leaderboard columns whose value lacks verdicts, read from the summaries' ``complete`` flags."""

    def incomplete(set_name: str, ch: str, key: str) -> bool:
        return ((summaries.get(set_name) or {}).get(ch) or {}).get(key, {}).get("complete") is False

    columns = set()
    for ch in ("text", "speech"):
        cs, en = incomplete("knowledge", ch, "accuracy"), incomplete("knowledge_en", ch, "accuracy")
        columns |= {f"acc_{ch}_cs"} if cs else set()
        columns |= {f"acc_{ch}_en"} if en else set()
        columns |= {f"drop_{ch}", f"preserve_{ch}"} if cs or en else set()
        if incomplete("knowledge", ch, "lsa") or incomplete("open_ended", ch, "lsa"):
            columns.add(f"lsa_{ch}")
        if incomplete("open_ended", ch, "understanding_rate"):
            columns.add(f"understanding_{ch}")
    return columns


def _summaries(scored: Path, model: str) -> dict[str, dict]:
    return {
        path.name.split(".")[0]: json.loads(path.read_text(encoding="utf-8"))
        for path in (scored / model).glob("*.summary.json")
    }


def _judge(request) -> Reply | str:
    """A verdict for most prompts, an HTTP error for some (a missing verdict): a function of the prompt."""
    if int(hashlib.sha256(request.prompt.encode()).hexdigest()[:8], 16) % 4 == 0:
        return Reply.error(400, "bad request")
    if "正确" in request.prompt:
        return "错误 不一致"
    if "True" in request.prompt:
        return "False, not consistent"
    return "评分：[4]"


@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> Path:
    """demo-strong as it is; demo-weak with 5 of 6 spoken answers gone (every set), judged by a judge that
    fails a quarter of its verdicts."""
    from conftest import FakeASR
    from judge_server import FakeJudgeServer

    tmp = tmp_path_factory.mktemp("incomplete")
    root = tmp / "outputs"
    shutil.copytree(DEMO, root)
    for jsonl in (root / "demo-weak").glob("*.jsonl"):
        for k, line in enumerate(jsonl.read_text(encoding="utf-8").splitlines()):
            if k % 6:
                (jsonl.parent / json.loads(line)["audio"]).unlink()
    patch = pytest.MonkeyPatch()
    patch.setattr("cs3_tasks.asr.transcribe_batch", FakeASR(lambda audio, language: "我不知道 I don't know"))
    patch.setenv("CS3_BENCH_CACHE", str(tmp / "cache"))
    with FakeJudgeServer(_judge) as server:
        argv = ["score", "--outputs-root", str(root), "--out", str(tmp / "results"), "--dataset", "demo"]
        argv += ["--asr-model", "fake-asr", "--protocol", "cs3", "--no-progress", "--judge-model", "fake"]
        argv += ["--judge-base-url", server.base_url, "--judge-api-key-env", ""]
        assert cli.main(argv) in (1, 3)  # demo-weak: most items have no speech
    patch.undo()
    return tmp / "results"


def _table(markdown: str, first_cell: str) -> list[list[str]]:
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in markdown.splitlines()]
    return [row for row in rows if row and row[0] == first_cell]


def test_leaderboard_markdown_and_csv_mark_every_value_that_lacks_verdicts(scored):
    board = (scored / "leaderboard.md").read_text(encoding="utf-8")
    with open(scored / "leaderboard.csv", encoding="utf-8") as handle:
        rows = {row["model"]: row for row in csv.DictReader(handle)}
    for model in ("demo-strong", "demo-weak"):
        expected = lacking(_summaries(scored, model))
        if model == "demo-weak":  # most clips gone: every speech value lacks verdicts
            assert {"acc_speech_cs", "drop_speech", "preserve_speech", "lsa_speech"} <= expected
        (cells,) = _table(board, model)
        for column, cell in zip(COLUMNS, cells):
            if column in expected:
                assert INCOMPLETE.match(cell), (model, column, cell)
            else:  # a plain number only when nothing is missing
                assert not cell.startswith("incomplete"), (model, column, cell)
        marks = rows[model]["incomplete"]
        marked = dict(part.split(": ", 1) for part in marks.split("; ")) if marks else {}
        assert set(marked) == expected and all(INCOMPLETE.match(text) for text in marked.values())
        float(rows[model]["acc_speech_cs"])  # the numbers stay numbers


def test_cs_vs_en_tables_mark_incomplete_values(scored):
    summaries = {
        s: json.loads((scored / "demo-weak" / f"{s}.summary.json").read_text(encoding="utf-8"))
        for s in ("knowledge", "knowledge_en")
    }
    for markdown in (
        (scored / "demo-weak" / "knowledge.summary.md").read_text(encoding="utf-8"),
        cs_vs_en_markdown({"demo-weak": summaries}),
    ):
        section = markdown.split("| acc cs | acc en |", 1)[1]
        rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()]
        (speech,) = [row for row in rows if "speech" in row[:2]]
        values = speech[speech.index("speech") + 1 :]
        assert len(values) == 5 and all(INCOMPLETE.match(v) for v in values), speech  # each shows its bounds


def test_ratio_bounds_past_100_percent_say_why():
    """preserve = acc cs / acc en: where acc cs may exceed acc en its bounds pass 100%; right,
    and said, so it does not read as a bug. Bounds within 100% carry no note; a difference never does."""
    gap = {
        "preserve": 0.5,
        "drop_rel": 0.2,
        "drop_abs": 0.1,
        "incomplete": {
            "preserve": {"bounds": [0.136, 11.0], "n_missing_verdict": 12},
            "drop_rel": {"bounds": [0.1, 0.4], "n_missing_verdict": 12},
            "drop_abs": {"bounds": [-0.2, 0.5], "n_missing_verdict": 12},
        },
    }
    assert format_entry(gap_entry(gap, "preserve")) == (
        "incomplete: 13.6-1100.0% (12 verdicts missing; a ratio: past 100% where acc cs may exceed acc en)"
    )
    assert format_entry(gap_entry(gap, "drop_rel")) == "incomplete: 10.0-40.0% (12 verdicts missing)"
    assert "ratio" not in format_entry(gap_entry(gap, "drop_abs"))


def test_the_html_report_marks_them_too(scored):
    page = (scored / "report" / "index.html").read_text(encoding="utf-8")
    row = re.search(r'<tr data-model="demo-weak">(.*?)</tr>', page).group(1)
    expected = lacking(_summaries(scored, "demo-weak"))
    assert len(re.findall(r'<td class="incomplete">incomplete[: ]', row)) == len(expected)
    cs_vs_en = page.split('id="cs-vs-en"', 1)[1].split("</table>", 1)[0]
    assert 'class="num incomplete"' in cs_vs_en and "without a verdict or a twin, not paired" in cs_vs_en


def test_lm_eval_table_prints_the_bounds_beside_the_value(scored):
    from cs3_tasks.task_configs import run, utils

    from cs3_tasks.harness import lm_eval_hook

    records = {
        s: [
            json.loads(line)
            for line in (scored / "demo-weak" / f"{s}.records.jsonl").read_text().splitlines()
        ]
        for s in ("knowledge", "knowledge_en", "open_ended")
    }
    run.RUN.put_records("audio", "knowledge", records["knowledge"])
    values = {
        "acc_speech": utils.agg_acc_speech(records["knowledge"]),
        "lsa_speech": utils.agg_lsa_speech(records["knowledge"]),
        "drop_speech": utils.agg_drop_speech(records["knowledge_en"]),
        "preserve_speech": utils.agg_preserve_speech(records["knowledge_en"]),
        "understanding_speech": utils.agg_understanding_speech(records["open_ended"]),
        "relevance_speech": utils.agg_relevance_speech(records["open_ended"]),
    }
    run.RUN.records.clear()
    for name, value in values.items():
        assert isinstance(value, lm_eval_hook.MarkedValue) and INCOMPLETE.match(value.mark), name
        assert json.dumps(value) == json.dumps(float(value))  # results and JSON keep the number
    assert type(utils.agg_english_wer(records["knowledge"])) is float  # nothing missing: a plain float
    table = lm_eval_hook.marked_results(
        {"results": {"cs3_knowledge": {"acc_speech,cs3": values["acc_speech"], "alias": "cs3_knowledge"}}},
        "results",
    )
    shown = table["results"]["cs3_knowledge"]["acc_speech,cs3"]
    assert shown == f"{values['acc_speech']:.4f} ({values['acc_speech'].mark})"
    # lm-eval's own table function, as the start-up hook patches it: the value and its mark on one line
    import lm_eval.utils

    lm_eval_hook.patch_table(lm_eval.utils)  # idempotent: a no-op when the hook already did it
    results = {
        "results": {"cs3_knowledge": {"alias": "cs3_knowledge", "acc_speech,cs3": values["acc_speech"]}},
        "versions": {"cs3_knowledge": 2.0},
        "n-shot": {"cs3_knowledge": 0},
        "higher_is_better": {"cs3_knowledge": {"acc_speech": True}},
    }
    (line,) = [row for row in lm_eval.utils.make_table(results).splitlines() if "acc_speech" in row]
    assert f"{values['acc_speech']:.4f} ({values['acc_speech'].mark})" in line
    assert isinstance(results["results"]["cs3_knowledge"]["acc_speech,cs3"], float)  # not changed
