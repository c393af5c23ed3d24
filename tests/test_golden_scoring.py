"""Golden: ``cs3-bench score --outputs-root`` on the demo responses, under both protocols, gives the files it
gave before (tests/golden/demo_scoring.json), timestamps, paths and the machine's own description aside.

The ASR is a stand-in that hears each clip as a function of its bytes (the demo text of the clip with the
English words dropped from every third clip); the judge is a loopback server whose reply is a function of the
prompt (correct, wrong, unparsed, an HTTP error, or a score 0-5). The cs3 protocol's half needs nothing beside
the clone, so a public clone checks it and ``--from-results`` too; the reference half needs the authors'
scripts. Refresh the golden file, on purpose only, with
``CS3_UPDATE_GOLDEN=1 python -m pytest tests/test_golden_scoring.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest
from demo_results import heard_texts
from judge_server import Reply
from shared_data import AUTHORS, need

from cs3_tasks import cli
from cs3_tasks.core.audio import content_hash

GOLDEN = Path(__file__).resolve().parent / "golden" / "demo_scoring.json"
DEMO = Path(cli.__file__).resolve().parents[1] / "demo" / "responses"
# values that name where or when a run happened, not what it computed
LOOPBACK = re.compile(r"http://127\.0\.0\.1:\d+")
VOLATILE_KEYS = {"created", "started", "finished", "timestamp", "elapsed_seconds", "seconds", "time"}
# what a run was computed on (the CPU, installed versions): recorded, not what the scoring computed
MACHINE_KEYS = {"machine", "engine"}
ASR_LINE = re.compile(r"(?<=Speech channel ASR: )[^\n]*")  # the same, as the leaderboard says it


def _digest(text: str) -> int:
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16)


def judge_reply(request) -> Reply | str:
    """A reply that depends only on the prompt's text."""
    prompt = request.prompt
    h = _digest(prompt)
    if h % 17 == 0:
        return Reply.error(400, "bad request")
    if "正确" in prompt and "错误" in prompt:
        return ("正确 与参考答案一致", "错误 不一致", "无法判断")[h % 3]
    if "True" in prompt and "False" in prompt:
        return ("True, consistent", "False, not consistent", "cannot tell")[h % 3]
    return (f"评分：[{h % 6}]", f"Score: [{h % 6}]", "no score")[h % 3]


def _normalised(value, roots: dict[str, str]):
    if isinstance(value, dict):
        return {
            k: "<volatile>"
            if k in VOLATILE_KEYS
            else "<machine>"
            if k in MACHINE_KEYS
            else _normalised(v, roots)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_normalised(v, roots) for v in value]
    if isinstance(value, str):
        for path, name in roots.items():
            value = value.replace(path, name)
        return ASR_LINE.sub("<asr>", LOOPBACK.sub("<judge>", value))
    return value


def _read(path: Path, roots: dict[str, str]):
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return _normalised(json.loads(text), roots)
    if path.suffix == ".jsonl":
        return [_normalised(json.loads(line), roots) for line in text.splitlines() if line.strip()]
    return _normalised(text, roots)


def _score(tmp_path: Path, protocol: str, server, extra: list[str]) -> dict:
    out = tmp_path / f"results-{protocol}"
    argv = [
        "score",
        "--outputs-root",
        str(DEMO),
        "--out",
        str(out),
        "--dataset",
        "demo",
        "--set",
        "all",
        "--asr-model",
        "fake-asr",
        "--protocol",
        protocol,
        "--no-progress",
        "--judge-base-url",
        server.base_url,
        "--judge-api-key-env",
        "",
        "--judge-model",
        "fake-judge",
        "--judge-cache",
        str(tmp_path / f"judge-{protocol}.sqlite"),
        *extra,
    ]
    code = cli.main(argv)
    roots = {str(out): "<out>", str(DEMO): "<demo>", str(tmp_path): "<tmp>", str(AUTHORS): "<authors>"}
    roots[str(AUTHORS.resolve())] = "<authors>"  # settings name the resolved folder (../shared: a link?)
    files = {
        str(p.relative_to(out)): _read(p, roots)
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.suffix in (".json", ".jsonl", ".md", ".csv") and not p.name.startswith(".")
    }
    return {"exit_code": code, "files": files}


