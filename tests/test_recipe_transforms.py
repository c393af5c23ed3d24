"""CoR and KH transforms: unit cases and properties over the real CS3-Bench questions."""

from __future__ import annotations

import json
import warnings

import pytest
from shared_data import CS3_SOURCE, need

from cs3_tasks.core import text
from cs3_tasks.recipe import transforms as tf


def _real_items(name: str) -> list[dict]:
    path = CS3_SOURCE / name
    need(path)
    return json.loads(path.read_text(encoding="utf-8"))


def test_cor_prefix_and_removal():
    q = "哪条河发源于Taurus Mountains并流经叙利亚和伊拉克？"
    target = tf.apply_cor(q, "幼发拉底河")
    assert target == "Taurus Mountains<|cor_sep|>幼发拉底河"
    assert tf.split_cor(target) == ("Taurus Mountains", "幼发拉底河")
    assert tf.remove_cor(target) == "幼发拉底河"


def test_cor_prefix_is_capped_at_four_words():
    q = "请解释machine learning和deep neural network的区别"
    assert tf.cor_prefix(q) == "machine learning deep neural"
    assert tf.cor_prefix("今天天气怎么样") == ""
    assert tf.apply_cor("今天天气怎么样", "晴天") == "<|cor_sep|>晴天"


def test_cor_without_separator_keeps_answer():
    assert tf.split_cor("幼发拉底河") == (None, "幼发拉底河")


def test_kh_wraps_english_runs_and_strips_back():
    t = "答案是Salt Lake City，也就是盐湖城。"
    h = tf.apply_kh(t)
    assert h == "答案是<|kw_start|>Salt Lake City<|kw_end|>，也就是盐湖城。"
    assert tf.highlighted_keywords(h) == ["Salt Lake City"]
    assert tf.strip_kh(h) == t


def test_kh_with_keyword_list_only_marks_those():
    t = "用Python写一个quick sort"
    assert tf.apply_kh(t, keywords=["quick sort"]) == "用Python写一个<|kw_start|>quick sort<|kw_end|>"


def test_transform_refuses_double_application():
    with pytest.raises(ValueError):
        tf.apply_kh(tf.apply_kh("用Python"))
    with pytest.raises(ValueError):
        tf.apply_cor("q", tf.apply_cor("q", "a"))


def test_combined_transform_warns_citing_paper():
    with pytest.warns(UserWarning, match="2510.07881"):
        cfg = tf.TransformConfig(cor=True, kh=True)
    assert cfg.name == "cor+kh"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tf.TransformConfig(cor=True)
        tf.TransformConfig(kh=True)


def test_postprocess_splits_text_and_speech_channels():
    cfg = tf.TransformConfig(cor=True)
    r = tf.postprocess("Salt Lake<|cor_sep|>是<|kw_start|>Salt Lake City<|kw_end|>", cfg)
    assert r.recognised == "Salt Lake"
    assert r.text == "是Salt Lake City"
    assert r.speech_text == "是<|kw_start|>Salt Lake City<|kw_end|>"
    # CoR off: a stray separator never reaches the user
    assert tf.postprocess("a<|cor_sep|>b", tf.TransformConfig(kh=True)).text == "ab"


@pytest.mark.parametrize("set_file", ["cs_knowledge.json", "cs_open_ended.json"])
@pytest.mark.shared
def test_transforms_on_real_items(set_file):
    items = _real_items(set_file)
    with_english = 0
    for item in items:
        qid, q = item["Qid"], item["Question"]
        # KH is lossless for the user channel and highlights exactly the English of the text
        h = tf.apply_kh(q)
        assert tf.strip_kh(h) == q, qid
        kws = tf.highlighted_keywords(h)
        assert [w for k in kws for w in text.english_words(k)] == text.english_words(q), qid
        assert all(k.strip() == k and k for k in kws), qid
        # CoR: prefix is English from the query, at most four words, and is removed cleanly
        target = item.get("Answer_zh") or "好的"
        cor = tf.apply_cor(q, target)
        prefix, answer = tf.split_cor(cor)
        assert answer == target, qid
        words = prefix.split()
        assert len(words) <= tf.COR_MAX_WORDS, qid
        assert words == tf.surface_english_words(q)[: tf.COR_MAX_WORDS], qid
        assert all(w in q for w in words), qid
        with_english += bool(words)
    # every code-switched question carries English (the set is built that way)
    assert with_english >= 0.95 * len(items)
