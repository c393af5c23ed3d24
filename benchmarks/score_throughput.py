"""Throughput of `cs3-bench score` vs a naive per-item sequential scorer, on the same N outputs.

    python benchmarks/score_throughput.py [--n 100] [--latency 0.3] [--concurrency 8]

Outputs: N code-switched knowledge items (the shared CS3-Bench source when present, else synthetic
items), a text response per item (one third with the Chinese answer, one third with the English answer,
one third without any: those need the judge) and its speech, synthesized with espeak-ng (voice cmn) and
cached under --workdir. The judge is the loopback OpenAI-compatible fake of tests/judge_server.py with a
fixed per-request latency. The same loaded Whisper model serves both pipelines (model loading is
excluded from every timing).

- ours, cold: `cs3-bench score` (score_cli.run) with empty ASR and judge caches: text channel judged in
  the background while all speech is transcribed in one transcribe_batch call, then the speech channel
  judged concurrently (--concurrency requests in flight), records appended per item. Once per short-clip
  mode (cs3_tasks/asr/): "batched" (the default: one window per clip, batches of 8, transcripts
  identical to per-clip decoding) and "packed" (opt-in: short clips share Whisper windows);
- ours, warm: the same command again with --restart (records discarded): every transcript and verdict
  comes from asr.sqlite / judge.sqlite;
- ours, resume: the same command again without --restart: the records file says everything is done;
- naive: per item, one after the other: transcribe (faster-whisper's WhisperModel.transcribe in this
  process, as a user's script runs it, no cache), keyword stage, judge the text channel, judge the speech
  channel (no cache, one request at a time), text metrics;
- faster-whisper's own BatchedInferencePipeline (ASR only) on the same clips with the same decoding
  settings and our features: one call per clip, and one call over all clips joined into one stream with
  clip_timestamps marking each clip (so it batches the clips, 8 at a time, and every segment is attributed
  to its clip); the one-stream call both with our ASR process's allocator settings
  (cs3_tasks/asr/process.py) and with glibc's defaults.

Every arm runs under the same arithmetic, one table each for ``--numerics portable,native`` (the values of
$CS3_ASR_NUMERICS): the engine reads its code paths once, at start-up, so each table's arms run in a child of
this script started with the environment our ASR child gets for it (`process.child_environment`: the
engine's pinned code paths for portable, none for native, and our allocator settings), and every arm
computes our float64 log-mel (`numerics.PortableFeatures`, which our ASR uses in both modes); the one-stream
pipeline call with glibc's default allocator runs in a child of its own with the same arithmetic. With
``--json`` the first table's figures keep their keys, the second's sit under its name ("native").
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from cs3_tasks.asr import AsrConfig

REPO = Path(__file__).resolve().parents[1]
NUMERICS = ("portable", "native")  # the values of $CS3_ASR_NUMERICS, one table each
SHARED = Path(os.environ.get("CS3_SHARED_DATA") or REPO.parent / "shared" / "data")
# The authors' scripts, which the default (reference) protocol reads its judge prompts from.
REFERENCE_SCRIPTS = (
    os.environ.get("CS3_REFERENCE_SCRIPTS") or REPO.parent / "shared" / "reference" / "vocalbench-zh"
)


def make_docs(n: int) -> list[dict]:
    source = SHARED / "cs3bench" / "cs_knowledge.json"
    if source.is_file():
        docs = json.loads(source.read_text(encoding="utf-8"))[:n]
        if len(docs) == n:
            return docs
    categories = ("Acoustic", "Semantic", "Integrated")
    return [
        {
            "Qid": f"bench-{i:03d}",
            "Question": f"第{i}个问题是关于 item number {i} 的吗？",
            "Answer_zh": f"答案{i}",
            "Answer_en": f"answer {i}",
            "Category": categories[i % 3],
        }
        for i in range(n)
    ]


def make_response(i: int, doc: dict) -> str:
    if i % 3 == 0:
        return f"答案是{doc['Answer_zh']}。"
    if i % 3 == 1:
        return f"我认为是 {doc['Answer_en']}。"
    return "这个问题我不太确定，可能是另外一个地方。"


def build_belle_outputs(docs: list[dict], workdir: Path) -> Path:
    """Our layout (<set>.jsonl, absolute audio paths) with real Mandarin speech: the BELLE-eval-S2S wavs.

    The speech does not answer the knowledge question (all speech items go to the judge); it exists to
    time the ASR on intelligible speech, where espeak-ng's Mandarin makes Whisper-base loop.
    """
    belle = SHARED / "belle_eval_s2s"
    if not (belle / "test.tsv").is_file():
        raise SystemExit(f"--audio belle needs {belle} (set CS3_SHARED_DATA)")
    rows = [line.split("\t", 1) for line in (belle / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    outputs = workdir / "outputs-belle"
    outputs.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, doc in enumerate(docs):
        wav_id, spoken = rows[i % len(rows)]
        lines.append(
            json.dumps(
                {
                    "Qid": doc["Qid"],
                    "text": f"{make_response(i, doc)} {spoken.strip()}",
                    "audio": str(belle / "wav" / f"{wav_id}.wav"),
                },
                ensure_ascii=False,
            )
        )
    (outputs / "knowledge.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"outputs: {len(docs)} items in {outputs} (speech: BELLE-eval-S2S wavs)")
    return outputs


def build_outputs(docs: list[dict], workdir: Path) -> Path:
    """Authors' layout under workdir/outputs; wavs synthesized once and kept (cached) across runs."""
    from cs3_tasks.build import tts
    from cs3_tasks.core import audio

    outputs = workdir / "outputs"
    (outputs / "json").mkdir(parents=True, exist_ok=True)
    (outputs / "wav").mkdir(exist_ok=True)
    lines = []
    made = 0
    for i, doc in enumerate(docs):
        text = make_response(i, doc)
        lines.append(json.dumps({"Qid": doc["Qid"], "Response": text}, ensure_ascii=False))
        wav = outputs / "wav" / f"{doc['Qid']}.wav"
        stamp = wav.with_suffix(".txt")
        if not (wav.is_file() and stamp.is_file() and stamp.read_text(encoding="utf-8") == text):
            samples, rate = tts.synthesize(text, voice="cmn")
            audio.write_wav(wav, samples, rate)
            stamp.write_text(text, encoding="utf-8")
            made += 1
    (outputs / "json" / "knowledge.json").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"outputs: {len(docs)} items in {outputs} ({made} wavs synthesized now, the rest cached)")
    return outputs


