"""cs3-openai-audio against a loopback fake endpoint (tests/openai_audio_server.py)."""

from __future__ import annotations

import hashlib
import io
import json

import numpy as np
import pytest
import soundfile as sf
from lm_eval.api.instance import Instance
from lm_eval_runner import run_lm_eval
from openai_audio_server import REPLY_RATE, FakeAudioServer

from cs3_tasks.harness.speech import decode_response


def query_wav_bytes(seconds: float = 0.3, rate: int = 22_050) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    buffer = io.BytesIO()
    sf.write(buffer, (0.2 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), rate, format="WAV")
    return buffer.getvalue()


def instance(qid: str, instruction: str, audio, task: str = "cs3_knowledge", doc_id: int = 0) -> Instance:
    return Instance(
        request_type="generate_until",
        doc={"Qid": qid},
        idx=0,
        metadata=(task, doc_id, 1),
        arguments=(instruction, {"until": ["\n\n"], "do_sample": False}, {"audio": audio}),
    )


@pytest.fixture
def server():
    with FakeAudioServer() as fake:
        yield fake


def make_lm(server, tmp_path, **overrides):
    from cs3_tasks.models.openai_audio import OpenAIAudioLM

    args = {
        "base_url": server.base_url,
        "model": "fake-omni",
        "max_concurrency": 3,
        "timeout": 10,
        "max_retries": 2,
        "retry_wait": 0.01,
        "output_dir": str(tmp_path / "out"),
    }
    args.update(overrides)
    return OpenAIAudioLM(**args)


def test_request_shape_and_saved_speech(server, tmp_path):
    wav_file = tmp_path / "q1.wav"
    wav_file.write_bytes(query_wav_bytes())
    lm = make_lm(server, tmp_path, system_prompt="You are a helpful assistant.")
    requests = [
        instance("q0", "Answer the spoken question.", query_wav_bytes()),
        instance("q1", "Answer briefly.", str(wav_file), doc_id=1),
    ]
    out = lm.generate_until(requests)

    assert server.problems == []
    assert len(server.requests) == 2
    body = server.requests[0]
    assert body["modalities"] == ["text", "audio"]
    assert body["audio"] == {"voice": "alloy", "format": "wav"}
    assert body["model"] == "fake-omni"
    assert body["messages"][0] == {"role": "system", "content": "You are a helpful assistant."}
    for response, req in zip(out, requests):
        text, audio_path = decode_response(response)
        assert text == f"spoken: {req.args[0]}"  # transcript used when content is null
        samples, rate = sf.read(audio_path)
        assert rate == REPLY_RATE and len(samples) == REPLY_RATE // 2
        assert audio_path == str(tmp_path / "out" / "cs3_knowledge" / f"{req.doc['Qid']}.wav")
    rows = [json.loads(line) for line in (tmp_path / "out" / "knowledge.jsonl").read_text().splitlines()]
    assert {r["Qid"]: r["audio"] for r in rows} == {
        "q0": "cs3_knowledge/q0.wav",
        "q1": "cs3_knowledge/q1.wav",
    }
    assert not (tmp_path / "out" / "errors.jsonl").exists()


def test_retry_after_500_then_ok(server, tmp_path):
    lm = make_lm(server, tmp_path)
    out = lm.generate_until([instance("q0", "FAIL500ONCE please", query_wav_bytes())])
    text, audio_path = decode_response(out[0])
    assert text == "spoken: FAIL500ONCE please" and audio_path is not None
    assert len(server.requests) == 2  # one 500, one success
    assert not (tmp_path / "out" / "errors.jsonl").exists()


def test_permanent_failure_is_recorded_per_item(server, tmp_path):
    lm = make_lm(server, tmp_path)
    requests = [
        instance("ok1", "fine", query_wav_bytes()),
        instance("bad", "ALWAYS500", query_wav_bytes(), doc_id=1),
        instance("client", "BADREQUEST", query_wav_bytes(), doc_id=2),
        instance("noaudio", "fine too", b"not audio at all", doc_id=3),
        instance("ok2", "fine again", query_wav_bytes(), doc_id=4),
        # 3 of 6 failed: an incomplete run, not a mostly failed one (that stops lm-eval: test_reliability)
        instance("ok3", "fine at last", query_wav_bytes(), doc_id=5),
    ]
    out = lm.generate_until(requests)

    decoded = [decode_response(o) for o in out]
    assert decoded[0][0] == "spoken: fine" and decoded[4][0] == "spoken: fine again"
    for text, audio in decoded[1:4]:
        assert text == "" and audio is None
    errors = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    by_qid = {e["Qid"]: e["error"] for e in errors}
    assert set(by_qid) == {"bad", "client", "noaudio"}
    assert "HTTP 500" in by_qid["bad"] and "HTTP 400" in by_qid["client"]
    assert "noaudio" in by_qid["noaudio"] and "query audio" in by_qid["noaudio"]
    # 500 is retried (1 + max_retries attempts); 400 is not retried; unreadable audio never hits the server
    assert server.seen["ALWAYS500"] == 3 and server.seen["BADREQUEST"] == 1
    assert server.seen["fine too"] == 0


