"""How much one system's numbers depend on the ASR and the judge: two runs of the SAME outputs, scored with
other ASR or judge settings, compared item by item.

`sensitivity_or_refusal(a, b)` decides what two loaded runs are. The same outputs (each Qid's record computed
from the same output and dataset item: its ``input_key``, or its text and audio label when a record has none)
scored with settings that differ only in how the speech was heard or the answers judged (differences of kind
"asr" or "judge": `report.comparable`, the one comparison of two runs' settings) give a `SensitivityView`. The
same outputs scored under another dataset or protocol, and other outputs scored with other ASR or judge
settings, are refused (`SensitivityRefusal`, naming the fields or the Qids). Other outputs under the same ASR
and judge are two systems: None (`report.compare` pairs them).

Per set and channel the view gives: the transcripts that differ, the verdicts that flipped each way (right ->
wrong, wrong -> right, to and from a missing verdict), Cohen's kappa of the verdicts (`core.agreement`), the
paired difference B - A with its bootstrap CI and exact McNemar p (`core.paired`), and the change of the rate
(accuracy; open_ended: understood), LSA and PSR; and the items that changed. Open-ended verdicts are
"understood" (relevance > 3).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cs3_tasks.core.agreement import cohen_kappa
from cs3_tasks.core.data import KNOWLEDGE_SETS, SETS
from cs3_tasks.core.paired import paired_difference
from cs3_tasks.core.refusal import Refusal
from cs3_tasks.report.comparable import SCORING, SettingDifference, changes, run_differences
from cs3_tasks.report.compare import points
from cs3_tasks.report.results import ModelResults
from cs3_tasks.scoring.records import CHANNELS
from cs3_tasks.scoring.store import INPUT_KEY

SHOWN_QIDS = 5  # Qids named in a refusal
CELL_CHARACTERS = 200  # of a transcript in the markdown view (the HTML page shows more, the records all)


class SensitivityRefusal(Refusal):
    """Two runs that are neither the same outputs under other ASR or judge settings nor two systems under the
    same settings; the message names the fields or the Qids that differ."""


@dataclass
class SensitivityView:
    """One system's outputs scored twice (run A, run B): what changed, per set and channel, and the items."""

    name_a: str
    name_b: str
    differences: list[str]  # "field: A -> B" of the settings that differ, each once
    rows: list[dict] = field(default_factory=list)  # one per set and channel
    items: list[dict] = field(default_factory=list)  # one per set, channel and Qid that changed
    only_one: list[str] = field(default_factory=list)  # sets scored in one run only


def _by_qid(records: Sequence[Mapping]) -> dict[str, Mapping]:
    found: dict[str, Mapping] = {}
    for record in records:
        found.setdefault(str(record.get("qid")), record)
    return found


def changed_outputs(a: Sequence[Mapping], b: Sequence[Mapping]) -> list[str]:
    """The Qids whose records were not computed from the same output (and dataset item): only in one run, or
    another ``input_key`` (without one on either side: another text or audio label)."""
    by_a, by_b = _by_qid(a), _by_qid(b)
    changed = [q for q in by_a if q not in by_b] + [q for q in by_b if q not in by_a]
    for qid in (q for q in by_a if q in by_b):
        ra, rb = by_a[qid], by_b[qid]
        if ra.get(INPUT_KEY) and rb.get(INPUT_KEY):
            same = ra[INPUT_KEY] == rb[INPUT_KEY]
        else:
            same = (ra.get("text"), ra.get("audio")) == (rb.get("text"), rb.get("audio"))
        if not same:
            changed.append(qid)
    return changed


def sensitivity_or_refusal(a: ModelResults, b: ModelResults) -> SensitivityView | None:
    """The sensitivity view of two runs of the same outputs that differ only in ASR or judge settings (or in
    none); None for two systems scored alike (other outputs, the same ASR and judge); SensitivityRefusal for
    anything else, naming the fields (dataset, protocol, ...) or the Qids whose outputs differ."""
    shared = [s for s in SETS if s in a.records and s in b.records]
    if not shared:
        raise SensitivityRefusal(f"{a.name} and {b.name} share no scored set")
    differences = run_differences(a, b)
    other = [d for d in differences if d.kind == SCORING]
    changed = {s: q for s in shared if (q := changed_outputs(a.records[s], b.records[s]))}
    if not changed:
        if other:
            raise SensitivityRefusal(
                f"the two runs hold the same outputs of {a.name} scored with other settings than ASR and "
                f"judge ({'; '.join(changes(other))}): a sensitivity view compares ASR and judge settings "
                "only; score both with the same dataset and protocol"
            )
        return _view(a, b, shared, differences)
    measured = [d for d in differences if d.kind != SCORING]
    if measured:
        named = "; ".join(
            f"{s}: {len(q)} ({', '.join(q[:SHOWN_QIDS])}{', ...' if len(q) > SHOWN_QIDS else ''})"
            for s, q in changed.items()
        )
        fields = ", ".join(dict.fromkeys(d.field for d in differences))
        raise SensitivityRefusal(
            f"the ASR or judge settings differ ({fields}), but so do the outputs scored, items "
            f"{named}: a sensitivity view needs the same outputs scored twice, a comparison of two systems "
            "the same settings"
        )
    return None


