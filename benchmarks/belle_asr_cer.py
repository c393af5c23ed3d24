"""ASR accuracy and speed on the 250 real BELLE-eval-S2S questions (Mandarin speech, 22.05 kHz).

Prints:
  * the corpus character error rate (after cs3_tasks.core.text.normalize_zh) of transcribe_batch with
    language detection on (language=None, as scoring uses it), the share of clips detected as "zh",
  * the wall time per clip (cache off, model already loaded),
  (these three for each short-clip decoding of --modes: packed windows, the default, and one window per
  clip in batches; and how many transcripts the two give identically),
  * the speed-up of our batched decoding (one encoder pass per batch of clips, as transcribe_batch does
    it) over the per-clip loop (faster-whisper's own transcribe), both with language="zh" and beam 5, on
    a subset, with the CER of each; the two runs alternate and the best of each is kept, which damps the
    noise of a shared machine.

    python benchmarks/belle_asr_cer.py [--limit N] [--compare N] [--repeats R]

Data: $CS3_SHARED_DATA/belle_eval_s2s, else <repo>/../shared/data/belle_eval_s2s.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from cs3_tasks.asr import AsrConfig


def belle_dir() -> Path:
    root = os.environ.get("CS3_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data"
    return Path(root) / "belle_eval_s2s"


def read_belle(limit: int | None = None) -> list[tuple[Path, str]]:
    """(wav path, reference text) pairs in test.tsv order."""
    root = belle_dir()
    rows = (root / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]
    pairs = []
    for row in rows:
        qid, text = row.split("\t", 1)
        pairs.append((root / "wav" / f"{qid}.wav", text.strip()))
    return pairs[:limit] if limit else pairs


def sequential(runner, audios: list[np.ndarray], language: str | None) -> list[str]:
    return [runner.transcribe(audio, language)[0] for audio in audios]


def batched(runner, audios: list[np.ndarray], language: str | None, batch_size: int) -> list[str]:
    """Our batched path (what transcribe_batch uses for clips <= 30 s): one encode per batch."""
    texts: list[str] = []
    for i in range(0, len(audios), batch_size):
        texts += [text for text, _ in runner.transcribe_many(audios[i : i + batch_size], language)]
    return texts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="first N clips only (default all 250)")
    parser.add_argument(
        "--compare", type=int, default=48, help="clips in the batched-vs-sequential run (0: skip)"
    )
    parser.add_argument(
        "--modes",
        default="packed,batched",
        help="short-clip decodings to run on all clips (packed, batched: asr.SHORT_CLIP_DECODINGS)",
    )
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)

    if not (belle_dir() / "test.tsv").is_file():
        print(f"BELLE-eval-S2S not found at {belle_dir()} (set CS3_SHARED_DATA)", file=sys.stderr)
        return 2

    from cs3_tasks import asr
    from cs3_tasks.core.audio import load_audio
    from cs3_tasks.core.metrics import character_error_rate, corpus_character_error_rate

    pairs = read_belle(args.limit)
    model_name = str(asr.offline_whisper_base() or asr.default_model())  # joined before WhisperModel loads it
    print(
        f"model: {model_name}  backend: faster-whisper  decoding: {asdict(asr.decoding_options())}  "
        f"threads: {asr.cpu_threads()}"
    )
    t0 = time.perf_counter()
    runner = asr.load_runner("faster-whisper", model_name)
    print(f"model load: {time.perf_counter() - t0:.1f} s")

    refs = [ref for _, ref in pairs]
    texts: dict[str, list[str]] = {}
    for mode in args.modes.split(","):
        t0 = time.perf_counter()
        transcripts = asr.transcribe_batch(
            [p for p, _ in pairs],
            asr=AsrConfig(model=model_name, short_clips=mode),
            use_cache=False,
            progress=True,
        )
        elapsed = time.perf_counter() - t0
        hyps = texts[mode] = [t.text for t in transcripts]
        errors = sum(t.error is not None for t in transcripts)
        zh = sum(t.language == "zh" for t in transcripts)
        per_item = [character_error_rate(r, h) for r, h in zip(refs, hyps)]
        print(f"[{mode}] clips: {len(pairs)}  errors: {errors}  detected zh: {zh}/{len(pairs)}")
        print(
            f"[{mode}] CER (corpus, normalised): {corpus_character_error_rate(refs, hyps):.4f}  "
            f"mean per-clip CER: {np.mean(per_item):.4f}  median: {np.median(per_item):.4f}"
        )
        print(f"[{mode}] time per clip (decode + ASR, language detection on): {elapsed / len(pairs):.3f} s")
    if len(texts) == 2:
        first, second = texts.values()
        same = sum(a == b for a, b in zip(first, second))
        print(f"identical transcripts in the two modes: {same}/{len(pairs)}")

    if args.compare:
        subset = [load_audio(p) for p, _ in pairs[: args.compare]]
        best_seq = best_bat = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            seq_hyps = sequential(runner, subset, "zh")
            best_seq = min(best_seq, time.perf_counter() - t0)
            t0 = time.perf_counter()
            bat_hyps = batched(runner, subset, "zh", args.batch_size)
            best_bat = min(best_bat, time.perf_counter() - t0)
        sub_refs = refs[: len(subset)]
        print(
            f"sequential ({len(subset)} clips, zh): {best_seq / len(subset):.3f} s/clip  "
            f"CER {corpus_character_error_rate(sub_refs, seq_hyps):.4f}"
        )
        print(
            f"batched (batch_size {args.batch_size}, zh): {best_bat / len(subset):.3f} s/clip  "
            f"CER {corpus_character_error_rate(sub_refs, bat_hyps):.4f}"
        )
        print(
            f"batched/sequential time ratio: {best_bat / best_seq:.2f} (speed-up {best_seq / best_bat:.2f}x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