def judge_handler(latency: float):
    sys.path.insert(0, str(REPO / "tests"))
    from judge_server import Reply

    def handler(request) -> Reply:
        prompt = request.prompt
        response = prompt.rsplit("模型回答：", 1)[-1]
        correct = any(key in response for key in ("答案", "answer"))
        return Reply.text("正确 与答案一致" if correct else "错误 与答案不一致", delay=latency)

    return handler


def run_ours(
    outputs: Path,
    dataset: Path,
    out: Path,
    model: str,
    base_url: str,
    concurrency: int,
    *extra: str,
    mode: str = "batched",
    reference_scripts: Path,
) -> tuple[float, float]:
    """(total seconds, seconds inside transcribe_batch) of one `cs3-bench score` run; ``mode``: the
    short-clip decoding (``--asr-short-clips``)."""
    from cs3_tasks import asr
    from cs3_tasks.cli import score as score_cli

    in_asr = 0.0
    transcribe_batch = asr.transcribe_batch

    def timed(*a, **k):  # scoring looks transcribe_batch up at call time: this wrapper is what it gets
        nonlocal in_asr
        t0 = time.perf_counter()
        try:
            return transcribe_batch(*a, **k)
        finally:
            in_asr += time.perf_counter() - t0

    parser = argparse.ArgumentParser()
    score_cli.add_arguments(parser)
    args = parser.parse_args(
        [
            "--outputs",
            str(outputs),
            "--set",
            "knowledge",
            "--out",
            str(out),
            "--dataset",
            str(dataset),
            "--asr-model",
            model,
            "--judge-base-url",
            base_url,
            "--judge-api-key-env",
            "",
            "--judge-model",
            "fake-judge",
            "--judge-concurrency",
            str(concurrency),
            "--no-progress",
            "--asr-short-clips",
            mode,
            "--reference-scripts",
            str(reference_scripts),
            *extra,
        ]
    )
    start = time.perf_counter()
    devnull = open(os.devnull, "w")  # noqa: SIM115 - the summary table would clutter the output
    stdout, sys.stdout = sys.stdout, devnull
    asr.transcribe_batch = timed
    try:
        code = score_cli.run(args)
    finally:
        asr.transcribe_batch = transcribe_batch
        sys.stdout = stdout
        devnull.close()
    elapsed = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"score_cli.run failed with exit code {code}")
    return elapsed, in_asr


