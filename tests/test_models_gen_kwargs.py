"""lm-eval's gen_kwargs and the task's instruction reach the wrappers' decoders (issue 23.3).

The ASR and TTS stages of cs3-cascade are replaced by stand-ins: what is checked is what the LLM is asked.
"""

from __future__ import annotations

import numpy as np
import pytest
from lm_eval.api.instance import Instance
from openai_audio_server import FakeAudioServer
from tiny_llm import build_tiny_qwen2

from cs3_tasks.models.base import SpeechReply, generation

BELLE_INSTRUCTION = "Listen to the user's question and answer it in English."
CS3_INSTRUCTION = "请回答音频中的问题。"


def request(qid: str, instruction: str, gen_kwargs: dict, doc: dict | None = None, task="cs3_open_ended"):
    return Instance(
        request_type="generate_until",
        doc={"Qid": qid, **(doc or {})},
        idx=0,
        metadata=(task, 0, 1),
        arguments=(instruction, gen_kwargs, {"audio": f"{qid}.wav"}),
    )


def with_stand_ins(lm, monkeypatch):
    monkeypatch.setattr(lm, "transcribe", lambda reqs: [f"question {r.qid}" for r in reqs])
    tone = np.sin(np.linspace(0, 200, 8000)).astype(np.float32)
    monkeypatch.setattr(lm, "speak", lambda text: SpeechReply(text=text, audio=tone, sample_rate=16000))
    return lm


def test_generation_reads_lm_eval_gen_kwargs():
    gen = generation({"until": ["\n\n"], "max_gen_toks": "64", "do_sample": "false", "temperature": 0.7})
    assert (gen.max_tokens, gen.until, gen.do_sample, gen.temperature) == (64, ("\n\n",), False, 0.0)
    assert gen.cap(None) == 64 and gen.cap(32) == 32 and gen.cap(128) == 64
    assert gen.cut("one\n\ntwo") == "one"
    sampled = generation({"do_sample": True, "temperature": 0.7})
    assert (sampled.max_tokens, sampled.until, sampled.temperature) == (None, (), 0.7)


def test_cascade_endpoint_honours_gen_kwargs_and_sends_the_belle_instruction(tmp_path, monkeypatch):
    """--gen_kwargs max_gen_toks reaches the LLM (it used its own 512); BELLE's instruction (the answer
    language) is sent by default, the cs3 sets' is not."""
    from cs3_tasks.models.cascade import CascadeLM

    with FakeAudioServer() as server:
        lm = CascadeLM(
            llm_base_url=server.base_url,
            llm_model="fake-llm",
            output_dir=str(tmp_path / "out"),
            retry_wait=0.01,
        )
        with_stand_ins(lm, monkeypatch)
        gen_kwargs = {"until": ["ZZZ"], "max_gen_toks": 40, "do_sample": False, "temperature": 0.0}
        belle_doc = {"cs3_set": "belle_eval_s2s", "cs3_pair": "zh2en"}
        lm.generate_until(
            [
                request("b1", BELLE_INSTRUCTION, gen_kwargs, belle_doc, task="belle_s2s_zh2en"),
                request("k1", CS3_INSTRUCTION, gen_kwargs),
            ]
        )
        bodies = {b["messages"][-1]["content"].split()[-1]: b for b in server.requests}
    assert {b["max_tokens"] for b in bodies.values()} == {40}
    assert all(b["stop"] == ["ZZZ"] and b["temperature"] == 0.0 for b in bodies.values())
    assert bodies["b1"]["messages"][-1]["content"] == f"{BELLE_INSTRUCTION}\n\nquestion b1"
    assert bodies["k1"]["messages"][-1]["content"] == "question k1"


def test_cascade_send_instruction_can_be_forced(tmp_path):
    from cs3_tasks.models.base import SpeechRequest
    from cs3_tasks.models.cascade import CascadeLM

    cs3 = SpeechRequest(index=0, task="cs3_knowledge", qid="q", instruction=CS3_INSTRUCTION, audio=None)
    for value, sent in (("true", True), ("false", False), ("auto", False)):
        lm = CascadeLM(llm_base_url="http://127.0.0.1:9/v1", llm_model="m", send_instruction=value)
        assert lm.sends_instruction(cs3) is sent
    with pytest.raises(ValueError, match="send_instruction"):
        CascadeLM(llm_base_url="http://127.0.0.1:9/v1", llm_model="m", send_instruction="sometimes")


@pytest.fixture(scope="module")
def tiny_llm_dir(tmp_path_factory):
    return build_tiny_qwen2(tmp_path_factory.mktemp("tiny-qwen2"))


def test_cascade_hf_caps_each_answer_at_max_gen_toks(tiny_llm_dir, tmp_path, monkeypatch):
    """HF generation stops at lm-eval's max_gen_toks (not the wrapper's own cap), and a model_arg
    max_new_tokens caps it further; a batch never mixes two settings."""
    from cs3_tasks.models import cascade

    lm = cascade.CascadeLM(llm=str(tiny_llm_dir), batch_size=4, output_dir=str(tmp_path / "o"), device="cpu")
    with_stand_ins(lm, monkeypatch)
    calls = []
    generate = lm.hf["model"].generate
    monkeypatch.setattr(
        lm.hf["model"], "generate", lambda **kw: (calls.append(kw), generate(**kw))[1], raising=False
    )
    short, long = {"max_gen_toks": 3}, {"max_gen_toks": 7}
    lm.generate_until([request("a", "", short), request("b", "", short), request("c", "", long)])
    assert [(c["max_new_tokens"], len(c["input_ids"])) for c in calls] == [(3, 2), (7, 1)]
    assert all(c["do_sample"] is False for c in calls)

    capped = cascade.CascadeLM(
        llm=str(tiny_llm_dir), max_new_tokens=2, output_dir=str(tmp_path / "p"), device="cpu"
    )
    assert capped.token_cap(generation(long)) == 2
    assert capped.token_cap(generation({})) == 2
    assert lm.token_cap(generation({})) == cascade.FALLBACK_MAX_NEW_TOKENS
