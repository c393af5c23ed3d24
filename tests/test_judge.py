"""Tests of the LLM judge against a loopback OpenAI-compatible server (tests/judge_server.py)."""

from __future__ import annotations

import argparse
import time
from importlib import resources

import pytest
from judge_server import FakeJudgeServer, Reply, by_keyword, fail_first, loopback_config

from cs3_tasks.judge import (
    ConversationItem,
    JudgeConfig,
    JudgeConfigError,
    KnowledgeItem,
    OpenEndedItem,
    UnparseableReply,
    Verdict,
    ask_batch,
    judge_config_from_options,
    judge_conversation,
    judge_knowledge,
    judge_open_ended,
    load_prompt,
    render_prompt,
)
from cs3_tasks.judge.parsing import parse_knowledge_verdict, parse_score

KNOWLEDGE = [
    KnowledgeItem(
        "Mormon church的总部位于美国哪个城市？", "盐湖城", "总部在Salt Lake City。", "Salt Lake City", "q0"
    ),
    KnowledgeItem(
        "Mormon church的总部位于美国哪个城市？", "盐湖城", "我觉得是纽约。", "Salt Lake City", "q1"
    ),
    KnowledgeItem("谁写了Hamlet？", "莎士比亚", "是 William Shakespeare 写的。", "William Shakespeare", "q2"),
]
ZH_RULES = {
    "Salt Lake City。": "正确 模型回答与英文答案一致。",
    "纽约": "错误 模型回答“纽约”与正确答案“盐湖城”不一致。",
    "William Shakespeare 写的": "**判断：** 正确\n模型给出了英文答案。",
}


# ------------------------------------------------------------------------------------------- parsers


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("正确 模型回答与中文答案语义一致。", True),
        ("错误 模型回答“纽约”，而正确答案是盐湖城。", False),
        ("正确。模型回答没有错误。", True),  # 错误 inside the explanation is not a verdict
        ("**判断：** 正确", True),
        ("【错误】答非所问", False),
        ("不正确，模型给出了别的城市。", False),
        ("分析：模型回答提到了另一个城市。\n\n最终判断：错误", False),
        ("错误\n\n解释：正确答案是盐湖城。", False),
    ],
)
def test_parse_knowledge_zh(reply, expected):
    assert parse_knowledge_verdict(reply, "zh") is expected


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "模型回答与答案一致。",  # no verdict at all
        "正确答案是盐湖城，模型回答错误",  # 正确答案 is not a verdict; the trailing 错误 is not explicit
        "正确/错误 [简单解释]",  # the format echoed
        "正确\n\n结论：错误",  # two contradicting verdicts
        "True The model is right.",  # English verdict in the zh judge
    ],
)
def test_parse_knowledge_zh_unparseable(reply):
    with pytest.raises(UnparseableReply):
        parse_knowledge_verdict(reply, "zh")


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("True The model response is semantically consistent with the answer.", True),
        ("False. The model names New York.", False),
        ("**Verdict:** False", False),
        ("true", True),
        ("Explanation first.\nFinal answer: TRUE", True),
    ],
)
def test_parse_knowledge_en(reply, expected):
    assert parse_knowledge_verdict(reply, "en") is expected


@pytest.mark.parametrize(
    "reply", ["True/False [explanation]", "The answer is true", "Trueish", "正确", "True.\nVerdict: False"]
)
def test_parse_knowledge_en_unparseable(reply):
    with pytest.raises(UnparseableReply):
        parse_knowledge_verdict(reply, "en")


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("模型理解了问题。得分：[5]", 5),
        ("Mostly right. Score: [4]", 4),
        ("[2]", 2),
        ("引用[1]中的说法不对。得分：[3]", 3),  # a labelled score wins over other brackets
        ("得分：【４】", 4),  # full-width forms
        ("Score: [4]. Again, Score: [4]", 4),
    ],
)
def test_parse_score(reply, expected):
    assert parse_score(reply) == expected


