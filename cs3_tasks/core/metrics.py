"""The CS3-Bench metrics: pure functions of strings and numbers (no I/O, no models).

All text comparisons go through `cs3_tasks.core.text`, so traditional characters (which Whisper prints at
times),
full-width forms, case and punctuation never count as errors.

Per-item metrics
  knowledge_keyword_hit / english_keyword_hit   keyword stage of knowledge accuracy (authors' rules)
  pronunciation_counts                          PSR parts (recognised, total) over English words
  english_wer / mixed_error_rate                WER over English words / over CJK chars + English words
  corpus_english_wer / corpus_mixed_error_rate  the same as corpus-level rates (edits / reference tokens)
  character_error_rate                          CER of Chinese text (dataset QC, ASR measurement)
  language_selected                             LSA: is the dominant language the expected one
  off_target                                    is the response not in the expected language
Aggregates
  rate / understanding_rate / mean_score / pronunciation_success_rate   value, n, excluded, 95% CI
  bootstrap_ci / ratio_bootstrap_ci             percentile bootstrap of a mean / of a ratio of sums
  accuracy_drop / paired_drop                   code-switched vs English accuracy (paired CI)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from cs3_tasks.core.languages import LanguagePair, load_pair
from cs3_tasks.core.text import (
    dominant_language,
    english_words,
    mixed_tokens,
    normalize_keyword,
    normalize_keyword_spans,
    normalize_zh,
    response_language,
    split_middle_dot,
)

# Language-dependent metrics take an optional `pair` (a LanguagePair or its name); None = CS3's zh-en.

LANGUAGES = ("zh", "en")
UNDERSTOOD_ABOVE = 3  # open-ended: an item is "understood" when its relevance score is > 3 (i.e. 4 or 5)


# --- knowledge accuracy, keyword stage ---------------------------------------------------------------


def _contains_keyword(response_spans: str, keyword: str | None, min_chars: int = 1) -> bool:
    # An answer (part) that normalises to "" (None, "", "·", "《》") must never match: "" is in every string.
    # response_spans is `normalize_keyword_spans(response)`: the key must lie within one span, unless the
    # answer itself has punctuation there ("Washington, D.C.").
    key = normalize_keyword(keyword or "")
    if len(key) < max(min_chars, 1):
        return False
    marked = normalize_keyword_spans(keyword or "")
    return key in response_spans or (marked != key and marked in response_spans)


# Parts of a transliterated name shorter than this are not matched on their own: in the data they are
# 肯 (Ken, also in 肯定 "certainly"), 范 (Van, in 范围), 休 (Hugh, in 休息) and T (Russell T Davies, in any
# English text); such an item goes to the judge instead. The whole Answer_zh is always matched, however
# short (猪, 马). The authors' rule verbatim (raw substrings, no normalisation) is the reference protocol's:
# `cs3_tasks.scoring.protocols.reference.knowledge_keyword_hit`; min_part_chars=1 does not give it.
MIN_NAME_PART_CHARS = 2


def knowledge_keyword_hit(
    response: str, answer_zh: str, answer_en: str, *, min_part_chars: int = MIN_NAME_PART_CHARS
) -> bool:
    """Authors' keyword rule on normalised text.

    True when the normalised response contains the normalised Answer_zh, or the normalised Answer_en, or
    a part of Answer_zh split on the middle dot (乔治·华盛顿 -> 乔治, 华盛顿) of at least `min_part_chars`
    characters. Normalisation (`text.normalize_keyword`): NFKC width folding, OpenCC t2s, lowercase,
    punctuation and middle dots to spaces, no whitespace next to CJK. Substring matching within the
    punctuation-separated spans of the response (`text.normalize_keyword_spans`), so removing a comma never
    joins two words into the answer ("盐，湖城" does not contain 盐湖城).
    """
    text = normalize_keyword_spans(response or "")
    if not text:
        return False
    if _contains_keyword(text, answer_zh) or _contains_keyword(text, answer_en):
        return True
    parts = split_middle_dot(answer_zh or "")
    return len(parts) > 1 and any(_contains_keyword(text, part, min_part_chars) for part in parts)


def english_keyword_hit(response: str, answer: str) -> bool:
    """knowledge_en keyword rule: the normalised Answer occurs in one punctuation-separated span of the
    normalised response (case-insensitive)."""
    return _contains_keyword(normalize_keyword_spans(response or ""), answer)


# --- speech-channel fidelity ---------------------------------------------------------------------------


def pronunciation_counts(
    text_response: str, transcript: str, pair: LanguagePair | str | None = None
) -> tuple[int, int]:
    """PSR parts: (recognised, total) English words of the text response.

    total = number of English words in the text response; recognised = count-aware bag-of-words overlap
    with the English words of the transcript, sum over words w of min(count_text(w), count_transcript(w)),
    so a word said once but written twice counts once. Words as in `text.english_words` (Whisper English
    normaliser). Items with total 0 have no PSR: the caller excludes (and counts) them.
    """
    written = Counter(english_words(text_response or "", pair))
    heard = Counter(english_words(transcript or "", pair))
    recognised = sum(min(count, heard[word]) for word, count in written.items())
    return recognised, sum(written.values())


def _token_error_rate(reference: list[str], hypothesis: list[str]) -> float:
    import jiwer

    # Tokens never contain whitespace, so joining with spaces is exactly jiwer's word tokenisation.
    return float(jiwer.wer(" ".join(reference), " ".join(hypothesis)))


def english_wer(text_response: str, transcript: str, pair: LanguagePair | str | None = None) -> float | None:
    """WER (jiwer) of the transcript's English-word sequence against the text response's.

    Reference = `english_words(text_response)`, hypothesis = `english_words(transcript)`, so Chinese in
    either is ignored. None when the text response has no English words. Can exceed 1 (insertions).
    """
    reference = english_words(text_response or "", pair)
    if not reference:
        return None
    return _token_error_rate(reference, english_words(transcript or "", pair))


def mixed_error_rate(
    text_response: str, transcript: str, pair: LanguagePair | str | None = None
) -> float | None:
    """Mixed error rate: WER (jiwer) over mixed tokens, each CJK character, English word and number a token.

    Reference = `mixed_tokens(text_response)`, hypothesis = `mixed_tokens(transcript)`. None when the text
    response has no tokens.
    """
    reference = mixed_tokens(text_response or "", pair)
    if not reference:
        return None
    return _token_error_rate(reference, mixed_tokens(transcript or "", pair))


def corpus_english_wer(
    text_responses: Sequence[str], transcripts: Sequence[str], pair: LanguagePair | str | None = None
) -> float | None:
    """Corpus form of `english_wer`: total English-word edits / total English words of the text responses
    (jiwer over lists), so long answers weigh by their length, unlike the per-item mean. Pairs whose text
    response has no English words are skipped; None when none is left."""
    return _corpus_token_error_rate(text_responses, transcripts, lambda t: english_words(t, pair))


def corpus_mixed_error_rate(
    text_responses: Sequence[str], transcripts: Sequence[str], pair: LanguagePair | str | None = None
) -> float | None:
    """Corpus form of `mixed_error_rate`: total token edits / total reference tokens over all pairs (jiwer
    over lists). Pairs whose text response has no tokens are skipped; None when none is left."""
    return _corpus_token_error_rate(text_responses, transcripts, lambda t: mixed_tokens(t, pair))


def _corpus_token_error_rate(
    text_responses: Sequence[str], transcripts: Sequence[str], tokens: Callable[[str], list[str]]
) -> float | None:
    import jiwer

    if len(text_responses) != len(transcripts):
        raise ValueError(f"{len(text_responses)} text responses but {len(transcripts)} transcripts")
    references, hypotheses = [], []
    for text_response, transcript in zip(text_responses, transcripts):
        reference = tokens(text_response or "")
        if reference:
            references.append(" ".join(reference))
            hypotheses.append(" ".join(tokens(transcript or "")))
    if not references:
        return None
    return float(jiwer.wer(references, hypotheses))


def _cer_form(text: str, pair: LanguagePair | str | None = None) -> str:
    return "".join(normalize_zh(text or "", pair).split())


def _char_edits(reference: str, hypothesis: str) -> int:
    if not reference:
        return len(hypothesis)
    if not hypothesis:
        return len(reference)
    import jiwer

    out = jiwer.process_characters(reference, hypothesis)
    return out.substitutions + out.deletions + out.insertions


def character_error_rate(reference: str, hypothesis: str, pair: LanguagePair | str | None = None) -> float:
    """CER of Chinese (or mixed) text: character edit distance / reference length after `normalize_zh`.

    Whitespace is removed after normalisation, so every remaining character (CJK, Latin letter, digit) is a
    unit. Empty normalised reference: 0.0 if the hypothesis is empty too, else 1.0 (all insertions, capped).
    """
    ref, hyp = _cer_form(reference, pair), _cer_form(hypothesis, pair)
    if not ref:
        return 0.0 if not hyp else 1.0
    return _char_edits(ref, hyp) / len(ref)


def corpus_character_error_rate(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    """Corpus CER: total character edits / total reference characters, same normalisation as
    `character_error_rate` (an item with an empty reference adds its hypothesis length as insertions).
    Raises ValueError on length mismatch; 0.0/1.0 rule as above when all references are empty.
    """
    if len(references) != len(hypotheses):
        raise ValueError(f"{len(references)} references but {len(hypotheses)} hypotheses")
    edits = ref_chars = hyp_chars = 0
    for reference, hypothesis in zip(references, hypotheses):
        ref, hyp = _cer_form(reference), _cer_form(hypothesis)
        edits += _char_edits(ref, hyp)
        ref_chars += len(ref)
        hyp_chars += len(hyp)
    if ref_chars == 0:
        return 0.0 if hyp_chars == 0 else 1.0
    return edits / ref_chars


# --- language selection ---------------------------------------------------------------------------------


def _check_expected(expected: str, pair: LanguagePair | str | None) -> None:
    if pair is None:
        languages = LANGUAGES
    else:
        languages = load_pair(pair).languages
    if expected not in languages:
        raise ValueError(f"expected language must be one of {languages}, got {expected!r}")


def language_selected(response: str, expected: str, pair: LanguagePair | str | None = None) -> bool | None:
    """LSA per item: True when `text.dominant_language(response)` equals `expected` ("zh" or "en").

    A "mixed" response (exact tie) is not a selection of the expected language: False. None when the response
    has no CJK characters and no English words ("none"): excluded from the rate. With a ``pair``, its two
    language codes and its dominance rule.
    """
    _check_expected(expected, pair)
    dominant = dominant_language(response or "", pair)
    if dominant == "none":
        return None
    return dominant == expected


def off_target(response: str, expected: str, pair: LanguagePair | str | None = None) -> bool | None:
    """Off-target per item: True when the response's language (`text.response_language`) is not `expected`.

    Off target: the other language of the pair dominates, an exact tie ("mixed"), or letters of neither
    language ("other", e.g. a kana answer to a zh->en question). None (excluded) when the response has no
    letters at all (empty, only digits or punctuation).
    """
    _check_expected(expected, pair)
    language = response_language(response or "", pair)
    if language == "none":
        return None
    return language != expected


# --- aggregates -------------------------------------------------------------------------------------------


def bootstrap_ci(
    values: Sequence[float], n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean.

    Draws `n_resamples` resamples of the items with replacement (numpy default_rng(seed): deterministic),
    takes each resample's mean, and returns the (1-confidence)/2 and (1+confidence)/2 quantiles of those
    means. Empty input -> (nan, nan); a single value v -> (v, v). Booleans count as 0/1.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    data = np.asarray(list(values), dtype=float)
    if data.size == 0:
        return (math.nan, math.nan)
    if np.isnan(data).any():
        raise ValueError("bootstrap_ci got NaN values: drop excluded items (None) before resampling")
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(n_resamples, data.size))].mean(axis=1)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    # The mean of identical values can differ from them in the last bit; keep the CI inside the data range.
    data_min, data_max = float(data.min()), float(data.max())
    low = min(max(float(low), data_min), data_max)
    high = max(min(float(high), data_max), data_min)
    return (low, high)


def ratio_bootstrap_ci(
    numerators: Sequence[float],
    denominators: Sequence[float],
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap CI of a ratio of sums, sum(num) / sum(den), resampling items (pairs) with
    replacement, e.g. micro PSR = recognised words / written words, where the words of one item are not
    independent. Same conventions as `bootstrap_ci`; resamples whose denominator sums to 0 are dropped.
    """
    if len(numerators) != len(denominators):
        raise ValueError(f"{len(numerators)} numerators but {len(denominators)} denominators")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    num = np.asarray(list(numerators), dtype=float)
    den = np.asarray(list(denominators), dtype=float)
    if num.size == 0 or not den.sum() > 0:
        return (math.nan, math.nan)
    picks = np.random.default_rng(seed).integers(0, num.size, size=(n_resamples, num.size))
    den_sums = den[picks].sum(axis=1)
    ratios = num[picks].sum(axis=1)[den_sums > 0] / den_sums[den_sums > 0]
    alpha = (1 - confidence) / 2
    low, high = np.quantile(ratios, [alpha, 1 - alpha])
    return (float(low), float(high))


