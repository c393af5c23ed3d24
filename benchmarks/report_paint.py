"""How fast the HTML report paints at scale: 8 models x 924 items in knowledge and knowledge_en (synthetic).

    python benchmarks/report_paint.py [--models 8] [--items 924] [--runs 3] [--workdir DIR]
                                      [--huge-response N]

Builds synthetic result dirs (records in the real schema, summaries from `scoring.summary.summarize`, one
short WAV shared by every response, questions from one source JSON file), writes the report with
`report.html.write_html_report`, then opens index.html from file:// in headless Chromium (Debian's
/usr/bin/chromium through Playwright) and prints, per run: first contentful paint of the leaderboard page,
and the time until items.js is loaded and the first item table is drawn (``body[data-ready]``). Also prints
the report's size and how long writing it took. Not a timed test: the issue's bar is FCP < 1 s.
``--huge-response N``: the first item of model-0 answered with N characters (Chinese and English words),
and the page opened on the item view, which shows that row (bounded).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from cs3_tasks.core.audio import write_wav
from cs3_tasks.core.data import CATEGORIES, KNOWLEDGE_SETS
from cs3_tasks.report.html import ReportSettings, write_html_report
from cs3_tasks.scoring.records import blank_record
from cs3_tasks.scoring.summary import attach_cs_vs_en, summarize, write_summary

CHROMIUM = "/usr/bin/chromium"  # Debian's; Playwright's own download is not used
WORDS = ["Python", "Kilimanjaro", "Saturn", "organ", "machine learning", "Mozart", "Danube", "Peru", "API"]


def synthetic_record(rng: random.Random, set_name: str, i: int, skill: float, clip: Path) -> dict:
    record = blank_record(set_name, f"q-{i:04d}", CATEGORIES[i % 3], None, "cs3")
    english = rng.sample(WORDS, 2)
    text = f"答案是{english[0]}，与{english[1]}有关的知识点{i}。"
    heard = text if rng.random() < 0.7 else text.replace(english[0], "")
    text_ok, speech_ok = rng.random() < skill, rng.random() < skill * 0.8
    record.update(
        text=text,
        audio=str(clip),
        transcript=heard,
        text_keyword_hit=text_ok,
        text_status="keyword" if text_ok else "unresolved",
        text_correct=text_ok,
        speech_keyword_hit=speech_ok,
        speech_status="keyword" if speech_ok else "unresolved",
        speech_correct=speech_ok,
        psr_recognised=2 if heard == text else 1,
        psr_total=2,
        text_language="mixed",
        speech_language="zh",
        text_lsa=True,
        speech_lsa=rng.random() < 0.9,
    )
    return record


def build_results(
    workdir: Path, n_models: int, n_items: int, huge_response: int = 0
) -> tuple[list[Path], Path]:
    clip = workdir / "clip.wav"
    write_wav(clip, (0.1 * np.sin(np.linspace(0, 2000, 16000))).astype(np.float32))
    questions = [
        {
            "Qid": f"q-{i:04d}",
            "Question": f"问题{i}: which word is it?",
            "Answer_zh": "答案",
            "Answer_en": "answer",
        }
        for i in range(n_items)
    ]
    source = workdir / "questions.json"
    source.write_text(json.dumps(questions, ensure_ascii=False), encoding="utf-8")
    dirs = []
    for m in range(n_models):
        rng, out = random.Random(m), workdir / f"model-{m}"
        out.mkdir(parents=True, exist_ok=True)
        summaries = {}
        for set_name in KNOWLEDGE_SETS:
            records = [synthetic_record(rng, set_name, i, 0.4 + 0.05 * m, clip) for i in range(n_items)]
            if huge_response and m == 0:
                piece = "很长的回答 long answer "
                records[0]["text"] = (piece * (huge_response // len(piece) + 1))[:huge_response]
            lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
            (out / f"{set_name}.records.jsonl").write_text(lines, encoding="utf-8")
            summaries[set_name] = {**summarize(set_name, records), "model": f"model-{m}"}
        attach_cs_vs_en(summaries)
        for summary in summaries.values():
            write_summary(out, summary)
        dirs.append(out)
    return dirs, source


def _missing_browser() -> str | None:
    """Why the browser cannot be started here (None when it can)."""
    import importlib.util

    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed (pip install playwright)"
    if not Path(CHROMIUM).is_file():
        return f"{CHROMIUM} is missing (apt-get install chromium)"
    return None


def measure(index: Path, runs: int, view: str = "leaderboard-view") -> list[tuple[float, float]]:
    from playwright.sync_api import sync_playwright

    timings = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        # the machine's floor: the same browser painting a one-line page
        blank = index.parent / "blank.html"
        blank.write_text("<!DOCTYPE html><p>blank</p>", encoding="utf-8")
        for _ in range(runs):
            page = browser.new_page()
            page.goto(blank.as_uri())
            page.wait_for_load_state()
            floor = page.evaluate(
                "performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? -1"
            )
            print(f"one-line page first contentful paint {floor / 1000:.3f} s")
            page.close()
        blank.unlink()
        for _ in range(runs):
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(index.as_uri() + f"#{view}")
            page.wait_for_selector("body[data-ready='1']", timeout=120_000, state="attached")
            fcp = page.evaluate("performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? -1")
            # the next frame: the view laid out and painted, not only built
            ready = page.evaluate("new Promise(done => requestAnimationFrame(() => done(performance.now())))")
            timings.append((fcp / 1000, ready / 1000))
            page.close()
        browser.close()
    return timings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=8)
    parser.add_argument("--items", type=int, default=924)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--huge-response", type=int, default=0, metavar="N")
    args = parser.parse_args(argv)
    missing = _missing_browser()
    if missing:
        print(f"report_paint needs headless Chromium through Playwright: {missing}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="cs3-report-paint-") as tmp:
        workdir = args.workdir or Path(tmp)
        dirs, source = build_results(workdir, args.models, args.items, args.huge_response)
        started = time.perf_counter()
        index = write_html_report(
            workdir / "report", dirs, ReportSettings(dataset=str(source), baseline="model-0")
        )
        written = time.perf_counter() - started
        size = sum(p.stat().st_size for p in index.parent.rglob("*") if p.is_file())
        items_size = (index.parent / "items.js").stat().st_size
        print(
            f"{args.models} models x {args.items} items x {len(KNOWLEDGE_SETS)} sets: report written in "
            f"{written:.1f} s, {size / 1e6:.1f} MB ({items_size / 1e6:.1f} MB items.js)"
        )
        timings = measure(index, args.runs, "items-view" if args.huge_response else "leaderboard-view")
    for run, (fcp, ready) in enumerate(timings, start=1):
        print(
            f"run {run}: leaderboard first contentful paint {fcp:.3f} s; items loaded and drawn {ready:.3f} s"
        )
    print(f"median first contentful paint {statistics.median(t[0] for t in timings):.3f} s (bar: < 1 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