def run_naive(docs: list[dict], outputs: Path, model: str, base_url: str) -> tuple[float, dict, list[dict]]:
    """One item at a time: ASR (no cache), keyword stage, sequential judge (no cache), metrics.

    Returns (total seconds, {"asr_s", "judge_s"} time spent in each, per-item rows).
    """
    from cs3_tasks import judge
    from cs3_tasks.asr.faster_whisper import FasterWhisperRunner
    from cs3_tasks.core import metrics, text
    from cs3_tasks.core.audio import load_audio
    from cs3_tasks.scoring.outputs import read_outputs

    whisper = FasterWhisperRunner(model, "cpu", "int8")  # loaded before the clock starts
    config = judge.JudgeConfig(
        base_url=base_url, model="fake-judge", api_key_env="", max_concurrency=1, use_cache=False
    )
    start = time.perf_counter()
    found = read_outputs(outputs, "knowledge")
    results = []
    spent = {"asr_s": 0.0, "judge_s": 0.0}
    for doc in docs:
        output = found[doc["Qid"]]
        t0 = time.perf_counter()
        transcript = whisper.transcribe(load_audio(output.audio), None)[0].strip()  # WhisperModel.transcribe
        spent["asr_s"] += time.perf_counter() - t0
        row = {"qid": doc["Qid"], "transcript": transcript}
        for ch, response in (("text", output.text), ("speech", transcript)):
            hit = metrics.knowledge_keyword_hit(response, doc["Answer_zh"], doc["Answer_en"])
            if not hit:
                item = judge.KnowledgeItem(
                    doc["Question"], doc["Answer_zh"], response, doc["Answer_en"], doc["Qid"]
                )
                t0 = time.perf_counter()
                hit = judge.judge_knowledge([item], config)[0].value
                spent["judge_s"] += time.perf_counter() - t0
            row[f"{ch}_correct"] = hit
        row["psr"] = metrics.pronunciation_counts(output.text, transcript)
        row["wer"] = metrics.english_wer(output.text, transcript)
        row["mer"] = metrics.mixed_error_rate(output.text, transcript)
        row["lsa"] = (metrics.language_selected(output.text, "zh"), text.dominant_language(transcript))
        results.append(row)
    return time.perf_counter() - start, spent, results


