"""``cs3-bench report --html OUT``: one static report folder that opens from file:// (no server, no network).

OUT/index.html holds the leaderboard with CIs, the cs-vs-en table, the notes and the page's own CSS and JS
(inlined from ``assets/``: no CDN). OUT/items.js holds every item once, as JSON (``window.CS3_ITEMS``); the
page loads it after its first paint and renders the item tables from it, paginated (item table per model and
set with filters, sorting and search; one Qid in knowledge and knowledge_en side by side; one row per Qid
across models). Audio is referenced by a path relative to OUT: question clips are written under
OUT/audio/<set>/ once, response clips linked or copied under OUT/audio/responses/<model>/<set>/. Also written
by ``cs3-bench demo`` and ``cs3-bench score --outputs-root``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from importlib import resources
from pathlib import Path

from cs3_tasks.core import data
from cs3_tasks.core.cache import atomic_write, json_text
from cs3_tasks.core.data import CATEGORIES, SETS, dataset_location
from cs3_tasks.report import items, questions, tables
from cs3_tasks.report.compare import baseline_comparisons
from cs3_tasks.report.leaderboard import leaderboard_rows
from cs3_tasks.report.results import ModelResults, load_results, summaries_of
from cs3_tasks.scoring.records import CHANNELS, STATUSES
from cs3_tasks.scoring.store import local_outputs

ITEMS_FILE = "items.js"


@dataclass(frozen=True)
class ReportSettings:
    """What the report shows besides the result dirs."""

    dataset: str | None = None  # questions, answers and question audio: a build dir, "demo" or a Hub id
    baseline: str | None = None  # model the others are compared with (paired CI + McNemar)
    title: str = "CS3-Bench report"


def dataset_items(set_name: str, location: str, out: Path) -> dict[str, dict]:
    """Question rows of one set (with question audio written under OUT when the dataset has it)."""
    if Path(location).is_file():  # one source JSON file: questions without audio
        return items.question_rows(data.load_docs(set_name, location))
    try:
        dataset = data.load_set(set_name, location)
    except Exception:  # noqa: BLE001 - not a build with audio: the authors' source dir
        return items.question_rows(data.load_docs(set_name, location))
    rows = items.question_rows([{k: v for k, v in r.items() if k != "audio"} for r in dataset])
    if "audio" in dataset.column_names:
        items.write_question_audio(rows, set_name, dataset.select_columns(["Qid", "audio"]), out)
    return rows


def set_questions(
    set_name: str, results: Mapping[str, ModelResults], given: str | None, out: Path
) -> tuple[dict[str, dict], str | None]:
    """The questions of one set from the dataset its runs were scored on (`questions.find_docs`), and a
    note when they are not shown or not the runs' own."""
    identities = [
        entry.settings[set_name]["dataset_sha256"]
        for entry in results.values()
        if (entry.settings.get(set_name) or {}).get("dataset_sha256")
    ]
    location, note = questions.find_docs(set_name, given, identities)
    if location is None:
        return {}, note
    try:
        return dataset_items(set_name, location, out), note
    except Exception as exc:  # noqa: BLE001 - the report is still useful without the questions
        return {}, f"{set_name}: questions not shown ({type(exc).__name__}: {exc})"


def report_data(
    results: Mapping[str, ModelResults], out: Path, settings: ReportSettings
) -> tuple[dict, list[str]]:
    """The JSON of items.js and the notes about what could not be shown."""
    scored_sets = [s for s in SETS if any(s in r.records for r in results.values())]
    shown, notes, question_notes = {}, [], {}
    for set_name in scored_sets:
        shown[set_name], note = set_questions(set_name, results, settings.dataset, out)
        if note:
            notes.append(note)
            question_notes[set_name] = note  # said in the Items view, above the set's table
    answers = {
        name: {
            s: [
                items.item_row(
                    r, items.place_response_audio(r, local_outputs(entry.result_dirs[s]), out, name, s)
                )
                for r in records
            ]
            for s, records in entry.records.items()
        }
        for name, entry in results.items()
    }
    data = {
        "models": list(results),
        "sets": scored_sets,
        "channels": list(CHANNELS),
        "categories": list(CATEGORIES),
        "statuses": list(STATUSES),
        "baseline": settings.baseline,
        "questions": shown,
        "question_notes": question_notes,
        "answers": answers,
    }
    return data, notes


def _asset(name: str) -> str:
    return resources.files("cs3_tasks.report").joinpath("assets", name).read_text(encoding="utf-8")


def render_index(results: Mapping[str, ModelResults], settings: ReportSettings, notes: Sequence[str]) -> str:
    rows = leaderboard_rows(summaries_of(results))
    versus = baseline_comparisons(results, settings.baseline) if settings.baseline else {}
    slots = {
        "title": escape(settings.title),
        "css": _asset("report.css"),
        "js": _asset("report.js"),
        "leaderboard": tables.leaderboard_table(rows, results, versus),
        "baseline": tables.baseline_table(settings.baseline, versus) if settings.baseline else "",
        "cs_vs_en": tables.cs_vs_en_table(results),
        "notes": tables.notes_list(results, notes),
        "items_file": ITEMS_FILE,
    }
    page = _asset("report.html")
    for name, value in slots.items():
        page = page.replace(f"<!--slot:{name}-->", value)
    return page


def write_html_report(out: Path, result_dirs: Sequence[Path], settings: ReportSettings | None = None) -> Path:
    """Write the report folder for the result dirs; returns OUT/index.html. Raises FileNotFoundError /
    ValueError (named dir or file) on unreadable results; nothing outside OUT is touched."""
    settings = settings or ReportSettings()
    out = Path(out)
    results = load_results(result_dirs)
    out.mkdir(parents=True, exist_ok=True)
    data, notes = report_data(results, out, settings)
    payload = json_text(data, separators=(",", ":"), allow_nan=False)
    # parsed as JSON, not as a JS object literal, in which a key "__proto__" (a Qid, a model name) would set
    # the object's prototype instead of holding its item
    atomic_write(out / ITEMS_FILE, f"window.CS3_ITEMS=JSON.parse({json_text(payload)});\n")
    index = out / "index.html"
    atomic_write(index, render_index(results, settings, notes))
    return index


def write_report_quietly(out: Path, result_dirs: Sequence[Path], dataset: str | None) -> None:
    """For the commands that write a report after their main job (demo, score --outputs-root): a report
    that cannot be written is an error message, never a lost result. ``dataset``: what the scores were
    computed on (None: the default dataset, as `core.data.dataset_location` resolves it)."""

    if not result_dirs:
        return
    try:
        index = write_html_report(out, result_dirs, ReportSettings(dataset=dataset_location(dataset)))
    except Exception as exc:  # noqa: BLE001 - the scores are already written
        print(f"error: the HTML report was not written ({type(exc).__name__}: {exc})", file=sys.stderr)
        return
    print(f"wrote the HTML report {index}", file=sys.stderr)
