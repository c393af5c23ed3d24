"""The cs3 lm-eval tasks, in process: configs, dataset loading, the scoring filter, metrics, Python API.

Text-only responses are used throughout, so no ASR model runs here (the CLI tests cover speech).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest
from cs3_tasks.task_configs.run import LmEvalRun

from cs3_tasks.cli import evaluate
from cs3_tasks.core import data
from cs3_tasks.harness import lm_eval_hook
from cs3_tasks.harness.speech import encode_response

lm_eval = pytest.importorskip("lm_eval")

TASKS = (
    "cs3_knowledge",
    "cs3_knowledge_en",
    "cs3_open_ended",
    "cs3_knowledge_text",
    "cs3_knowledge_en_text",
    "cs3_open_ended_text",
)
DEMO_READY = (data.demo_dataset_dir() / "README.md").is_file()
needs_demo = pytest.mark.skipif(not DEMO_READY, reason="embedded demo dataset not built")


@pytest.fixture(scope="module")
def utils():
    """task_configs/utils.py as lm-eval loads it (one module per file path)."""
    from lm_eval.tasks._yaml_loader import _load_module_with_cache

    return _load_module_with_cache(lm_eval_hook.task_dir() / "utils.py")


@pytest.fixture(scope="module")
def manager():
    return evaluate.task_manager()


def test_task_manager_knows_tasks_and_groups(manager):
    for name in (*TASKS, "cs3", "cs3_text"):
        assert name in manager.all_tasks, name
    assert {"cs3", "cs3_text"} <= set(manager.all_groups)
    assert "arc_easy" not in manager.all_tasks  # lm-eval's own tasks only with include_defaults=True


@pytest.mark.parametrize(
    ("tasks", "ours"),
    [
        ("cs3", True),
        ("cs3_knowledge,cs3_knowledge_en_text", True),
        (["cs3_text", "belle_s2s_zh2en"], True),
        ("cs3,arc_easy", False),
        (["cs3", "arc_easy"], False),
        ("cs3*", False),  # a pattern lm-eval matches against every task it knows
        ("", False),
        ([{"task": "inline"}], False),
    ],
)
def test_which_runs_name_only_our_tasks(tasks, ours):
    assert lm_eval_hook.only_our_tasks(tasks) is ours


@pytest.mark.parametrize(
    ("tasks", "indexes_lm_evals_own"), [("cs3_knowledge", False), ("cs3,arc_easy", True)]
)
def test_a_run_of_our_tasks_only_does_not_index_lm_evals_own(tasks, indexes_lm_evals_own, monkeypatch):
    import lm_eval.tasks
    import lm_eval.tasks.manager
    from lm_eval.config.evaluate_config import EvaluatorConfig

    indexed = []
    real_build = lm_eval.tasks.manager.TaskIndex.build

    def build(paths, **kwargs):
        paths = list(paths)
        indexed.extend(Path(p).resolve() for p in paths)
        ours = [p for p in paths if Path(p).resolve() == lm_eval_hook.task_dir().resolve()]
        return real_build(ours, **kwargs)  # the real index of our folder only: quick either way

    monkeypatch.setattr(lm_eval.tasks.manager.TaskIndex, "build", staticmethod(build))
    config = EvaluatorConfig(tasks=tasks)
    if indexes_lm_evals_own:
        with pytest.raises(ValueError, match="arc_easy"):  # not in the trimmed index this test builds
            config.process_tasks()
    else:
        config.process_tasks()
        assert config.tasks == ["cs3_knowledge"]
    lm_evals_own = Path(lm_eval.tasks.__file__).resolve().parent
    assert (lm_evals_own in indexed) is indexes_lm_evals_own
    assert lm_eval_hook.task_dir().resolve() in indexed


def test_a_run_still_works_when_our_names_cannot_be_read(monkeypatch):
    import lm_eval.tasks.manager
    from lm_eval.config.evaluate_config import EvaluatorConfig

    def moved():
        raise ImportError("lm_eval.tasks._index moved")

    monkeypatch.setattr(lm_eval_hook, "our_task_names", moved)
    decided = []
    hooked_init = lm_eval.tasks.manager.TaskManager.__init__

    def record(self, *args, **kwargs):
        decided.append(lm_eval_hook._RUN.only_our_tasks)
        kwargs["include_defaults"] = False  # keep this test quick: the decision is what it checks
        hooked_init(self, *args, **kwargs)

    monkeypatch.setattr(lm_eval.tasks.manager.TaskManager, "__init__", record)
    config = EvaluatorConfig(tasks="cs3_knowledge")
    config.process_tasks()
    assert decided == [False] and config.tasks == ["cs3_knowledge"]


def test_our_groups_refer_only_to_our_tasks():
    from lm_eval.tasks._index import Kind, TaskIndex

    index = TaskIndex.build([lm_eval_hook.task_dir()])
    ours = lm_eval_hook.our_task_names()
    for name, entry in index.items():
        if entry.kind == Kind.GROUP:
            members = entry.cfg["task"]
            names = [m if isinstance(m, str) else m.get("task") for m in members]
            assert set(names) <= ours, (name, names)


def test_include_path_is_added_once():
    ours = lm_eval_hook.task_dir()
    assert lm_eval_hook.with_our_tasks(None) == [ours]
    assert lm_eval_hook.with_our_tasks(["/x"]) == [ours, "/x"]
    assert lm_eval_hook.with_our_tasks([str(ours)]) == [str(ours)]


def test_yaml_metrics_match_utils(utils):
    from lm_eval.tasks._yaml_loader import load_yaml

    for task in TASKS:
        config = load_yaml(lm_eval_hook.task_dir() / f"{task}.yaml", resolve_func=False)
        set_name, variant = evaluate.set_of_task(task)
        names = [m["metric"] for m in config["metric_list"]]
        assert names == utils.metric_names(set_name, variant), task
        for entry in config["metric_list"]:
            assert "higher_is_better" in entry and "aggregation" in entry
            assert entry["higher_is_better"] is (entry["metric"] not in utils.LOWER_IS_BETTER)
        if variant == "text":
            assert "doc_to_audio" not in config and not any("speech" in n for n in names)
        else:
            assert "doc_to_audio" in config


def test_query_audio_path(utils, tmp_path, monkeypatch):
    monkeypatch.setenv("CS3_BENCH_CACHE", str(tmp_path / "cache"))
    blob = b"RIFF" + bytes(range(64))
    path = utils.query_audio_path({"bytes": blob, "path": None}, "q-1")
    assert Path(path).read_bytes() == blob
    assert Path(path).name == hashlib.sha256(blob).hexdigest() + ".wav"
    assert utils.query_audio_path({"bytes": blob, "path": "x.flac"}, "q-1").endswith(".flac")
    own = tmp_path / "own.wav"
    own.write_bytes(blob)
    assert utils.query_audio_path({"bytes": None, "path": str(own)}, "q-2") == str(own.resolve())
    with pytest.raises(ValueError, match="q-3"):
        utils.query_audio_path({"bytes": None, "path": "/nowhere.wav"}, "q-3")


def test_doc_to_audio_is_hashable_by_the_request_cache(utils):
    from lm_eval.api.model import hash_args

    args = ("instruction", {"until": []}, {"audio": utils.doc_to_audio({"Qid": "q", "audio": "/a.flac"})})
    assert hash_args("generate_until", args) == hash_args("generate_until", args)
    with pytest.raises(ValueError, match="q-9"):
        utils.doc_to_audio({"Qid": "q-9", "audio": None})


def test_no_judge_configured_stops_with_the_cli_message(utils, monkeypatch, tmp_path, capsys):
    """Without a judge named, lm-eval's tasks use the default judge as ``cs3-bench score`` does: a missing
    key stops the task load with the CLI's message (plus how to say "judge": "none"); "none" is keyword-only;
    a judge from the environment joins."""
    from cs3_tasks import cli

    for var in ("CS3_JUDGE_MODEL", "CS3_JUDGE_BASE_URL", "CS3_JUDGE_API_KEY_ENV", "DASHSCOPE_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ValueError) as refused:
        utils.judge_config({})
    message = str(refused.value)
    assert message.startswith("cs3 --metadata: ") and '{"judge": "none"}' in message
    assert (
        cli.main(["score", "--outputs", str(tmp_path), "--set", "knowledge", "--out", str(tmp_path / "o")])
        == 2
    )
    cli_message = capsys.readouterr().err.strip().removeprefix("error: ")
    from cs3_tasks.scoring.options import in_metadata_words

    assert cli_message and in_metadata_words(cli_message) in message  # the CLI's refusal, in metadata words
    with pytest.raises(ValueError, match="DASHSCOPE_API_KEY"):
        utils.load_knowledge(dataset="demo")  # the task load stops: nothing is generated
    assert utils.judge_config({"judge": "none"}) is None
    monkeypatch.setenv("CS3_JUDGE_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("CS3_JUDGE_MODEL", "local-judge")
    config = utils.judge_config({})
    assert config is not None and config.model == "local-judge"


def test_the_cs3_block_says_an_undated_judge(utils):
    """lm-eval's ``cs3`` block (run_note) carries the note of a judge named by an undated alias."""
    options = {"protocol": "cs3", "asr_model": "fake-asr", "judge_base_url": "http://127.0.0.1:9/v1"}
    note = utils.run_note(utils.scoring_settings_of({**options, "judge_model": "gpt-4o-mini"}))
    assert any("gpt-4o-mini is an undated alias" in line for line in note["notes"])
    assert not any(note["comparable_to_paper"].values())
    pinned = utils.run_note(utils.scoring_settings_of({**options, "judge_model": "gpt-4o-mini-2024-07-18"}))
    assert not any("undated alias" in line for line in pinned["notes"])


