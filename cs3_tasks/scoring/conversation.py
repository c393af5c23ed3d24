"""Spoken-conversation scoring (BELLE-eval-S2S style) for any language pair.

A spoken query goes in; the model answers in text and in speech, in the pair's expected response language
(``belle_s2s_zh2en``: Mandarin query, English answer). Per item and per channel (``text`` = the text
response, ``speech`` = the ASR transcript of the speech response):

* **GPT Score**: the LLM judge's 1-5 score of helpfulness and correctness for the question, in the
  target language (``judge.judge_conversation`` with the pair's ``prompts.conversation`` template);
* **Off-target**: the response's language (`text.response_language` under the pair) is not the expected
  one (`metrics.off_target`);
* **ASR Error Rate** (both channels together): `metrics.mixed_error_rate` of the transcript against the
  text response, tokens = matrix-script characters (or words), embedded-language words and numbers after
  normalisation (for an English answer: the WER over normalised words).

Everything language-specific comes from the `LanguagePair`; the arithmetic is `cs3_tasks.core.metrics`, the
ASR
`cs3_tasks.asr`, the judge `cs3_tasks.judge`: nothing here re-implements a metric. Failures are recorded per
item (``asr_error``, ``{ch}_gpt_score_error``) and excluded from the rates with their count, never scored.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cs3_tasks import judge as judge_module
from cs3_tasks.core import metrics, text
from cs3_tasks.core.languages import load_pair
from cs3_tasks.scoring import pipeline as scoring
from cs3_tasks.scoring.records import CHANNELS, sample_spread, score_value
from cs3_tasks.scoring.summary import format_entry, item_counts, judge_sample_spread, sample_lines

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable

    from cs3_tasks.asr import AsrConfig
    from cs3_tasks.core.languages import LanguagePair
    from cs3_tasks.judge import JudgeConfig
    from cs3_tasks.scoring.outputs import ModelOutput

BELLE_SET = "belle_eval_s2s"
BELLE_PAIR = "zh2en"
# Paper-reported GPT Score (T) on BELLE-eval-S2S, Chinese-to-English (for the README table; not measured
# here).
PAPER_GPT_SCORE_TEXT = {"CSLM": 3.53, "GLM-4-Voice": 1.2}


def doc_id(doc: Mapping) -> str:
    """The item id of a conversation doc (``id``; ``Qid`` accepted too)."""
    value = doc.get("id", doc.get("Qid"))
    if value is None or str(value).strip() == "":
        raise ValueError(f"conversation doc without an id: {dict(doc)!r:.200}")
    return str(value)


def _blank_record(
    set_name: str, pair: LanguagePair, qid: str, question: str | None, problem: str | None
) -> dict:
    record: dict[str, Any] = {
        "qid": qid,
        "set": set_name,
        "pair": pair.name,
        "pair_source": str(pair.source) if pair.source else None,
        "problem": problem,
        "question": question,
        "text": None,
        "audio": None,
        "transcript": None,
        "asr_language": None,
        "asr_error": None,
        "asr_language_hint": pair.asr_language_of(set_name),
        "expected_language": pair.response_language_of(set_name),
        "asr_error_rate": None,
    }
    for ch in CHANNELS:
        record.update(
            {
                f"{ch}_language": None,
                f"{ch}_off_target": None,
                f"{ch}_gpt_score": None,
                f"{ch}_gpt_score_raw": None,
                f"{ch}_gpt_score_error": None,
            }
        )
    return record


# failures worth retrying on a re-run of ``score-conversation``; any other record is final
RETRYABLE_ERRORS = ("asr_error", *(f"{ch}_gpt_score_error" for ch in CHANNELS))


def score_conversation(
    set_name: str,
    docs: Sequence[Mapping],
    outputs: Sequence[ModelOutput],
    pair: LanguagePair | str | None = None,
    *,
    asr: AsrConfig | None = None,
    judge: JudgeConfig | None = None,
    progress: bool = True,
    on_record: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Per-item records of one conversation set: one per doc (in order), then one per unknown id.

    A doc without output gets problem "no output for this id" and no values. ``judge=None`` leaves the
    GPT scores None (``--no-judge``: off-target and ASR error rate are still computed). The pairing of
    outputs with docs and the batched ASR are `cs3_tasks.scoring.pipeline`'s (the same stage as
    ``score_batch``).
    ``on_record`` is called with each record once it is final (the CLI appends it to the records file).
    """

    pair = load_pair(pair)
    expected = pair.response_language_of(set_name)

    def blank(qid: str, doc: Mapping | None, problem: str | None) -> dict:
        return _blank_record(set_name, pair, qid, None if doc is None else doc.get("text"), problem)

    records, pairs = scoring.pair_outputs(set_name, docs, outputs, doc_id=doc_id, blank=blank, noun="id")
    # speech channel: one batched ASR call, with the pair's language hint
    scoring.transcribe_outputs(
        records,
        pairs,
        language=pair.asr_language_of(set_name),
        asr=asr,
        progress=progress,
    )

    for record, (doc, _) in zip(records, pairs):
        if doc is None:
            continue  # an unknown id: kept for the audit, nothing to score it against
        for ch, response in (("text", record["text"]), ("speech", record["transcript"])):
            if response is not None:
                record[f"{ch}_language"] = text.response_language(response, pair)
                record[f"{ch}_off_target"] = metrics.off_target(response, expected, pair)
        if record["text"] is not None and record["transcript"] is not None:
            record["asr_error_rate"] = metrics.mixed_error_rate(record["text"], record["transcript"], pair)

    jobs = []
    if judge is not None:
        jobs = [
            (i, ch)
            for i, (doc, _) in enumerate(pairs)
            if doc is not None
            for ch in CHANNELS
            if records[i]["text" if ch == "text" else "transcript"] is not None
        ]
    judged = {i for i, _ in jobs}
    for i in range(len(records)):  # final now: nothing to judge
        if i not in judged and on_record is not None:
            on_record(records[i])
    # judged in chunks of records, each chunk's records final (and emitted) when it returns
    waiting = sorted(judged)
    for start in range(0, len(waiting), scoring.JUDGE_CHUNK_RECORDS):
        chunk = set(waiting[start : start + scoring.JUDGE_CHUNK_RECORDS])
        chunk_jobs = [(i, ch) for i, ch in jobs if i in chunk]
        items = [
            judge_module.ConversationItem(
                question=records[i]["question"] or "",
                response=records[i]["text" if ch == "text" else "transcript"],
                reference=pairs[i][0].get("reference") or None,
                qid=records[i]["qid"],
            )
            for i, ch in chunk_jobs
        ]
        verdicts = judge_module.judge_conversation(
            items,
            judge,
            target_language=pair.language_name(expected),
            template=pair.prompt_template("conversation"),
            progress=progress,
        )
        for (i, ch), verdict in zip(chunk_jobs, verdicts):
            records[i][f"{ch}_gpt_score_raw"] = verdict.raw
            if verdict.samples is not None:  # the median of k asks: each ask's score, and their spread
                records[i][f"{ch}_gpt_score_samples"] = sample_spread(verdict.samples)
            if verdict.error or verdict.value is None:
                records[i][f"{ch}_gpt_score_error"] = verdict.error or "judge_error: no score"
            else:
                records[i][f"{ch}_gpt_score"] = score_value(verdict.value)
        if on_record is not None:
            for i in sorted(chunk):
                on_record(records[i])
    return records


