"""Every public function of cs3_tasks.core.text and cs3_tasks.core.metrics on hostile input: arbitrary
Unicode (lone
surrogates, controls, combining marks, RTL, NUL), a 1 M-character text, and odd numbers. No crash, rates in
[0, 1], error rates >= 0, None only where documented."""

from __future__ import annotations

import inspect
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cs3_tasks.core import metrics as M
from cs3_tasks.core import text as T

HOSTILE = [
    "\ud83d",
    "\ude00",
    "\ud83d\ude00",
    "\udfff\ud800",
    "\x00",
    "\x07",
    "\x1b[31m",
    "\u202e",
    "\u200f",
    "\u200b",
    "\ufeff",
    "\ufffd",
    "\u0301",
    "e\u0301\u0301\u0301",
    "שלום",
    "مرحبا",
    "華盛頓",
    "乔治·华盛顿",
    "It's",
    "twenty-one",
    "3.5",
    "1,000",
    "《》",
    "（self-attention）",
    "Ⅻ",
    "ﬁ",
    "\U0001f600",
    "\U00020000",
    "\n\r\t",
    "can't",
    " ",
]
# Every code point, surrogates included (hypothesis leaves them out by default), mixed with hostile pieces.
any_char = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=())
hostile_text = st.one_of(
    st.text(alphabet=any_char, max_size=40),
    st.lists(st.one_of(st.sampled_from(HOSTILE), st.text(alphabet=any_char, max_size=3)), max_size=12).map(
        "".join
    ),
)
pairs = st.sampled_from([None, "zh-en"])


def _public(module) -> set[str]:
    return {
        name
        for name, f in vars(module).items()
        if inspect.isfunction(f) and not name.startswith("_") and f.__module__ == module.__name__
    }


def _is_rate(value) -> bool:
    return isinstance(value, float) and 0.0 <= value <= 1.0


def _is_error_rate(value) -> bool:  # WER/MER/CER count insertions: >= 0, may exceed 1, finite
    return isinstance(value, float) and value >= 0.0 and math.isfinite(value)


def _is_encodable(value) -> bool:
    if isinstance(value, str):
        value.encode("utf-8")
    elif isinstance(value, (list, tuple)):
        for part in value:
            _is_encodable(part)
    return True


TEXT_CHECKS = {  # name -> check of the output for one text (and a pair where the function takes one)
    "is_cjk": lambda out: isinstance(out, bool),
    "to_simplified": _is_encodable,
    "valid_unicode": _is_encodable,
    "lone_surrogates": lambda out: isinstance(out, int) and out >= 0,
    "valid_text": lambda out: _is_encodable(out[0]) and (out[1] is None or "lone surrogates" in out[1]),
    "normalize_zh": _is_encodable,
    "normalize_matrix": _is_encodable,
    "normalize_en": _is_encodable,
    "normalize_keyword": _is_encodable,
    "normalize_keyword_spans": _is_encodable,
    "segments": lambda out: all(tag in ("zh", "en", "num") for tag, _ in out) and _is_encodable(out),
    "english_words": _is_encodable,
    "embedded_words": _is_encodable,
    "cjk_chars": lambda out: all(T.is_cjk(c) for c in out),
    "matrix_tokens": _is_encodable,
    "mixed_tokens": _is_encodable,
    "raw_english_word_count": lambda out: isinstance(out, int) and out >= 0,
    "dominant_language": lambda out: out in ("zh", "en", "mixed", "none"),
    "gloss_language": lambda out: out in ("zh", "en", None),
    "response_language": lambda out: out in ("zh", "en", "mixed", "none", "other"),
    "split_middle_dot": _is_encodable,
}

TEXT_METRICS = {  # metrics of strings: name -> (call on three texts, check of the output)
    "knowledge_keyword_hit": (
        lambda a, b, c: M.knowledge_keyword_hit(a, b, c),
        lambda o: isinstance(o, bool),
    ),
    "english_keyword_hit": (lambda a, b, c: M.english_keyword_hit(a, b), lambda o: isinstance(o, bool)),
    "pronunciation_counts": (lambda a, b, c: M.pronunciation_counts(a, b), lambda o: 0 <= o[0] <= o[1]),
    "english_wer": (lambda a, b, c: M.english_wer(a, b), lambda o: o is None or _is_error_rate(o)),
    "mixed_error_rate": (lambda a, b, c: M.mixed_error_rate(a, b), lambda o: o is None or _is_error_rate(o)),
    "corpus_mixed_error_rate": (
        lambda a, b, c: M.corpus_mixed_error_rate([a, c], [b, a]),
        lambda o: o is None or _is_error_rate(o),
    ),
    "corpus_english_wer": (
        lambda a, b, c: M.corpus_english_wer([a, c], [b, a]),
        lambda o: o is None or _is_error_rate(o),
    ),
    "character_error_rate": (lambda a, b, c: M.character_error_rate(a, b), _is_error_rate),
    "corpus_character_error_rate": (
        lambda a, b, c: M.corpus_character_error_rate([a, c], [b, a]),
        _is_error_rate,
    ),
    "language_selected": (lambda a, b, c: M.language_selected(a, "zh"), lambda o: o in (True, False, None)),
    "off_target": (lambda a, b, c: M.off_target(a, "en"), lambda o: o in (True, False, None)),
}

_ci_keys = ("value", "ci_low", "ci_high")