def _summary(kept: list[float], excluded: int, **ci_options) -> dict:
    if not kept:
        return {"value": None, "n": 0, "excluded": excluded, "ci_low": None, "ci_high": None}
    low, high = bootstrap_ci(kept, **ci_options)
    # as in bootstrap_ci: a mean of identical values can leave them in the last bit; keep it in range
    value = min(max(float(np.mean(kept)), min(kept)), max(kept))
    return {
        "value": value,
        "n": len(kept),
        "excluded": excluded,
        "ci_low": low,
        "ci_high": high,
    }


def rate(values: Sequence[bool | None], **ci_options) -> dict:
    """Share of True among the non-None values, with counts and a bootstrap 95% CI.

    Returns {"value", "n", "hits", "excluded", "ci_low", "ci_high"}: n = number of non-None values, hits =
    number of True, excluded = number of None (e.g. judge errors, not-applicable channels). With n = 0,
    value and CI are None (JSON-friendly; never 0). `ci_options` go to `bootstrap_ci`.
    """
    kept = [float(bool(v)) for v in values if v is not None]
    out = _summary(kept, len(values) - len(kept), **ci_options)
    out["hits"] = int(sum(kept))
    return out


def understood(relevance: int | None) -> bool | None:
    """Open-ended item understood: relevance score (1-5) > 3; None stays None (no score)."""
    if relevance is None:
        return None
    if isinstance(relevance, bool) or not 1 <= relevance <= 5:
        raise ValueError(f"relevance score must be 1..5 or None, got {relevance!r}")
    return relevance > UNDERSTOOD_ABOVE


