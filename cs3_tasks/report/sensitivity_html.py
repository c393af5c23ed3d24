"""``cs3-bench report A B --sensitivity --html OUT``: the sensitivity view of one system's outputs scored
twice (`report.sensitivity`) as one static page that opens from file://: the settings that differ, the table
per set and channel, and every item that changed with its response audio, both transcripts and both
verdicts. Every value is escaped; the response audio is linked or copied under OUT as the main report does."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from importlib import resources
from pathlib import Path

from cs3_tasks.core.cache import atomic_write
from cs3_tasks.report import items as report_items
from cs3_tasks.report.results import ModelResults, load_results
from cs3_tasks.report.sensitivity import (
    SensitivityRefusal,
    SensitivityView,
    change_text,
    paired_texts,
    sensitivity_or_refusal,
)
from cs3_tasks.scoring.store import local_outputs

ROW_COLUMNS = (
    ("set", "set"),
    ("channel", "channel"),
    ("n_items", "items"),
    ("transcripts_differ", "transcripts differ"),
    ("right_to_wrong", "right → wrong"),
    ("wrong_to_right", "wrong → right"),
    ("to_missing", "to no verdict"),
    ("from_missing", "from no verdict"),
)


def one_system(result_dir: Path) -> ModelResults:
    """The one system a result dir holds (ValueError naming the dir otherwise)."""
    found = load_results([Path(result_dir)])
    if len(found) != 1:
        raise ValueError(f"{result_dir} must hold one system, it holds {len(found)}")
    return next(iter(found.values()))


def _rows_table(view: SensitivityView) -> str:
    head = "".join(f"<th>{escape(title)}</th>" for _, title in ROW_COLUMNS)
    head += "<th>kappa</th><th>rate A → B</th><th>B − A [95% CI]</th><th>McNemar p</th><th>LSA A → B</th>"
    head += "<th>PSR A → B</th>"
    body = []
    for row in view.rows:
        cells = "".join(
            f'<td class="num">{"" if row[key] is None else escape(str(row[key]))}</td>'
            if key not in ("set", "channel")
            else f"<td>{escape(str(row[key]))}</td>"
            for key, _ in ROW_COLUMNS
        )
        kappa = row["kappa"]["kappa"]
        difference, p = paired_texts(row["paired"])
        rate, lsa, psr = (change_text(row.get(k, (None, None)), "→") for k in ("rate", "lsa", "psr"))
        cells += (
            f'<td class="num" data-value="{kappa!r}">{"n/a" if kappa is None else f"{kappa:.3f}"}</td>'
            f'<td>{rate}</td><td>{difference}</td><td class="num">{p}</td><td>{lsa}</td><td>{psr}</td>'
        )
        body.append(f'<tr data-set="{row["set"]}" data-channel="{row["channel"]}">{cells}</tr>')
    return f'<table id="sensitivity"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _items_table(view: SensitivityView, audio: Mapping[tuple[str, str], str | None]) -> str:
    head = (
        "<tr><th>set</th><th>Qid</th><th>channel</th><th>text response</th><th>spoken response</th>"
        "<th>transcript A</th><th>transcript B</th><th>verdict A</th><th>verdict B</th></tr>"
    )
    body = []
    for item in view.items:
        url = audio.get((item["set"], item["qid"]))
        if url:
            player = f'<audio controls preload="none" src="{escape(url)}"></audio>'
        elif item.get("audio"):
            player = f'<span class="small">not on this machine: {escape(str(item["audio"]))}</span>'
        else:
            player = '<span class="none">none</span>'
        speech = item["channel"] == "speech"
        heard = [escape(str(item[k] or "")) if speech else "" for k in ("transcript_a", "transcript_b")]
        mark = ' class="flipped"' if item["flipped"] else ""
        body.append(
            f"<tr{mark}><td>{escape(item['set'])}</td><td>{escape(item['qid'])}</td><td>{item['channel']}</td>"
            f"<td>{escape(str(item.get('text') or ''))}</td><td>{player}</td><td>{heard[0]}</td>"
            f"<td>{heard[1]}</td><td>{escape(item['verdict_a'])}</td><td>{escape(item['verdict_b'])}</td></tr>"
        )
    rows = "".join(body)
    return f'<table id="sensitivity-items" class="items"><thead>{head}</thead><tbody>{rows}</tbody></table>'


def write_sensitivity_report(out: Path, result_a: Path, result_b: Path) -> Path:
    """Write OUT/index.html, the sensitivity view of two runs of the same outputs; returns its path.
    SensitivityRefusal when the runs are not that (e.g. two systems: the main report compares those)."""
    a, b = one_system(result_a), one_system(result_b)
    view = sensitivity_or_refusal(a, b)
    if view is None:
        raise SensitivityRefusal(
            f"{result_a} and {result_b} hold other outputs scored alike: two systems, not one system scored "
            "twice; drop --sensitivity to report them side by side"
        )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    audio = {}
    for item in view.items:
        key = (item["set"], item["qid"])
        if key not in audio:
            outputs = local_outputs(a.result_dirs[item["set"]])
            audio[key] = report_items.place_response_audio(item, outputs, out, a.name, item["set"])
    label_a, label_b = Path(result_a).name, Path(result_b).name
    css = resources.files("cs3_tasks.report").joinpath("assets", "report.css").read_text(encoding="utf-8")
    differences = "".join(f"<li>{escape(text)}</li>" for text in view.differences) or "<li>none</li>"
    only_one = (
        f"<p>Scored in one run only (not compared): {escape(', '.join(view.only_one))}</p>"
        if view.only_one
        else ""
    )
    title = f"CS3-Bench sensitivity: {view.name_a}"
    page = (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{escape(title)}</title>\n'
        f"<style>\n{css}\ntr.flipped td {{ background: #fff6e0; }}\n</style>\n</head>\n<body>\n"
        f"<header><h1>{escape(title)}</h1></header>\n<main>\n"
        f"<p>The same outputs scored twice: A = {escape(label_a)}, B = {escape(label_b)}.</p>\n"
        f'<h2>Settings that differ (A → B)</h2>\n<ul id="differences">{differences}</ul>\n'
        f"<h2>Per set and channel</h2>\n{_rows_table(view)}\n"
        '<p class="legend">rate: accuracy (knowledge sets) or understood, relevance &gt; 3 (open_ended); '
        "kappa: Cohen's kappa of the verdicts over the items with one in both runs; B − A: the paired "
        "difference of the rate over those items, in points, with its bootstrap 95% CI and exact McNemar p."
        f"</p>\n{only_one}"
        f"<h2>Items that changed ({len(view.items)})</h2>\n"
        '<p class="legend">A transcript, a verdict or a score differs; highlighted: the verdict '
        "flipped.</p>\n"
        f"{_items_table(view, audio)}\n</main>\n</body>\n</html>\n"
    )
    index = out / "index.html"
    atomic_write(index, page)
    return index