@pytest.mark.parametrize(
    "reply, reason",
    [
        ("模型回答很好。", r"no \[n\]"),
        ("Score: [6]", "out of range"),
        ("Score: [0]", "out of range"),
        ("得分：[3.5]", "not an integer"),
        ("[3] or maybe [4]", "several"),
        ("得分：[3]，修正后得分：[4]", "several"),
    ],
)
def test_parse_score_unparseable(reply, reason):
    with pytest.raises(UnparseableReply, match=reason):
        parse_score(reply)


# ------------------------------------------------------------------------------------------- prompts


def test_prompt_files_are_package_data_and_render():
    shipped = {p.name for p in resources.files("cs3_tasks.prompts").iterdir()}
    names = [
        "conversation_en.txt",
        "knowledge_en.txt",
        "knowledge_zh.txt",
        "open_relevance_en.txt",
        "open_relevance_zh.txt",
        "open_semantic_en.txt",
        "open_semantic_zh.txt",
    ]
    assert set(names) <= shipped
    values = {
        "question": "Q",
        "reference": "R",
        "reference_en": "RE",
        "response": "A",
        "target_language": "English",
    }
    for name in names:
        text = render_prompt(load_prompt(name[:-4]), **values)
        assert "{" not in text and "Q" in text and "A" in text, name
    assert "正确" in load_prompt("knowledge_zh") and "True" in load_prompt("knowledge_en")
    assert "[n]" in load_prompt("open_semantic_zh") and "完全用中文" in load_prompt("open_semantic_zh")


def test_render_prompt_drops_missing_optional_lines_and_never_retemplates():
    template = "问题：{question}\n参考回答：{reference}\n模型回答：{response}\n"
    text = render_prompt(template, question="{response}", reference=None, response="x {reference} y")
    assert text == "问题：{response}\n模型回答：x {reference} y\n"
    with pytest.raises(KeyError, match="response"):
        render_prompt(template, question="q", reference="r")
    with pytest.raises(FileNotFoundError, match="available"):
        load_prompt("no_such_prompt")


# ------------------------------------------------------------------------------------------- judging


def test_judge_knowledge_zh_end_to_end(tmp_path, judge_server):
    server = judge_server(by_keyword(ZH_RULES, default="无法判断"))
    verdicts = judge_knowledge(KNOWLEDGE, loopback_config(server, tmp_path), language="zh")
    assert [v.value for v in verdicts] == [True, False, True]
    assert all(v.error is None for v in verdicts)
    assert verdicts[1].raw == ZH_RULES["纽约"]
    assert server.request_count == 3
    body = server.requests[0].body
    assert body["model"] == "fake-judge" and body["temperature"] == 0.0
    assert len(body["messages"]) == 1 and body["messages"][0]["role"] == "user"
    prompts = sorted(r.prompt for r in server.requests)
    assert any(
        "中文答案：盐湖城" in p and "英文答案：Salt Lake City" in p and "我觉得是纽约" in p for p in prompts
    )
    assert server.requests[0].path == "/v1/chat/completions"
    assert "Authorization" not in server.requests[0].headers  # local server, no key configured


def test_judge_knowledge_en(tmp_path, judge_server):
    items = [
        KnowledgeItem("Who wrote Hamlet?", "William Shakespeare", "Shakespeare wrote it."),
        KnowledgeItem("Who wrote Hamlet?", "William Shakespeare", "Charles Dickens."),
    ]
    rules = {
        "Shakespeare wrote it": "True The response names the same person.",
        "Dickens": "False. Dickens did not write Hamlet.",
    }
    server = judge_server(by_keyword(rules, default="?"))
    verdicts = judge_knowledge(items, loopback_config(server, tmp_path), language="en")
    assert [v.value for v in verdicts] == [True, False]
    assert "Answer: William Shakespeare" in server.requests[0].prompt


