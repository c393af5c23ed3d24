"""Same transcripts on any AVX2 machine: what the pinned arithmetic costs and what it buys.

    python benchmarks/asr_numerics.py [--n 120] [--audio demo|belle]

Each setting runs the default ASR (``transcribe_batch``, no cache) over the same clips in a fresh process: the
portable arithmetic (cs3_tasks.asr.numerics: float64 features, MKL's AVX2 code path), this CPU's own code
paths (``CS3_ASR_NUMERICS=native``), and each of them on an emulated AVX2-only machine (MKL, OpenBLAS and
numpy told to use their AVX2 kernels), plus the portable arithmetic under a shell that asks CTranslate2 for
each of its instruction sets. It prints the ASR seconds, the ratio to the portable setting and how many
transcripts differ from the portable setting's. Clips: the 120 demo response clips (default) or the first N
BELLE-eval-S2S questions from the shared data.

``--factors`` times instead where the portable arithmetic's cost goes, each factor alone on top of this
CPU's own code paths (``CS3_ASR_NUMERICS=native``): CTranslate2's instruction set
(``CT2_FORCE_CPU_ISA=AVX2``), MKL's reproducibility mode (``MKL_CBWR=AVX2``), MKL on every CPU
(``CT2_USE_MKL=1``), MKL told only to use its AVX2 kernels (``MKL_ENABLE_INSTRUCTIONS=AVX2``, no
reproducibility mode), faster-whisper's own float32 log-mel instead of our float64 one, and one core instead
of all. Every setting runs the model in its child itself, started with the environment our ASR child gets
(`process.child_environment`: the same allocator settings), ``--runs`` rounds in turn; it prints the median
seconds and the median of each round's ratio to native.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CS3_SHARED_DATA") or REPO.parent / "shared" / "data")
AVX2_MACHINE = {
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "OPENBLAS_CORETYPE": "Haswell",
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
}
SETTINGS = {
    "portable (default)": {},
    "native (this CPU)": {"CS3_ASR_NUMERICS": "native"},
    "portable, emulated AVX2 machine": AVX2_MACHINE,
    "native, emulated AVX2 machine": {"CS3_ASR_NUMERICS": "native", **AVX2_MACHINE},
    **{f"portable, shell CT2_FORCE_CPU_ISA={isa}": {"CT2_FORCE_CPU_ISA": isa} for isa in ("AVX512", "AVX")},
}
NATIVE = {"CS3_ASR_NUMERICS": "native"}
FLOAT32_FEATURES = "CS3_BENCH_FLOAT32_FEATURES"  # this script's child: faster-whisper's own log-mel
ONE_CORE = "CS3_BENCH_ONE_CORE"  # this script's child: runs on the first core of its affinity only
FACTORS = {
    "native (this CPU)": NATIVE,
    "native + CT2_FORCE_CPU_ISA=AVX2": {**NATIVE, "CT2_FORCE_CPU_ISA": "AVX2"},
    "native + MKL_CBWR=AVX2": {**NATIVE, "MKL_CBWR": "AVX2"},
    "native + CT2_USE_MKL=1": {**NATIVE, "CT2_USE_MKL": "1"},
    "native + MKL_ENABLE_INSTRUCTIONS=AVX2": {**NATIVE, "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "native + MKL_ENABLE_INSTRUCTIONS=AVX2 + CT2_FORCE_CPU_ISA=AVX2": {
        **NATIVE,
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "CT2_FORCE_CPU_ISA": "AVX2",
    },
    "native, float32 log-mel": {**NATIVE, FLOAT32_FEATURES: "1"},
    "native, one core": {**NATIVE, ONE_CORE: "1"},
    "portable (default)": {},
    "portable, float32 log-mel": {FLOAT32_FEATURES: "1"},
    "portable, one core": {ONE_CORE: "1"},
}


def clip_paths(audio: str, n: int) -> list[str]:
    if audio == "belle":
        rows = (SHARED / "belle_eval_s2s" / "test.tsv").read_text(encoding="utf-8").splitlines()[1 : n + 1]
        return [str(SHARED / "belle_eval_s2s" / "wav" / f"{row.split(chr(9))[0]}.wav") for row in rows]
    demo = REPO / "cs3_tasks" / "demo" / "responses"
    return [str(p) for p in sorted(demo.glob("*/wav/*/*.flac"))[:n]]


def child(paths: list[str]) -> dict:
    """This process: the default ASR over ``paths`` (after one warm-up clip), seconds and transcripts."""
    from cs3_tasks.asr import faster_whisper, transcribe_batch

    if os.environ.get(ONE_CORE):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:1])  # cpu_threads() then says 1
    if os.environ.get(FLOAT32_FEATURES):  # the runner keeps faster-whisper's own extractor
        faster_whisper.PortableFeatures = lambda extractor: extractor
    transcribe_batch(paths[:1], use_cache=False, progress=False)  # the model loads outside the timing
    started = time.perf_counter()
    heard = transcribe_batch(paths, use_cache=False, progress=False)
    return {"seconds": time.perf_counter() - started, "transcripts": [t.text for t in heard]}


def run_setting(args: argparse.Namespace, env: dict[str, str], in_process: bool) -> dict:
    """One setting's child: seconds and transcripts. ``in_process``: the child holds the model itself, started
    with the environment our ASR child gets for ``env``; else it runs the ASR as users do."""
    from cs3_tasks.asr.process import child_environment

    environ = {**os.environ, **env}
    command = [sys.executable, __file__, "--child", "--n", str(args.n), "--audio", args.audio]
    done = subprocess.run(
        command,
        env=child_environment(environ) if in_process else environ,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def print_settings(paths: list[str], args: argparse.Namespace, results: dict) -> None:
    base = results["portable (default)"]
    print(f"{len(paths)} {args.audio} clips, default ASR (transcribe_batch, no cache), one process each\n")
    print("| setting | ASR seconds | vs portable | transcripts differing from portable |")
    print("| --- | ---: | ---: | ---: |")
    for name, result in results.items():
        differ = sum(a != b for a, b in zip(result["transcripts"], base["transcripts"]))
        ratio = result["seconds"] / base["seconds"]
        print(f"| {name} | {result['seconds']:.1f} | {ratio:.2f}x | {differ} of {len(paths)} |")


def print_factors(paths: list[str], args: argparse.Namespace, rounds: list[dict]) -> None:
    base = rounds[0]["portable (default)"]["transcripts"]
    print(
        f"{len(paths)} {args.audio} clips, default ASR in each setting's own process (our ASR child's "
        f"environment), {len(rounds)} round(s); median seconds, median of each round's ratio to native\n"
    )
    print("| setting | ASR seconds | vs native | transcripts differing from portable |")
    print("| --- | ---: | ---: | ---: |")
    for name in FACTORS:
        seconds = statistics.median(r[name]["seconds"] for r in rounds)
        ratio = statistics.median(r[name]["seconds"] / r["native (this CPU)"]["seconds"] for r in rounds)
        differ = sum(a != b for a, b in zip(rounds[0][name]["transcripts"], base))
        print(f"| {name} | {seconds:.1f} | {ratio:.2f}x | {differ} of {len(paths)} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=120, help="clips (default: all 120 demo clips)")
    parser.add_argument("--audio", choices=("demo", "belle"), default="demo")
    parser.add_argument(
        "--factors", action="store_true", help="time each factor of the portable arithmetic alone instead"
    )
    parser.add_argument("--runs", type=int, default=1, help="rounds of --factors (default 1)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    paths = clip_paths(args.audio, args.n)
    if args.child:
        print(json.dumps(child(paths)))
        return 0
    if not paths:
        print(f"error: no {args.audio} clips found", file=sys.stderr)
        return 2
    if args.factors:
        rounds = []
        for round_ in range(max(1, args.runs)):
            rounds.append({name: run_setting(args, env, in_process=True) for name, env in FACTORS.items()})
            found = ", ".join(f"{name} {r['seconds']:.1f} s" for name, r in rounds[-1].items())
            print(f"round {round_ + 1}: {found}", file=sys.stderr)
        print_factors(paths, args, rounds)
        return 0
    results = {}
    for name, env in SETTINGS.items():
        results[name] = run_setting(args, env, in_process=False)
        print(f"{name}: {results[name]['seconds']:.1f} s", file=sys.stderr)
    print_settings(paths, args, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
