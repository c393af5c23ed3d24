"""Tests of cs3_tasks.core.text: normalisation and zh/en tagging of mixed text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cs3_tasks.core import text as T


def test_to_simplified_converts_traditional_and_keeps_the_rest():
    assert T.to_simplified("喬治·華盛頓說話 hello 123") == "乔治·华盛顿说话 hello 123"
    assert T.to_simplified("") == ""


def test_to_simplified_survives_nul_characters():
    assert T.to_simplified("華\x00盛頓") == "华\x00盛顿"


def test_opencc_converter_is_a_singleton():
    T.to_simplified("華")
    first = T._opencc()
    assert T._opencc() is first


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("喬治·華盛頓", "乔治华盛顿"),  # t2s + middle dot
        ("乔治•华盛顿", "乔治华盛顿"),  # bullet look-alike
        ("乔治・华盛顿", "乔治华盛顿"),  # katakana middle dot
        ("乔治‧华盛顿", "乔治华盛顿"),  # hyphenation point
        ("乔治 华盛顿", "乔治华盛顿"),  # ASR-inserted space between CJK
        ("ＡＢＣ，１２３！", "abc 123"),  # full width -> half width, punctuation
        ("《风流寡妇》。", "风流寡妇"),
        ("在 Salt Lake City 。", "在salt lake city"),
        ("It's 3.5 or 1,000%", "its 3.5 or 1000"),
        ("", ""),
    ],
)
def test_normalize_zh(raw, expected):
    assert T.normalize_zh(raw) == expected


def test_normalize_en_is_whisper_normaliser_per_span():
    # contractions, British spelling, numbers standardised; CJK untouched (and simplified)
    assert T.normalize_en("It's a colour, twenty-one") == "it is a color 21"
    assert T.normalize_en("我說It's OK") == "我说it is ok"


def test_normalize_en_spells_cannot_as_the_expanded_contraction():
    # Whisper writes "can't" for spoken "cannot" (and back): one spelling, so WER and PSR count no error
    assert T.normalize_en("I cannot answer") == T.normalize_en("I can't answer") == "i can not answer"
    assert T.english_words("我Cannot去") == ["can", "not"]
    assert T.normalize_en("cannots cannotx") == "cannots cannotx"


def test_normalize_en_keeps_bracketed_english():
    # the bare Whisper normaliser deletes "(...)": models write English glosses in brackets
    assert T.normalize_en("自注意力（self-attention）机制") == "自注意力self attention机制"
    assert T.english_words("自注意力（self-attention）[transformer]") == ["self", "attention", "transformer"]


def test_segments_tags_cjk_runs_english_words_and_numbers():
    assert T.segments("我有twenty-one個Apple和3.5个橙子。") == [
        ("zh", "我有"),
        ("num", "21"),
        ("zh", "个"),
        ("en", "apple"),
        ("zh", "和"),
        ("num", "3.5"),
        ("zh", "个橙子"),
    ]


def test_segments_punctuation_ends_a_cjk_run():
    assert T.segments("你好，世界") == [("zh", "你好"), ("zh", "世界")]


def test_english_words_in_order_without_numbers():
    assert T.english_words("Mormon church的總部位於Salt Lake City, 1847年") == [
        "mormon",
        "church",
        "salt",
        "lake",
        "city",
    ]
    assert T.english_words("纯中文回答") == []


def test_english_words_drop_other_scripts():
    assert T.english_words("привет カタカナ 안녕 hello") == ["hello"]


def test_cjk_chars_simplified():
    assert T.cjk_chars("喬治·華盛頓 George") == ["乔", "治", "华", "盛", "顿"]


def test_mixed_tokens():
    assert T.mixed_tokens("我用GPU訓練了3次") == ["我", "用", "gpu", "训", "练", "了", "3", "次"]


def test_raw_english_word_count_counts_as_written():
    assert T.raw_english_word_count("it's self-attention, café") == 4
    assert T.raw_english_word_count("中文 123") == 0


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", "none"),
        ("123 ！？", "none"),
        ("这是中文", "zh"),
        ("This is English", "en"),
        # 3 CJK chars vs 2 words * 1.5 = 3: exact tie
        ("我喜欢 deep learning", "mixed"),
        ("我很喜欢 deep learning", "zh"),  # 4 > 3
        ("我喜 deep learning", "en"),  # 2 < 3
        ("自注意力机制让Transformer更强", "zh"),
        ("I think 这个 idea is great", "en"),  # 2 chars vs 5 words
    ],
)
def test_dominant_language(raw, expected):
    assert T.dominant_language(raw) == expected


def test_dominant_language_counts_traditional_like_simplified():
    assert T.dominant_language("我喜歡 deep learning") == T.dominant_language("我喜欢 deep learning")


def test_normalize_keyword_and_split_middle_dot():
    assert T.normalize_keyword("喬治·華盛頓") == T.normalize_keyword("乔治华盛顿")
    assert T.split_middle_dot("乔治·华盛顿") == ["乔治", "华盛顿"]
    assert T.split_middle_dot("a･b") == ["a", "b"]  # half-width katakana dot (NFKC -> ・)
    assert T.split_middle_dot("盐湖城") == ["盐湖城"]


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_no_text_function_crashes_on_arbitrary_unicode(s):
    for fn in (T.to_simplified, T.normalize_zh, T.normalize_en, T.normalize_keyword):
        assert isinstance(fn(s), str)
    for tag, piece in T.segments(s):
        assert tag in ("zh", "en", "num") and piece and not piece.isspace()
    assert all(" " not in w for w in T.english_words(s))
    assert all(T.is_cjk(c) for c in T.cjk_chars(s))
    assert T.dominant_language(s) in ("zh", "en", "mixed", "none")
    assert isinstance(T.split_middle_dot(s), list)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="喬治華盛頓說話東亞語言學習中國臺灣ab ,.·"))
def test_traditional_and_simplified_normalise_equal(s):
    simplified = T.to_simplified(s)
    assert T.normalize_zh(s) == T.normalize_zh(simplified)
    assert T.mixed_tokens(s) == T.mixed_tokens(simplified)
    assert T.cjk_chars(s) == T.cjk_chars(simplified)


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_normalize_zh_is_idempotent(s):
    once = T.normalize_zh(s)
    assert T.normalize_zh(once) == once


# An answer named in both languages (issue 31): "黑海，Black Sea。" was tagged English and
# "坦桑尼亚，Tanzania。" Chinese, by the length of the names. The class: one and several English words, the
# Chinese name short and long, every separator (comma, full stop, brackets of both widths, colon, dash,
# slash), both orders.
NAME_PAIRS = [
    ("黑海", "Black Sea"),
    ("坦桑尼亚", "Tanzania"),
    ("乔治·华盛顿", "George Washington"),
    ("盐湖城", "Salt Lake City"),
    ("耶稣基督后期圣徒教会", "The Church of Jesus Christ of Latter-day Saints"),
    ("莫扎特", "Mozart"),
]
GLOSSES = ["{a}，{b}。", "{a}, {b}.", "{a}（{b}）", "{a} ({b})", "{a}：{b}", "{a} - {b}", "{a}/{b}"]
GLOSSES += ["{a}。{b}"]


@pytest.mark.parametrize(("zh", "en"), NAME_PAIRS)
@pytest.mark.parametrize("gloss", GLOSSES)
def test_an_answer_named_in_both_languages_is_in_the_language_named_first(zh, en, gloss):
    from cs3_tasks.core import metrics as M

    chinese_first, english_first = gloss.format(a=zh, b=en), gloss.format(a=en, b=zh)
    assert T.dominant_language(chinese_first) == "zh" and T.dominant_language(english_first) == "en"
    # knowledge (code-switched query: Mandarin expected) and knowledge_en (English expected)
    assert M.language_selected(chinese_first, "zh") is True
    assert M.language_selected(english_first, "zh") is False
    assert M.language_selected(english_first, "en") is True
    assert M.language_selected(chinese_first, "en") is False
    assert T.dominant_language(chinese_first.replace("盐湖城", "鹽湖城")) == "zh"  # traditional script alike


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Python是一种编程语言", "zh"),  # a sentence with an English term: the weighted count
        ("我喜欢 deep learning", "mixed"),  # a space is no separator (ASRs put spaces next to English)
        ("黑海 Black Sea", "en"),  # no punctuation: the weighted count (2 < 3)
        ("黑海，Black Sea，黑海", "zh"),  # three runs: no gloss, the weighted count (4 > 3)
        ("The answer is the Black Sea (黑海).", "en"),
        ("答案是黑海（Black Sea）。", "zh"),
    ],
)
def test_what_is_not_a_gloss_keeps_the_weighted_count(raw, expected):
    assert T.dominant_language(raw) == expected