def test_judge_open_ended_scores(tmp_path, judge_server):
    items = [
        OpenEndedItem(
            "请解释self-attention的作用。", "动态计算相关性。", "self-attention让模型关注重要的词。"
        ),
        OpenEndedItem("请解释self-attention的作用。", None, "今天天气很好。"),
    ]
    rules = {
        "是否正确理解": by_keyword({"重要的词": "理解正确。得分：[5]"}, default="答非所问。得分：[1]"),
        "语义质量": by_keyword({"重要的词": "较好。得分：[4]"}, default="很差。得分：[2]"),
    }

    def handler(request):
        for key, sub in rules.items():
            if key in request.prompt:
                return sub(request)
        return "no rubric recognised"

    server = judge_server(handler)
    config = loopback_config(server, tmp_path)
    relevance = judge_open_ended(items, config, aspect="relevance")
    semantic = judge_open_ended(items, config, aspect="semantic")
    assert [v.value for v in relevance] == [5, 1]
    assert [v.value for v in semantic] == [4, 2]
    no_reference = [r.prompt for r in server.requests if "今天天气很好" in r.prompt]
    assert no_reference and all("参考回答：" not in p for p in no_reference)
    with pytest.raises(ValueError, match="aspect"):
        judge_open_ended(items, config, aspect="fluency")


def test_judge_conversation_scores(tmp_path, judge_server):
    items = [
        ConversationItem("怎样才能保持健康？", "Eat well, sleep enough and exercise regularly."),
        ConversationItem("怎样才能保持健康？", "I do not know."),
    ]
    rules = {
        "exercise regularly": "Helpful and correct. Score: [5]",
        "I do not know": "Not helpful. Score: [1]",
    }
    server = judge_server(by_keyword(rules, default="?"))
    verdicts = judge_conversation(items, loopback_config(server, tmp_path))
    assert [v.value for v in verdicts] == [5, 1]
    assert "answer in English" in server.requests[0].prompt


# ------------------------------------------------------------------------------------------- failures


def test_timeout_gives_judge_error_quickly(tmp_path, judge_server):
    server = judge_server("正确 一致", mode="timeout", delay=5.0)
    config = loopback_config(server, tmp_path, timeout=0.3, max_retries=1)
    start = time.monotonic()
    verdicts = judge_knowledge(KNOWLEDGE, config)
    elapsed = time.monotonic() - start
    assert all(v.value is None for v in verdicts)
    assert all(v.error.startswith("judge_error: timeout") and "2 attempts" in v.error for v in verdicts)
    assert server.request_count == 3 * 2  # one retry per item
    assert elapsed < 15.0  # 30 s if the 0.3 s timeout did not hold; room for a loaded machine
    # nothing is cached: with the server answering, a re-run asks again and succeeds
    server.mode = None
    assert [v.value for v in judge_knowledge(KNOWLEDGE, config)] == [True, True, True]


def test_500s_then_success_is_retried(tmp_path, judge_server):
    server = judge_server(fail_first(2, "错误 不一致"))
    [verdict] = judge_knowledge(KNOWLEDGE[:1], loopback_config(server, tmp_path, max_retries=3))
    assert verdict == Verdict(value=False, raw="错误 不一致", error=None, model="fake-judge")
    assert server.request_count == 3


def test_429_with_retry_after_is_retried(tmp_path):
    with FakeJudgeServer(
        fail_first(1, "得分：[3]", Reply.error(429, "rate limited", retry_after=0.01))
    ) as server:
        [verdict] = judge_open_ended(
            [OpenEndedItem("q", "r", "a")], loopback_config(server, tmp_path), aspect="relevance"
        )
        assert verdict.value == 3 and server.request_count == 2


def test_permanent_500_is_judge_error(tmp_path, judge_server):
    server = judge_server(mode="http500")
    verdicts = judge_knowledge(KNOWLEDGE, loopback_config(server, tmp_path, max_retries=2))
    assert all(v.value is None and v.error.startswith("judge_error: HTTP 500") for v in verdicts)
    assert server.request_count == 3 * 3