def run_pipeline(docs: list[dict], outputs: Path, model: str, per_clip: bool = True) -> dict:
    """faster-whisper's BatchedInferencePipeline on the same clips, our decoding settings (beam 5,
    temperature 0, no conditioning, no VAD; its own default: no timestamps) and our features (the float64
    log-mel of cs3_tasks.asr.numerics, as our ASR computes them): one call per clip, and one call over all
    clips joined into one stream with ``clip_timestamps`` marking each clip, so that it batches the clips (8
    at a time) and each segment is attributed to its clip by time. Language: detected per call (so once for
    the whole stream). Reading the clips is inside each timing, as for ours and the naive loop."""
    import numpy as np
    from faster_whisper import BatchedInferencePipeline, WhisperModel

    from cs3_tasks import asr
    from cs3_tasks.asr.numerics import PortableFeatures
    from cs3_tasks.core.audio import SAMPLE_RATE, load_audio
    from cs3_tasks.scoring.outputs import read_outputs

    whisper = WhisperModel(model, device="cpu", compute_type="int8", cpu_threads=asr.cpu_threads())
    whisper.feature_extractor = PortableFeatures(whisper.feature_extractor)
    pipeline = BatchedInferencePipeline(whisper)
    found = read_outputs(outputs, "knowledge")
    paths = [found[doc["Qid"]].audio for doc in docs]
    options = {
        "beam_size": asr.DECODING.beam_size,
        "temperature": asr.DECODING.temperature,
        "condition_on_previous_text": asr.DECODING.condition_on_previous_text,
        "vad_filter": False,
        "batch_size": 8,
    }
    list(pipeline.transcribe(load_audio(paths[0]), **options)[0])  # warm-up, excluded
    # each call reads its clips inside the timing, as ours and the naive loop do
    start = time.perf_counter()
    per_clip_texts = [
        "".join(seg.text for seg in pipeline.transcribe(load_audio(path), **options)[0]).strip()
        for path in (paths if per_clip else [])
    ]
    per_clip_s = time.perf_counter() - start
    start = time.perf_counter()
    clips = [load_audio(path) for path in paths]
    gap = np.zeros(SAMPLE_RATE, dtype=np.float32)
    stream = np.concatenate([part for clip in clips for part in (clip, gap)])
    bounds, at = [], 0.0
    for clip in clips:
        bounds.append({"start": at, "end": at + len(clip) / SAMPLE_RATE})
        at += (len(clip) + len(gap)) / SAMPLE_RATE
    stream_texts = [""] * len(clips)
    for seg in pipeline.transcribe(stream, clip_timestamps=bounds, **options)[0]:
        owner = max(i for i, b in enumerate(bounds) if b["start"] <= seg.start + 0.05)
        stream_texts[owner] += seg.text
    return {
        "per_clip_s": per_clip_s,
        "stream_s": time.perf_counter() - start,
        "texts": per_clip_texts,
        "stream_texts": [t.strip() for t in stream_texts],
    }


def arithmetic_environment(numerics: str, allocator: bool) -> dict[str, str]:
    """This process's environment with $CS3_ASR_NUMERICS=``numerics`` and what our ASR child starts with for
    it: the engine's pinned code paths (`numerics.engine_environment`, none for native) and, with
    ``allocator``, our allocator settings (`process.child_environment`). Our own scoring still runs its ASR
    in its own child, as users run it (that child gets the same environment)."""
    from cs3_tasks.asr.numerics import NUMERICS_ENV, engine_environment
    from cs3_tasks.asr.process import IN_PROCESS_ENV, child_environment

    environ = {**os.environ, NUMERICS_ENV: numerics}
    if not allocator:
        return {**environ, **engine_environment(environ)}
    return {**child_environment(environ), IN_PROCESS_ENV: os.environ.get(IN_PROCESS_ENV, "0")}


def run_child(argv: list[str], option: str, env: dict[str, str], scratch: Path) -> dict:
    """This script with ``argv`` and the internal ``option`` in a child started with ``env``; its JSON."""
    import subprocess

    out = scratch / f"{option.strip('-')}-{len(list(scratch.iterdir()))}.json"
    subprocess.run(
        [sys.executable, __file__, *argv, option, str(out)], env=env, check=True, stdout=subprocess.DEVNULL
    )
    return json.loads(out.read_text(encoding="utf-8"))