def _channel_summary(records: Sequence[dict], ch: str) -> dict | None:

    applicable = [r for r in records if (r["text"] if ch == "text" else r["audio"]) is not None]
    if not applicable:
        return None  # e.g. a text-only model's speech channel: not applicable, never 0
    scores = [r[f"{ch}_gpt_score"] for r in applicable]
    return {
        "gpt_score": metrics.mean_score(scores),
        **judge_sample_spread(applicable, {"gpt_score": f"{ch}_gpt_score"}),
        "off_target": metrics.rate([r[f"{ch}_off_target"] for r in applicable]),
        "n_judge_error": sum(1 for r in applicable if r[f"{ch}_gpt_score_error"]),
        "n_unjudged": sum(
            1 for r in applicable if r[f"{ch}_gpt_score"] is None and not r[f"{ch}_gpt_score_error"]
        ),
        "language_counts": dict(Counter(r[f"{ch}_language"] for r in applicable if r[f"{ch}_language"])),
    }


def summarize_conversation(records: Sequence[dict]) -> dict:
    """Headline values with 95% bootstrap CIs and the counts needed to audit them.

    ``text``/``speech``: GPT Score (mean of the judged items; judge errors and unjudged items excluded and
    counted), Off-Target Rate (share of responses not in the expected language; responses without letters
    excluded); ``asr_error_rate``: mean of the per-item ASR error rates (and the corpus rate, total token
    edits / total tokens). A channel without any response is None (not applicable).
    """

    scorable, counts = item_counts(records, noun="id")
    both = [r for r in scorable if r["text"] is not None and r["transcript"] is not None]
    first = scorable[0] if scorable else (records[0] if records else {})
    return {
        "set": first.get("set"),
        "pair": first.get("pair"),
        "expected_language": first.get("expected_language"),
        "asr_language_hint": first.get("asr_language_hint"),
        **counts,
        "text": _channel_summary(scorable, "text"),
        "speech": _channel_summary(scorable, "speech"),
        "asr_error_rate": metrics.mean_score(
            [r["asr_error_rate"] for r in both if r["asr_error_rate"] is not None]
        ),
        "asr_error_rate_corpus": metrics.corpus_mixed_error_rate(
            [r["text"] for r in both], [r["transcript"] for r in both], _pair_of(first)
        )
        if both
        else None,
    }