def test_client_error_is_not_retried(tmp_path, judge_server):
    server = judge_server(Reply.error(404, "model not found"))
    [verdict] = judge_knowledge(KNOWLEDGE[:1], loopback_config(server, tmp_path))
    assert verdict.value is None and "HTTP 404" in verdict.error and "model not found" in verdict.error
    assert server.request_count == 1


def test_garbage_body_is_judge_error(tmp_path, judge_server):
    server = judge_server(mode="garbage")
    [verdict] = judge_knowledge(KNOWLEDGE[:1], loopback_config(server, tmp_path, max_retries=1))
    assert verdict.value is None and verdict.error.startswith("judge_error: malformed response body")
    assert server.request_count == 2


def test_unparseable_reply_is_reasked_then_judge_error(tmp_path, judge_server):
    server = judge_server("我认为模型说得有道理。")
    [knowledge] = judge_knowledge(KNOWLEDGE[:1], loopback_config(server, tmp_path, max_retries=2))
    assert knowledge.value is None and knowledge.error.startswith("judge_error: unparseable reply")
    assert knowledge.raw == "我认为模型说得有道理。"  # the judge's reply is kept for auditing
    assert server.request_count == 3
    [score] = judge_open_ended(
        [OpenEndedItem("q", "r", "a")], loopback_config(server, tmp_path, max_retries=0), aspect="semantic"
    )
    assert score.value is None and "no [n] score" in score.error


def test_unparseable_then_parseable_is_accepted(tmp_path, judge_server):
    replies = iter(["正确/错误 [解释]", "正确 一致"])
    server = judge_server(lambda request: next(replies))
    [verdict] = judge_knowledge(KNOWLEDGE[:1], loopback_config(server, tmp_path))
    assert verdict.value is True and server.request_count == 2


def test_one_failing_item_does_not_stop_the_others(tmp_path, judge_server):
    rules = {**ZH_RULES, "纽约": Reply.error(500)}
    server = judge_server(by_keyword(rules, default="?"))
    verdicts = judge_knowledge(KNOWLEDGE, loopback_config(server, tmp_path, max_retries=1))
    assert [v.value for v in verdicts] == [True, None, True]
    assert verdicts[1].error.startswith("judge_error: HTTP 500")


def test_a_judge_server_that_is_not_there_is_refused_before_the_first_request(tmp_path):
    from cs3_tasks.judge import JudgeUnreachableError

    server = FakeJudgeServer("正确").start()
    config = loopback_config(server, tmp_path, max_retries=3)
    server.stop()  # nothing listens on that port any more
    with pytest.raises(JudgeUnreachableError, match=r"cannot be reached .*Connection refused") as refused:
        judge_knowledge(KNOWLEDGE[:1], config)  # one connection tried, not 4 attempts per item
    assert config.public_base_url in str(refused.value) and "\n" not in str(refused.value)


# ------------------------------------------------------------------------------------------- cache


def test_cache_second_run_makes_no_request(tmp_path, judge_server):
    server = judge_server(by_keyword(ZH_RULES, default="?"))
    config = loopback_config(server, tmp_path)
    first = judge_knowledge(KNOWLEDGE, config)
    assert server.request_count == 3
    server.reset()
    second = judge_knowledge(KNOWLEDGE, config)
    assert server.request_count == 0
    assert second == first
    # a different model (or temperature) is a different question
    judge_knowledge(KNOWLEDGE, loopback_config(server, tmp_path, model="other-judge"))
    assert server.request_count == 3


def test_only_successful_verdicts_are_cached(tmp_path, judge_server):
    rules = {**ZH_RULES, "纽约": Reply.error(500)}
    server = judge_server(by_keyword(rules, default="?"))
    config = loopback_config(server, tmp_path, max_retries=0)
    judge_knowledge(KNOWLEDGE, config)
    server.reset()
    server.handler = by_keyword(ZH_RULES, default="?")
    verdicts = judge_knowledge(KNOWLEDGE, config)
    assert server.request_count == 1 and "纽约" in server.requests[0].prompt
    assert [v.value for v in verdicts] == [True, False, True]