def produce(tmp_path: Path, protocol: str, judge_server, fake_asr) -> dict:
    heard = heard_texts()  # English words dropped from every third clip (by content hash)
    fake_asr(lambda audio, language: heard.get(content_hash(audio), "<unknown clip>"))
    server = judge_server(judge_reply)
    extra = ["--reference-scripts", str(AUTHORS)] if protocol == "reference" else []
    return _score(tmp_path, protocol, server, extra)


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["cs3", pytest.param("reference", marks=pytest.mark.shared)])
def test_demo_scoring_equals_the_golden_files(protocol, tmp_path, judge_server, fake_asr, monkeypatch):
    if protocol == "reference":
        need(AUTHORS / "utils")
    monkeypatch.setenv("CS3_BENCH_CACHE", str(tmp_path / "cache"))
    result = produce(tmp_path, protocol, judge_server, fake_asr)
    if os.environ.get("CS3_UPDATE_GOLDEN") == "1":  # each protocol refreshes its own half
        stored = json.loads(GOLDEN.read_text(encoding="utf-8")) if GOLDEN.is_file() else {}
        GOLDEN.parent.mkdir(exist_ok=True)
        stored[protocol] = result
        GOLDEN.write_text(json.dumps(stored, ensure_ascii=False, indent=1, sort_keys=True) + "\n", "utf-8")
    golden = _normalised(json.loads(GOLDEN.read_text(encoding="utf-8")), {})[protocol]
    assert result["exit_code"] == golden["exit_code"]
    assert sorted(result["files"]) == sorted(golden["files"])
    for name, content in golden["files"].items():
        assert result["files"][name] == content, f"{protocol}: {name} differs from the golden file"
    _rescored_elsewhere_is_the_same(tmp_path, protocol, result["exit_code"], monkeypatch)


def _rescored_elsewhere_is_the_same(tmp_path: Path, protocol: str, exit_code: int, monkeypatch) -> None:
    """``score --from-results`` on a copy of the results under another HOME, with no ASR, no judge and no key:
    the same records, byte-identical summaries and leaderboard, the report of the copy, the same exit code."""
    import shutil

    original, copy = tmp_path / f"results-{protocol}", tmp_path / "elsewhere" / f"results-{protocol}"
    shutil.copytree(original, copy, ignore=shutil.ignore_patterns(".cs3-bench*", "report"))
    monkeypatch.setenv("HOME", str(tmp_path / "elsewhere" / "home"))
    monkeypatch.setenv("CS3_BENCH_CACHE", str(tmp_path / "elsewhere" / "cache"))
    for name in ("DASHSCOPE_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CS3_BENCH_DATASET", "demo")  # the report's questions, as the scoring run had them
    rescored = tmp_path / "elsewhere" / f"rescored-{protocol}"
    argv = ["score", "--from-results", str(copy), "--out", str(rescored), "--dataset", "demo"]
    assert cli.main(argv) == exit_code
    for path in sorted(original.rglob("*")):
        name = path.relative_to(original)
        if path.suffix in (".json", ".jsonl", ".md", ".csv") and name.parts[0] != "report":
            if name.name == "models.json" or name.name.startswith("."):  # the run's own statuses, local files
                continue
            assert (rescored / name).read_bytes() == path.read_bytes(), (
                f"{protocol}: {name} re-scored differs"
            )
    assert (
        cli.main(
            ["report", *(str(copy / m) for m in ("demo-strong", "demo-weak")), "--html", str(copy / "r")]
        )
        == 0
    )
    for name in ("index.html", "items.js"):
        assert (rescored / "report" / name).read_bytes() == (copy / "r" / name).read_bytes(), name
    wrong = tmp_path / "elsewhere" / "en.json"  # another dataset with the same Qids: refused, named
    wrong.write_text(json.dumps([{"Qid": "demo_knowledge-000", "Question": "?", "Answer": "x"}]), "utf-8")
    only = tmp_path / "elsewhere" / f"only-knowledge-{protocol}"
    shutil.copytree(copy / "demo-strong", only, ignore=shutil.ignore_patterns("knowledge_en*", "open*"))
    assert (
        cli.main(["score", "--from-results", str(only), "--out", str(only / "x"), "--dataset", str(wrong)])
        == 2
    )
