"""Same outputs, same numbers: README command 1's job prints README's demo table, and the pinned ASR engine
hears every demo clip as tests/golden/asr_transcripts.json says (tests/test_asr.py holds the BELLE half).

A different transcript fails with the clip, both transcripts and the installed engine versions, so an engine
upgrade (or a machine whose arithmetic differs) is seen here, not in a paper. Refresh the golden file, on
purpose only, with ``CS3_UPDATE_GOLDEN=1 python -m pytest tests/test_reproducible.py tests/test_asr.py -k
golden``, and README's table with the demo's printed one.

The demo runs on a simulated GPU machine with CUDA 13 only (tests/fakes/cuda13: CTranslate2 counts a GPU whose
first encode fails, as measured on one): what a user who chooses nothing gets there is README's table too.

Runtime: one full ``cs3-bench demo`` (~1-2 min on 2 cores: 120 clips heard).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cs3_tasks import asr
from cs3_tasks.asr import offline as asr_offline
from cs3_tasks.cli import evaluate
from cs3_tasks.core import data

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden" / "asr_transcripts.json"
README = REPO / "README.md"
SIMULATED_CUDA13 = REPO / "tests" / "fakes" / "cuda13"
needs_offline_asr = pytest.mark.skipif(
    asr.offline_whisper_base(join=False) is None,
    reason="the offline Whisper-base (extra `offline`) is absent",
)


def read_golden() -> dict:
    return json.loads(GOLDEN.read_text(encoding="utf-8")) if GOLDEN.is_file() else {}


def update_golden(part: str, transcripts: dict[str, str]) -> None:
    """Write one part ("demo", "belle") of the golden file, with the fingerprint that heard it."""
    golden = read_golden()
    golden[part] = dict(sorted(transcripts.items()))
    golden["fingerprint"] = asr.asr_fingerprint(asr.AsrConfig())
    GOLDEN.write_text(
        json.dumps(golden, ensure_ascii=False, indent=1, sort_keys=True) + "\n", encoding="utf-8"
    )


def assert_golden(part: str, transcripts: dict[str, str]) -> None:
    """Every clip heard as the golden file says; else every differing clip, both transcripts, and the
    installed engine against the one that made the file."""
    if os.environ.get("CS3_UPDATE_GOLDEN") == "1":
        update_golden(part, transcripts)
    golden = read_golden()
    expected = golden.get(part) or {}
    assert sorted(transcripts) == sorted(expected), f"{part}: the clips heard are not the golden file's"
    differing = [
        f"  {clip}: golden {expected[clip]!r}, heard {transcripts[clip]!r}"
        for clip in expected
        if transcripts[clip] != expected[clip]
    ]
    if differing:
        made, now = golden.get("fingerprint") or {}, asr.asr_fingerprint(asr.AsrConfig())
        raise AssertionError(
            f"{len(differing)} of {len(expected)} {part} transcripts differ from {GOLDEN.name}:\n"
            + "\n".join(differing)
            + f"\ninstalled: {asr.describe_fingerprint(now)}\ngolden file made with: "
            f"{asr.describe_fingerprint(made)}\nREADME's numbers hold for the pinned engine "
            "(pyproject.toml); see docs/stability.md"
        )


def readme_demo_table() -> dict[tuple[str, str], list[str]]:
    """(model, channel) -> [acc cs, acc en, drop (points), preserve] of README's demo table."""
    rows = {}
    for line in README.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith("demo-") and cells[1] in ("text", "speech"):
            rows[(cells[0], cells[1])] = cells[2:]
    return rows


def printed_demo_table(stdout: str) -> dict[tuple[str, str], list[str]]:
    """The same cells from the code-switched vs English table the demo prints."""
    rows = {}
    section = stdout.split("=== code-switched vs English", 1)[1].split("===", 2)[1]
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[0].startswith("demo-"):
            drop = cells[4].removesuffix(" points")
            rows[(cells[0], cells[1])] = [cells[2], cells[3], drop, cells[6]]
    return rows


