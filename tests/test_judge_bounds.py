"""The judge's exchange is bounded (whole-request timeout, request and reply sizes) and never writes or prints
a credential (issue 12, items 4 and 8). Loopback servers only; time bounds are generous (< 4x the timeout)."""

from __future__ import annotations

import time

import pytest

from cs3_tasks.judge import (
    JudgeAuthError,
    JudgeConfig,
    JudgeConfigError,
    KnowledgeItem,
    judge_knowledge,
    redact,
)
from cs3_tasks.judge import engine as judge_engine
from cs3_tasks.judge import prompts as judge_prompts

try:
    from judge_server import FakeJudgeServer, Reply
except ImportError:  # pragma: no cover
    from tests.judge_server import FakeJudgeServer, Reply

ITEM = KnowledgeItem(
    "谁写了Hamlet？", "莎士比亚", "是 William Shakespeare 写的。", "William Shakespeare", "q0"
)
KEY = "sk-very-secret-0123456789"


def _config(base_url: str, tmp_path, **overrides) -> JudgeConfig:
    settings = {
        "base_url": base_url,
        "model": "fake-judge",
        "api_key_env": "",
        "cache_path": tmp_path / "j.sqlite",
        "timeout": 2.0,
        "max_retries": 0,
        "backoff_initial": 0.01,
        "backoff_max": 0.05,
    }
    return JudgeConfig(**{**settings, **overrides})


# ------------------------------------------------------------------------------------------- item 4: bounds


def test_timeout_bounds_the_whole_request_not_each_read(tmp_path):
    # one byte every 0.2 s: no read ever waits 1 s, the whole body would take about a minute
    with FakeJudgeServer("正确 一致", mode="drip", drip_interval=0.2) as server:
        start = time.monotonic()
        [verdict] = judge_knowledge([ITEM], _config(server.base_url, tmp_path, timeout=1.0))
        elapsed = time.monotonic() - start
    assert verdict.value is None and "timeout after 1 s" in verdict.error
    assert elapsed < 20.0  # the body alone would take a minute; the bound leaves room for a loaded machine


def test_a_long_reply_is_cut_with_a_note_and_the_cached_verdict_is_the_same(tmp_path):
    long_reply = "正确 " + "很长的解释。" * 20_000  # 120 k characters
    with FakeJudgeServer(long_reply) as server:
        config = _config(server.base_url, tmp_path)
        [first] = judge_knowledge([ITEM], config)
        [again] = judge_knowledge([ITEM], config)
        assert server.request_count == 1
    assert first.value is True and len(first.raw) == judge_engine.MAX_REPLY_CHARS
    assert "cut to its first" in first.note
    assert again == first


def test_a_huge_reply_body_is_not_read_to_the_end(tmp_path):
    with FakeJudgeServer("正确 " + "x" * (judge_engine.MAX_REPLY_BYTES + 10)) as server:
        [verdict] = judge_knowledge([ITEM], _config(server.base_url, tmp_path))
    assert verdict.value is None and "larger than" in verdict.error
    assert len(verdict.raw) <= 2000


def test_a_huge_response_is_sent_cut_with_a_note(tmp_path):
    huge = KnowledgeItem("谁写了Hamlet？", "莎士比亚", "莎士比亚" * 500_000, None, "q1")  # 2 M characters
    with FakeJudgeServer("正确 一致") as server:
        [verdict] = judge_knowledge([huge], _config(server.base_url, tmp_path))
        sent = server.requests[0].prompt
    assert verdict.value is True
    assert len(sent) <= judge_engine.MAX_MESSAGE_CHARS
    assert sent.startswith(judge_prompts.knowledge_prompt(huge)[:50]) and sent.endswith(
        judge_prompts.knowledge_prompt(huge)[-50:]
    )
    assert "judge request cut" in verdict.note


# ------------------------------------------------------------------------------------------- item 8: secrets


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://user:pw@judge.example/v1", "http://***@judge.example/v1"),
        ("https://h/v1?api-version=2024&api-key=abc", "https://h/v1?api-version=2024&api-key=***"),
        ("url: http://h/v1?key=abc&sig=zz, path", "url: http://h/v1?key=***&sig=***, path"),
        ("echo: Authorization: Bearer sk-abcdefgh1234", "echo: Authorization: Bearer ***"),
        (f"the key {KEY} again {KEY}", "the key *** again ***"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        (None, None),
    ],
)
def test_redact(text, expected):
    assert redact(text, KEY) == expected


def test_the_query_string_of_the_base_url_is_kept_in_requests(tmp_path):
    with FakeJudgeServer("正确 一致") as server:
        config = _config(server.base_url + "?api-version=2024-02&api-key=" + KEY, tmp_path)
        [verdict] = judge_knowledge([ITEM], config)
        assert server.requests[0].path == f"/v1/chat/completions?api-version=2024-02&api-key={KEY}"
    assert verdict.value is True
    assert KEY not in repr(config) and KEY not in config.public_base_url


def test_a_server_echoing_the_key_never_gets_it_into_verdicts(tmp_path, monkeypatch):
    monkeypatch.setenv("CS3_TEST_JUDGE_KEY", KEY)

    def echo(request):
        auth = request.headers.get("Authorization", "")
        if request.index == 0:
            return Reply.error(401, message=f"bad token {auth}")
        return f"正确 your header was {auth} and the key {auth.split()[-1]}"

    with FakeJudgeServer(echo) as server:
        config = _config(server.base_url, tmp_path, api_key_env="CS3_TEST_JUDGE_KEY")
        with pytest.raises(JudgeAuthError) as refused:  # 401 stops the run (issue 12 item 3)
            judge_knowledge([ITEM], config)
        [accepted] = judge_knowledge([ITEM], config)
        assert server.requests[0].headers["Authorization"] == f"Bearer {KEY}"  # still sent
    assert "401" in str(refused.value) and KEY not in str(refused.value)
    assert accepted.value is True and KEY not in accepted.raw


def test_connection_errors_and_config_errors_print_no_credentials(tmp_path, monkeypatch):
    from cs3_tasks.judge import JudgeUnreachableError

    config = _config(f"http://user:pw-{KEY}@127.0.0.1:9/v1?api-key={KEY}", tmp_path)
    with pytest.raises(JudgeUnreachableError) as unreachable:  # nothing listens there
        judge_knowledge([ITEM], config)
    assert KEY not in str(unreachable.value) and "127.0.0.1:9" in str(unreachable.value)
    with pytest.raises(JudgeConfigError) as bad_url:
        JudgeConfig(base_url=f"ftp://user:{KEY}@h/v1").validate()
    assert KEY not in str(bad_url.value)
    monkeypatch.delenv(KEY, raising=False)
    with pytest.raises(JudgeConfigError) as key_as_name:  # the key passed where its variable's name goes
        JudgeConfig(base_url=f"https://user:{KEY}@judge.example.invalid/v1", api_key_env=KEY).validate()
    assert KEY not in str(key_as_name.value) and "not an environment variable name" in str(key_as_name.value)
