"""Summaries of scored records: headline rates with 95% CIs and every count needed to audit them, the
code-switched vs English comparison, and their markdown rendering.

`summarize` reads the records of one set (``cs3_tasks.scoring.records``' schema); `compare_cs_en` needs the
summaries of both knowledge sets, so it is attached where both are known (`attach_cs_vs_en`): by
``cs3-bench score`` once both sets of a result dir are scored (whichever ran first), by the lm-eval
result writer (``evaluate.write_scored_dir``) and by the leaderboard (``report``).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from cs3_tasks.core import metrics
from cs3_tasks.core.cache import atomic_write
from cs3_tasks.core.data import KNOWLEDGE_SETS, check_set
from cs3_tasks.core.statefile import check_state_file, read_state_text
from cs3_tasks.judge import is_dated_snapshot, redact, undated_judge_note
from cs3_tasks.scoring.cs_vs_en import GAP_KEYS, compare_cs_en, gap_entry
from cs3_tasks.scoring.formatting import format_entry
from cs3_tasks.scoring.protocols import Protocol, protocol_for
from cs3_tasks.scoring.records import (
    ASPECTS,
    CHANNELS,
    STATUSES,
    UNNAMED_PROTOCOL,
    judge_answered_models,
    judge_ran,
    sample_spreads,
)

# the two sets compared by `compare_cs_en`: (code-switched, English twin)
CS_EN_PAIR = ("knowledge", "knowledge_en")


def _psr(records: Sequence[dict]) -> dict:
    """PSR: headline = micro (sum recognised / sum total) over items with English words in the text response.

    `metrics.pronunciation_success_rate` gives the counts, the macro mean (kept as "macro") and the micro
    ratio with its item-level bootstrap CI (the words of one answer are not independent).
    """

    counts = [(r["psr_recognised"], r["psr_total"]) for r in records if r.get("psr_total") is not None]
    entry = metrics.pronunciation_success_rate(counts)
    entry["macro"] = entry["value"]
    entry["macro_ci"] = [entry["ci_low"], entry["ci_high"]]
    entry["value"], entry["ci_low"], entry["ci_high"] = (
        entry["micro"],
        entry["micro_ci_low"],
        entry["micro_ci_high"],
    )
    entry["n_excluded_no_english"] = sum(1 for _, total in counts if total <= 0)
    return entry


def _channel_summary(set_name: str, records: Sequence[dict], ch: str, protocol: Protocol) -> dict | None:

    applicable = [r for r in records if (r["text"] if ch == "text" else r["audio"]) is not None]
    if not applicable:
        return None  # text-only model (speech) or no text at all: not applicable, never 0
    summary: dict[str, Any] = {}
    if set_name in KNOWLEDGE_SETS:
        # None = not in the rate but in its bounds (judge_error, missing); unresolved items are False
        summary["accuracy"] = metrics.rate([r[f"{ch}_correct"] for r in records])
        statuses = Counter(r[f"{ch}_status"] for r in records)
        summary["status_counts"] = {s: statuses.get(s, 0) for s in STATUSES}
        summary["n_judge_error"] = statuses.get("judge_error", 0)  # a missing verdict: in the bounds
        summary["n_unresolved"] = statuses.get("unresolved", 0)  # counted as not correct
        summary["n_missing"] = statuses.get("missing", 0)  # no response on this channel: in the bounds
        summary["n_empty"] = statuses.get("empty", 0)  # counted as not correct: the model said nothing
        with_bounds(summary["accuracy"], summary["n_judge_error"] + summary["n_missing"])
        categories = sorted({r["category"] for r in records if r["category"] is not None})
        summary["by_category"] = {}
        for category in categories:
            in_cat = [r for r in records if r["category"] == category]
            entry = metrics.rate([r[f"{ch}_correct"] for r in in_cat])
            entry["n_judge_error"] = sum(1 for r in in_cat if r[f"{ch}_status"] == "judge_error")
            entry["n_unresolved"] = sum(1 for r in in_cat if r[f"{ch}_status"] == "unresolved")
            entry["n_missing"] = sum(1 for r in in_cat if r[f"{ch}_status"] == "missing")
            with_bounds(entry, entry["n_judge_error"] + entry["n_missing"])
            summary["by_category"][category] = entry
        n_missing = summary["n_missing"]
    else:
        relevance = [r[f"{ch}_relevance"] for r in applicable]
        summary["understanding_rate"] = protocol.understanding_rate(relevance)
        summary["mean_relevance"] = metrics.mean_score([r[f"{ch}_relevance"] for r in applicable])
        summary["mean_semantic"] = metrics.mean_score([r[f"{ch}_semantic"] for r in applicable])
        summary["n_relevance_error"] = sum(1 for r in records if r[f"{ch}_relevance_error"])
        summary["n_semantic_error"] = sum(1 for r in records if r[f"{ch}_semantic_error"])
        summary["n_unscored"] = sum(
            1 for r in applicable if r[f"{ch}_relevance"] is None and not r[f"{ch}_relevance_error"]
        )
        n_missing = summary["n_missing"] = sum(1 for r in records if channel_response(r, ch) is None)
        # without a judge there is no rate to bound: the items without a response change nothing
        judged = judge_ran(records, ch)
        n_unjudged = n_missing if judged else 0
        with_bounds(summary["understanding_rate"], summary["n_relevance_error"] + n_unjudged)
        with_bounds(summary["mean_relevance"], summary["n_relevance_error"] + n_unjudged, worst=1.0, best=5.0)
        with_bounds(summary["mean_semantic"], summary["n_semantic_error"] + n_unjudged, worst=1.0, best=5.0)
        summary.update(judge_sample_spread(applicable, {a: f"{ch}_{a}" for a in ASPECTS}))
    summary["lsa"] = with_bounds(metrics.rate([r[f"{ch}_lsa"] for r in applicable]), n_missing)
    summary["language_counts"] = dict(
        Counter(r[f"{ch}_language"] for r in records if r[f"{ch}_language"] is not None)
    )
    return summary


def judge_sample_spread(records: Sequence[Mapping], scores: Mapping[str, str]) -> dict:
    """``{"judge_samples": {"k", "mean_spread": {name: mean max - min with its CI}}}`` when the scores (name
    -> record prefix, e.g. "relevance" -> "speech_relevance") were asked k > 1 times (`--judge-samples`);
    ``{}`` otherwise, so a one-ask summary is what it always was."""
    ks = {
        len(r[f"{prefix}_samples"]["values"])
        for r in records
        for prefix in scores.values()
        if isinstance(r.get(f"{prefix}_samples"), Mapping)
    }
    if not ks:
        return {}
    spreads = {name: metrics.mean_score(sample_spreads(records, prefix)) for name, prefix in scores.items()}
    return {"judge_samples": {"k": max(ks), "mean_spread": spreads}}


def channel_response(record: Mapping, ch: str) -> str | None:
    """What a channel scores: the text response, or the transcript of the spoken one (None: no response
    on the channel: no output, unreadable output, TTS or ASR failure)."""
    return record["text"] if ch == "text" else record["transcript"]


def with_bounds(entry: dict, n_missing: int, *, worst: float = 0.0, best: float = 1.0) -> dict:
    """Mark a rate (or mean score) with the verdicts it lacks: ``complete`` (no verdict missing),
    ``n_missing_verdict`` and ``bounds`` = [all missing ones ``worst``, all ``best``] (None without data).

    A missing verdict is not an excluded item. The items that reach the judge are those the keyword stage
    rejected, and the items without a response (generation, TTS or ASR failed) are often the hard ones, so a
    rate over the rest alone is biased upward."""
    n, value = entry.get("n") or 0, entry.get("value")
    entry["complete"] = n_missing == 0
    entry["n_missing_verdict"] = n_missing
    if n + n_missing == 0:
        entry["bounds"] = None
    else:
        total = (value or 0.0) * n
        entry["bounds"] = [
            (total + worst * n_missing) / (n + n_missing),
            (total + best * n_missing) / (n + n_missing),
        ]
    return entry


def missing_responses(summary: Mapping) -> tuple[int, int]:
    """(items without a response on the channel that lacks the most, items) of a `summarize` output."""
    missing = [(summary.get(ch) or {}).get("n_missing", 0) for ch in CHANNELS]
    return max(missing), summary["n_items"]


def item_counts(records: Sequence[dict], *, noun: str = "Qid") -> tuple[list[dict], dict]:
    """The scorable records (all but those of unknown ids) and the counts every summary reports:
    records, items, unknown ids (``n_unknown_<noun>``), items without output, with problems, ASR errors."""
    scorable = [r for r in records if not (r["problem"] or "").startswith(f"unknown {noun}")]
    return scorable, {
        "n_records": len(records),
        "n_items": len(scorable),
        f"n_unknown_{noun.lower()}": len(records) - len(scorable),
        "n_no_output": sum(1 for r in scorable if r["text"] is None and r["audio"] is None),
        "n_problems": sum(1 for r in records if r["problem"]),
        "n_asr_error": sum(1 for r in records if r["asr_error"]),
    }


def summarize(set_name: str, records: Sequence[dict], protocol: str | None = None) -> dict:
    """Headline rates with 95% CIs, per Category, and every count needed to audit them.

    ``protocol``: the records' (their "protocol" key; without one: `UNNAMED_PROTOCOL`). The protocol adds its
    own aggregation (`Protocol.finish_channel`; reference: the authors' bounds, ``complete``, the count of
    unparsed verdicts).
    """

    check_set(set_name)
    if protocol is None:
        protocol = next((r.get("protocol") for r in records if r.get("protocol")), UNNAMED_PROTOCOL)
    scoring = protocol_for(protocol)
    scorable, counts = item_counts(records)
    channels = {ch: _channel_summary(set_name, scorable, ch, scoring) for ch in CHANNELS}
    for ch in CHANNELS:
        scoring.finish_channel(set_name, scorable, ch, channels[ch])
    return {
        "set": set_name,
        "protocol": scoring.name,
        **scoring.summary_fields(channels),
        **counts,
        "text": channels["text"],
        "speech": channels["speech"],
        "psr": _psr(scorable),
        # mean of per-item rates over items that have one (English WER: text response has English words)
        "english_wer": metrics.mean_score(
            [r["english_wer"] for r in scorable if r["english_wer"] is not None]
        ),
        "mixed_error_rate": metrics.mean_score(
            [r["mixed_error_rate"] for r in scorable if r["mixed_error_rate"] is not None]
        ),
        # the model ids the judge API answered with, per verdict (the model asked for is in settings)
        "judge_answered_models": judge_answered_models(scorable),
    }


def add_comparability(summary: dict, settings: Mapping) -> dict:
    """Say in ``summary`` whether its numbers are comparable with the paper (reference protocol: judge
    qwen-max-2025-01-25, pinned scripts, speech transcribed by Whisper-large-v3 through transformers), from
    the run's settings (`scoring.run_settings`); ``notes`` lists what is not: a judge that answered as
    another model than asked, a judge named by an undated alias (`judge.is_dated_snapshot`), and transcripts
    that depend on the machine (ASR numerics native)."""
    protocol_for(settings.get("protocol") or UNNAMED_PROTOCOL).add_comparability(summary, settings)
    judge = settings.get("judge") or {}
    answered = sorted(set(summary.get("judge_answered_models") or {}) - {judge.get("model"), "unknown"})
    if answered:  # the endpoint served another model than the one asked for (an alias, a redirect)
        summary["comparable_to_paper"] = {ch: False for ch in summary.get("comparable_to_paper") or CHANNELS}
        summary["notes"] = [
            *(summary.get("notes") or []),
            f"the judge answered as {', '.join(answered)}, not as the {judge.get('model')} asked for: its "
            "verdicts are that model's",
        ]
    if judge and not is_dated_snapshot(judge.get("model")):  # an alias: its weights may change any day
        summary["comparable_to_paper"] = {ch: False for ch in summary.get("comparable_to_paper") or CHANNELS}
        summary["notes"] = [*(summary.get("notes") or []), undated_judge_note(str(judge.get("model")))]
    asr = settings.get("asr") or {}
    if asr.get("numerics") == "native":  # asr.numerics: the arithmetic followed this machine's CPU
        summary["notes"] = [
            *(summary.get("notes") or []),
            f"transcripts depend on this machine: {asr.get('backend')} ran on its own code paths "
            f"({asr.get('device')}, numerics native); another machine may transcribe some clips otherwise",
        ]
    return summary


# ---------------------------------------------------------------------------------------------
# markdown


def summary_markdown(summary: Mapping) -> str:
    """A markdown rendering of `summarize` output (95% CIs in brackets)."""
    set_name = summary["set"]
    lines = [
        f"# {summary.get('model') or 'model'}: {set_name}",
        "",
        (
            f"items: {summary['n_items']}, no output: {summary['n_no_output']}, unknown Qids: "
            f"{summary['n_unknown_qid']}, items with problems: {summary['n_problems']}, "
            f"ASR errors: {summary['n_asr_error']}"
        ),
        "",
    ]
    header = f"protocol: {summary.get('protocol', 'cs3')}"
    if "complete" in summary:  # a protocol that says whether every verdict is known (reference)
        header += (
            ", complete"
            if summary["complete"]
            else (
                ", INCOMPLETE (judge errors or items without a response: value over the known verdicts, "
                "[low, high] bounds the number over every item)"
            )
        )
    if summary.get("n_judge_unparsed"):
        header += (
            f"; {summary['n_judge_unparsed']} of {summary['n_judge_verdicts']} judge verdicts UNPARSED (no "
            "reply held a verdict in 10 asks: counted wrong, as the authors' code does)"
        )
    lines += [header, *(f"- note: {n}" for n in summary.get("notes") or []), ""]
    if set_name in KNOWLEDGE_SETS:
        lines += [
            (
                "| channel | accuracy [95% CI] | n | judge_error (no verdict) | unresolved | empty (wrong) "
                "| missing (no response) | LSA |"
            ),
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for ch in CHANNELS:
            s = summary.get(ch)
            if s is None:
                lines.append(f"| {ch} | n/a | 0 | | | | | n/a |")
                continue
            lines.append(
                f"| {ch} | {format_entry(s['accuracy'])} | {s['accuracy']['n']} | {s['n_judge_error']} | "
                f"{s['n_unresolved']} | {s['n_empty']} | {s['n_missing']} | {format_entry(s['lsa'])} |"
            )
        categories = sorted(
            {c for ch in CHANNELS for c in ((summary.get(ch) or {}).get("by_category") or {})}
        )
        if categories:
            lines += ["", "| category | text accuracy | speech accuracy |", "| --- | --- | --- |"]
            for c in categories:
                cells = [
                    format_entry(((summary.get(ch) or {}).get("by_category") or {}).get(c)) for ch in CHANNELS
                ]
                lines.append(f"| {c} | {cells[0]} | {cells[1]} |")
    else:
        lines += [
            "| channel | understanding rate | mean relevance | mean semantic | judge errors | LSA |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for ch in CHANNELS:
            s = summary.get(ch)
            if s is None:
                lines.append(f"| {ch} | n/a | n/a | n/a | | n/a |")
                continue
            errors = s["n_relevance_error"] + s["n_semantic_error"]
            lines.append(
                f"| {ch} | {format_entry(s['understanding_rate'])} "
                f"| {format_entry(s['mean_relevance'], False)} | {format_entry(s['mean_semantic'], False)} "
                f"| {errors} | {format_entry(s['lsa'])} |"
            )
    lines += sample_lines(summary)
    psr = summary["psr"]
    lines += [
        "",
        "| PSR | English WER | mixed error rate |",
        "| --- | --- | --- |",
        (
            f"| {format_entry(psr)} ({psr['recognised']}/{psr['words']} words; "
            f"{psr['n_excluded_no_english']} items without English words excluded) | "
            f"{format_entry(summary['english_wer'], False)} | "
            f"{format_entry(summary['mixed_error_rate'], False)} |"
        ),
    ]
    comparison = summary.get("cs_vs_en")
    if comparison:
        lines += [
            "",
            "| channel | acc cs | acc en | drop (abs) | drop (rel) | preserve |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for ch in CHANNELS:
            cells = [format_entry(gap_entry(comparison[ch], k)) for k in GAP_KEYS]
            lines.append(f"| {ch} | " + " | ".join(cells) + " |")
    lines += settings_lines(summary)
    return "\n".join(lines) + "\n"


def sample_lines(summary: Mapping) -> list[str]:
    """The spread of scores asked k times (``judge_samples``), per channel, for the markdown."""
    lines = []
    for ch in CHANNELS:
        sampled = (summary.get(ch) or {}).get("judge_samples")
        if sampled:
            spreads = ", ".join(
                f"{name} {format_entry(entry, False)}" for name, entry in sampled["mean_spread"].items()
            )
            lines.append(
                f"- {ch}: each score is the median of {sampled['k']} asks; mean spread (max - min): {spreads}"
            )
    return ["", *lines] if lines else []


def settings_lines(summary: Mapping) -> list[str]:
    """The judge a summary was made with, for the markdown (its URL through `judge.redact`)."""

    judge = (summary.get("settings") or {}).get("judge")
    if not isinstance(judge, Mapping):
        return []
    return ["", f"judge: {judge.get('model')} at {redact(str(judge.get('base_url')))}"]


def attach_cs_vs_en(summaries: MutableMapping[str, dict]) -> dict | None:
    """Add the cs-vs-en comparison (``cs_vs_en``) to both knowledge summaries when both are present.

    Returns the comparison, or None (and changes nothing) when one of the two sets is absent.
    """
    cs_name, en_name = CS_EN_PAIR
    if not summaries.get(cs_name) or not summaries.get(en_name):
        return None
    comparison = compare_cs_en(summaries[cs_name], summaries[en_name])
    summaries[cs_name]["cs_vs_en"] = summaries[en_name]["cs_vs_en"] = comparison
    return comparison


def summary_paths(out: Path, set_name: str) -> tuple[Path, Path]:
    """Where a set's summary lives in a result dir: ``<set>.summary.json`` and ``<set>.summary.md``."""
    return Path(out) / f"{set_name}.summary.json", Path(out) / f"{set_name}.summary.md"


def read_summary(out: Path, set_name: str) -> dict | None:
    """The set's summary in a result dir, or None when it was not scored there."""
    path = summary_paths(out, set_name)[0]
    return json.loads(read_state_text(path)) if check_state_file(path) else None


def write_summary(out: Path, summary: Mapping) -> str:
    """Write ``<set>.summary.json`` and ``.summary.md`` atomically; returns the markdown."""

    json_path, md_path = summary_paths(out, summary["set"])
    markdown = summary_markdown(summary)
    atomic_write(json_path, json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    atomic_write(md_path, markdown)
    return markdown