@pytest.fixture(scope="module")
def readme_demo(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """README command 1's job as a user runs it: ``cs3-bench demo`` in an empty folder (writes ./cs3_demo), on
    the simulated CUDA 13 machine."""
    folder = tmp_path_factory.mktemp("readme-demo")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SIMULATED_CUDA13), env.get("PYTHONPATH")) if p)
    result = subprocess.run(
        [sys.executable, "-m", "cs3_tasks.cli", "demo"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    return result, folder / "cs3_demo"


pytestmark = [
    pytest.mark.slow,
    needs_offline_asr,
    pytest.mark.skipif(
        not (evaluate.DEMO_RESPONSES / "demo-strong").is_dir(), reason="demo responses absent"
    ),
]


def test_the_demo_prints_readmes_table(readme_demo):
    result, out = readme_demo
    assert result.returncode == 0, result.stderr[-3000:]
    readme, printed = readme_demo_table(), printed_demo_table(result.stdout)
    assert len(readme) == 4, "README's demo table has a row per demo system and channel"
    assert printed == readme, f"README says {readme}, the demo printed {printed}"


def test_on_a_gpu_machine_the_demo_says_its_asr_ran_on_the_cpu(readme_demo):
    result, out = readme_demo
    assert result.returncode == 0, result.stderr[-3000:]
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: ASR runs on the CPU")]
    assert len(notes) == 1 and "--asr-device cuda" in notes[0], result.stderr[-3000:]
    assert "batched ASR failed" not in result.stderr and "libcublas" not in result.stderr
    summary = json.loads((out / "demo-strong" / "knowledge.summary.json").read_text(encoding="utf-8"))
    assert (
        summary["settings"]["asr"]["device"] == "cpu" and summary["settings"]["asr"]["compute_type"] == "int8"
    )


def test_the_demo_hears_every_clip_as_the_golden_file(readme_demo):
    result, out = readme_demo
    assert result.returncode == 0, result.stderr[-3000:]
    heard = {}
    for system in ("demo-strong", "demo-weak"):
        for set_name in data.SETS:
            for line in (out / system / f"{set_name}.records.jsonl").read_text(encoding="utf-8").splitlines():
                record = json.loads(line)
                heard[f"{system}/{set_name}/{record['qid']}"] = record["transcript"]
    assert_golden("demo", heard)


def test_the_demo_prints_ours_and_not_lm_evals_notices(readme_demo):
    """What the demo prints is what a user reads: lm-eval's notices about its own tasks, git's complaint
    about the folder and lm-eval's request-building bars stay out; each ASR bar ends at its total."""
    result, out = readme_demo
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Custom kwargs" not in result.stderr and "fatal: not a git repository" not in result.stderr
    bars = [line for line in re.split(r"[\r\n]", result.stderr) if "|" in line and "/" in line]
    assert bars and all(line.startswith(("ASR", "cs3-precomputed")) for line in bars), bars[:5]
    # each ASR bar, from its start to the next one's, ends at its total
    started = re.split(r"(?=ASR \(\d+ cached\):\s+0%)", result.stderr)[1:]
    lasts = [re.findall(r"ASR \(\d+ cached\):[^|]*\|[^|]*\| (\d+)/(\d+)", bar)[-1] for bar in started]
    assert lasts and all(done == total for done, total in lasts), lasts


def test_the_demos_results_name_no_folder_of_this_machine(readme_demo):
    """What the demo writes for sharing (records, settings, summaries, leaderboard, report, lm-eval's results)
    holds no local path, and says by identity which ASR heard the speech."""
    result, out = readme_demo
    assert result.returncode == 0, result.stderr[-3000:]
    local = [str(out.parent), str(REPO), str(Path.home()), os.environ["CS3_BENCH_CACHE"]]
    for path in sorted(out.rglob("*")):
        if path.is_file() and path.suffix in (".json", ".jsonl", ".md", ".csv", ".html", ".js"):
            if path.name.startswith("."):
                continue
            text = path.read_text(encoding="utf-8")
            assert not [p for p in local if p in text], f"{path.relative_to(out)} names a local folder"
    summary = json.loads((out / "demo-strong" / "knowledge.summary.json").read_text(encoding="utf-8"))
    fingerprint = summary["settings"]["asr"]
    assert (
        fingerprint["model"]["name"] == asr_offline.OFFLINE_MODEL_DIR
        and len(fingerprint["model"]["sha256"]) == 64
    )
    assert fingerprint["engine"]["ctranslate2"] and fingerprint["numerics"] in ("portable-avx2", "native")
    # the main job end to end: lm-eval's own table, the leaderboard, the figure, the report
    assert re.search(r"\|[\s-]*cs3_knowledge_en\s*\|", result.stdout)
    assert "=== leaderboard ===" in result.stdout and (out / "accuracy.png").stat().st_size > 1000
    assert summary["protocol"] == "reference" and summary["comparable_to_paper"]["speech"] is False
    assert (out / "report" / "index.html").is_file()