def understanding_rate(relevance_scores: Sequence[int | None], **ci_options) -> dict:
    """Share of scored items with relevance > 3 (None scores excluded and counted); as `rate`."""
    return rate([understood(score) for score in relevance_scores], **ci_options)


def mean_score(scores: Sequence[float | None], **ci_options) -> dict:
    """Mean of the non-None scores with counts and bootstrap CI.

    Returns {"value", "n", "excluded", "ci_low", "ci_high"}.

    Also used for per-item error rates (mean English WER / MER over items that have one).
    """
    kept = [float(s) for s in scores if s is not None and not (isinstance(s, float) and math.isnan(s))]
    return _summary(kept, len(scores) - len(kept), **ci_options)


def pronunciation_success_rate(counts: Sequence[tuple[int, int] | None], **ci_options) -> dict:
    """PSR over items: mean of the per-item fractions recognised/total (macro), with bootstrap CI.

    Items with total 0 or None (no speech) are excluded and counted in "excluded". Also returns "micro" =
    sum(recognised) / sum(total) over the kept items with "micro_ci_low"/"micro_ci_high" from
    `ratio_bootstrap_ci`, and the "recognised"/"words" totals.
    """
    kept = [(int(c[0]), int(c[1])) for c in counts if c is not None and c[1] > 0]
    for recognised, total in kept:
        if not 0 <= recognised <= total:
            raise ValueError(f"PSR counts must satisfy 0 <= recognised <= total, got {(recognised, total)}")
    out = _summary([r / t for r, t in kept], len(counts) - len(kept), **ci_options)
    words = sum(t for _, t in kept)
    out["recognised"] = sum(r for r, _ in kept)
    out["words"] = words
    out["micro"] = out["recognised"] / words if words else None
    low, high = ratio_bootstrap_ci([r for r, _ in kept], [t for _, t in kept], **ci_options)
    out["micro_ci_low"], out["micro_ci_high"] = (None, None) if math.isnan(low) else (low, high)
    return out


