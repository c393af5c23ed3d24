"""Throughput of `cs3-bench score` vs a naive per-item sequential scorer, on the same N outputs.

    python benchmarks/score_throughput.py [--n 100] [--latency 0.3] [--concurrency 8]

Outputs: N code-switched knowledge items (the shared CS3-Bench source when present, else synthetic
items), a text response per item (one third with the Chinese answer, one third with the English answer,
one third without any: those need the judge) and its speech, synthesized with espeak-ng (voice cmn) and
cached under --workdir. The judge is the loopback OpenAI-compatible fake of tests/judge_server.py with a
fixed per-request latency. The same loaded Whisper model serves both pipelines (model loading is
excluded from every timing).

- ours, cold: `cs3-bench score` (scoring.run) with empty ASR and judge caches: text channel judged in
  the background while all speech is transcribed in one transcribe_batch call (short clips packed into
  shared Whisper windows, cs3_tasks/asr.py), then the speech channel
  judged concurrently (--concurrency requests in flight), records appended per item;
- ours, warm: the same command again with --restart (records discarded): every transcript and verdict
  comes from asr.sqlite / judge.sqlite;
- ours, resume: the same command again without --restart: the records file says everything is done;
- naive: per item, one after the other: transcribe (faster-whisper's WhisperModel.transcribe, no cache),
  keyword stage, judge the text channel, judge the speech channel (no cache, one request at a time), text
  metrics.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CS3_SHARED_DATA") or REPO.parent / "shared" / "data")


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
    from cs3_tasks import audio, tts

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
    outputs: Path, dataset: Path, out: Path, model: str, base_url: str, concurrency: int, *extra: str
) -> tuple[float, float]:
    """(total seconds, seconds inside transcribe_batch) of one `cs3-bench score` run."""
    from cs3_tasks import asr, scoring

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
    scoring.add_arguments(parser)
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
            *extra,
        ]
    )
    start = time.perf_counter()
    devnull = open(os.devnull, "w")  # noqa: SIM115 - the summary table would clutter the output
    stdout, sys.stdout = sys.stdout, devnull
    asr.transcribe_batch = timed
    try:
        code = scoring.run(args)
    finally:
        asr.transcribe_batch = transcribe_batch
        sys.stdout = stdout
        devnull.close()
    elapsed = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"scoring.run failed with exit code {code}")
    return elapsed, in_asr


def run_naive(docs: list[dict], outputs: Path, model: str, base_url: str) -> tuple[float, dict, list[dict]]:
    """One item at a time: ASR (no cache), keyword stage, sequential judge (no cache), metrics.

    Returns (total seconds, {"asr_s", "judge_s"} time spent in each, per-item rows).
    """
    from cs3_tasks import asr, judge, metrics, text
    from cs3_tasks.outputs import read_outputs

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
        transcript = asr.transcribe_batch(
            [output.audio], None, model=model, use_cache=False, progress=False, batch_size=1
        )[0]  # WhisperModel.transcribe on this one clip
        spent["asr_s"] += time.perf_counter() - t0
        row = {"qid": doc["Qid"]}
        for ch, response in (("text", output.text), ("speech", transcript.text)):
            hit = metrics.knowledge_keyword_hit(response, doc["Answer_zh"], doc["Answer_en"])
            if not hit:
                item = judge.KnowledgeItem(
                    doc["Question"], doc["Answer_zh"], response, doc["Answer_en"], doc["Qid"]
                )
                t0 = time.perf_counter()
                hit = judge.judge_knowledge([item], config)[0].value
                spent["judge_s"] += time.perf_counter() - t0
            row[f"{ch}_correct"] = hit
        row["psr"] = metrics.pronunciation_counts(output.text, transcript.text)
        row["wer"] = metrics.english_wer(output.text, transcript.text)
        row["mer"] = metrics.mixed_error_rate(output.text, transcript.text)
        row["lsa"] = (metrics.language_selected(output.text, "zh"), text.dominant_language(transcript.text))
        results.append(row)
    return time.perf_counter() - start, spent, results


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
    args = parser.parse_args(argv)

    sys.path.insert(0, str(REPO / "tests"))
    from judge_server import FakeJudgeServer

    from cs3_tasks import asr

    model = asr.default_model("faster-whisper")  # joined once into the user's cache
    docs = make_docs(args.n)
    args.workdir.mkdir(parents=True, exist_ok=True)
    outputs = (build_belle_outputs if args.audio == "belle" else build_outputs)(docs, args.workdir)
    dataset = args.workdir / "docs.json"
    dataset.write_text(json.dumps(docs, ensure_ascii=False), encoding="utf-8")

    scratch = Path(tempfile.mkdtemp(prefix="cs3-throughput-"))
    os.environ["CS3_BENCH_CACHE"] = str(scratch / "cache")  # cold ASR and judge caches
    try:
        import numpy as np

        from cs3_tasks import metrics

        # load the model, OpenCC and the Whisper normaliser once for both pipelines (excluded from timings)
        asr.transcribe_batch(
            [np.zeros(16000, dtype=np.float32)], model=model, use_cache=False, progress=False
        )
        metrics.mixed_error_rate("答案是 Salt Lake City", "答案是 salt lake city")
        metrics.knowledge_keyword_hit("鹽湖城", "盐湖城", "Salt Lake City")
        with FakeJudgeServer(judge_handler(args.latency)) as server:
            out = scratch / "result"
            naive_s, naive_parts, naive_rows = run_naive(docs, outputs, model, server.base_url)
            naive_requests = server.request_count
            server.reset()
            cold_s, cold_asr_s = run_ours(outputs, dataset, out, model, server.base_url, args.concurrency)
            cold_requests, max_in_flight = server.request_count, server.max_in_flight
            server.reset()
            warm_s, _ = run_ours(outputs, dataset, out, model, server.base_url, args.concurrency, "--restart")
            warm_requests = server.request_count
            resume_s, _ = run_ours(outputs, dataset, out, model, server.base_url, args.concurrency)
        records = {
            json.loads(line)["qid"]: json.loads(line)
            for line in (out / "knowledge.records.jsonl").read_text(encoding="utf-8").splitlines()
        }
        same = sum(
            records[r["qid"]]["text_correct"] == r["text_correct"]
            and records[r["qid"]]["speech_correct"] == r["speech_correct"]
            for r in naive_rows
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    result = {
        "n": args.n,
        "audio": args.audio,
        "judge_latency_s": args.latency,
        "judge_concurrency": args.concurrency,
        "cpu_threads": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "naive_s": naive_s,
        "naive_asr_s": naive_parts["asr_s"],
        "naive_judge_s": naive_parts["judge_s"],
        "ours_cold_s": cold_s,
        "ours_cold_asr_s": cold_asr_s,
        "ours_warm_s": warm_s,
        "ours_resume_s": resume_s,
        "speedup_cold": naive_s / cold_s,
        "speedup_warm_vs_cold": cold_s / warm_s,
        "judge_requests": {"naive": naive_requests, "ours_cold": cold_requests, "ours_warm": warm_requests},
        "judge_max_in_flight_ours": max_in_flight,
        "items_with_identical_verdicts": same,
    }
    print(
        f"N={args.n} outputs (text + speech: {args.audio}), judge latency {args.latency:.2f} s, "
        f"{result['cpu_threads']} CPU threads, ASR {Path(model).name}"
    )
    print(
        f"  naive sequential     {naive_s:8.1f} s   ({naive_requests} judge requests; ASR "
        f"{naive_parts['asr_s']:.1f} s, judge {naive_parts['judge_s']:.1f} s)"
    )
    print(
        f"  ours, cold caches    {cold_s:8.1f} s   ({cold_requests} judge requests, "
        f"max {max_in_flight} in flight; ASR {cold_asr_s:.1f} s, the rest {cold_s - cold_asr_s:.1f} s)   "
        f"speedup x{naive_s / cold_s:.1f}"
    )
    print(
        f"  without the ASR      naive {naive_s - naive_parts['asr_s']:.1f} s vs ours "
        f"{cold_s - cold_asr_s:.1f} s: "
        f"x{(naive_s - naive_parts['asr_s']) / max(cold_s - cold_asr_s, 1e-9):.1f}"
    )
    print(
        f"  ours, warm (restart) {warm_s:8.2f} s   ({warm_requests} judge requests)   "
        f"x{cold_s / warm_s:.0f} faster than cold"
    )
    print(f"  ours, resume         {resume_s:8.2f} s   (records file complete)")
    print(f"  same verdicts as naive on {same}/{args.n} items")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
