"""Every shell block of README.md and docs/*.md runs as written, or says what it needs and is checked.

A block with a line ``*Needs: ...*`` right above it cannot run here (GPUs, a real checkpoint, a paid API, a
package index): each of its commands is checked instead: the program exists (a ``cs3-bench`` subcommand,
lm_eval, a script or file of this repository) and every ``--flag`` it uses is one the program takes. README's
first block is checked the same way: its command 1 is run by tests/test_reproducible.py (README's demo table)
and its command 2 is this suite itself (`.ci/run`).

Every other block runs with bash, as written, one script per file (later blocks see what earlier ones wrote),
in a fresh folder where:

- ``cs3_tasks`` and ``examples`` are this repository's (commands name files in them);
- the placeholders of the docs are real: ``DIR`` and ``answers/`` are folders of one model's outputs,
  ``MODELS`` a folder of two models' outputs (``MODEL_A``, ``MODEL_B``), ``RESULTS`` their scored results
  where a file's blocks do not make them first; the outputs are the demo systems' text answers (no speech);
- the documented environment variables stand in for what the machine lacks: ``$CS3_BENCH_DATASET=demo`` (no
  Hub), ``$CS3_JUDGE_BASE_URL`` / ``$CS3_JUDGE_MODEL`` a loopback judge (no paid API),
  ``$CS3_REFERENCE_SCRIPTS`` the authors' scripts beside the clone.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from shared_data import AUTHORS

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
DEMO = REPO / "cs3_tasks" / "demo" / "responses"
BLOCK = re.compile(r"```(?:bash|sh|console)\n(.*?)```", re.S)
NEEDS = re.compile(r"^\*Needs: (.+)\*$")
# programs of other projects: their own docs say how they run
FOREIGN = {"pip", "apt-get", "sudo", "git", "cp", "export", "vllm", "cd"}


def blocks() -> list[tuple[Path, int, str, str | None]]:
    """(file, line, block, what it needs or None) of every shell block."""
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            before = text[: match.start()].rstrip("\n").splitlines()[-2:]
            needs = next((m.group(1) for line in before if (m := NEEDS.match(line.strip()))), None)
            line = text[: match.start()].count("\n") + 1
            if doc.name == "README.md" and line <= 5:
                needs = "README command 1: tests/test_reproducible.py; command 2: this suite (.ci/run)"
            found.append((doc, line, match.group(1), needs))
    return found


def commands(block: str) -> list[list[str]]:
    """The commands of a block, each as words (continuations joined, comments dropped)."""
    joined = re.sub(r"\\\n\s*", " ", block)
    found = []
    for line in joined.splitlines():
        line = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        for part in re.split(r"\s&&\s", line):
            if part.strip():
                found.append(shlex.split(part))
    return found


@cache
def help_text(program: tuple[str, ...]) -> str:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([*program, "--help"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, f"{' '.join(program)} --help: {done.stderr[-500:]}"
    return done.stdout


def check_command(words: list[str]) -> list[str]:
    """What is wrong with a command that is not run: a program or file that is not there, a flag it does not
    take (an empty list: nothing)."""
    problems = []
    if not words or words[0] in FOREIGN or "=" in words[0]:
        return problems
    if words[0] in ("accelerate", "torchrun") or words[:3] == [sys.executable, "-m", "torch.distributed.run"]:
        if "-m" in words:  # the launched module's own command line
            words = words[words.index("-m") + 1 :]
            words = ["cs3-bench", *words[1:]] if words[0] == "cs3_tasks.cli" else words
        for word in words:
            if word.startswith("cs3_tasks/") and not (REPO / word).exists():
                problems.append(f"no file {word}")
    if words[0] in ("python", "python3"):  # python -m MODULE ..., or python SCRIPT ...
        words = words[2:] if words[1:2] == ["-m"] else words[1:]
        words = ["cs3-bench", *words[1:]] if words[0] == "cs3_tasks.cli" else words
        if words[0] == "pytest":
            text = help_text((sys.executable, "-m", "pytest"))
            return [
                f"pytest takes no {w}" for w in words if w.startswith("--") and w.split("=")[0] not in text
            ]
    program = words[0]
    if program == "cs3-bench":
        subcommand = [w for w in words[1:3] if not w.startswith("-")]
        if words[1:2] == ["recipe"]:
            subcommand = words[1:3]
        text = help_text(("cs3-bench", *subcommand))
    elif program.startswith("benchmarks/") and program.endswith(".py"):  # a script with its own options
        if not (REPO / program).is_file():
            return [f"no script {program}"]
        text = help_text((sys.executable, str(REPO / program)))
    elif program == "lm_eval" or program.endswith(".py"):
        if program.endswith(".py") and not (
            (REPO / program).is_file() or (REPO / "examples" / program).is_file()
        ):
            problems.append(f"no script {program}")
        text = help_text(("lm_eval", "run"))
    else:
        return [f"unknown program {program!r}"]
    flags = {w.split("=", 1)[0] for w in words if w.startswith("--")}
    problems += [f"{program} takes no {flag}" for flag in sorted(flags) if flag not in text]
    for word in words:
        if word.startswith(("cs3_tasks/", "examples/")) and "*" not in word and not (REPO / word).exists():
            problems.append(f"no file {word}")
    return problems


def test_every_block_is_found_and_each_that_cannot_run_says_what_it_needs():
    found = blocks()
    assert len(found) >= 20
    problems = []
    for doc, line, block, needs in found:
        if needs is None:
            continue
        for words in commands(block):
            problems += [f"{doc.name}:{line}: {p}" for p in check_command(words)]
    assert not problems, "\n".join(problems)


def _text_only(source: Path, target: Path) -> None:
    """A model's outputs folder with the demo system's text answers (our layout; no speech)."""
    target.mkdir(parents=True)
    for jsonl in sorted(source.glob("*.jsonl")):
        rows = [json.loads(line) for line in jsonl.read_text(encoding="utf-8").splitlines()]
        text = "".join(
            json.dumps({"Qid": r["Qid"], "text": r["text"]}, ensure_ascii=False) + "\n" for r in rows
        )
        (target / jsonl.name).write_text(text, encoding="utf-8")


def _judge_reply(request) -> str:
    """A verdict in the format each judge prompt asks for (as tests/test_golden_scoring.py's judge)."""
    prompt = request.prompt
    if re.search(r"\[\d\]", prompt):  # an open-ended prompt asks for a score in brackets
        return "评分：[4]"
    if "正确" in prompt and "错误" in prompt:
        return "正确 与参考答案一致"
    if "True" in prompt and "False" in prompt:
        return "True, consistent"
    return "评分：[4]"


def _folder(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    for name in ("cs3_tasks", "examples"):
        (work / name).symlink_to(REPO / name, target_is_directory=True)
    _text_only(DEMO / "demo-strong", work / "DIR")
    _text_only(DEMO / "demo-strong", work / "answers")
    _text_only(DEMO / "demo-strong", work / "MODELS" / "MODEL_A")
    _text_only(DEMO / "demo-weak", work / "MODELS" / "MODEL_B")
    return work


RUN_AS_WRITTEN = [doc for doc in DOCS if any(d == doc and n is None for d, _, _, n in blocks())]


@pytest.mark.slow
@pytest.mark.parametrize("doc", RUN_AS_WRITTEN, ids=lambda d: d.name)
@pytest.mark.shared
def test_the_blocks_of_a_doc_run_as_written(doc, tmp_path, judge_server):
    if not (AUTHORS / "utils").is_dir():
        pytest.skip(
            f"the authors' scripts are not beside the clone ({AUTHORS}): judged runs need them offline"
        )
    work = _folder(tmp_path)
    script = "\n".join(block for d, _, block, needs in blocks() if d == doc and needs is None)
    if "RESULTS" in script and "--out RESULTS" not in script:  # a file that reads results it does not make
        score = [
            sys.executable,
            "-m",
            "cs3_tasks.cli",
            "score",
            "--outputs-root",
            "MODELS",
            "--out",
            "RESULTS",
        ]
        subprocess.run([*score, "--dataset", "demo", "--no-judge", "--no-progress"], cwd=work, check=True)
    server = judge_server(_judge_reply)
    env = {
        **os.environ,
        "CS3_BENCH_DATASET": "demo",
        "CS3_JUDGE_BASE_URL": server.base_url,
        "CS3_JUDGE_MODEL": "qwen-max-2025-01-25",
        "CS3_REFERENCE_SCRIPTS": str(AUTHORS),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    env.pop("CS3_JUDGE_API_KEY_ENV", None)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert done.returncode == 0, f"{doc.name}:\n{script}\n--- stderr:\n{done.stderr[-4000:]}"
    assert "Traceback" not in done.stderr, done.stderr[-4000:]