def run_table(args: argparse.Namespace, docs: list[dict], outputs: Path, model: str) -> dict:
    """Every arm in this process (started with one arithmetic and our allocator settings): the naive loop,
    ours cold in each mode, warm and resume, and the pipeline's two calls. Seconds, transcripts, verdicts."""
    import numpy as np

    sys.path.insert(0, str(REPO / "tests"))
    from judge_server import FakeJudgeServer

    from cs3_tasks import asr
    from cs3_tasks.core import metrics

    modes = [m for m in dict.fromkeys(args.modes.split(",")) if m and m != "batched"] + ["batched"]
    dataset = args.workdir / "docs.json"
    dataset.write_text(json.dumps(docs, ensure_ascii=False), encoding="utf-8")
    scratch = Path(tempfile.mkdtemp(prefix="cs3-throughput-"))
    os.environ["CS3_BENCH_CACHE"] = str(scratch / "cache-warmup")
    try:
        # load the model, OpenCC and the Whisper normaliser once for both pipelines (excluded from timings)
        asr.transcribe_batch(
            [np.zeros(16000, dtype=np.float32)], asr=AsrConfig(model=model), use_cache=False, progress=False
        )
        metrics.mixed_error_rate("答案是 Salt Lake City", "答案是 salt lake city")
        metrics.knowledge_keyword_hit("鹽湖城", "盐湖城", "Salt Lake City")
        with FakeJudgeServer(judge_handler(args.latency)) as server:
            naive_s, naive_parts, naive_rows = run_naive(docs, outputs, model, server.base_url)
            naive_requests = server.request_count
            server.reset()
            cold = {}
            for mode in modes:  # each with its own empty ASR and judge caches
                os.environ["CS3_BENCH_CACHE"] = str(scratch / f"cache-{mode}")
                cold[mode] = run_ours(
                    outputs,
                    dataset,
                    scratch / f"result-{mode}",
                    model,
                    server.base_url,
                    args.concurrency,
                    mode=mode,
                    reference_scripts=args.reference_scripts,
                )
            cold_requests, max_in_flight = server.request_count // 2, server.max_in_flight
            server.reset()
            again = functools.partial(  # the default mode's result dir, scored again
                run_ours,
                outputs,
                dataset,
                scratch / "result-batched",
                model,
                server.base_url,
                args.concurrency,
                reference_scripts=args.reference_scripts,
            )
            warm_s, _ = again("--restart")
            warm_requests = server.request_count
            resume_s, _ = again()
        pipeline = run_pipeline(docs, outputs, model)
        records = {}
        for mode in cold:
            lines = (scratch / f"result-{mode}" / "knowledge.records.jsonl").read_text("utf-8").splitlines()
            records[mode] = {
                row["qid"]: {key: row[key] for key in ("transcript", "text_correct", "speech_correct")}
                for row in map(json.loads, lines)
            }
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "naive_s": naive_s,
        "naive_parts": naive_parts,
        "naive_rows": [
            {key: row[key] for key in ("qid", "transcript", "text_correct", "speech_correct")}
            for row in naive_rows
        ],
        "naive_requests": naive_requests,
        "cold": cold,
        "cold_requests": cold_requests,
        "max_in_flight": max_in_flight,
        "warm_s": warm_s,
        "warm_requests": warm_requests,
        "resume_s": resume_s,
        "pipeline": pipeline,
        "records": records,
    }


def summarize(args: argparse.Namespace, found: dict, stream_default: dict) -> dict:
    """The figures of one table (the JSON keys the README's figures use) from ``run_table``'s findings and
    the pipeline's one-stream call with the default allocator."""
    naive_rows, cold, pipeline, records = (
        found["naive_rows"],
        found["cold"],
        found["pipeline"],
        found["records"],
    )
    same = {
        mode: sum(
            rows[r["qid"]]["text_correct"] == r["text_correct"]
            and rows[r["qid"]]["speech_correct"] == r["speech_correct"]
            for r in naive_rows
        )
        for mode, rows in records.items()
    }
    same_text = {
        mode: sum((rows[r["qid"]]["transcript"] or "") == r["transcript"] for r in naive_rows)
        for mode, rows in records.items()
    }
    for key, texts in (
        ("pipeline", pipeline["texts"]),
        ("pipeline_stream", stream_default["stream_texts"]),
        ("pipeline_stream_our_allocator", pipeline["stream_texts"]),
    ):
        same_text[key] = sum(t == r["transcript"] for t, r in zip(texts, naive_rows))
    naive_s, naive_asr = found["naive_s"], found["naive_parts"]["asr_s"]
    cold_s = cold["batched"][0]
    return {
        "n": args.n,
        "audio": args.audio,
        "judge_latency_s": args.latency,
        "judge_concurrency": args.concurrency,
        "cpu_threads": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "naive_s": naive_s,
        "naive_asr_s": naive_asr,
        "naive_judge_s": found["naive_parts"]["judge_s"],
        "ours_cold_s": {mode: t for mode, (t, _) in cold.items()},
        "ours_cold_asr_s": {mode: a for mode, (_, a) in cold.items()},
        "pipeline_asr_s": {
            "per_clip": pipeline["per_clip_s"],
            "one_stream": stream_default["stream_s"],
            "one_stream_our_allocator": pipeline["stream_s"],
        },
        "ours_warm_s": found["warm_s"],
        "ours_resume_s": found["resume_s"],
        "speedup_cold": {mode: naive_s / t for mode, (t, _) in cold.items()},
        "asr_speedup": {mode: naive_asr / a for mode, (_, a) in cold.items()},
        "speedup_warm_vs_cold": cold_s / found["warm_s"],
        "judge_requests": {
            "naive": found["naive_requests"],
            "ours_cold": found["cold_requests"],
            "ours_warm": found["warm_requests"],
        },
        "judge_max_in_flight_ours": found["max_in_flight"],
        "items_with_identical_verdicts": same,
        "transcripts_identical_to_naive": same_text,
        "transcripts_differing_from_naive": {
            mode: [
                {"qid": r["qid"], "naive": r["transcript"], "ours": rows[r["qid"]]["transcript"] or ""}
                for r in naive_rows
                if (rows[r["qid"]]["transcript"] or "") != r["transcript"]
            ]
            for mode, rows in records.items()
        },
    }