def accuracy_drop(acc_cs: float | None, acc_en: float | None) -> dict:
    """Code-switched vs English accuracy: {"absolute": en - cs, "relative": (en - cs) / en,
    "preserve_rate": cs / en}; a value is None when an input is None or en is 0 (ratio undefined)."""
    if acc_cs is None or acc_en is None:
        return {"absolute": None, "relative": None, "preserve_rate": None}
    absolute = acc_en - acc_cs
    if acc_en == 0:
        return {"absolute": absolute, "relative": None, "preserve_rate": None}
    return {"absolute": absolute, "relative": absolute / acc_en, "preserve_rate": acc_cs / acc_en}


def paired_drop(cs_correct: Sequence[bool | None], en_correct: Sequence[bool | None], **ci_options) -> dict:
    """Absolute accuracy drop en - cs over the same items (paired by position, i.e. by Qid), with a CI.

    Only pairs where both values are non-None count (others are "excluded"); the value is the mean of the
    per-item differences en_i - cs_i (= acc_en - acc_cs on those pairs) and the CI is `bootstrap_ci` of
    those differences, which accounts for the pairing.
    Returns {"value", "n", "excluded", "ci_low", "ci_high"}.
    """
    if len(cs_correct) != len(en_correct):
        raise ValueError(f"{len(cs_correct)} code-switched values but {len(en_correct)} English values")
    differences = [
        float(bool(en)) - float(bool(cs))
        for cs, en in zip(cs_correct, en_correct)
        if cs is not None and en is not None
    ]
    return _summary(differences, len(cs_correct) - len(differences), **ci_options)
