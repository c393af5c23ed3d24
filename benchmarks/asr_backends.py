"""Our default decoding against the authors' decoding, on the same weights and audio.

    python benchmarks/asr_backends.py [--demo 120] [--belle 50] [--batch 8] [--no-scoring]

Our default: faster-whisper, beam 5, the offline Whisper-base (CTranslate2, int8, portable arithmetic).
The authors': ``transformers.pipeline("automatic-speech-recognition")`` with the checkpoint's generation
config and no language forced (cs3_tasks.asr.transformers_whisper), on the same Whisper-base converted to a
transformers checkpoint (cs3_tasks.asr.convert). Over the demo's response clips (the text each system spoke
is the reference) and every n-th BELLE-eval-S2S question (its text is the reference): how many transcripts
are identical, the corpus CER of each, seconds per clip, and the transformers pipeline batched (``--batch``)
against one clip at a time. Then the demo is scored with each ASR (``cs3-bench score --outputs-root``,
keyword stage): the speech accuracy, PSR and LSA of each system side by side, then each system's sensitivity
view (``cs3-bench compare``: transcripts that differ, flipped verdicts, kappa, McNemar); skipped with
``--no-scoring`` (the authors' pipeline takes minutes on the demo's 120 clips).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cs3_tasks.asr import AsrConfig, load_runner, transcribe_batch
from cs3_tasks.core.audio import SAMPLE_RATE, load_audio
from cs3_tasks.core.metrics import corpus_character_error_rate

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CS3_SHARED_DATA") or REPO.parent / "shared" / "data")
DEMO = REPO / "cs3_tasks" / "demo" / "responses"


def demo_clips(n: int) -> list[tuple[str, str]]:
    """(clip, the text its system spoke) of the first n demo response clips."""
    pairs = []
    for jsonl in sorted(DEMO.glob("*/*.jsonl")):
        for line in jsonl.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row.get("audio"):
                pairs.append((str(jsonl.parent / row["audio"]), row["text"]))
    return pairs[:n]


def belle_clips(n: int) -> list[tuple[str, str]]:
    """(clip, its text) of n BELLE questions spread over test.tsv (none without the shared data)."""
    tsv = SHARED / "belle_eval_s2s" / "test.tsv"
    if n <= 0 or not tsv.is_file():
        return []
    rows = [r.split("\t") for r in tsv.read_text(encoding="utf-8").splitlines()[1:]]
    step = max(1, len(rows) // n)
    return [(str(SHARED / "belle_eval_s2s" / "wav" / f"{r[0]}.wav"), r[1].strip()) for r in rows[::step][:n]]


def heard(clips: list[tuple[str, str]], backend: str | None) -> tuple[list[str], float]:
    """Transcripts (cached: the scoring below reuses them) and seconds per clip."""
    transcribe_batch([clips[0][0]], asr=AsrConfig(backend=backend), use_cache=False, progress=False)  # load
    started = time.perf_counter()
    out = transcribe_batch([c for c, _ in clips], asr=AsrConfig(backend=backend), progress=False)
    return [t.text for t in out], (time.perf_counter() - started) / len(clips)


def pipeline_batched(clips: list[tuple[str, str]], batch: int) -> tuple[list[str], float, list[str], float]:
    """The transformers pipeline over the clips one at a time and in batches: transcripts, s/clip of each."""
    config = AsrConfig(backend="transformers").resolved()
    runner = load_runner(config.backend, config.model, "cpu")
    audios = [load_audio(c, SAMPLE_RATE) for c, _ in clips]

    def inputs() -> list[dict]:
        # The pipeline pops "raw" from each dict it is given: fresh dicts for each pass.
        return [{"raw": a, "sampling_rate": SAMPLE_RATE} for a in audios]

    started = time.perf_counter()
    single = [runner.pipe(x)["text"].strip() for x in inputs()]
    one = (time.perf_counter() - started) / len(audios)
    started = time.perf_counter()
    together = [r["text"].strip() for r in runner.pipe(inputs(), batch_size=batch)]
    return single, one, together, (time.perf_counter() - started) / len(audios)


def cer(references: list[str], transcripts: list[str]) -> float:
    return corpus_character_error_rate(references, transcripts)


def scored(backend: str | None, out: Path) -> dict[str, dict]:
    """The demo scored with this ASR (keyword stage): model -> (speech acc cs, en, PSR, LSA speech)."""
    argv = [sys.executable, "-m", "cs3_tasks.cli", "score", "--outputs-root", str(DEMO), "--out", str(out)]
    argv += ["--dataset", "demo", "--no-judge", "--no-progress"] + (
        ["--asr-backend", backend] if backend else []
    )
    subprocess.run(argv, check=True, capture_output=True)
    rows = {}
    for model in ("demo-strong", "demo-weak"):
        summaries = {
            s: json.loads((out / model / f"{s}.summary.json").read_text())
            for s in ("knowledge", "knowledge_en")
        }
        cs, en = summaries["knowledge"], summaries["knowledge_en"]
        rows[model] = {
            "acc speech cs": cs["speech"]["accuracy"]["value"],
            "acc speech en": en["speech"]["accuracy"]["value"],
            "PSR": cs["psr"]["value"],
            "LSA speech": cs["speech"]["lsa"]["value"],
        }
    return rows


def percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo", type=int, default=120, help="demo response clips (default all 120)")
    parser.add_argument("--belle", type=int, default=50, help="BELLE questions, spread (default 50)")
    parser.add_argument("--batch", type=int, default=8, help="batch size of the batched pipeline (default 8)")
    parser.add_argument("--no-scoring", action="store_true", help="do not score the demo with each ASR")
    args = parser.parse_args()
    sets = {"demo responses": demo_clips(args.demo), "BELLE questions": belle_clips(args.belle)}
    sets = {name: clips for name, clips in sets.items() if clips}
    os.environ.setdefault("CS3_BENCH_CACHE", tempfile.mkdtemp(prefix="cs3-asr-backends-"))
    print("| clips | n | identical transcripts | CER ours | CER authors' | s/clip ours | s/clip authors' |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, clips in sets.items():
        ours, ours_s = heard(clips, None)
        theirs, theirs_s = heard(clips, "transformers")
        same = sum(a.strip() == b.strip() for a, b in zip(ours, theirs))
        references = [r for _, r in clips]
        print(
            f"| {name} | {len(clips)} | {same} | {cer(references, ours):.3f} | {cer(references, theirs):.3f} "
            f"| {ours_s:.2f} | {theirs_s:.2f} |"
        )
    clips = sets.get("BELLE questions") or sets["demo responses"]
    single, one, together, batched = pipeline_batched(clips, args.batch)
    same = sum(a == b for a, b in zip(single, together))
    print(
        f"\nauthors' pipeline on {len(clips)} clips: one at a time {one:.2f} s/clip, batches of {args.batch} "
        f"{batched:.2f} s/clip; batched transcripts equal to one at a time: {same} of {len(clips)}"
    )
    if args.no_scoring:
        return 0
    with tempfile.TemporaryDirectory() as folder:
        rows = {
            "ours": scored(None, Path(folder) / "ours"),
            "authors'": scored("transformers", Path(folder) / "t"),
        }
        print("\n| demo system | ASR | acc speech cs | acc speech en | PSR | LSA speech |")
        print("| --- | --- | ---: | ---: | ---: | ---: |")
        for model in ("demo-strong", "demo-weak"):
            for asr_name, by_model in rows.items():
                cells = " | ".join(percent(v) for v in by_model[model].values())
                print(f"| {model} | {asr_name} | {cells} |")
        for model in ("demo-strong", "demo-weak"):  # the sensitivity view of each system's two scorings
            runs = [str(Path(folder) / arm / model) for arm in ("ours", "t")]
            view = subprocess.run(
                [sys.executable, "-m", "cs3_tasks.cli", "compare", *runs],
                check=True,
                capture_output=True,
                text=True,
            )
            print(f"\n{model}: cs3-bench compare (A: ours, B: the authors' decoding)\n{view.stdout}", end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
