"""Acceptance: the reference protocol gives the authors' own numbers, item by item.

The authors' scripts (../shared/reference/vocalbench-zh/utils) run unchanged on the same model outputs as our
reference protocol, for all three sets. Judge replies are scripted per prompt: our client gets them from a
loopback server, their code from a stand-in for their Qwen_Max client (their functions take it as an
argument). Per-item prompts, verdicts, scores and headline numbers must be identical. The scripts hold the
hard cases (a verdict in bold or after a space, an explanation first, two bracketed scores, an out-of-range
score, [0], no score, an empty reply). Skipped with a printed reason when the shared copies are absent.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import os
import random
import re
import shutil
import sys
import threading
import types
from collections import defaultdict
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from judge_server import FakeJudgeServer, Reply

from cs3_tasks.judge import JudgeConfig
from cs3_tasks.scoring import reference
from cs3_tasks.scoring.summary import add_comparability

SHARED = Path(__file__).resolve().parents[2] / "shared"
AUTHORS = SHARED / "reference" / "vocalbench-zh"
DATA = SHARED / "data" / "cs3bench"

# ask k of a prompt gets script[min(k, len - 1)]
KNOWLEDGE_ZH_SCRIPTS = [
    ["正确 一致。"],
    ["错误 不一致。"],
    ["**正确** 一致。", "正确"],  # bold verdict: not a start, asked again
    [" 正确 有前导空格"],  # verdict after a space: 10 asks, then wrong
    ["模型回答与中文答案一致，因此判断为正确"],  # explanation before the verdict: 10 asks, then wrong
    ["", "错误 不一致"],  # empty reply, then a verdict
    ["正确/错误"],  # the format echoed: starts with 正确
    ["不正确。"],
    ["判断：错误", "错误 不一致"],
]
KNOWLEDGE_EN_SCRIPTS = [
    ["True The response is consistent."],
    ["False The response is wrong."],
    ["**True** consistent", "True"],
    [" True leading space"],
    ["The response matches the answer, so: True"],
    ["", "False"],
    ["true lower case"],
    ["False."],
]
OPEN_SCRIPTS = [
    ["理解正确。得分：[4]"],
    ["先是 [3]，后来 [5]"],  # two bracketed scores: the first
    ["得分：[6]"],  # out of range: no match, 10 asks, then 1
    ["完全错误。得分：[0]"],  # 0 is allowed
    ["没有给出分数"],
    [""],
    ["", "得分：[5]"],
    ["得分：[ 4 ]", "得分：[2]"],
    ["得分：[4.5]"],
    ["**[5]**"],
]
SCRIPTS = {
    "knowledge": KNOWLEDGE_ZH_SCRIPTS,
    "knowledge_en": KNOWLEDGE_EN_SCRIPTS,
    "open_ended": OPEN_SCRIPTS,
}


def _need_authors() -> None:
    missing = [p for p in (AUTHORS / "utils", DATA) if not p.is_dir()]
    if missing:
        reason = (
            f"authors' scripts or data not found ({', '.join(map(str, missing))}): differential test skipped"
        )
        print(reason)
        pytest.skip(reason)


class Script:
    """The scripted judge: the reply for (prompt, ask number), the same for both implementations."""

    def __init__(self, scripts: list[list[str]]):
        self.scripts = scripts
        self.used: set[int] = set()
        self.lock = threading.Lock()

    def choice(self, prompt: str) -> int:
        return int(hashlib.sha256(prompt.encode("utf-8")).hexdigest(), 16) % len(self.scripts)

    def reply(self, prompt: str, ask: int) -> str:
        index = self.choice(prompt)
        with self.lock:
            self.used.add(index)
        script = self.scripts[index]
        return script[min(ask, len(script) - 1)]


class ServerSide:
    """Handler of the loopback server: counts asks per prompt."""

    def __init__(self, script: Script):
        self.script, self.asks, self.lock = script, defaultdict(int), threading.Lock()

    def __call__(self, request):
        prompt = request.prompt
        with self.lock:
            ask = self.asks[prompt]
            self.asks[prompt] += 1
        return self.script.reply(prompt, ask)


class TheirClient:
    """Stands in for their Qwen_Max: same call shape, scripted replies; the ask counter restarts per item."""

    def __init__(self, script: Script):
        self.script = script
        self.asks: dict[str, int] = defaultdict(int)
        self.prompts: list[str] = []

    def __call__(self, messages, retry=10):
        assert isinstance(messages, list) and len(messages) == 1 and messages[0]["role"] == "user"
        prompt = messages[0]["content"]
        self.prompts.append(prompt)
        ask = self.asks[prompt]
        self.asks[prompt] += 1
        return {"text": self.script.reply(prompt, ask)}

    def new_item(self) -> None:
        self.asks.clear()


def _import_authors(name: str, monkeypatch) -> types.ModuleType:
    """Import one of their scripts unchanged, with a stub `config` module (their keys and client)."""
    stub = types.ModuleType("config")
    stub.keys = ["test-key"]
    stub.Qwen_Max = None  # replaced per run
    monkeypatch.setitem(sys.modules, "config", stub)
    monkeypatch.setenv("QWEN_API_KEY", "unused")  # they set it at import; monkeypatch restores it
    monkeypatch.setattr(sys, "path", list(sys.path))  # they append "./" to it
    state = random.getstate()  # they reseed the global generator at import
    try:
        spec = importlib.util.spec_from_file_location(f"vocalbench_{name}", AUTHORS / "utils" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        random.setstate(state)
    return module


def _run_theirs(set_name: str, outputs_file: Path, tmp: Path, script: Script, monkeypatch):
    """Their qwenmax_eval_json on our outputs file: (per-item instances, printed headline numbers,
    prompts)."""
    stem = reference.AUTHORS_SET_FILES[set_name]
    module = _import_authors(stem, monkeypatch)
    client = TheirClient(script)
    module.Qwen_Max = lambda model_name=None, temperature=0: client
    for function in ("qwenmax_eval", "qwenmax_eval_relevance", "qwenmax_eval_semantic"):
        original = getattr(module, function, None)
        if original is not None:

            def wrapped(*args, _original=original):
                client.new_item()
                return _original(*args)

            monkeypatch.setattr(module, function, wrapped)
    # they read the reference data from ../json/<stem>.json relative to the working directory
    (tmp / "json").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(DATA / f"{stem}.json", tmp / "json" / f"{stem}.json")
    (tmp / "work").mkdir(exist_ok=True)
    monkeypatch.chdir(tmp / "work")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        module.qwenmax_eval_json(str(outputs_file), str(tmp / f"{stem}.judged.json"))
    instances = json.loads((tmp / f"{stem}.judged.json").read_text(encoding="utf-8"))
    numbers = {
        m.group(1): float(m.group(2))
        for m in re.finditer(r"^([^\[{\n][^:\n]*): ([0-9.e+-]+)$", printed.getvalue(), re.MULTILINE)
    }
    return instances, numbers, client.prompts


def _responses(set_name: str, docs: list[dict]) -> list[dict]:
    """Model outputs with keyword hits, name parts, case changes, empty answers and wrong answers."""
    question_count = defaultdict(int)
    for doc in docs:
        question_count[doc["Question"]] += 1
    rows = []
    for i, doc in enumerate(docs):
        kind = i % 7
        if set_name == "knowledge" and kind == 0:
            text = f"答案是{doc['Answer_zh']}。"
        elif set_name == "knowledge" and kind == 1:
            text = f"I think it is {doc['Answer_en'].upper()}."
        elif set_name == "knowledge" and kind == 2 and "·" in doc["Answer_zh"]:
            text = f"应该是{doc['Answer_zh'].split('·')[-1]}吧"
        elif set_name == "knowledge_en" and kind == 0:
            text = f"It is {doc['Answer'].swapcase()}!"
        elif kind == 3 and question_count[doc["Question"]] == 1:
            text = ""
        else:
            text = f"我不太确定，第{i}题可能是别的 answer。"
        rows.append({"Qid": doc["Qid"], "Response": text})
    return rows


def _write_outputs(path: Path, rows: list[dict], as_lines: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if as_lines:
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    else:
        path.write_text(json.dumps(rows, ensure_ascii=False, indent=4), encoding="utf-8")


def _config(server: FakeJudgeServer, tmp: Path) -> JudgeConfig:
    return JudgeConfig(
        base_url=server.base_url,
        model=reference.REFERENCE_JUDGE_MODEL,
        api_key_env="",
        cache_path=tmp / "judge.sqlite",
        max_concurrency=4,
        backoff_initial=0.0,
        max_retries=1,
    )


@pytest.mark.parametrize("set_name", reference.SETS)
def test_reference_protocol_equals_the_authors_scripts(set_name, tmp_path, monkeypatch):
    _need_authors()
    stem = reference.AUTHORS_SET_FILES[set_name]
    docs = json.loads((DATA / f"{stem}.json").read_text(encoding="utf-8"))
    rows = _responses(set_name, docs)
    outputs = tmp_path / "model"
    _write_outputs(outputs / "json" / f"{stem}.json", rows, as_lines=set_name == "knowledge_en")
    script = Script(SCRIPTS[set_name])

    # ours: read their layout, score through the loopback judge, reading the prompts from their scripts
    with FakeJudgeServer(ServerSide(script)) as server:
        read = reference.read_authors_outputs(outputs, set_name)
        records = reference.score_reference_set(
            set_name,
            docs,
            reference.responses_of(read.values()),
            judge=_config(server, tmp_path),
            scripts=AUTHORS,
        )
        our_prompts = [r.prompt for r in server.requests]
        bodies = [r.body for r in server.requests]
    ours = reference.summarize_reference(set_name, records)
    used_by_us = set(script.used)

    script.used.clear()
    theirs, numbers, their_prompts = _run_theirs(
        set_name, outputs / "json" / f"{stem}.json", tmp_path / "theirs", script, monkeypatch
    )
    assert script.used == used_by_us == set(range(len(SCRIPTS[set_name]))), "every hard case was exercised"

    # the same prompts were sent, as one user message to qwen-max-2025-01-25 at temperature 0
    assert set(our_prompts) == set(their_prompts) and our_prompts
    assert all(
        b == {"model": "qwen-max-2025-01-25", "messages": [{"role": "user", "content": p}], "temperature": 0}
        for b, p in zip(bodies, our_prompts)
    )

    by_qid = {r["qid"]: r for r in records}
    assert [t["Qid"] for t in theirs] == [r["Qid"] for r in rows]
    if set_name == "open_ended":
        for t in theirs:
            assert (by_qid[t["Qid"]]["relevance"], by_qid[t["Qid"]]["semantic"]) == (
                t["Relevance"],
                t["Semantic"],
            )
        assert ours["avg_relevance"]["value"] == numbers["Avg Relevance Score"]
        assert ours["relevance_rate"]["value"] == numbers["Relevance Rate"]
        assert ours["avg_semantic"]["value"] == numbers["Avg Semantic Score"]
        assert all(ours[k]["complete"] for k in ("avg_relevance", "relevance_rate", "avg_semantic"))
        assert {0, 1, 3, 4, 5} <= {r["relevance"] for r in records} | {r["semantic"] for r in records}
    else:
        for t in theirs:
            assert by_qid[t["Qid"]]["correct"] == t["Correct"], t["Qid"]
        headline = numbers["准确率" if set_name == "knowledge" else "Avg Accuracy"]
        assert ours["accuracy"]["value"] == headline and ours["accuracy"]["complete"]
        statuses = ours["statuses"]
        assert statuses["keyword"] and statuses["judge_correct"] and statuses["judge_wrong"]
        assert statuses["judge_unparsed"] and not statuses["judge_error"]
    print(
        f"{set_name}: {len(records)} items, {len(our_prompts)} judge requests, headline identical: "
        f"{ours.get('accuracy', ours.get('avg_relevance'))['value']}"
    )


def test_their_client_request_equals_ours(tmp_path, monkeypatch):
    """Their Qwen_Max pointed at the loopback server sends the same body as our reference client."""
    _need_authors()
    spec = importlib.util.spec_from_file_location("vocalbench_config", AUTHORS / "utils" / "config.py")
    their_config = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(their_config)
    prompt = "\n一个提示 with English\n  ***\n  "
    with FakeJudgeServer("正确 一致") as server:
        client = their_config.Qwen_Max()
        client.url = f"{server.base_url}/chat/completions"
        assert client([{"role": "user", "content": prompt}]) == {"text": "正确 一致"}
        verdicts = reference.ask_reference(
            [prompt],
            reference.parse_knowledge_reply,
            False,
            reference.reference_judge_config(_config(server, tmp_path)),
        )
        theirs, ours = (r.body for r in server.requests)
    assert verdicts[0].value is True and theirs == ours
    assert json.dumps(theirs["temperature"]) == json.dumps(ours["temperature"]) == "0"


def test_transport_failure_is_a_judge_error_where_their_script_crashes(tmp_path, monkeypatch):
    _need_authors()
    docs = json.loads((DATA / "cs_knowledge.json").read_text(encoding="utf-8"))[:4]
    responses = {d["Qid"]: f"不知道 {i}" for i, d in enumerate(docs)}
    failing = docs[1]["Qid"]

    def handler(request):
        return Reply.error(500) if "不知道 1" in request.prompt else "错误 不一致"

    with FakeJudgeServer(handler) as server:
        records = reference.score_reference_set(
            "knowledge", docs, responses, judge=_config(server, tmp_path), scripts=AUTHORS
        )
    summary = reference.summarize_reference("knowledge", records)
    bad = next(r for r in records if r["qid"] == failing)
    assert bad["status"] == "judge_error" and bad["correct"] is None and "HTTP 500" in bad["judge_error"]
    accuracy = summary["accuracy"]
    assert accuracy["complete"] is False and accuracy["judge_errors"] == 1
    assert (accuracy["low"], accuracy["high"]) == (0.0, 0.25)

    # their client returns None after its 10 HTTP failures, and their script then crashes
    module = _import_authors("cs_knowledge", monkeypatch)
    with pytest.raises(TypeError):
        module.qwenmax_eval("q", "a", "b", "r", lambda messages: None)


# ---------------------------------------------------------------------------------------------------
# locating, downloading and reading the scripts


def test_scripts_from_argument_env_and_errors(tmp_path, monkeypatch):
    _need_authors()
    monkeypatch.delenv(reference.SCRIPTS_ENV, raising=False)
    monkeypatch.setenv("CS3_BENCH_CACHE", str(tmp_path / "cache"))
    found = reference.find_reference_scripts(AUTHORS)
    assert found.directory == (AUTHORS / "utils").resolve() and found.pinned and found.origin == "argument"
    assert reference.find_reference_scripts(AUTHORS / "utils").pinned
    monkeypatch.setenv(reference.SCRIPTS_ENV, str(AUTHORS))
    assert reference.find_reference_scripts().origin == "environment"
    with pytest.raises(reference.ReferenceScriptsError, match="holds neither"):
        reference.find_reference_scripts(tmp_path)
    monkeypatch.delenv(reference.SCRIPTS_ENV)
    with pytest.raises(reference.ReferenceScriptsError) as error:
        reference.find_reference_scripts(download=False)
    message = str(error.value)
    assert "--reference-scripts" in message and reference.SCRIPTS_ENV in message
    assert "download" in message and "--protocol cs3" in message


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def _file_server(root: Path):
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_download_is_checked_and_cached(tmp_path, monkeypatch):
    _need_authors()
    monkeypatch.delenv(reference.SCRIPTS_ENV, raising=False)
    monkeypatch.setenv("CS3_BENCH_CACHE", str(tmp_path / "cache"))
    site = tmp_path / "site"
    shutil.copytree(AUTHORS / "utils", site / "utils")
    with _file_server(site) as base:
        url = base + "/utils/{name}"
        found = reference.find_reference_scripts(url=url)
        assert found.origin == "download" and found.pinned
        assert reference.find_reference_scripts(download=False).origin == "cache"  # no second download
        (site / "utils" / "cs_open_ended.py").write_text("tampered", encoding="utf-8")
        with pytest.raises(reference.ReferenceScriptsError, match="sha256"):
            reference.download_reference_scripts(tmp_path / "other", url=url)
        assert not (tmp_path / "other" / "cs_open_ended.py").exists()
    with pytest.raises(reference.ReferenceScriptsError, match="--protocol cs3"):
        reference.download_reference_scripts(tmp_path / "x", url="http://127.0.0.1:9/{name}", timeout=2)
    assert len(list(found.directory.iterdir())) == 3


def test_template_of_another_shape_is_a_clear_error(tmp_path):
    _need_authors()
    for name in reference.SCRIPT_SHA256:
        shutil.copyfile(AUTHORS / "utils" / name, tmp_path / name)
    text = (tmp_path / "cs_knowledge.py").read_text(encoding="utf-8")
    (tmp_path / "cs_knowledge.py").write_text(
        text.replace('startswith("正确")', 'startswith("对")'), encoding="utf-8"
    )
    with pytest.raises(reference.ReferenceScriptsError, match="verdict prefixes"):
        reference.load_templates(tmp_path)
    assert not reference.find_reference_scripts(tmp_path).pinned


def test_no_judge_needs_no_scripts(tmp_path, monkeypatch):
    monkeypatch.setenv(reference.SCRIPTS_ENV, str(tmp_path / "nowhere"))
    docs = [
        {
            "Qid": "k-0",
            "Question": "q",
            "Answer_zh": "乔治·华盛顿",
            "Answer_en": "George Washington",
            "Category": "Acoustic",
        },
        {"Qid": "k-1", "Question": "q", "Answer_zh": "猪", "Answer_en": "Pig", "Category": "Semantic"},
    ]
    records = reference.score_reference_set("knowledge", docs, {"k-0": "是华盛顿", "k-1": "是狗"}, judge=None)
    assert [r["status"] for r in records] == ["keyword", "unresolved"]
    assert reference.summarize_reference("knowledge", records)["accuracy"]["value"] == 0.5
    open_records = reference.score_reference_set(
        "open_ended", [{"Qid": "o-0", "Question": "q", "Answer": "a"}], {"o-0": "r"}, judge=None
    )
    assert reference.summarize_reference("open_ended", open_records)["avg_relevance"]["value"] is None


# ---------------------------------------------------------------------------------------------------
# pure rules


def test_keyword_rule_is_their_raw_substring_rule():
    hit = reference.knowledge_keyword_hit
    assert hit("这是肯定的", "肯·罗素", "Ken Russell")  # one-character part, as theirs
    assert hit("RUSSELL? 不", "甲", "russell")
    assert not hit("盐 湖城", "盐湖城", "Salt Lake City")  # no normalisation
    assert not hit("喬治·華盛頓", "乔治·华盛顿", "George Washington")  # no t2s
    assert hit("anything", "甲· ", "x")  # an empty part after strip occurs in every response
    assert reference.knowledge_en_keyword_hit("SALT LAKE CITY.", "Salt Lake City")
    assert not reference.knowledge_en_keyword_hit("Salt-Lake City", "Salt Lake City")


def test_reply_parsing_is_theirs():
    parse = reference.parse_knowledge_reply
    assert parse("正确，一致") is True and parse("错误") is False
    assert parse("**正确**") is None and parse(" 正确") is None and parse("结论：正确") is None
    assert parse("True.", "en") is True and parse("true", "en") is None and parse("False", "en") is False
    score = reference.parse_open_ended_reply
    assert score("得分：[3] 或 [5]") == 3 and score("[0]") == 0
    assert score("[6]") is None and score("[ 4 ]") is None and score("") is None and score("4分") is None


# ---------------------------------------------------------------------------------------------------
# their output layout


def test_authors_layout_array_lines_wavs_and_transcripts(tmp_path):
    out = tmp_path / "model"
    rows = [
        {"Qid": "codeswitching_knowledge-000", "Response": "答"},
        {"Qid": "codeswitching_knowledge-001", "Response": ""},
        {"Qid": "codeswitching_knowledge-000", "Response": "again"},
        {"Response": "no qid"},
        {"Qid": "../evil", "Response": "x"},
    ]
    _write_outputs(out / "json" / "cs_knowledge.json", rows, as_lines=False)
    (out / "wav" / "cs_knowledge").mkdir(parents=True)
    (out / "wav" / "cs_knowledge" / "codeswitching_knowledge-000.wav").write_bytes(b"RIFF")
    read = reference.read_authors_outputs(out, "knowledge")
    first = read["codeswitching_knowledge-000"]
    assert first["text"] == "答" and first["audio"].endswith(
        "wav/cs_knowledge/codeswitching_knowledge-000.wav"
    )
    assert "duplicate Qid" in first["problem"]
    assert "empty Response" in read["codeswitching_knowledge-001"]["problem"]
    assert "missing wav" in read["codeswitching_knowledge-001"]["problem"]
    assert any("no Qid" in (v["problem"] or "") for v in read.values())
    assert "cannot name a wav" in read["../evil"]["problem"]
    try:  # its home after the scoring split
        from cs3_tasks.scoring.outputs import ModelOutput
    except ImportError:
        from cs3_tasks.scoring.pipeline import ModelOutput

    assert ModelOutput(**first).qid == "codeswitching_knowledge-000"

    # JSON lines, flat wav/<Qid>.wav, and the given transcripts
    _write_outputs(out / "json" / "cs_open_ended.json", [{"Qid": "o-1", "Response": "r"}], as_lines=True)
    (out / "wav" / "o-1.wav").write_bytes(b"RIFF")
    assert reference.read_authors_outputs(out, "open_ended")["o-1"]["audio"].endswith("wav/o-1.wav")
    _write_outputs(
        out / "json_asr" / "cs_open_ended.json",
        [{"Qid": "o-1", "Response": "r", "Response_hyp": "heard"}],
        as_lines=False,
    )
    assert reference.read_given_transcripts(out, "open_ended")["o-1"]["transcript"] == "heard"
    assert reference.find_authors_sets(out) == ["knowledge", "open_ended"]

    # text-only model (no wav folder): no audio, no problem; non-UTF-8 bytes: a clear error
    text_only = tmp_path / "text-only"
    _write_outputs(
        text_only / "json" / "cs_knowledge_en.json", [{"Qid": "e-0", "Response": "x"}], as_lines=True
    )
    assert reference.read_authors_outputs(text_only, "knowledge_en")["e-0"] == {
        "qid": "e-0",
        "text": "x",
        "audio": None,
        "problem": None,
    }
    (text_only / "json" / "cs_knowledge_en.json").write_bytes(
        '{"Qid": "e-0", "Response": "答"}\n'.encode("gbk")
    )
    with pytest.raises(ValueError, match="line 1 is not UTF-8"):
        reference.read_authors_outputs(text_only, "knowledge_en")
    with pytest.raises(FileNotFoundError, match="cs_knowledge.json"):
        reference.read_authors_outputs(text_only, "knowledge")


def test_shipped_hashes_match_the_shared_copies():
    _need_authors()
    for name, digest in reference.SCRIPT_SHA256.items():
        assert hashlib.sha256((AUTHORS / "utils" / name).read_bytes()).hexdigest() == digest
    assert os.path.basename(reference.CACHE_SUBDIR) == "utils"


def test_comparability_flags():
    judge = JudgeConfig(base_url="http://127.0.0.1:1/v1", api_key_env="")
    settings = reference.protocol_settings(None, judge, "transformers", "openai/whisper-large-v3")
    assert settings["judge_is_reference"] and settings["asr_is_reference"]
    assert settings["comparable_to_paper"] == {"text": True, "speech": True}
    other = reference.protocol_settings(None, judge, "faster-whisper", "large-v3")
    assert other["comparable_to_paper"] == {"text": True, "speech": False}
    keyword_only = reference.protocol_settings(None, None, "transformers", "openai/whisper-large-v3")
    assert keyword_only["comparable_to_paper"] == {"text": False, "speech": False}
    notes = add_comparability({}, {**keyword_only, "judge": None})["notes"]
    assert any("no judge ran" in note for note in notes)
    assert not reference.is_reference_judge(JudgeConfig(model="gpt-4o-mini"))
    assert reference.is_reference_asr("transformers", "/models/whisper-large-v3")
    assert isinstance(reference.reference_asr_available(), bool)
