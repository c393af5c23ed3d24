"""cs3-openai-audio against vLLM-Omni-shaped and several loopback servers (tests/openai_audio_server.py):
both reply shapes, both audio input parts, round robin over servers, and a server that dies mid-run."""

from __future__ import annotations

import json

import pytest
import soundfile as sf
from openai_audio_server import REPLY_RATE, FakeAudioServer
from test_models_openai_audio import instance, query_wav_bytes

from cs3_tasks.harness.speech import decode_response
from cs3_tasks.models.openai_audio import (
    EndpointError,
    OpenAIAudioLM,
    ServerRotation,
    audio_content_part,
    reply_parts,
    split_base_urls,
)


def make_lm(base_url: str, tmp_path, **overrides) -> OpenAIAudioLM:
    args = {
        "base_url": base_url,
        "model": "fake-omni",
        "max_concurrency": 2,
        "timeout": 10,
        "max_retries": 2,
        "retry_wait": 0.01,
        "output_dir": str(tmp_path / "out"),
    }
    args.update(overrides)
    return OpenAIAudioLM(**args)


def requests_for(n: int, tmp_path) -> list:
    wav = tmp_path / "q.wav"
    wav.write_bytes(query_wav_bytes())
    return [instance(f"q{i}", f"question {i}", str(wav), doc_id=i) for i in range(n)]


def test_reply_parts_reads_both_shapes():
    openai = {"choices": [{"message": {"content": None, "audio": {"data": "QUJD", "transcript": "hi"}}}]}
    assert reply_parts(openai) == ("hi", {"data": "QUJD", "transcript": "hi"})
    omni = {
        "choices": [
            {"message": {"content": "hello"}},
            {"message": {"content": "", "audio": {"data": "QUJD"}}},
        ]
    }
    assert reply_parts(omni) == ("hello", {"data": "QUJD"})
    audio_first = {
        "choices": [{"message": {"audio": {"data": "QUJD"}}}, {"message": {"content": [{"text": "a"}]}}]
    }
    assert reply_parts(audio_first) == ("a", {"data": "QUJD"})
    assert reply_parts({"choices": [{"message": {"content": "text only"}}]}) == ("text only", {})
    with pytest.raises(Exception, match="no choices"):
        reply_parts({"choices": []})


def test_audio_content_parts():
    assert audio_content_part("QUJD") == {
        "type": "input_audio",
        "input_audio": {"data": "QUJD", "format": "wav"},
    }
    assert audio_content_part("QUJD", "audio_url") == {
        "type": "audio_url",
        "audio_url": {"url": "data:audio/wav;base64,QUJD"},
    }
    with pytest.raises(ValueError, match="input_part"):
        audio_content_part("QUJD", "video_url")


def test_split_base_urls_and_round_robin():
    assert split_base_urls(" http://a/v1 ; http://b/v1;") == ["http://a/v1", "http://b/v1"]
    rotation = ServerRotation("http://a/v1;http://b/v1;http://c/v1")
    firsts = [rotation.order()[0].split("/")[2] for _ in range(6)]
    assert firsts == ["a", "b", "c", "a", "b", "c"]
    calls = []

    def post(url):
        calls.append(url)
        if "a" in url.split("/")[2]:
            raise EndpointError("down", retryable=True)
        return {"ok": url}

    rotation = ServerRotation(["http://a/v1", "http://b/v1"])
    assert rotation.send(post) == {"ok": "http://b/v1/chat/completions"}  # a failed, b answered
    with pytest.raises(EndpointError, match="bad"):  # a request the server rejects is not retried elsewhere
        ServerRotation(["http://b/v1", "http://c/v1"]).send(
            lambda url: (_ for _ in ()).throw(EndpointError("bad", retryable=False))
        )


@pytest.mark.parametrize("input_part", ["input_audio", "audio_url"])
def test_vllm_omni_shape_keeps_speech(tmp_path, input_part):
    with FakeAudioServer(shape="vllm-omni", input_part=input_part) as server:
        out = make_lm(server.base_url, tmp_path, input_part=input_part).generate_until(
            requests_for(3, tmp_path)
        )
        problems = list(server.problems)
    assert problems == []
    for i, response in enumerate(out):
        text, audio_path = decode_response(response)
        assert text == f"spoken: question {i}"
        assert audio_path is not None and sf.info(audio_path).samplerate == REPLY_RATE


def test_wrong_input_part_is_a_clear_item_failure(tmp_path):
    from cs3_tasks.models.base import RunMostlyFailed

    with FakeAudioServer(input_part="audio_url") as server, pytest.raises(RunMostlyFailed, match="1 of 1"):
        make_lm(server.base_url, tmp_path).generate_until(requests_for(1, tmp_path))
    error = json.loads((tmp_path / "out" / "errors.jsonl").read_text().splitlines()[0])["error"]
    assert "HTTP 400" in error and "expected one audio_url part" in error


def test_requests_spread_over_servers_and_survive_one_dying(tmp_path):
    n = 12
    with FakeAudioServer() as steady, FakeAudioServer(shape="vllm-omni", die_after=2) as dying:
        lm = make_lm(f"{steady.base_url};{dying.base_url}", tmp_path, max_concurrency=1)
        out = lm.generate_until(requests_for(n, tmp_path))
        served = {"steady": len(steady.requests), "dying": len(dying.requests)}
    for i, response in enumerate(out):  # every item answered, with speech, whichever server took it
        text, audio_path = decode_response(response)
        assert text == f"spoken: question {i}" and audio_path is not None
    assert not (tmp_path / "out" / "errors.jsonl").exists()
    # round robin: the second server answered its turns until it died (2 answered), the first took the
    # rest, the request the dying server dropped included; none was lost or answered twice
    assert served["dying"] == 2
    assert served["steady"] == n - 2
    rows = [json.loads(line) for line in (tmp_path / "out" / "knowledge.jsonl").read_text().splitlines()]
    assert sorted(row["Qid"] for row in rows) == sorted(f"q{i}" for i in range(n))


def test_every_server_down_fails_each_item_then_stops_the_run(tmp_path):
    from cs3_tasks.models.base import RunMostlyFailed

    with FakeAudioServer(die_after=0) as a, FakeAudioServer(die_after=0) as b:
        urls = f"{a.base_url};{b.base_url}"
    with pytest.raises(RunMostlyFailed, match="2 of 2 items failed"):  # after every item is recorded
        make_lm(urls, tmp_path, max_retries=1).generate_until(requests_for(2, tmp_path))
    errors = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert sorted(e["Qid"] for e in errors) == ["q0", "q1"]