def _rate_summary_ok(out: dict) -> bool:
    if out["n"] == 0:
        return all(out[k] is None for k in _ci_keys)
    return all(_is_rate(out[k]) for k in _ci_keys) and out["ci_low"] <= out["value"] <= out["ci_high"]


def _mean_summary_ok(out: dict) -> bool:
    if out["n"] == 0:
        return all(out[k] is None for k in _ci_keys)
    return out["ci_low"] <= out["value"] + 1e-9 and out["value"] <= out["ci_high"] + 1e-9


verdicts = st.lists(st.one_of(st.none(), st.booleans()), max_size=30)
NUMBER_METRICS = {  # metrics of numbers: name -> (strategy, call, check)
    "rate": (verdicts, M.rate, _rate_summary_ok),
    "understood": (st.one_of(st.none(), st.integers(1, 5)), M.understood, lambda o: o in (True, False, None)),
    "understanding_rate": (
        st.lists(st.one_of(st.none(), st.integers(1, 5)), max_size=30),
        M.understanding_rate,
        _rate_summary_ok,
    ),
    "mean_score": (
        st.lists(st.one_of(st.none(), st.floats(0, 10), st.just(math.nan)), max_size=30),
        M.mean_score,
        _mean_summary_ok,
    ),
    "pronunciation_success_rate": (
        st.lists(
            st.one_of(
                st.none(), st.integers(0, 20).flatmap(lambda t: st.tuples(st.integers(0, t), st.just(t)))
            ),
            max_size=30,
        ),
        M.pronunciation_success_rate,
        lambda o: _rate_summary_ok(o) and (o["micro"] is None or _is_rate(o["micro"])),
    ),
    "bootstrap_ci": (
        st.lists(st.floats(0, 1), max_size=30),
        lambda v: M.bootstrap_ci(v, n_resamples=50),
        lambda o: (math.isnan(o[0]) and math.isnan(o[1])) or 0 <= o[0] <= o[1] <= 1,
    ),
    "ratio_bootstrap_ci": (
        st.lists(st.integers(0, 20).flatmap(lambda t: st.tuples(st.integers(0, t), st.just(t))), max_size=30),
        lambda rows: M.ratio_bootstrap_ci([r for r, _ in rows], [t for _, t in rows], n_resamples=50),
        lambda o: (math.isnan(o[0]) and math.isnan(o[1])) or 0 <= o[0] <= o[1] <= 1,
    ),
    "accuracy_drop": (
        st.tuples(st.one_of(st.none(), st.floats(0, 1)), st.one_of(st.none(), st.floats(0, 1))),
        lambda ab: M.accuracy_drop(*ab),
        lambda o: o["preserve_rate"] is None or o["preserve_rate"] >= 0,
    ),
    "paired_drop": (
        st.lists(
            st.tuples(st.one_of(st.none(), st.booleans()), st.one_of(st.none(), st.booleans())), max_size=30
        ),
        lambda rows: M.paired_drop([a for a, _ in rows], [b for _, b in rows]),
        lambda o: o["n"] == 0 or -1 <= o["ci_low"] <= o["value"] <= o["ci_high"] <= 1,
    ),
}


def test_every_public_function_is_covered():
    assert _public(T) == set(TEXT_CHECKS), "add the new public function of text to TEXT_CHECKS"
    assert _public(M) == set(TEXT_METRICS) | set(NUMBER_METRICS), "add the new metric to this test"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TEXT_CHECKS))
@settings(max_examples=150, deadline=None)
@given(text=hostile_text, pair=pairs)
def test_text_function_survives_hostile_unicode(name, text, pair):
    function = getattr(T, name)
    takes_pair = "pair" in inspect.signature(function).parameters
    out = function(text, pair) if takes_pair else function(text)
    assert TEXT_CHECKS[name](out), (name, text, out)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TEXT_METRICS))
@settings(max_examples=150, deadline=None)
@given(a=hostile_text, b=hostile_text, c=hostile_text)
def test_text_metric_survives_hostile_unicode(name, a, b, c):
    call, check = TEXT_METRICS[name]
    out = call(a, b, c)
    assert check(out), (name, a, b, c, out)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(NUMBER_METRICS))
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_number_metric_keeps_its_bounds(name, data):
    strategy, call, check = NUMBER_METRICS[name]
    out = call(data.draw(strategy))
    assert check(out), (name, out)


def test_smallest_crash_of_the_probe():
    # issue 12: character_error_rate('', '\ud800') raised UnicodeEncodeError from OpenCC
    assert M.character_error_rate("", "\ud800") == 0.0  # U+FFFD is a symbol: nothing is left to compare
    assert M.character_error_rate("你好", "你\ud83d好") == 0.0
    assert T.valid_unicode("a\ud83d\ude00b\ud83d") == "a\U0001f600b\ufffd"
    assert T.lone_surrogates("a\ud83d\ude00b\ud83d") == 1
    assert T.lone_surrogates("\ufffd plain") == 0


def _million_characters() -> str:
    piece = "".join(HOSTILE) + "乔治华盛顿说 hello world 21 "
    return (piece * (1_000_000 // len(piece) + 1))[:1_000_000]


@pytest.mark.slow
def test_a_million_characters_through_every_public_function():
    big = _million_characters()
    for name, check in TEXT_CHECKS.items():
        assert check(getattr(T, name)(big)), name
    for name, (call, check) in TEXT_METRICS.items():
        assert check(call(big, "乔治 hello", "x")), name
        assert check(call("乔治 hello", big, "x")), name