@pytest.mark.slow
def test_results_and_table_say_how_the_run_was_scored(utils, monkeypatch):
    """Every lm-eval result of a cs3 run carries protocol, judge and comparable_to_paper (results JSON key
    "cs3"), and lm-eval's printed table ends with a line saying it."""
    import lm_eval.evaluator
    import lm_eval.utils
    from cs3_tasks.task_configs.run import RUN

    from cs3_tasks.harness import lm_eval_hook

    note = utils.run_note(utils.scoring_settings_of({"judge": "none", "protocol": "cs3"}))
    assert note["protocol"] == "cs3" and note["judge"] is None
    assert note["comparable_to_paper"] and not any(note["comparable_to_paper"].values()) and note["notes"]
    monkeypatch.setattr(RUN, "note", note)
    assert getattr(lm_eval.evaluator.simple_evaluate, "_cs3_patched", False)  # the hook patched lm-eval
    results = {"results": {"cs3_knowledge": {"acc_text,none": 0.5}}}
    module = type("M", (), {"simple_evaluate": staticmethod(lambda *a, **k: results)})
    lm_eval_hook.patch_evaluator(module)
    assert module.simple_evaluate()["cs3"] == note
    table = lm_eval.utils.make_table(
        {**results, "configs": {}, "versions": {}, "n-shot": {}, "higher_is_better": {}}
    )
    assert (
        "cs3: protocol cs3, no judge (keyword-only lower bounds); comparable to the paper: text no" in table
    )
    other = {"results": {"arc_easy": {}}}
    module = type("M", (), {"simple_evaluate": staticmethod(lambda *a, **k: other)})
    lm_eval_hook.patch_evaluator(module)
    assert "cs3" not in module.simple_evaluate()  # not a cs3 run: nothing added


