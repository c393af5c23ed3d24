"""The static part of the HTML report, rendered here so the first page paints before any script runs: the
leaderboard with CIs, the cs-vs-en table with the paired drop, differences to a baseline, and the notes
(protocol, judge, comparability with the paper). Every value is escaped; numbers carry ``data-value``
(the exact rate) so a test or a script can read them without parsing the text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

from cs3_tasks.asr import describe_fingerprint as describe_asr
from cs3_tasks.report.compare import SIGNIFICANCE, cs_en_drops, points
from cs3_tasks.report.leaderboard import COLUMNS, HEADERS, TEXT_COLUMNS
from cs3_tasks.report.results import ModelResults
from cs3_tasks.scoring.records import CHANNELS

# leaderboard column -> (set, channel) whose summary accuracy holds its CI
ACCURACY_COLUMNS = {
    f"acc_{ch}_{suffix}": (set_name, ch)
    for ch in CHANNELS
    for suffix, set_name in (("cs", "knowledge"), ("en", "knowledge_en"))
}


def _rate_cell(value: float | None, entry: Mapping | None = None, extra: str = "") -> str:
    if value is None:
        return '<td class="na">n/a</td>'
    ci = ""
    if entry and entry.get("ci_low") is not None and entry.get("ci_high") is not None:
        ci = f' <span class="ci">[{100 * entry["ci_low"]:.1f}, {100 * entry["ci_high"]:.1f}]</span>'
    return f'<td class="num" data-value="{value!r}">{100 * value:.1f}{ci}{extra}</td>'


def _difference_mark(row: Mapping | None) -> str:
    """`` <sup>+5.0*</sup>``: the paired difference to the baseline, * when McNemar p < SIGNIFICANCE."""
    if not row or row.get("difference") is None:
        return ""
    star = "*" if row["mcnemar_p"] < SIGNIFICANCE else ""
    title = (
        f"vs baseline: {points(row['difference'])} [{points(row['ci_low'])}, {points(row['ci_high'])}], "
        f"McNemar p={row['mcnemar_p']:.3g}, {row['n_discordant']} discordant of {row['n']}"
    )
    return f' <sup class="vs" title="{escape(title)}">{points(row["difference"])}{star}</sup>'


def leaderboard_table(
    rows: Sequence[dict], results: Mapping[str, ModelResults], baseline_rows: Mapping[str, list[dict]]
) -> str:
    head = "".join(f"<th>{escape(HEADERS[c])}</th>" for c in COLUMNS)
    body = []
    for row in rows:
        model = row["model"]
        versus = {(r["set"], r["channel"]): r for r in baseline_rows.get(model, [])}
        cells = []
        for column in COLUMNS:
            value = row.get(column)
            if column in TEXT_COLUMNS:
                cells.append(f"<td>{escape('' if value is None else str(value))}</td>")
            elif row.get(f"{column}_incomplete"):
                cells.append(f'<td class="incomplete">{escape(row[f"{column}_incomplete"])}</td>')
            elif column in ACCURACY_COLUMNS:
                set_name, ch = ACCURACY_COLUMNS[column]
                summary = results[model].summaries.get(set_name) or {}
                entry = (summary.get(ch) or {}).get("accuracy")
                cells.append(_rate_cell(value, entry, _difference_mark(versus.get((set_name, ch)))))
            else:
                cells.append(_rate_cell(value))
        body.append(f'<tr data-model="{escape(model)}">' + "".join(cells) + "</tr>")
    return f'<table id="leaderboard"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def cs_vs_en_table(results: Mapping[str, ModelResults]) -> str:
    head = (
        "<tr><th>model</th><th>channel</th><th>acc cs</th><th>acc en</th><th>drop (en - cs)</th>"
        "<th>paired 95% CI</th><th>McNemar p</th><th>discordant</th><th>n paired</th></tr>"
    )
    body = []
    for name, entry in results.items():
        for ch, drop in cs_en_drops(entry).items():
            if drop["difference"] is None:
                continue
            body.append(
                f'<tr data-model="{escape(name)}" data-channel="{ch}"><td>{escape(name)}</td><td>{ch}</td>'
                f"{_rate_cell(drop['acc_b'])}{_rate_cell(drop['acc_a'])}"
                f'<td class="num" data-value="{drop["difference"]!r}">{points(drop["difference"])}</td>'
                f"<td>[{points(drop['ci_low'])}, {points(drop['ci_high'])}]</td>"
                f'<td class="num">{drop["mcnemar_p"]:.3g}</td><td class="num">{drop["n_discordant"]}</td>'
                f"{_paired_cell(drop)}</tr>"
            )
    if not body:
        return "<p>No model has both knowledge sets scored.</p>"
    return f'<table id="cs-vs-en"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table>'


def _paired_cell(row: Mapping) -> str:
    """The number of items paired; marked incomplete when items lack a verdict on a side (or a twin): the
    accuracies and the drop of the row are over the paired items only."""
    unpaired = (row.get("n_excluded") or 0) + (row.get("n_only_a") or 0) + (row.get("n_only_b") or 0)
    if not unpaired:
        return f'<td class="num">{row["n"]}</td>'
    return (
        f'<td class="num incomplete">{row["n"]} (incomplete: {unpaired} item{"" if unpaired == 1 else "s"} '
        "without a verdict or a twin, not paired)</td>"
    )


def baseline_table(baseline: str, baseline_rows: Mapping[str, list[dict]]) -> str:
    head = (
        "<tr><th>model</th><th>set</th><th>channel</th><th>difference</th><th>paired 95% CI</th>"
        "<th>McNemar p</th><th>model only / baseline only</th><th>n paired</th></tr>"
    )
    body = []
    for name, rows in baseline_rows.items():
        for r in rows:
            p = "n/a" if r["mcnemar_p"] is None else f"{r['mcnemar_p']:.3g}"
            body.append(
                f"<tr><td>{escape(name)}</td><td>{r['set']}</td><td>{r['channel']}</td>"
                f'<td class="num">{points(r["difference"])}</td>'
                f'<td>[{points(r["ci_low"])}, {points(r["ci_high"])}]</td><td class="num">{p}</td>'
                f'<td class="num">{r["a_only"]} / {r["b_only"]}</td><td class="num">{r["n"]}</td></tr>'
            )
    return (
        f"<h3>Differences to the baseline {escape(baseline)}</h3>"
        f'<table id="baseline"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table>'
    )


def notes_list(results: Mapping[str, ModelResults], extra: Sequence[str] = ()) -> str:
    """Per model and set: protocol, ASR, judge, comparable_to_paper, and the summary's own notes."""
    items = [f"<li>{escape(line)}</li>" for line in extra]
    for name, entry in results.items():
        for set_name, summary in entry.summaries.items():
            settings = summary.get("settings") or {}
            judge = settings.get("judge")
            judge_text = (
                judge.get("model") if isinstance(judge, Mapping) else judge
            ) or "none (keyword stage)"
            comparable = summary.get("comparable_to_paper") or {}
            parts = [
                f"protocol {summary.get('protocol') or 'cs3'}",
                f"ASR {describe_asr(settings.get('asr'))}",
                f"judge {judge_text}",
                "comparable to the paper: "
                + (
                    ", ".join(f"{ch} {'yes' if ok else 'no'}" for ch, ok in comparable.items())
                    or "not stated"
                ),
            ]
            own = "".join(f"<li>{escape(str(note))}</li>" for note in summary.get("notes") or [])
            items.append(
                f"<li><b>{escape(name)}</b> / {escape(set_name)}: {escape('; '.join(parts))}"
                + (f"<ul>{own}</ul>" if own else "")
                + "</li>"
            )
    return f'<ul id="notes">{"".join(items)}</ul>'
