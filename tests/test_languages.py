"""Tests of cs3_tasks.core.languages (the language-pair configuration) and pair-aware text/metrics
functions."""

from __future__ import annotations

from fractions import Fraction

import pytest

from cs3_tasks.core import metrics, text
from cs3_tasks.core.languages import (
    LanguagePair,
    LanguagePairError,
    available_pairs,
    default_pair,
    load_pair,
    pair_from_dict,
)
from cs3_tasks.core.scripts import SCRIPTS

JA_EN = {
    "name": "ja-en",
    "matrix": {"code": "ja", "name": "Japanese"},
    "embedded": {"code": "en", "name": "English"},
    "script": "japanese",
    "tokens": "char",
    "embedded_word_weight": "3/2",
    "response_language": "ja",
    "asr_language": "ja",
    "tts_voice": "ja",
    "prompts": {"conversation": "conversation_en"},
}


def test_shipped_pairs_zh_en_and_zh2en():
    pairs = available_pairs()
    assert {"zh-en", "zh2en"} <= set(pairs)
    cs3 = load_pair("zh-en")
    assert cs3 is default_pair() or cs3 == default_pair()
    assert (cs3.matrix, cs3.embedded, cs3.tokens, cs3.normalizers) == ("zh", "en", "char", ("t2s",))
    assert cs3.embedded_word_weight == Fraction(3, 2) == text.ENGLISH_WORD_WEIGHT
    assert cs3.script_class == SCRIPTS["han"] == text.CJK_CLASS
    assert cs3.asr_language is None  # auto-detection (see zh-en.yaml)
    assert [cs3.response_language_of(s) for s in ("knowledge", "knowledge_en", "open_ended")] == [
        "zh",
        "en",
        "zh",
    ]
    assert cs3.query_language_of("knowledge_en") == "en" and cs3.query_language_of("knowledge") == "zh"
    belle = load_pair("zh2en")
    assert (belle.matrix, belle.response_language, belle.asr_language) == ("zh", "en", None)
    assert "{target_language}" in belle.prompt_template("conversation")
    assert belle.language_name("en") == "English"


def test_load_pair_by_path_and_unknown_name(tmp_path):
    path = tmp_path / "ja-en.yaml"
    import yaml

    path.write_text(yaml.safe_dump(JA_EN, allow_unicode=True), encoding="utf-8")
    pair = load_pair(str(path))
    assert pair.name == "ja-en" and pair.source == path.resolve()
    assert load_pair(pair) is pair
    with pytest.raises(LanguagePairError, match="unknown language pair 'xx-yy'.*available"):
        load_pair("xx-yy")
    with pytest.raises(LanguagePairError, match="not found"):
        load_pair(str(tmp_path / "missing.yaml"))


def test_invalid_pair_lists_every_problem():
    bad = {
        "name": "bad",
        "matrix": {"code": "ko"},
        "embedded": {"code": "ko"},
        "script": "klingon",
        "tokens": "syllable",
        "normalizers": ["t2t"],
        "embedded_word_weight": "-1",
        "response_language": "fr",
        "colour": "blue",
    }
    with pytest.raises(LanguagePairError) as info:
        pair_from_dict(bad)
    message = str(info.value)
    for fragment in (
        "unknown field(s) ['colour']",
        "both 'ko'",
        "script: 'klingon'",
        "tokens: 'syllable'",
        "normalizers: 't2t'",
        "embedded_word_weight must be > 0",
        "response_language 'fr'",
    ):
        assert fragment in message
    with pytest.raises(LanguagePairError, match="Latin letters"):
        pair_from_dict({**JA_EN, "script": None, "script_class": "a-z\u3040-\u309f"})


def test_prompt_template_missing_task_and_file(tmp_path):
    pair = pair_from_dict({**JA_EN, "prompts": {"conversation": "nope.txt"}}, source=tmp_path / "ja-en.yaml")
    with pytest.raises(LanguagePairError, match="nope.txt not found"):
        pair.prompt_template("conversation")
    with pytest.raises(LanguagePairError, match="no judge prompt for 'knowledge'"):
        pair.prompt_template("knowledge")


def test_default_arguments_are_the_zh_en_pair():
    sample = "我有twenty-one個Apple, 乔治 华盛顿说 it's OK。"
    cs3 = load_pair("zh-en")
    for function in (
        text.normalize_zh,
        text.normalize_en,
        text.segments,
        text.english_words,
        text.cjk_chars,
        text.mixed_tokens,
        text.dominant_language,
    ):
        assert function(sample) == function(sample, cs3) == function(sample, "zh-en")
    assert metrics.language_selected(sample, "zh") == metrics.language_selected(sample, "zh", cs3)


def test_japanese_pair_counts_kana_and_han_as_japanese():
    pair = pair_from_dict(JA_EN)
    answer = "東京タワーは高さ333メートルのtowerです"
    assert text.segments(answer, pair) == [
        ("ja", "東京タワーは高さ"),
        ("num", "333"),
        ("ja", "メートルの"),
        ("en", "tower"),
        ("ja", "です"),
    ]
    assert text.dominant_language(answer, pair) == "ja"
    # no t2s normaliser for Japanese: 東京 stays as written (t2s would not touch it, but 會 would become 会)
    assert text.cjk_chars("會", pair) == ["會"] and text.cjk_chars("會") == ["会"]
    assert metrics.language_selected("It is a tower", "ja", pair) is False
    with pytest.raises(ValueError, match="expected language must be one of"):
        metrics.language_selected(answer, "zh", pair)


def test_word_token_pair_keeps_spaces_and_counts_words():
    pair = pair_from_dict(
        {
            "name": "ko-en",
            "matrix": {"code": "ko"},
            "embedded": {"code": "en"},
            "script": "hangul",
            "tokens": "word",
            "response_language": "ko",
        }
    )
    assert text.normalize_zh("저는  학생 입니다!", pair) == "저는 학생 입니다"
    assert text.matrix_tokens("저는 학생 입니다", pair) == ["저는", "학생", "입니다"]
    # 3 Korean words vs 3 English words at weight 1: an exact tie
    assert text.dominant_language("저는 학생 입니다 I am student", pair) == "mixed"
    assert metrics.mixed_error_rate("저는 학생 입니다", "저는 학생입니다", pair) == pytest.approx(2 / 3)


def test_off_target_and_response_language():
    assert metrics.off_target("The capital is Beijing.", "en", "zh2en") is False
    assert metrics.off_target("首都是北京。", "en", "zh2en") is True
    assert metrics.off_target("東京です", "en", "zh2en") is True  # kana: neither language -> "other"
    assert text.response_language("すし", "zh2en") == "other"
    assert metrics.off_target("123 !!", "en", "zh2en") is None  # no letters: excluded
    assert metrics.off_target("", "en") is None


def test_pair_is_frozen():
    pair = default_pair()
    assert isinstance(pair, LanguagePair)
    with pytest.raises(AttributeError):
        pair.matrix = "ko"  # type: ignore[misc]