@pytest.mark.parametrize(
    ("world_size", "tasks", "limit", "refused"),
    [
        ("2", ["cs3"], 1.0, True),  # lm-eval's --limit is a float
        ("4", ["cs3_knowledge"], 3, True),
        ("2", ["belle_s2s_zh2en"], 1, True),
        ("2", ["cs3"], 2.0, False),
        ("2", ["cs3"], 0.5, False),  # a fraction of each task: not known here
        ("2", ["cs3"], None, False),
        ("1", ["cs3"], 1.0, False),
        ("2", ["arc_easy"], 1.0, False),  # not ours to say
    ],
)
def test_a_launch_that_leaves_a_rank_without_docs_is_refused_before_it_runs(
    world_size, tasks, limit, refused, monkeypatch
):
    from cs3_tasks.harness import lm_eval_hook

    monkeypatch.setenv("WORLD_SIZE", world_size)
    ran = []

    def simple_evaluate(model=None, model_args=None, tasks=None, limit=None):
        ran.append(tasks)
        return {"results": {}}

    module = type("M", (), {"simple_evaluate": staticmethod(simple_evaluate)})
    lm_eval_hook.patch_evaluator(module)
    if not refused:
        module.simple_evaluate("cs3-precomputed", tasks=tasks, limit=limit)
        assert ran == [tasks]
        return
    from cs3_tasks.core.refusal import Refusal

    with pytest.raises(Refusal, match=f"under {world_size} processes leaves a process with no item") as stop:
        module.simple_evaluate("cs3-precomputed", tasks=tasks, limit=limit)
    assert f"--limit {world_size} or more" in str(stop.value) and not ran