def test_resume_skips_answered_items(server, tmp_path):
    lm = make_lm(server, tmp_path)
    lm.generate_until([instance("q0", "first", query_wav_bytes())])
    lm2 = make_lm(server, tmp_path, resume=True)
    out = lm2.generate_until(
        [instance("q0", "first", query_wav_bytes()), instance("q1", "second", query_wav_bytes(), doc_id=1)]
    )
    assert server.seen["first"] == 1 and server.seen["second"] == 1
    assert decode_response(out[0])[0] == "spoken: first"


def test_loglikelihood_not_supported(server, tmp_path):
    lm = make_lm(server, tmp_path)
    with pytest.raises(NotImplementedError, match="loglikelihood"):
        lm.loglikelihood([])
    with pytest.raises(TypeError, match="unknown model_args"):
        make_lm(server, tmp_path, voise="alloy")


def test_registered_and_created_from_arg_string(server, tmp_path):
    from lm_eval.api import registry

    import cs3_tasks.models.openai_audio  # noqa: F401  (registers the name)

    cls = registry.get_model("cs3-openai-audio")
    lm = cls.create_from_arg_string(
        f"base_url={server.base_url},model=fake-omni,max_concurrency=2,output_dir={tmp_path / 'o'}",
        {"batch_size": "1", "max_batch_size": None, "device": None},
    )
    assert lm.max_concurrency == 2 and lm.output_dir == tmp_path / "o"


@pytest.mark.slow
def test_real_lm_eval_cli_on_demo_set(tmp_path):
    """The whole path: lm_eval CLI -> task doc_to_audio -> this wrapper -> fake endpoint -> task scoring,
    twice with --use_cache: the second run is answered from lm-eval's cache, not the endpoint."""
    import shutil

    from cs3_tasks.core import data

    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed")
    try:
        data.load_set("knowledge", data.dataset_location("demo"))
    except Exception as error:  # noqa: BLE001 - any reason the demo set cannot load
        pytest.skip(f"embedded demo dataset not available: {error}")
    out_dir = tmp_path / "out"
    with FakeAudioServer(speak=True) as server:

        def lm_eval(results_dir):
            run = run_lm_eval(
                "--model",
                "cs3-openai-audio",
                "--model_args",
                f"base_url={server.base_url},model=fake-omni,output_dir={out_dir}",
                "--tasks",
                "cs3_knowledge",
                "--limit",
                "2",
                "--log_samples",
                "--output_path",
                str(results_dir),
                "--use_cache",
                str(tmp_path / "lm_cache"),
                "--metadata",
                json.dumps({"dataset": "demo", "judge": "none"}),
            )
            assert run.returncode == 0, run.stderr[-3000:]
            return run

        first = lm_eval(tmp_path / "results1")
        assert server.problems == [] and len(server.requests) == 2
        second = lm_eval(tmp_path / "results2")
        assert len(server.requests) == 2, "the second run should be served from --use_cache"

    assert "acc_speech" in first.stdout and "acc_speech" in second.stdout
    rows = [json.loads(line) for line in (out_dir / "knowledge.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all((out_dir / r["audio"]).is_file() for r in rows)
    samples_files = list((tmp_path / "results1").rglob("samples_cs3_knowledge_*.jsonl"))
    assert samples_files, "no --log_samples file"
    logged = [json.loads(line) for line in samples_files[0].read_text().splitlines()]
    assert len(logged) == 2
    # each sample names its spoken response by content (cs3_tasks/harness/portable.py), never by this path
    heard = {f"sha256:{hashlib.sha256((out_dir / r['audio']).read_bytes()).hexdigest()}" for r in rows}
    for sample in logged:
        text = json.dumps(sample, ensure_ascii=False)
        assert str(out_dir) not in text and any(label in text for label in heard)