def print_table(numerics: str, result: dict) -> None:
    n, naive_s, naive_asr = result["n"], result["naive_s"], result["naive_asr_s"]
    same_text, same = result["transcripts_identical_to_naive"], result["items_with_identical_verdicts"]
    pipeline = result["pipeline_asr_s"]
    print(
        f"\n{numerics} arithmetic: every arm on the engine code paths and float64 log-mel our ASR uses with "
        f"$CS3_ASR_NUMERICS={numerics}, in a process with our ASR process's allocator settings unless said; "
        f"N={n} (speech: {result['audio']}), judge latency {result['judge_latency_s']:.2f} s, "
        f"{result['cpu_threads']} CPU threads\n"
    )
    print("| arm | seconds | ASR seconds | ASR vs naive | same transcripts as naive | same verdicts |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    print(
        f"| naive sequential (WhisperModel.transcribe per clip) | {naive_s:.1f} | {naive_asr:.1f} | 1.00x | "
        f"| ({result['judge_requests']['naive']} judge requests) |"
    )
    for mode, total in result["ours_cold_s"].items():
        asr_s = result["ours_cold_asr_s"][mode]
        label = "default" if mode == "batched" else "opt-in"
        print(
            f"| ours, cold, {mode} ({label}; x{naive_s / total:.2f} the naive total) | {total:.1f} | "
            f"{asr_s:.1f} | {naive_asr / asr_s:.2f}x | {same_text[mode]}/{n} | {same[mode]}/{n} |"
        )
    for label, key, texts in (
        ("one call per clip", "per_clip", "pipeline"),
        (
            "one-stream call (clip_timestamps, batches of 8), default allocator",
            "one_stream",
            "pipeline_stream",
        ),
        ("one-stream call, our allocator", "one_stream_our_allocator", "pipeline_stream_our_allocator"),
    ):
        seconds = pipeline[key]
        print(
            f"| BatchedInferencePipeline, {label} | | {seconds:.1f} | {naive_asr / seconds:.2f}x | "
            f"{same_text[texts]}/{n} | |"
        )
    asr_s = result["ours_cold_asr_s"]["batched"]
    print(
        f"\nours batched ASR vs the pipeline's one-stream call: x{pipeline['one_stream'] / asr_s:.2f} "
        f"(default allocator), x{pipeline['one_stream_our_allocator'] / asr_s:.2f} (our allocator); "
        f"vs its per-clip calls x{pipeline['per_clip'] / asr_s:.2f}"
    )
    print(
        f"judge: {result['judge_requests']['ours_cold']} requests per cold run, max "
        f"{result['judge_max_in_flight_ours']} in flight; warm (restart) {result['ours_warm_s']:.2f} s "
        f"(x{result['ours_cold_s']['batched'] / result['ours_warm_s']:.0f} faster than cold, "
        f"{result['judge_requests']['ours_warm']} judge requests); resume {result['ours_resume_s']:.2f} s"
    )
    for mode, differing in result["transcripts_differing_from_naive"].items():
        for clip in differing[:10] if mode == "batched" else []:
            print(f"  {mode} differs from naive on {clip['qid']}: {clip['naive']!r} vs {clip['ours']!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100, help="number of outputs (default 100)")
    parser.add_argument("--latency", type=float, default=0.3, help="judge latency per request, seconds")
    parser.add_argument("--concurrency", type=int, default=8, help="judge requests in flight (ours)")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "cs3-bench-throughput",
        help="where the synthesized outputs are kept between runs",
    )
    parser.add_argument(
        "--audio",
        choices=("espeak", "belle"),
        default="espeak",
        help="speech outputs: espeak-ng synthesis of the text responses (default), or the "
        "real Mandarin BELLE-eval-S2S wavs from the shared data",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the timings here")
    parser.add_argument(
        "--reference-scripts",
        type=Path,
        default=Path(REFERENCE_SCRIPTS),
        help="the authors' VocalBench-zh checkout, read by the default (reference) protocol "
        "(default: $CS3_REFERENCE_SCRIPTS, else ../shared/reference/vocalbench-zh beside the clone)",
    )
    parser.add_argument(
        "--modes",
        default="packed,batched",
        help="our short-clip decodings to time, comma-separated (default packed,batched; batched is "
        "always run: the warm and resume runs reuse its results)",
    )
    parser.add_argument(
        "--numerics",
        default="portable,native",
        help="the arithmetic of each table, comma-separated values of $CS3_ASR_NUMERICS (default "
        "portable,native: one table each, every arm under that arithmetic)",
    )
    # internal: one table's arms in this process, or the one-stream pipeline call alone
    parser.add_argument("--table-json", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--pipeline-stream-json", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    tables = [t for t in dict.fromkeys(args.numerics.split(",")) if t]
    # every missing input is named, whichever would be needed first: one run tells the user all they lack
    missing = [f"--numerics: {t!r} is not one of portable, native" for t in tables if t not in NUMERICS]
    if not args.reference_scripts.exists():
        missing.append(
            f"the authors' scripts are not at {args.reference_scripts}: pass --reference-scripts DIR or set "
            "CS3_REFERENCE_SCRIPTS (a VocalBench-zh checkout; ../shared/reference/vocalbench-zh here)"
        )
    if args.audio == "belle" and not (SHARED / "belle_eval_s2s" / "test.tsv").is_file():
        missing.append(f"--audio belle needs {SHARED / 'belle_eval_s2s'} (set CS3_SHARED_DATA)")
    if missing or not tables:
        print("\n".join(missing) or "--numerics: name at least one of portable, native", file=sys.stderr)
        return 2

    from cs3_tasks import asr

    model = str(
        asr.offline_whisper_base() or asr.default_model("faster-whisper")
    )  # joined once into the cache
    docs = make_docs(args.n)
    args.workdir.mkdir(parents=True, exist_ok=True)
    outputs = (build_belle_outputs if args.audio == "belle" else build_outputs)(docs, args.workdir)
    if args.pipeline_stream_json:
        found = run_pipeline(docs, outputs, model, per_clip=False)
        args.pipeline_stream_json.write_text(json.dumps(found, ensure_ascii=False), encoding="utf-8")
        return 0
    if args.table_json:
        found = run_table(args, docs, outputs, model)
        args.table_json.write_text(json.dumps(found, ensure_ascii=False), encoding="utf-8")
        return 0

    # Each table in children started with its arithmetic (the engine reads it at start-up, and the loaded
    # model is kept per process): every arm with our allocator settings, then the pipeline's one-stream
    # call again with the default allocator.
    child_argv = argv if argv is not None else sys.argv[1:]
    scratch = Path(tempfile.mkdtemp(prefix="cs3-throughput-tables-"))
    result: dict = {}
    try:
        for numerics in tables:
            found = run_child(child_argv, "--table-json", arithmetic_environment(numerics, True), scratch)
            stream = run_child(
                child_argv, "--pipeline-stream-json", arithmetic_environment(numerics, False), scratch
            )
            table = {"numerics": numerics, **summarize(args, found, stream)}
            print_table(numerics, table)
            if result:
                result[numerics] = table  # the second table: under its own key
            else:
                result = table  # the first table: the keys the README's figures use
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