def _docs(set_name: str) -> list[dict]:
    return [{k: v for k, v in row.items() if k != "audio"} for row in data.load_set(set_name, "demo")]


@needs_demo
def test_filter_records_and_metrics_equal_scoring_summaries(utils, monkeypatch):
    """lm-eval's numbers are cs3_tasks.scoring.pipeline's: same records, same summarize()."""
    from cs3_tasks.scoring import summary

    monkeypatch.setattr(utils, "RUN", LmEvalRun({"judge": "none"}))
    docs = _docs("knowledge")
    # right answer (Chinese keyword) for even items, a wrong one for odd items; text only
    resps = [[encode_response(d["Answer_zh"] if i % 2 == 0 else "不知道", None)] for i, d in enumerate(docs)]
    filtered = utils.ScoreResponses(set_name="knowledge").apply(resps, docs)
    records = [json.loads(f) for f in filtered]
    assert [r["qid"] for r in records] == [d["Qid"] for d in docs]
    per_doc = [utils.process_results(d, [f]) for d, f in zip(docs, filtered)]
    assert set(per_doc[0]) == set(utils.metric_names("knowledge"))
    expected = summary.summarize("knowledge", records)
    column = {name: [m[name] for m in per_doc] for name in per_doc[0]}
    assert utils.agg_acc_text(column["acc_text"]) == pytest.approx(expected["text"]["accuracy"]["value"])
    assert utils.agg_acc_text(column["acc_text"]) == pytest.approx(
        sum(1 for i in range(len(docs)) if i % 2 == 0) / len(docs)
    )
    for category in ("Acoustic", "Semantic", "Integrated"):
        got = getattr(utils, f"agg_acc_text_{category.lower()}")(column[f"acc_text_{category.lower()}"])
        want = expected["text"]["by_category"].get(category, {}).get("value")
        assert (math.isnan(got) and want is None) or got == pytest.approx(want)
    # no speech: not applicable (NaN), never 0
    for name in ("acc_speech", "acc_speech_acoustic", "lsa_speech", "psr", "english_wer"):
        assert math.isnan(getattr(utils, f"agg_{name}")(column[name])), name
    assert utils.agg_judge_errors(column["judge_errors"]) == 0
    assert utils.agg_lsa_text(column["lsa_text"]) == pytest.approx(expected["text"]["lsa"]["value"])


@needs_demo
def test_missing_output_is_excluded_not_wrong(utils, monkeypatch):
    monkeypatch.setattr(utils, "RUN", LmEvalRun({"judge": "none"}))
    docs = _docs("knowledge")[:2]
    resps = [
        [encode_response(docs[0]["Answer_zh"], None)],
        [encode_response(None, None, problem="no output for this Qid")],
    ]
    records = [json.loads(f) for f in utils.ScoreResponses(set_name="knowledge").apply(resps, docs)]
    assert records[1]["text_correct"] is None and "no output" in records[1]["problem"]
    assert utils.agg_acc_text([utils.compact(r) for r in records]) == 1.0


