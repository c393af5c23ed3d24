"""Same transcripts on any AVX2 machine: what the pinned arithmetic costs and what it buys.

    python benchmarks/asr_numerics.py [--n 120] [--audio demo|belle]

Each setting runs the default ASR (``transcribe_batch``, no cache) over the same clips in a fresh process: the
portable arithmetic (cs3_tasks.asr.numerics: float64 features, MKL's AVX2 code path), this CPU's own code
paths (``CS3_ASR_NUMERICS=native``), and each of them on an emulated AVX2-only machine (MKL, OpenBLAS and
numpy told to use their AVX2 kernels), plus the portable arithmetic under a shell that asks CTranslate2 for
each of its instruction sets. It prints the ASR seconds, the ratio to the portable setting and how many
transcripts differ from the portable setting's. Clips: the 120 demo response clips (default) or the first N
BELLE-eval-S2S questions from the shared data.
"""

from __future__ import annotations

import argparse
import json
import os
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


def clip_paths(audio: str, n: int) -> list[str]:
    if audio == "belle":
        rows = (SHARED / "belle_eval_s2s" / "test.tsv").read_text(encoding="utf-8").splitlines()[1 : n + 1]
        return [str(SHARED / "belle_eval_s2s" / "wav" / f"{row.split(chr(9))[0]}.wav") for row in rows]
    demo = REPO / "cs3_tasks" / "demo" / "responses"
    return [str(p) for p in sorted(demo.glob("*/wav/*/*.flac"))[:n]]


def child(paths: list[str]) -> dict:
    """This process: the default ASR over ``paths`` (after one warm-up clip), seconds and transcripts."""
    from cs3_tasks.asr import transcribe_batch

    transcribe_batch(paths[:1], use_cache=False, progress=False)  # the model loads outside the timing
    started = time.perf_counter()
    heard = transcribe_batch(paths, use_cache=False, progress=False)
    return {"seconds": time.perf_counter() - started, "transcripts": [t.text for t in heard]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=120, help="clips (default: all 120 demo clips)")
    parser.add_argument("--audio", choices=("demo", "belle"), default="demo")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    paths = clip_paths(args.audio, args.n)
    if args.child:
        print(json.dumps(child(paths)))
        return 0
    if not paths:
        print(f"error: no {args.audio} clips found", file=sys.stderr)
        return 2
    results = {}
    for name, env in SETTINGS.items():
        command = [sys.executable, __file__, "--child", "--n", str(args.n), "--audio", args.audio]
        done = subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True, check=True)
        results[name] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{name}: {results[name]['seconds']:.1f} s", file=sys.stderr)
    base = results["portable (default)"]
    print(f"{len(paths)} {args.audio} clips, default ASR (transcribe_batch, no cache), one process each\n")
    print("| setting | ASR seconds | vs portable | transcripts differing from portable |")
    print("| --- | ---: | ---: | ---: |")
    for name, result in results.items():
        differ = sum(a != b for a, b in zip(result["transcripts"], base["transcripts"]))
        ratio = result["seconds"] / base["seconds"]
        print(f"| {name} | {result['seconds']:.1f} | {ratio:.2f}x | {differ} of {len(paths)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
