"""ASR on a GPU: our transformers backend batched against the authors' one clip at a time, per batch size.

    python benchmarks/gpu_asr.py [--n 120] [--batches 1,8,16,32,64] [--model M] [--json FILE]
    python benchmarks/gpu_asr.py --random-shape large-v3   # no weights on the machine: the real shapes

The authors decode one clip at a time (``transformers.pipeline``, their utils/whisper_asr.py); our
transformers backend hands the same pipeline ``--asr-device cuda``'s batches
(cs3_tasks.asr.transformers_whisper). Over the demo's response clips (``--n``; ``--audio belle`` for
BELLE-eval-S2S questions): clips/s of each batch size after one warm-up batch, the peak GPU memory, and how
many transcripts equal the one-at-a-time ones. The model
is the transformers backend's default (openai/whisper-large-v3 where the Hugging Face cache has it, else the
offline Whisper-base converted) or ``--model``. ``--random-shape base|large-v3`` builds a randomly initialised
Whisper of that shape instead (a GPU machine without the weights) and forces ``--tokens`` decoder steps per
clip, so that each batch does the same work; its transcripts are noise and are not compared. Last, whether
faster-whisper can run on this GPU (`cs3_tasks.asr.check_asr_device`, the check every run makes).

Figures and the command that made them: benchmarks/README.md ("ASR on a GPU"). ``--device cpu`` runs the same
arms on a CPU (tests/test_benchmarks.py does, on two clips).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from asr_backends import belle_clips, demo_clips

from cs3_tasks.asr import AsrConfig, AsrModelError, check_asr_device, default_model, load_runner
from cs3_tasks.core.audio import SAMPLE_RATE, load_audio

SHAPES = {  # WhisperConfig sizes of the real checkpoints, and a tiny one for the tests
    "tiny-test": {"d_model": 64, "layers": 2, "heads": 2, "ffn": 128, "mels": 80},
    "base": {"d_model": 512, "layers": 6, "heads": 8, "ffn": 2048, "mels": 80},
    "large-v3": {"d_model": 1280, "layers": 32, "heads": 20, "ffn": 5120, "mels": 128},
}


def random_whisper(shape: str, folder: Path) -> str:
    """A randomly initialised Whisper of ``shape`` as a local checkpoint folder (the tests' builder: a
    byte-level vocabulary, the real sizes otherwise)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from tiny_whisper import build_whisper  # noqa: E402 - the tests' offline builder

    size = SHAPES[shape]
    return build_whisper(
        folder,
        d_model=size["d_model"],
        layers=size["layers"],
        heads=size["heads"],
        ffn=size["ffn"],
        mels=size["mels"],
        max_target_positions=448,
        max_length=448,
    )


def transcribe_all(runner, audios: list, batch: int, tokens: int | None) -> tuple[list[str], float]:
    """Every clip through ``runner`` in batches of ``batch`` (1: the authors' call): texts and clips/s."""
    forced = {"generate_kwargs": {"min_new_tokens": tokens, "max_new_tokens": tokens}} if tokens else {}
    texts: list[str] = []
    started = time.perf_counter()
    for at in range(0, len(audios), batch):
        inputs = [{"raw": audio, "sampling_rate": SAMPLE_RATE} for audio in audios[at : at + batch]]
        results = runner.pipe(inputs, batch_size=len(inputs), **forced)
        texts += [str(r.get("text", "")).strip() for r in results]
    synchronize(runner)
    return texts, len(audios) / (time.perf_counter() - started)


def synchronize(runner) -> None:
    import torch

    if runner.device.startswith("cuda"):
        torch.cuda.synchronize(runner.device)


def peak_memory_gib(device: str, reset: bool = False) -> float | None:
    import torch

    if not device.startswith("cuda"):
        return None
    if reset:
        torch.cuda.reset_peak_memory_stats(device)
        return None
    return torch.cuda.max_memory_allocated(device) / 2**30


def faster_whisper_on(device: str) -> str:
    """Whether the default engine runs on ``device`` (the check of every run), in words."""
    try:
        libraries = check_asr_device(AsrConfig(backend="faster-whisper", device=device))
    except (AsrModelError, ValueError) as exc:
        return f"refused: {exc}"
    return "runs" + (f" ({', '.join(f'{k}: {v}' for k, v in libraries.items())})" if libraries else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=120, help="clips (default 120)")
    parser.add_argument("--audio", choices=("demo", "belle"), default="demo")
    parser.add_argument("--batches", default="1,8,16,32,64", help="batch sizes (default 1,8,16,32,64)")
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    parser.add_argument("--model", default=None, help="a transformers Whisper (default: the backend's)")
    parser.add_argument("--random-shape", choices=tuple(SHAPES), default=None)
    parser.add_argument("--tokens", type=int, default=96, help="decoder steps per clip with --random-shape")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()

    clips = demo_clips(args.n) if args.audio == "demo" else belle_clips(args.n)
    if not clips:
        print("no clips: --audio belle needs BELLE-eval-S2S ($CS3_SHARED_DATA)", file=sys.stderr)
        return 2
    audios = [load_audio(path, SAMPLE_RATE) for path, _ in clips]
    tokens = args.tokens if args.random_shape else None
    if args.random_shape:
        import tempfile

        model = random_whisper(args.random_shape, Path(tempfile.mkdtemp(prefix="whisper-random-")))
        name = f"random weights, {args.random_shape} shape, {tokens} decoder steps per clip"
    else:
        model = args.model or default_model("transformers")
        name = Path(model).name if Path(model).expanduser().is_absolute() or Path(model).exists() else model
    runner = load_runner("transformers", model, args.device)
    batches = sorted({int(b) for b in args.batches.split(",") if b.strip()})
    transcribe_all(runner, audios[: max(batches)], max(batches), tokens)  # warm-up: kernels, allocator
    rows, one_at_a_time = [], None
    for batch in batches:
        peak_memory_gib(args.device, reset=True)
        texts, rate = transcribe_all(runner, audios, batch, tokens)
        if batch == 1:
            one_at_a_time = texts
        same = None if tokens or one_at_a_time is None else sum(a == b for a, b in zip(texts, one_at_a_time))
        rows.append(
            {"batch": batch, "clips_per_s": rate, "peak_gib": peak_memory_gib(args.device), "same": same}
        )
    base = next((r["clips_per_s"] for r in rows if r["batch"] == 1), None)
    print(f"transformers backend on {args.device}, {runner.dtype}, {name}; {len(audios)} {args.audio} clips")
    print("| batch | clips/s | x one at a time | peak GPU memory | transcripts = one at a time |")
    print("|---:|---:|---:|---:|---:|")
    for r in rows:
        ratio = f"x{r['clips_per_s'] / base:.2f}" if base else "n/a"
        memory = f"{r['peak_gib']:.1f} GiB" if r["peak_gib"] is not None else "n/a"
        same = f"{r['same']}/{len(audios)}" if r["same"] is not None else "n/a"
        print(f"| {r['batch']} | {r['clips_per_s']:.2f} | {ratio} | {memory} | {same} |")
    engine = faster_whisper_on(args.device) if args.device != "cpu" else "n/a on the CPU"
    print(f"faster-whisper (CTranslate2) on {args.device}: {engine}")
    if args.json:
        figures = {
            "device": args.device,
            "model": name,
            "clips": len(audios),
            "rows": rows,
            "faster_whisper": engine,
        }
        args.json.write_text(json.dumps(figures, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