@needs_demo
def test_cs_vs_en_drop_uses_the_same_run(utils, monkeypatch):
    monkeypatch.setattr(utils, "RUN", LmEvalRun({"judge": "none"}))  # a fresh run: no records yet
    cs_docs, en_docs = _docs("knowledge"), _docs("knowledge_en")
    en = [
        json.loads(f)
        for f in utils.ScoreResponses(set_name="knowledge_en").apply(
            [[d["Answer"]] for d in en_docs], en_docs
        )
    ]
    compact_en = [utils.compact(r) for r in en]
    assert math.isnan(utils.agg_drop_text(compact_en))  # the cs set did not run
    half = len(cs_docs) // 2
    utils.ScoreResponses(set_name="knowledge").apply(
        [[d["Answer_zh"] if i < half else "不知道"] for i, d in enumerate(cs_docs)], cs_docs
    )
    assert utils.agg_drop_text(compact_en) == pytest.approx(1 - half / len(cs_docs))
    assert utils.agg_preserve_text(compact_en) == pytest.approx(half / len(cs_docs))
    assert math.isnan(utils.agg_drop_speech(compact_en))


@pytest.mark.slow
@needs_demo
def test_python_api_simple_evaluate_text_only(tmp_path):
    """The Python API end to end with a text-only model: the text-input variant of one set."""
    responses = Path(evaluate.DEMO_RESPONSES) / "demo-strong"
    if not (responses / "knowledge.jsonl").is_file():
        pytest.skip("demo responses not generated")
    import cs3_tasks.models.precomputed  # noqa: F401

    results = lm_eval.simple_evaluate(
        model="cs3-precomputed",
        model_args={"outputs": str(responses), "text_only": "true"},
        tasks=["cs3_knowledge_text"],
        task_manager=evaluate.task_manager(metadata={"dataset": "demo", "judge": "none"}),
        metadata={"dataset": "demo", "judge": "none"},
        bootstrap_iters=0,
        log_samples=True,
    )
    metrics = results["results"]["cs3_knowledge_text"]
    assert 0.5 < metrics["acc_text,cs3"] < 1.0  # demo-strong misses every fifth item
    assert not any(key.startswith(("acc_speech", "psr")) for key in metrics)
    records = evaluate.records_from_samples(results["samples"])[("knowledge", "text")]
    assert len(records) == len(_docs("knowledge")) and all(r["audio"] is None for r in records)


def test_demo_responses_are_what_the_script_makes(tmp_path):
    """The bundled demo responses come from make_responses (texts identical; audio 16 kHz, readable)."""
    from cs3_tasks.core.audio import load_audio
    from cs3_tasks.demo import make_responses

    bundled = Path(evaluate.DEMO_RESPONSES)
    if not (make_responses.SOURCE_DIR / "cs_knowledge.json").is_file() or not bundled.is_dir():
        pytest.skip("demo source or responses absent")
    made = make_responses.make_demo_responses(
        make_responses.SOURCE_DIR, tmp_path, {"demo-weak": make_responses.weak_answer}
    )
    assert made["demo-weak"] > 0
    for set_name in data.SETS:
        ours = (tmp_path / "demo-weak" / f"{set_name}.jsonl").read_text(encoding="utf-8")
        assert ours == (bundled / "demo-weak" / f"{set_name}.jsonl").read_text(encoding="utf-8"), set_name
        first = json.loads(ours.splitlines()[0])
        assert load_audio(bundled / "demo-weak" / first["audio"]).size > 16000 * 0.3
    strong = {
        s: [json.loads(x) for x in (bundled / "demo-strong" / f"{s}.jsonl").read_text().splitlines()]
        for s in data.SETS
    }
    assert any(
        "Salt Lake City" in r["text"] or any(c.isascii() and c.isalpha() for c in r["text"])
        for r in strong["knowledge"]
    )
    total = sum(f.stat().st_size for f in bundled.rglob("*") if f.is_file())
    assert total < 10_000_000


