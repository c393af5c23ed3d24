"""Wall time of a 2-process data-parallel lm-eval run vs one process: cs3-cascade with a tiny LLM on the demo
set.

    python benchmarks/data_parallel_cascade.py [--limit N] [--processes 2] [--workdir DIR]

Both arms run the real command a user runs, with a cold cs3-bench cache each (ASR of every query and
answer clip, no cached transcript), on the embedded demo set (60 requests; --limit N per task):

- 1 process:  python -m lm_eval run --model cs3-cascade --model_args llm=<tiny Qwen2>,... --tasks cs3
- N processes: accelerate launch --multi_gpu --num_processes N -m lm_eval run ... (the same arguments;
  on a machine without GPUs accelerate starts N CPU processes joined over gloo; ``--cpu`` would start one)

It prints both wall times, the ratio, and whether the metrics tables agree. Each rank runs its share of
the ASR, LLM, TTS and the task filters' scoring ASR with cores/N threads; lm-eval's start-up (~15-20 s of
imports and task loading per process) runs on every rank and does not shrink. Other processes on the
machine skew both arms: the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from tiny_llm import build_tiny_qwen2  # noqa: E402 - found through the sys.path line above


def run(nproc: int, llm: Path, workdir: Path, limit: int | None) -> tuple[float, dict]:
    out, cache = workdir / f"results-{nproc}", workdir / f"cache-{nproc}"
    env = {k: v for k, v in os.environ.items() if k not in ("CS3_JUDGE_MODEL", "CS3_JUDGE_BASE_URL")}
    env.update(
        {
            "CS3_BENCH_CACHE": str(cache),
            "CS3_BENCH_DATASET": "demo",
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
        }
    )
    args = [
        "run",
        "--model",
        "cs3-cascade",
        "--model_args",
        f"llm={llm},max_new_tokens=8,output_dir={workdir}/out-{nproc}",
        "--device",
        "cpu",
        "--tasks",
        "cs3",
        "--metadata",
        json.dumps({"judge": "none"}),
        "--output_path",
        str(out),
    ] + (["--limit", str(limit)] if limit else [])
    launcher = (
        [sys.executable, "-m", "lm_eval"]
        if nproc == 1
        else [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--multi_gpu",
            "--num_processes",
            str(nproc),
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            "--main_process_port",
            str(free_port()),  # the default port collides with another launch on the same machine
            "-m",
            "lm_eval",
        ]
    )
    start = time.perf_counter()
    result = subprocess.run(launcher + args, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"{nproc} process(es) failed:\n{result.stderr[-3000:]}")
    results = json.loads(next(out.rglob("results_*.json")).read_text(encoding="utf-8"))["results"]
    metrics = {
        t: {k: ("nan" if isinstance(v, float) and math.isnan(v) else v) for k, v in m.items()}
        for t, m in results.items()
    }
    return wall, metrics


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="docs per task (default: all 24/24/12)")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="cs3-dp-bench-"))
    llm = build_tiny_qwen2(workdir / "tiny-qwen2")
    print(f"load average before: {os.getloadavg()}", flush=True)
    one, metrics_one = run(1, llm, workdir, args.limit)
    print(f"1 process:  {one:.1f} s", flush=True)
    many, metrics_many = run(args.processes, llm, workdir, args.limit)
    print(f"{args.processes} processes: {many:.1f} s", flush=True)
    print(f"load average after: {os.getloadavg()}")
    print(f"speed-up (1-process wall / {args.processes}-process wall): {one / many:.2f}x")
    same = metrics_one == metrics_many
    print(
        f"metrics identical: {same}"
        + (
            ""
            if same
            else " (a transcript or an answer differs between the runs: see README, data parallelism)"
        )
    )


if __name__ == "__main__":
    main()