def test_failed_requests_are_not_cached_even_for_lenient_parsers(tmp_path, judge_server):
    server = judge_server(mode="http500")
    config = loopback_config(server, tmp_path, max_retries=0)
    assert ask_batch(["hello"], str, config)[0].error.startswith("judge_error: HTTP 500")
    server.mode = None
    server.handler = lambda request: "fine"
    assert ask_batch(["hello"], str, config)[0] == Verdict(value="fine", raw="fine", model="fake-judge")
    assert server.request_count == 2


def test_duplicate_prompts_are_asked_once(tmp_path, judge_server):
    server = judge_server(by_keyword(ZH_RULES, default="?"))
    verdicts = judge_knowledge([KNOWLEDGE[0]] * 5, loopback_config(server, tmp_path, use_cache=False))
    assert [v.value for v in verdicts] == [True] * 5 and server.request_count == 1


def test_cached_replies_are_reparsed(tmp_path, judge_server):
    def strict(raw: str) -> int:
        raise UnparseableReply("never satisfied")

    server = judge_server("whatever")
    config = loopback_config(server, tmp_path, max_retries=0)
    assert ask_batch(["hello"], str.upper, config)[0].value == "WHATEVER"
    assert ask_batch(["hello"], str.upper, config)[0].value == "WHATEVER"
    assert server.request_count == 1
    # a stricter parser does not trust the cached reply: it asks again (and fails visibly)
    assert ask_batch(["hello"], strict, config)[0].error == (
        "judge_error: unparseable reply: never satisfied (after 1 attempt)"
    )
    assert server.request_count == 2


def test_an_unparseable_reply_is_asked_again_at_once(tmp_path, judge_server):
    """The server answered; only its text did not follow the format: no backoff before the re-ask (two
    minutes here, so a wait would run far past the test's timeout)."""
    replies = iter(["no verdict here", "正确"])
    server = judge_server(lambda request: next(replies))
    config = loopback_config(server, tmp_path, backoff_initial=120.0, backoff_max=120.0, use_cache=False)
    verdict = _within(30, lambda: judge_knowledge([KNOWLEDGE[0]], config)[0])
    assert verdict.value is True and server.request_count == 2


def _within(seconds: float, call):
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(1)
    try:
        return pool.submit(call).result(timeout=seconds)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def test_ask_batch_accepts_message_lists(tmp_path, judge_server):
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"}]
    server = judge_server("ok")
    [verdict] = ask_batch([messages], str, loopback_config(server, tmp_path))
    assert verdict.value == "ok" and server.requests[0].messages == messages


# ------------------------------------------------------------------------------------------- concurrency


def test_requests_in_flight_are_bounded(tmp_path, judge_server):
    items = [OpenEndedItem(f"问题{i}", None, f"回答{i}") for i in range(12)]
    server = judge_server(Reply.sleep(0.15, "得分：[4]"))
    verdicts = judge_open_ended(
        items, loopback_config(server, tmp_path, max_concurrency=3), aspect="relevance"
    )
    assert [v.value for v in verdicts] == [4] * 12
    assert server.request_count == 12
    assert server.max_in_flight == 3  # parallel, and never more than the bound


# ------------------------------------------------------------------------------------------- configuration


def test_missing_api_key_fails_before_any_request(tmp_path, monkeypatch):
    monkeypatch.delenv("CS3_TEST_JUDGE_KEY", raising=False)
    config = JudgeConfig(
        base_url="https://judge.example.invalid/v1",
        api_key_env="CS3_TEST_JUDGE_KEY",
        cache_path=tmp_path / "judge.sqlite",
    )
    with pytest.raises(JudgeConfigError, match="CS3_TEST_JUDGE_KEY"):
        judge_knowledge(KNOWLEDGE, config)
    with pytest.raises(JudgeConfigError, match="no API key variable"):
        JudgeConfig(base_url="https://judge.example.invalid/v1", api_key_env="").validate()
    assert judge_knowledge([], config) == []  # nothing to judge, nothing to check