def test_the_run_settings_are_resolved_once_per_run(utils, monkeypatch):
    """lm-eval's hooks (loaders, filters, the judge, protocol, ASR and settings helpers) share one resolved
    ScoringSettings per run: the options are checked and the authors' prompts read once, not at each hook."""
    calls = []
    resolve = utils.settings_from_options

    def counted(settings, **kwargs):
        calls.append(kwargs)
        return resolve(settings, **kwargs)

    monkeypatch.setattr(utils, "settings_from_options", counted)
    monkeypatch.setattr(utils, "RUN", LmEvalRun())
    settings = utils.RUN.load_task({"judge": "none", "protocol": "cs3"})
    resolved = utils.scoring_settings_of(settings)
    assert utils.scoring_settings_of(dict(settings)) is resolved
    assert utils.judge_config(settings) is None and utils.protocol(settings) == "cs3"
    assert utils.asr_config(settings) is resolved.asr
    assert utils.scoring_settings(settings, "knowledge")["protocol"] == "cs3"
    assert len(calls) == 1
    utils.RUN.put_records("audio", "knowledge", [])  # the filters ran: the next loader starts a new run
    utils.RUN.put_records("audio", "knowledge", [{"qid": "x"}])
    utils.scoring_settings_of(utils.RUN.load_task({"judge": "none", "protocol": "cs3"}))
    assert len(calls) == 2
    monkeypatch.setenv("CS3_ASR_MODEL", "another")  # what the resolution reads changed: resolved again
    assert utils.scoring_settings_of(settings) is not resolved and len(calls) == 3


def test_the_hooks_model_list_is_pyprojects_entry_points():
    """The models the start-up hook registers are the ones pyproject's lm_eval.models entry points name,
    each from the module its entry point names (two lists, one content)."""
    tomllib = pytest.importorskip("tomllib")
    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text("utf-8"))
    entry_points = pyproject["project"]["entry-points"]["lm_eval.models"]
    assert {name: target.split(":")[0] for name, target in entry_points.items()} == lm_eval_hook.MODEL_MODULES


@pytest.mark.parametrize(
    ("arguments", "ours"),
    [
        (["-m", "lm_eval", "--model", "cs3-precomputed", "--tasks", "cs3"], True),
        (["-m", "lm_eval", "--model", "hf", "--tasks=mmlu,cs3_knowledge"], True),
        (["-m", "lm_eval", "--model", "hf", "--tasks", "mmlu"], False),
        (["train.py", "--epochs", "3"], False),
    ],
)
def test_the_launcher_is_changed_for_cs3_launches_only(arguments, ours):
    """torch's elastic launcher exits 2 when every process refused a cs3 run; any other torchrun in the
    environment fails as torch makes it fail."""
    import types

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    def refused(config, entrypoint, args):
        failures = {0: ProcessFailure(0, 1, 2, "/nonexistent"), 1: ProcessFailure(1, 2, -15, "/nonexistent")}
        raise ChildFailedError("lm_eval", failures)

    launcher = types.SimpleNamespace(launch_agent=refused)
    lm_eval_hook.patch_launcher(launcher)
    assert lm_eval_hook.is_cs3_launch(arguments) is ours
    with pytest.raises(SystemExit if ours else ChildFailedError):
        launcher.launch_agent(None, "python", arguments)


@pytest.mark.parametrize(("first_code", "launcher_exit"), [(2, 2), (3, 3), (1, None)])
def test_the_launcher_ends_with_the_code_the_first_process_said_why_for(first_code, launcher_exit):
    """2 (a refused run) and 3 (a set failed as a whole): the first process said why in one line, so the
    launcher exits with that code, without its own traceback; any other failure is torch's to report."""
    import types

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    def ended(config, entrypoint, args):
        failures = {0: ProcessFailure(0, 1, first_code, "/nonexistent"), 1: ProcessFailure(1, 2, -15, "/x")}
        raise ChildFailedError("lm_eval", failures)

    launcher = types.SimpleNamespace(launch_agent=ended)
    lm_eval_hook.patch_launcher(launcher)
    arguments = ["-m", "lm_eval", "--model", "cs3-precomputed", "--tasks", "cs3"]
    if launcher_exit is None:
        with pytest.raises(ChildFailedError):
            launcher.launch_agent(None, "python", arguments)
    else:
        with pytest.raises(SystemExit) as ended_with:
            launcher.launch_agent(None, "python", arguments)
        assert ended_with.value.code == launcher_exit
