"""Tests of cs3_tasks.core.metrics on hand-made cases, plus hypothesis robustness and invariants."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cs3_tasks.core import metrics as M

# --- keyword stage -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "answer_zh", "answer_en", "expected"),
    [
        ("摩门教总部在盐湖城。", "盐湖城", "Salt Lake City", True),  # Answer_zh
        ("The answer is SALT LAKE CITY.", "盐湖城", "Salt Lake City", True),  # Answer_en, any case
        ("答案是鹽湖城", "盐湖城", "Salt Lake City", True),  # traditional ASR transcript
        ("答案是 盐 湖 城", "盐湖城", "Salt Lake City", True),  # ASR spaces between CJK
        ("总部在Salt-Lake City", "盐湖城", "Salt Lake City", True),  # punctuation folded
        ("ｓａｌｔ　ｌａｋｅ　ｃｉｔｙ", "盐湖城", "Salt Lake City", True),  # full width
        ("总部在纽约", "盐湖城", "Salt Lake City", False),
        ("是华盛顿写的", "乔治·华盛顿", "George Washington", True),  # a part split on ·
        ("是喬治華盛頓", "乔治·华盛顿", "George Washington", True),  # no dot, traditional
        ("是乔治・华盛顿", "乔治·华盛顿", "George Washington", True),  # look-alike dot
        ("是林肯", "乔治·华盛顿", "George Washington", False),
        ("是《风流寡妇》", "《风流寡妇》", "The Merry Widow", True),
        ("是风流寡妇", "《风流寡妇》", "The Merry Widow", True),  # book-title marks ignored
        ("", "盐湖城", "Salt Lake City", False),
        ("。。。", "盐湖城", "Salt Lake City", False),
    ],
)
def test_knowledge_keyword_hit(response, answer_zh, answer_en, expected):
    assert M.knowledge_keyword_hit(response, answer_zh, answer_en) is expected


@pytest.mark.parametrize(
    ("answer_zh", "answer_en"),
    [("", ""), ("·", ""), ("乔治·", ""), ("《》", "..."), ("", " ")],
)
def test_degenerate_answers_never_match_everything(answer_zh, answer_en):
    assert M.knowledge_keyword_hit("任何回答 any answer", answer_zh, answer_en) is False


def test_degenerate_part_does_not_hide_real_part():
    assert M.knowledge_keyword_hit("他叫乔治", "乔治·", "") is True


def test_single_character_name_parts_are_not_matched_alone():
    # 肯·罗素 (Ken Russell): "肯" is in 肯定 ("certainly"); "T" of 拉塞尔·T·戴维斯 is in any English text
    assert M.knowledge_keyword_hit("我肯定不知道", "肯·罗素", "Ken Russell") is False
    assert M.knowledge_keyword_hit("我肯定不知道", "肯·罗素", "Ken Russell", min_part_chars=1) is True
    assert M.knowledge_keyword_hit("导演是罗素", "肯·罗素", "Ken Russell") is True
    assert M.knowledge_keyword_hit("It was Davies", "拉塞尔·T·戴维斯", "Russell T Davies") is False
    assert M.knowledge_keyword_hit("是戴维斯", "拉塞尔·T·戴维斯", "Russell T Davies") is True
    assert M.knowledge_keyword_hit("是一只猪", "猪", "Pig") is True  # a whole one-character answer counts


@pytest.mark.parametrize(
    ("response", "answer_zh", "answer_en", "expected"),
    [
        ("盐，湖城", "盐湖城", "Salt Lake City", False),  # a comma does not join characters into the answer
        ("盐。湖城", "盐湖城", "Salt Lake City", False),
        ("盐\n湖城", "盐湖城", "Salt Lake City", False),
        ("答案：盐湖城。", "盐湖城", "Salt Lake City", True),
        ("是乔治·华盛顿，对", "乔治·华盛顿", "George Washington", True),  # middle dots still join
        ("salt, lake city", "盐湖城", "Salt Lake City", False),
        ("It is Salt-Lake City, Utah.", "盐湖城", "Salt Lake City", True),
        ("共1,000人", "1000人", "1000 people", True),  # digit groups are not a break
        ("It is Washington, D.C.", "华盛顿哥伦比亚特区", "Washington, D.C.", True),  # the answer's own comma
        ("It is Washington D.C.", "华盛顿哥伦比亚特区", "Washington, D.C.", True),
    ],
)
def test_keyword_is_matched_within_punctuation_separated_spans(response, answer_zh, answer_en, expected):
    assert M.knowledge_keyword_hit(response, answer_zh, answer_en) is expected


def test_english_keyword_hit():
    assert M.english_keyword_hit("It's in Salt Lake City.", "Salt Lake City") is True
    assert M.english_keyword_hit("it's in salt lake", "Salt Lake City") is False
    assert M.english_keyword_hit("anything", "") is False
    assert M.english_keyword_hit("", "Salt Lake City") is False


# --- PSR, WER, MER, CER ---------------------------------------------------------------------------------


def test_pronunciation_counts_is_count_aware():
    # text: i, like, deep, learning, and, deep, thought (7); heard: like, deep, learning -> 3
    assert M.pronunciation_counts("I like deep learning and deep thought", "我 like deep learning") == (3, 7)
    # a word written twice but heard once counts once; heard twice counts twice
    assert M.pronunciation_counts("deep deep", "deep") == (1, 2)
    assert M.pronunciation_counts("deep deep", "deep, deep!") == (2, 2)


def test_pronunciation_counts_normalises_both_sides():
    written, heard = "我用（Transformer）的self-attention", "我用 transformer 的 self attention"
    assert M.pronunciation_counts(written, heard) == (3, 3)
    assert M.pronunciation_counts("纯中文", "纯中文") == (0, 0)


def test_english_wer():
    assert M.english_wer("我喜欢deep learning", "我喜歡 Deep Learning.") == 0.0
    assert M.english_wer("我喜欢deep learning", "我喜欢deep") == pytest.approx(0.5)
    assert M.english_wer("我喜欢deep learning", "我喜欢") == pytest.approx(1.0)
    assert M.english_wer("我喜欢deep learning", "deep learning is fun") == pytest.approx(1.0)  # 2 insertions
    assert M.english_wer("纯中文", "deep") is None


def test_mixed_error_rate():
    # tokens: 我 喜 欢 deep learning (5); transcript drops "learning" -> 1/5
    assert M.mixed_error_rate("我喜欢deep learning", "我喜歡 deep") == pytest.approx(0.2)
    assert M.mixed_error_rate("我喜欢deep learning", "我喜欢deep learning") == 0.0
    assert M.mixed_error_rate("。。", "anything") is None


def test_character_error_rate():
    assert M.character_error_rate("我喜歡你。", "我喜欢你") == 0.0
    assert M.character_error_rate("我喜欢你", "我喜欢他") == pytest.approx(0.25)
    assert M.character_error_rate("我喜欢你", "") == 1.0
    assert M.character_error_rate("", "") == 0.0
    assert M.character_error_rate("！", "你好") == 1.0  # empty reference, non-empty hypothesis


def test_corpus_english_wer():
    texts = ["我喜欢deep learning", "纯中文", "the cat sat on a mat"]
    heard = ["我喜欢deep", "deep", "the cat sat on a mat"]
    assert M.corpus_english_wer(texts, heard) == pytest.approx(1 / 8)  # 1 edit over 2 + 6 words
    per_item = [M.english_wer(t, h) for t, h in zip(texts, heard)]
    assert M.mean_score(per_item)["value"] == pytest.approx(0.25)  # the per-item mean differs
    assert M.corpus_english_wer(["纯中文"], ["deep"]) is None
    with pytest.raises(ValueError):
        M.corpus_english_wer(["a"], [])


def test_corpus_character_error_rate():
    assert M.corpus_character_error_rate(["我喜欢你", "你好"], ["我喜欢他", "你好"]) == pytest.approx(1 / 6)
    assert M.corpus_character_error_rate([], []) == 0.0
    with pytest.raises(ValueError, match="2 references but 1"):
        M.corpus_character_error_rate(["a", "b"], ["a"])


# --- language selection ---------------------------------------------------------------------------------


def test_language_selected():
    assert M.language_selected("这是一个中文回答，包含一个word", "zh") is True
    assert M.language_selected("This is an English answer", "zh") is False
    assert M.language_selected("This is an English answer", "en") is True
    assert M.language_selected("我喜欢 deep learning", "zh") is False  # tie -> mixed -> not selected
    assert M.language_selected("123 !!!", "zh") is None
    with pytest.raises(ValueError, match="expected language"):
        M.language_selected("中文", "fr")


# --- aggregates -----------------------------------------------------------------------------------------


def test_bootstrap_ci_is_deterministic_and_brackets_the_mean():
    values = [1, 0, 1, 1, 0, 1, 0, 1, 1, 1] * 5
    low, high = M.bootstrap_ci(values)
    assert (low, high) == M.bootstrap_ci(values)
    assert low < sum(values) / len(values) < high
    assert M.bootstrap_ci(values, seed=1) != (low, high)
    narrow = M.bootstrap_ci(values, confidence=0.5)
    assert low <= narrow[0] <= narrow[1] <= high


def test_bootstrap_ci_edge_cases():
    low, high = M.bootstrap_ci([])
    assert math.isnan(low) and math.isnan(high)
    assert M.bootstrap_ci([0.7]) == (0.7, 0.7)
    assert M.bootstrap_ci([0.1] * 30) == (0.1, 0.1)
    with pytest.raises(ValueError, match="confidence"):
        M.bootstrap_ci([1.0], confidence=1.5)
    with pytest.raises(ValueError, match="NaN"):
        M.bootstrap_ci([1.0, math.nan])


def test_rate_excludes_none_and_counts_it():
    out = M.rate([True, False, None, True])
    assert out["value"] == pytest.approx(2 / 3)
    assert (out["n"], out["hits"], out["excluded"]) == (3, 2, 1)
    assert 0 <= out["ci_low"] <= out["value"] <= out["ci_high"] <= 1
    assert M.rate([None, None]) == {
        "value": None,
        "n": 0,
        "excluded": 2,
        "ci_low": None,
        "ci_high": None,
        "hits": 0,
    }


def test_understanding_rate():
    out = M.understanding_rate([5, 4, 3, 1, None])
    assert out["value"] == pytest.approx(0.5)
    assert (out["n"], out["hits"], out["excluded"]) == (4, 2, 1)
    with pytest.raises(ValueError, match="1..5"):
        M.understanding_rate([6])


def test_mean_score():
    out = M.mean_score([5, 3, None, 4])
    assert out["value"] == pytest.approx(4.0)
    assert (out["n"], out["excluded"]) == (3, 1)
    assert M.mean_score([])["value"] is None


def test_pronunciation_success_rate_macro_and_micro():
    out = M.pronunciation_success_rate([(1, 2), (0, 0), None, (3, 3)])
    assert out["value"] == pytest.approx(0.75)  # mean of 1/2 and 3/3
    assert out["micro"] == pytest.approx(0.8)  # 4 / 5
    assert (out["n"], out["excluded"], out["recognised"], out["words"]) == (2, 2, 4, 5)
    with pytest.raises(ValueError, match="recognised <= total"):
        M.pronunciation_success_rate([(3, 2)])


def test_accuracy_drop():
    out = M.accuracy_drop(0.6, 0.8)
    assert out["absolute"] == pytest.approx(0.2)
    assert out["relative"] == pytest.approx(0.25)
    assert out["preserve_rate"] == pytest.approx(0.75)
    assert M.accuracy_drop(0.5, 0.0)["preserve_rate"] is None
    assert M.accuracy_drop(None, 0.8)["absolute"] is None


# --- robustness and invariants --------------------------------------------------------------------------

# Text that exercises the interesting paths: CJK (traditional and simplified), Latin words, digits,
# punctuation, middle dots and full-width forms, plus arbitrary unicode.
mixed_text = st.one_of(
    st.text(),
    st.text(alphabet="喬治華盛顿说話中文学习 abcDEF deep learning 0123 .,!?·・《》（）ＡＢ"),
)


@settings(max_examples=200, deadline=None)
@given(mixed_text, mixed_text, mixed_text)
def test_no_metric_crashes_on_arbitrary_unicode(response, answer_zh, answer_en):
    assert isinstance(M.knowledge_keyword_hit(response, answer_zh, answer_en), bool)
    assert isinstance(M.english_keyword_hit(response, answer_en), bool)
    recognised, total = M.pronunciation_counts(response, answer_zh)
    assert 0 <= recognised <= total
    for value in (M.english_wer(response, answer_zh), M.mixed_error_rate(response, answer_zh)):
        assert value is None or value >= 0
    assert M.character_error_rate(response, answer_zh) >= 0
    assert M.language_selected(response, "zh") in (True, False, None)


@settings(max_examples=200, deadline=None)
@given(mixed_text)
def test_identical_strings_have_zero_error_and_full_psr(s):
    assert M.english_wer(s, s) in (0.0, None)
    assert M.mixed_error_rate(s, s) in (0.0, None)
    assert M.character_error_rate(s, s) == 0.0
    recognised, total = M.pronunciation_counts(s, s)
    assert recognised == total


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="喬治華盛頓說話東亞語言學習中國臺灣 deep learning ,.·"))
def test_traditional_transcript_is_not_penalised(s):
    from cs3_tasks.core.text import to_simplified

    simplified = to_simplified(s)
    assert M.character_error_rate(simplified, s) == 0.0
    assert M.mixed_error_rate(simplified, s) in (0.0, None)
    assert M.language_selected(s, "zh") == M.language_selected(simplified, "zh")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), st.booleans()), max_size=50))
def test_rate_invariants(values):
    out = M.rate(values)
    assert out["n"] + out["excluded"] == len(values)
    if out["n"]:
        assert 0 <= out["ci_low"] <= out["value"] <= out["ci_high"] <= 1
    else:
        assert out["value"] is None


def test_paired_drop():
    cs = [True, False, False, None, True]
    en = [True, True, False, True, None]
    out = M.paired_drop(cs, en)
    assert out["value"] == pytest.approx(1 / 3)  # pairs (T,T), (F,T), (F,F): differences 0, 1, 0
    assert (out["n"], out["excluded"]) == (3, 2)
    assert out["ci_low"] <= out["value"] <= out["ci_high"]
    with pytest.raises(ValueError, match="2 code-switched values but 1"):
        M.paired_drop([True, True], [True])


def test_ratio_bootstrap_ci():
    recognised, total = [1, 3, 0, 5], [2, 3, 4, 5]
    low, high = M.ratio_bootstrap_ci(recognised, total)
    assert (low, high) == M.ratio_bootstrap_ci(recognised, total)
    assert low < sum(recognised) / sum(total) < high
    assert M.ratio_bootstrap_ci([2, 4], [2, 4]) == (1.0, 1.0)
    assert all(math.isnan(v) for v in M.ratio_bootstrap_ci([], []))
    assert all(math.isnan(v) for v in M.ratio_bootstrap_ci([0], [0]))
    with pytest.raises(ValueError, match="2 numerators but 1"):
        M.ratio_bootstrap_ci([1, 2], [1])


def test_pronunciation_success_rate_micro_ci():
    out = M.pronunciation_success_rate([(1, 2), (3, 3), (0, 4), (5, 5)])
    assert out["micro_ci_low"] < out["micro"] < out["micro_ci_high"]
    assert M.pronunciation_success_rate([None])["micro_ci_low"] is None