def _pair_of(record: Mapping) -> LanguagePair:

    source = record.get("pair_source")
    return load_pair(source if source and Path(source).is_file() else record.get("pair"))


def _fmt(entry: Mapping | None, percent: bool = False) -> str:

    return format_entry(entry, percent)


def summary_markdown(summary: Mapping, model: str = "model") -> str:
    """A markdown table of `summarize_conversation` output (95% CIs in brackets)."""
    lines = [
        (
            f"# {model}: {summary.get('set')} (pair {summary.get('pair')}, expected response language "
            f"{summary.get('expected_language')})"
        ),
        "",
        (
            f"items: {summary['n_items']}, no output: {summary['n_no_output']}, unknown ids: "
            f"{summary['n_unknown_id']}, ASR errors: {summary['n_asr_error']}"
        ),
        "",
        "| channel | GPT Score (1-5) | n judged | judge errors | unjudged | Off-Target Rate |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for ch, label in (("text", "T"), ("speech", "S")):
        s = summary.get(ch)
        if s is None:
            lines.append(f"| {label} | n/a | 0 | | | n/a |")
            continue
        lines.append(
            f"| {label} | {_fmt(s['gpt_score'])} | {s['gpt_score']['n']} | {s['n_judge_error']} | "
            f"{s['n_unjudged']} | {_fmt(s['off_target'], percent=True)} |"
        )
    lines += sample_lines(summary)
    corpus = summary.get("asr_error_rate_corpus")
    lines += [
        "",
        (
            f"ASR Error Rate (speech vs text response): {_fmt(summary['asr_error_rate'], percent=True)} "
            f"mean per item; corpus {'n/a' if corpus is None else f'{100 * corpus:.1f}%'}"
        ),
    ]
    return "\n".join(lines) + "\n"