def _view(
    a: ModelResults, b: ModelResults, shared: list[str], differences: Sequence[SettingDifference]
) -> SensitivityView:
    view = SensitivityView(a.name, b.name, changes(differences))
    view.only_one = [s for s in SETS if (s in a.records) != (s in b.records)]
    for set_name in shared:
        by_a, by_b = _by_qid(a.records[set_name]), _by_qid(b.records[set_name])
        for ch in CHANNELS:
            row, items = _channel(set_name, ch, by_a, by_b)
            row.update(_metrics(set_name, ch, a.summaries.get(set_name), b.summaries.get(set_name)))
            view.rows.append(row)
            view.items += items
    return view


def verdict_of(set_name: str, ch: str, record: Mapping) -> bool | None:
    """The item's verdict on a channel: right (knowledge) or understood (open_ended); None: no verdict."""
    value = record.get(f"{ch}_correct" if set_name in KNOWLEDGE_SETS else f"{ch}_understood")
    return None if value is None else bool(value)


def verdict_label(set_name: str, ch: str, record: Mapping) -> str:
    """A verdict as people read it: "right (keyword)", "wrong (judge_wrong)", "no verdict (judge_error)",
    "understood (relevance 4, semantic 3)"."""
    verdict = verdict_of(set_name, ch, record)
    if set_name in KNOWLEDGE_SETS:
        word = {True: "right", False: "wrong", None: "no verdict"}[verdict]
        return f"{word} ({record.get(f'{ch}_status')})"
    error = record.get(f"{ch}_relevance_error") or record.get(f"{ch}_semantic_error")
    if verdict is None and not error:  # no judge ran, or the channel has no response
        heard = record.get("text" if ch == "text" else "transcript")
        return "no verdict (" + ("not judged" if heard is not None else "no response") + ")"
    word = {True: "understood", False: "not understood", None: "no verdict"}[verdict]
    scores = ", ".join(f"{a} {record.get(f'{ch}_{a}')}" for a in ("relevance", "semantic"))
    return f"{word} ({scores}{'; ' + str(error) if error else ''})"


def _channel(
    set_name: str, ch: str, by_a: Mapping[str, Mapping], by_b: Mapping[str, Mapping]
) -> tuple[dict, list[dict]]:
    qids = [q for q in by_a if q in by_b]
    va = {q: verdict_of(set_name, ch, by_a[q]) for q in qids}
    vb = {q: verdict_of(set_name, ch, by_b[q]) for q in qids}
    flips = {
        "right_to_wrong": [q for q in qids if va[q] is True and vb[q] is False],
        "wrong_to_right": [q for q in qids if va[q] is False and vb[q] is True],
        "to_missing": [q for q in qids if va[q] is not None and vb[q] is None],
        "from_missing": [q for q in qids if va[q] is None and vb[q] is not None],
    }
    heard = (
        [q for q in qids if by_a[q].get("transcript") != by_b[q].get("transcript")] if ch == "speech" else []
    )
    scores = [
        q
        for q in qids
        if set_name not in KNOWLEDGE_SETS
        and any(by_a[q].get(f"{ch}_{k}") != by_b[q].get(f"{ch}_{k}") for k in ("relevance", "semantic"))
    ]
    row = {
        "set": set_name,
        "channel": ch,
        "n_items": len(qids),
        "transcripts_differ": len(heard) if ch == "speech" else None,
        "scores_differ": len(scores) if set_name not in KNOWLEDGE_SETS else None,
        **{name: len(found) for name, found in flips.items()},
        "kappa": cohen_kappa(va, vb),
        "paired": paired_difference(vb, va),  # B - A over the items decided in both
    }
    listed = set(heard) | set(scores) | {q for q in qids if va[q] != vb[q]}
    items = [
        {
            "set": set_name,
            "channel": ch,
            "qid": q,
            "text": by_a[q].get("text"),
            "audio": by_a[q].get("audio"),
            "transcript_a": by_a[q].get("transcript"),
            "transcript_b": by_b[q].get("transcript"),
            "verdict_a": verdict_label(set_name, ch, by_a[q]),
            "verdict_b": verdict_label(set_name, ch, by_b[q]),
            "flipped": va[q] != vb[q],
        }
        for q in qids
        if q in listed
    ]
    return row, items


def _value(summary: Mapping | None, *path: str) -> float | None:
    entry: Any = summary or {}
    for key in path:
        entry = (entry or {}).get(key) if isinstance(entry, Mapping) else None
    return entry.get("value") if isinstance(entry, Mapping) else None