def test_api_key_is_sent_as_bearer_token(tmp_path, monkeypatch, judge_server):
    monkeypatch.setenv("CS3_TEST_JUDGE_KEY", "sk-test-123")
    server = judge_server("正确 一致")
    judge_knowledge(KNOWLEDGE[:1], loopback_config(server, tmp_path, api_key_env="CS3_TEST_JUDGE_KEY"))
    assert server.requests[0].headers["Authorization"] == "Bearer sk-test-123"


def test_from_env_precedence(monkeypatch):
    for var in ("CS3_JUDGE_BASE_URL", "CS3_JUDGE_MODEL", "CS3_JUDGE_API_KEY_ENV"):
        monkeypatch.delenv(var, raising=False)
    default = JudgeConfig.from_env()
    assert (default.base_url, default.model, default.api_key_env, default.temperature) == (
        "https://dashscope.aliyuncs.com/compatible-mode/v1",
        "qwen-max-2025-01-25",
        "DASHSCOPE_API_KEY",
        0.0,
    )
    assert JudgeConfig.from_env(preset="gpt-4o-mini").api_key_env == "OPENAI_API_KEY"
    # another provider's endpoint never inherits the DashScope key variable
    assert JudgeConfig.from_env(base_url="https://api.openai.com/v1").api_key_env == "OPENAI_API_KEY"
    assert JudgeConfig.from_env(base_url="http://localhost:11434/v1").api_key_env == ""
    monkeypatch.setenv("CS3_JUDGE_BASE_URL", "http://127.0.0.1:8000/v1")
    monkeypatch.setenv("CS3_JUDGE_MODEL", "Qwen/Qwen2.5-7B-Instruct")
    from_env = JudgeConfig.from_env(timeout=5.0)
    assert (from_env.base_url, from_env.model, from_env.timeout) == (
        "http://127.0.0.1:8000/v1",
        "Qwen/Qwen2.5-7B-Instruct",
        5.0,
    )
    assert from_env.validate() is None  # loopback: no key needed
    assert JudgeConfig.from_env(model="judge-x", base_url=None).model == "judge-x"  # None = not given
    with pytest.raises(JudgeConfigError, match="preset"):
        JudgeConfig.from_env(preset="no-such-judge")


def test_cli_helpers(monkeypatch, tmp_path):
    for var in ("CS3_JUDGE_BASE_URL", "CS3_JUDGE_MODEL", "CS3_JUDGE_API_KEY_ENV", "DASHSCOPE_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    from cs3_tasks.scoring.options import SCORE, add_run_options

    parser = argparse.ArgumentParser()
    add_run_options(parser, SCORE)

    def judge_config_from_args(args):
        return judge_config_from_options(vars(args))

    assert judge_config_from_args(parser.parse_args(["--no-judge"])) is None
    with pytest.raises(JudgeConfigError, match="DASHSCOPE_API_KEY"):
        judge_config_from_args(parser.parse_args([]))
    args = parser.parse_args(
        [
            "--judge-base-url",
            "http://localhost:8000/v1",
            "--judge-model",
            "local-judge",
            "--judge-concurrency",
            "2",
            "--judge-timeout",
            "7.5",
            "--judge-cache",
            str(tmp_path / "j.sqlite"),
        ]
    )
    config = judge_config_from_args(args)
    assert (config.base_url, config.model, config.max_concurrency, config.timeout, config.cache_path) == (
        "http://localhost:8000/v1",
        "local-judge",
        2,
        7.5,
        tmp_path / "j.sqlite",
    )
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    assert judge_config_from_args(parser.parse_args(["--judge-preset", "gpt-4o-mini"])).model == "gpt-4o-mini"


def test_bad_item_names_its_qid(tmp_path, judge_server):
    server = judge_server("正确")
    with pytest.raises(TypeError, match="q9"):
        judge_knowledge([KnowledgeItem("q", "a", None, qid="q9")], loopback_config(server, tmp_path))
    assert server.request_count == 0