def _metrics(set_name: str, ch: str, a: Mapping | None, b: Mapping | None) -> dict:
    """(A, B) of the set's summary rates on this channel: the rate (accuracy, or understood), LSA, and PSR
    on the speech channel."""
    rate = ("accuracy",) if set_name in KNOWLEDGE_SETS else ("understanding_rate",)
    found = {
        "rate": (_value(a, ch, *rate), _value(b, ch, *rate)),
        "lsa": (_value(a, ch, "lsa"), _value(b, ch, "lsa")),
    }
    if ch == "speech":
        found["psr"] = (_value(a, "psr"), _value(b, "psr"))
    return found


def _cell(value: Any) -> str:
    """A markdown cell of any text (a transcript): "|" and line breaks would end the cell; a text longer than
    `CELL_CHARACTERS` (an ASR loop, a 10 MB response) is cut there and says how long it was."""
    if value is None:
        return "(none)"
    text = str(value)
    if len(text) > CELL_CHARACTERS:
        text = f"{text[:CELL_CHARACTERS]}... ({len(text):,} characters)"
    return " ".join(text.replace("\\", "\\\\").replace("|", "\\|").splitlines()) or '""'


def change_text(pair: tuple[float | None, float | None], arrow: str = "->") -> str:
    """A rate of run A and run B in percent, and B - A in points: ``25.0 -> 29.2 (+4.2)``."""
    a, b = pair
    if a is None and b is None:
        return ""
    shown = [("n/a" if v is None else f"{100 * v:.1f}") for v in (a, b)]
    delta = "" if a is None or b is None else f" ({points(b - a)})"
    return f"{shown[0]} {arrow} {shown[1]}{delta}"


def paired_texts(paired: Mapping) -> tuple[str, str]:
    """The paired difference B - A with its CI (``+4.2 [+0.0, +12.5]``) and McNemar p, as shown ("n/a"
    without an item decided in both runs)."""
    difference = (
        "n/a"
        if paired["difference"] is None
        else f"{points(paired['difference'])} [{points(paired['ci_low'])}, {points(paired['ci_high'])}]"
    )
    return difference, "n/a" if paired["mcnemar_p"] is None else f"{paired['mcnemar_p']:.3g}"


def sensitivity_markdown(view: SensitivityView, label_a: str = "A", label_b: str = "B") -> str:
    """The view as markdown: the settings that differ, a table per set and channel, the items that changed."""
    names = view.name_a if view.name_a == view.name_b else f"{view.name_a} (A) and {view.name_b} (B)"
    lines = [
        f"Sensitivity of {names}: the same outputs scored twice, A = {label_a}, B = {label_b}",
        "",
        "Settings that differ (A -> B): " + ("; ".join(view.differences) or "none"),
        "",
        "| set | channel | items | transcripts differ | right -> wrong | wrong -> right | to no verdict "
        "| from no verdict | kappa | rate A -> B | B - A [95% CI] | McNemar p | LSA A -> B | PSR A -> B |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---|---|",
    ]
    for row in view.rows:
        kappa = row["kappa"]["kappa"]
        difference, p = paired_texts(row["paired"])
        rate, lsa, psr = (change_text(row.get(k, (None, None))) for k in ("rate", "lsa", "psr"))
        heard = "" if row["transcripts_differ"] is None else str(row["transcripts_differ"])
        lines.append(
            f"| {row['set']} | {row['channel']} | {row['n_items']} | {heard} | {row['right_to_wrong']} | "
            f"{row['wrong_to_right']} | {row['to_missing']} | {row['from_missing']} | "
            f"{'n/a' if kappa is None else f'{kappa:.3f}'} | {rate} | {difference} | {p} | {lsa} | {psr} |"
        )
    lines += [
        "",
        "rate: accuracy (knowledge sets), understood = relevance > 3 (open_ended); right/wrong of open_ended "
        "read understood/not; kappa: Cohen's kappa of the verdicts over the items with one in both runs; "
        "B - A: paired difference of the rate over those items, in points.",
    ]
    if view.only_one:
        lines += ["", f"Scored in one run only (not compared): {', '.join(view.only_one)}"]
    lines += [
        "",
        f"Items that changed ({len(view.items)}): a transcript, a verdict or a score differs",
        "",
        "| set | Qid | channel | transcript A | transcript B | verdict A | verdict B |",
        "|---|---|---|---|---|---|---|",
    ]
    for item in view.items:
        heard = (
            (_cell(item["transcript_a"]), _cell(item["transcript_b"]))
            if item["channel"] == "speech"
            else ("", "")
        )
        lines.append(
            f"| {item['set']} | {_cell(item['qid'])} | {item['channel']} | {heard[0]} | {heard[1]} | "
            f"{_cell(item['verdict_a'])} | {_cell(item['verdict_b'])} |"
        )
    return "\n".join(lines) + "\n"
