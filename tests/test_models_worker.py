"""The five worker-run models (cs3-glm-4-voice, cs3-kimi-audio, cs3-minicpm-o, cs3-baichuan-omni,
cs3-vita-audio): each through the real worker protocol (a subprocess of this venv's Python with fakes of
the official code on its path, tests/fakes/), a worker that crashes mid-run, one that hangs, the message
naming what to install, in-process mode, and a real ``python -m lm_eval`` run on the demo set."""

from __future__ import annotations

import ast
import glob
import io
import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from lm_eval.api.instance import Instance
from lm_eval_runner import run_lm_eval

from cs3_tasks.harness.speech import decode_payload, decode_response
from cs3_tasks.models import worker_models
from cs3_tasks.models.worker import ModelCodeMissing, WorkerError

FAKES = Path(__file__).parent / "fakes"
COMMON = FAKES / "common"
WRAPPERS = {
    "glm4_voice": worker_models.GLM4VoiceLM,
    "kimi_audio": worker_models.KimiAudioLM,
    "minicpm_o": worker_models.MiniCPMOLM,
    "baichuan_omni": worker_models.BaichuanOmniLM,
    "vita_audio": worker_models.VitaAudioLM,
}


def wav_bytes(seconds: float, rate: int = 22_050) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    buffer = io.BytesIO()
    sf.write(buffer, (0.2 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), rate, format="WAV")
    return buffer.getvalue()


def instance(qid: str, seconds: float = 0.8, doc_id: int = 0, task: str = "cs3_knowledge") -> Instance:
    return Instance(
        request_type="generate_until",
        doc={"Qid": qid},
        idx=0,
        metadata=(task, doc_id, 1),
        arguments=("请回答音频中的问题。", {"until": ["\n\n"]}, {"audio": wav_bytes(seconds)}),
    )


def fake_options(model: str, tmp_path: Path) -> dict:
    """model_args that point a wrapper at the fakes of its official code."""
    site = FAKES / model / "site"
    pythonpath = os.pathsep.join(str(p) for p in (site, COMMON) if p.is_dir())
    options: dict = {"pythonpath": pythonpath}
    if model in ("glm4_voice", "baichuan_omni", "vita_audio"):
        options["repo"] = str(FAKES / model / "repo")
    if model == "minicpm_o":  # the reference voice lives in the OpenBMB/MiniCPM-o checkout
        voice = tmp_path / "MiniCPM-o" / "assets" / "input_examples" / "assistant_female_voice.wav"
        voice.parent.mkdir(parents=True)
        voice.write_bytes(wav_bytes(1.0, 16_000))
        options["repo"] = str(tmp_path / "MiniCPM-o")
    if model == "baichuan_omni":
        options["pretrained"] = "/ckpt/Baichuan-Omni-1d5"
    return options


@pytest.fixture
def calls(tmp_path, monkeypatch):
    """The fakes' record of every official call (JSON lines), read after the run."""
    path = tmp_path / "official_calls.jsonl"
    monkeypatch.setenv("CS3_FAKE_CALLS", str(path))

    def read(name: str | None = None) -> list[dict]:
        rows = (
            [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
            if path.exists()
            else []
        )
        return [row for row in rows if name is None or row["call"] == name]

    return read


def make_lm(model: str, tmp_path: Path, **overrides):
    args = {
        **fake_options(model, tmp_path),
        "output_dir": str(tmp_path / "out"),
        "init_timeout": 300,
        "item_timeout": 300,
        **overrides,
    }
    return WRAPPERS[model](**args)


EXPECTED = {  # model -> (text pattern, output sample rate)
    "glm4_voice": (r"heard (\d+) speech tokens", 22_050),
    "kimi_audio": (r"kimi heard (\d+) frames", 24_000),
    "minicpm_o": (r"minicpm heard (\d+) samples", 24_000),
    "baichuan_omni": (r"baichuan heard (\d+) samples", 24_000),
    "vita_audio": (r"vita heard (\d+) frames", 22_050),
}


@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(WRAPPERS))
def test_each_model_through_its_worker(model, tmp_path, calls):
    lm = make_lm(model, tmp_path)
    try:
        assert lm.info["sample_rate"] == EXPECTED[model][1] and lm.info["max_batch"] == 1
        out = lm.generate_until([instance("q0", 0.8), instance("q1", 0.4, 1)])
    finally:
        lm.close()
    pattern, rate = EXPECTED[model]
    counts = []
    for response, qid in zip(out, ["q0", "q1"]):
        text, audio_path = decode_response(response)
        match = re.fullmatch(pattern, text)
        assert match, (model, text)
        counts.append(int(match.group(1)))
        assert audio_path.endswith(f"cs3_knowledge/{qid}.wav")
        audio, sr = sf.read(audio_path)
        assert sr == rate and len(audio) > 0
    assert counts[0] > counts[1] > 0  # each answer comes from its own query
    rows = [json.loads(line) for line in (tmp_path / "out" / "knowledge.jsonl").read_text().splitlines()]
    assert [r["Qid"] for r in rows] == ["q0", "q1"] and all(r["audio"] and not r.get("error") for r in rows)
    assert not (tmp_path / "out" / "errors.jsonl").exists()
    assert not lm.scratch.exists(), "close() removes the scratch directory"
    check_official_calls(model, calls)


def check_official_calls(model: str, calls) -> None:
    """What each official entry point received: prompts, decoding settings, paths."""
    if model == "glm4_voice":
        load = calls("AutoModel.from_pretrained")[0]
        assert load["path"] == "THUDM/glm-4-voice-9b" and load["kwargs"]["trust_remote_code"] == "True"
        generate = calls("glm.generate")
        assert len(generate) == 2
        prompt = generate[0]["prompt"]
        assert prompt.startswith(
            "<|system|>\nFAKE audio prompt: User will provide you with a speech instruction."
        )
        assert "<|user|>\n<|begin_of_audio|><|audio_0|>" in prompt
        assert prompt.endswith("<|end_of_audio|><|assistant|>streaming_transcription\n")
        assert {k: generate[0][k] for k in ("do_sample", "temperature", "top_p", "max_new_tokens")} == {
            "do_sample": True,
            "temperature": 0.2,
            "top_p": 0.8,
            "max_new_tokens": 2000,
        }
        assert calls("AudioDecoder")[0]["config_path"].endswith("repo/glm-4-voice-decoder/config.yaml")
    elif model == "kimi_audio":
        assert calls("KimiAudio") == [
            {"call": "KimiAudio", "model_path": "moonshotai/Kimi-Audio-7B-Instruct", "load_detokenizer": True}
        ]
        generate = calls("KimiAudio.generate")[0]
        assert generate["output_type"] == "both"
        assert [{k: v for k, v in m.items() if k != "content"} for m in generate["chats"]] == [
            {"role": "user", "message_type": "audio"}
        ]
        assert (
            generate["audio_temperature"],
            generate["audio_top_k"],
            generate["text_temperature"],
            generate["text_top_k"],
        ) == (0.8, 10, 0.0, 5)  # infer.py's sampling_params
    elif model == "minicpm_o":
        load = calls("AutoModel.from_pretrained")[0]
        assert load["path"] == "openbmb/MiniCPM-o-2_6"
        assert {k: load["kwargs"][k] for k in ("trust_remote_code", "init_audio", "init_tts")} == {
            "trust_remote_code": "True",
            "init_audio": "True",
            "init_tts": "True",
        }
        assert calls("init_tts") and calls("get_sys_prompt")[0]["mode"] == "audio_assistant"
        assert calls("get_sys_prompt")[0]["ref_audio_samples"] == 16_000  # the reference voice, 16 kHz
        chat = calls("chat")[0]
        assert chat["roles"] == ["user", "user"] and chat["system_parts"] == 3
        assert chat["query_samples"] == 12_800  # 0.8 s at 16 kHz
        assert (
            chat["sampling"],
            chat["max_new_tokens"],
            chat["use_tts_template"],
            chat["generate_audio"],
            chat["kwargs"],
        ) == (True, 128, True, True, {"temperature": 0.3})
    elif model == "baichuan_omni":
        load = calls("AutoModelForCausalLM.from_pretrained")[0]
        assert load["path"] == "/ckpt/Baichuan-Omni-1d5" and load["kwargs"]["trust_remote_code"] == "True"
        assert calls("bind_processor")[0]["kwargs"] == {"training": False, "relative_path": "/"}
        assert calls("Cosy24kVocoder.from_pretrained")[0]["model_path"].endswith(
            "repo/third_party/cosy24k_vocoder/hift.pt"
        )
        text = calls("processor")[0]["texts"][0]
        assert text.startswith("<B_SYS>FAKE: 请用【邻家女声】这个声音回答问题。<C_Q><audio_start_baichuan>")
        assert text.endswith("<audio_end_baichuan><audiotext_start_baichuan><C_A>")
    elif model == "vita_audio":
        init = calls("S2SInference")[0]
        assert (
            init["model_name_or_path"],
            init["audio_tokenizer_type"],
            init["device_map"],
            init["torch_dtype"],
        ) == ("VITA-MLLM/VITA-Audio-Plus-Vanilla", "sensevoice_glm4voice", "cuda:0", "torch.bfloat16")
        assert init["chat_template"] == "fake qwen2 chat template"  # the repo's evaluation/ on sys.path
        run = calls("run_infer")[0]
        assert (run["mode"], run["do_sample"], run["message"]) == ("luke", False, "")


def test_worker_crash_mid_run_fails_that_item_only_and_restarts(tmp_path, calls):
    lm = make_lm("kimi_audio", tmp_path)
    try:
        out = lm.generate_until([instance("q0"), instance("crash", doc_id=1), instance("q2", doc_id=2)])
        assert lm.restarts == 1
    finally:
        lm.close()
    assert decode_response(out[0])[0].startswith("kimi heard") and decode_response(out[2])[0].startswith(
        "kimi"
    )
    payload = decode_payload(out[1])
    assert payload.text is None and payload.audio is None
    assert "cs3_knowledge/crash" in payload.problem and "exited (code 17)" in payload.problem
    assert "fake: crashing on" in payload.problem  # the worker's last stderr lines
    errors = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert [e["Qid"] for e in errors] == ["crash"] and "worker-kimi_audio.log" in errors[0]["error"]
    rows = {
        r["Qid"]: r for r in map(json.loads, (tmp_path / "out" / "knowledge.jsonl").read_text().splitlines())
    }
    assert rows["q0"]["audio"] and rows["q2"]["audio"] and rows["crash"]["error"]
    assert len(calls("KimiAudio")) == 2  # the model was loaded again by the fresh worker


@pytest.mark.slow
def test_worker_hang_is_killed_and_the_item_named(tmp_path, calls):
    # The hanging fake sleeps for an hour: the timeout always fires, however loaded the machine; the other
    # items take milliseconds in the fake, far below it.
    lm = make_lm("vita_audio", tmp_path, item_timeout=10)
    try:
        out = lm.generate_until([instance("q0"), instance("hang", doc_id=1), instance("q2", doc_id=2)])
    finally:
        lm.close()
    problem = decode_payload(out[1]).problem
    assert "cs3_knowledge/hang" in problem and "gave no answer within 10 s" in problem and "killed" in problem
    assert decode_response(out[0])[0].startswith("vita heard") and decode_response(out[2])[0].startswith(
        "vita"
    )
    assert lm.restarts == 1


@pytest.mark.slow
def test_after_max_restarts_the_remaining_items_fail_fast(tmp_path, calls):
    lm = make_lm("glm4_voice", tmp_path, max_restarts=0)
    try:
        # 2 of 5 fail: an incomplete run, not a mostly failed one (that stops lm-eval: test_reliability)
        qids = ["q0", "q1", "q3", "crash", "q2"]
        out = lm.generate_until([instance(qid, doc_id=i) for i, qid in enumerate(qids)])
    finally:
        lm.close()
    assert all(decode_response(o)[0].startswith("heard") for o in out[:3])
    assert "exited (code 17)" in decode_payload(out[3]).problem
    late = decode_payload(out[4]).problem
    assert "cs3_knowledge/q2" in late and "not restarting it again (max_restarts=0)" in late
    assert "exited (code 17)" in late  # the cause is named
    assert len(calls("AutoModel.from_pretrained")) == 1


@pytest.mark.slow
def test_resume_skips_answered_items_without_asking_the_worker(tmp_path, calls):
    lm = make_lm("kimi_audio", tmp_path)
    try:
        lm.generate_until([instance("q0")])
    finally:
        lm.close()
    again = make_lm("kimi_audio", tmp_path, resume=True)
    try:
        out = again.generate_until([instance("q0"), instance("q1", doc_id=1)])
    finally:
        again.close()
    assert [decode_response(o)[0] for o in out] == ["kimi heard 10 frames", "kimi heard 10 frames"]
    assert len(calls("KimiAudio.generate")) == 2  # q0 once (first run), q1 once (second run)


INSTALL_HINTS = {
    "glm4_voice": "git clone --recurse-submodules https://github.com/THUDM/GLM-4-Voice",
    "kimi_audio": "git clone --recurse-submodules https://github.com/MoonshotAI/Kimi-Audio",
    "minicpm_o": "requirements_o2.6.txt",
    "baichuan_omni": "git clone https://github.com/baichuan-inc/Baichuan-Omni-1.5",
    "vita_audio": "git clone --recurse-submodules https://github.com/VITA-MLLM/VITA-Audio",
}


@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(WRAPPERS))
def test_missing_model_code_says_what_to_install(model, tmp_path):
    # No fakes on the path (and, for repo models, a repo without the official files): the official code is
    # not importable in this Python, as in a fresh environment.
    empty = tmp_path / "empty-checkout"
    empty.mkdir()
    args = {"output_dir": str(tmp_path / "out"), "init_timeout": 300}
    if model in ("glm4_voice", "baichuan_omni", "vita_audio"):
        args["repo"] = str(empty)
    if model == "baichuan_omni":
        args["pretrained"] = "/ckpt/Baichuan-Omni-1d5"
    if model == "minicpm_o":
        args["ref_audio"] = str(tmp_path / "voice.wav")
    with pytest.raises(ModelCodeMissing) as info:
        WRAPPERS[model](**args)
    message = str(info.value)
    assert message.startswith(WRAPPERS[model].model_name) and INSTALL_HINTS[model] in message
    assert "python=" in message


def other_python() -> str | None:
    """An interpreter other than this venv's (without our packages), preferably an older Python."""
    candidates = [os.environ.get("CS3_TEST_OTHER_PYTHON", "")]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.[89].*/bin/python")))
    candidates += ["/usr/bin/python3"]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def test_the_worker_speaks_the_protocol_under_another_python(tmp_path):
    python = other_python()
    if python is None:
        pytest.skip("no other Python interpreter on this machine")
    # That Python has neither our packages nor torch: the worker starts (standard library only), says hello,
    # and reports the missing model code through the protocol.
    with pytest.raises(ModelCodeMissing, match="Kimi-Audio") as info:
        worker_models.KimiAudioLM(python=python, output_dir=str(tmp_path / "out"))
    assert "No module named" in str(info.value)
    assert "git clone --recurse-submodules https://github.com/MoonshotAI/Kimi-Audio" in str(info.value)


def test_worker_modules_import_only_the_standard_library():
    """At module level a worker imports the standard library and workerlib; the model's code is imported
    inside its Backend; nothing from cs3_tasks (it runs with another Python)."""
    workers = Path(worker_models.__file__).parent / "workers"
    for path in sorted(workers.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] if node.level == 0 else []
            else:
                continue
            for name in names:
                assert not name.startswith("cs3_tasks"), (path.name, name)
        for node in tree.body:
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.If):  # the "package or script" import of workerlib
                names = [
                    alias.name for sub in ast.walk(node) if isinstance(sub, ast.Import) for alias in sub.names
                ]
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top in ("__future__", "workerlib"), (path.name, name)


def test_protocol_version_mismatch_is_a_clear_error(tmp_path, monkeypatch):
    from cs3_tasks.models.workers import workerlib

    monkeypatch.setattr(workerlib, "PROTOCOL_VERSION", 99)  # this side only: the subprocess still says 1
    with pytest.raises(WorkerError, match="speaks protocol 1, this cs3-bench speaks 99"):
        worker_models.KimiAudioLM(output_dir=str(tmp_path / "out"))


def test_bad_python_and_unknown_option(tmp_path):
    with pytest.raises(FileNotFoundError, match="python=/no/such/python"):
        worker_models.KimiAudioLM(python="/no/such/python", output_dir=str(tmp_path))
    with pytest.raises(TypeError, match="unknown model_args"):
        worker_models.KimiAudioLM(no_such_option=1, output_dir=str(tmp_path))


def test_in_process_mode_runs_the_same_worker_code(tmp_path, calls, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # in_process adds the fakes to this process's path
    for name in [m for m in sys.modules if m.startswith("kimia_infer") or m == "fake_calls"]:
        monkeypatch.delitem(sys.modules, name)
    lm = make_lm("kimi_audio", tmp_path, in_process=True, audio_temperature=0.5)
    try:
        out = lm.generate_until([instance("q0")])
    finally:
        lm.close()
    assert decode_response(out[0])[0] == "kimi heard 10 frames"
    assert calls("KimiAudio.generate")[0]["audio_temperature"] == 0.5  # a model option, typed as the default


def test_registered_names_resolve():
    from lm_eval.api.registry import get_model

    for name, cls in [
        ("cs3-glm-4-voice", worker_models.GLM4VoiceLM),
        ("cs3-kimi-audio", worker_models.KimiAudioLM),
        ("cs3-minicpm-o", worker_models.MiniCPMOLM),
        ("cs3-baichuan-omni", worker_models.BaichuanOmniLM),
        ("cs3-vita-audio", worker_models.VitaAudioLM),
    ]:
        assert get_model(name) is cls


@pytest.mark.slow
def test_lm_eval_cli_on_the_demo_set(tmp_path, calls):
    """python -m lm_eval --model cs3-glm-4-voice ... --device cpu --tasks cs3_knowledge --limit 3."""
    from cs3_tasks.core import data

    try:
        data.load_set("knowledge", data.dataset_location("demo"))
    except Exception as error:  # noqa: BLE001 - any reason the demo set cannot load
        pytest.skip(f"embedded demo dataset not available: {error}")
    options = fake_options("glm4_voice", tmp_path)
    out_dir = tmp_path / "out"
    model_args = f"repo={options['repo']},pythonpath={options['pythonpath']},output_dir={out_dir}"
    run = run_lm_eval(
        "--model",
        "cs3-glm-4-voice",
        "--model_args",
        model_args,
        "--device",
        "cpu",
        "--tasks",
        "cs3_knowledge",
        "--limit",
        "3",
        "--metadata",
        json.dumps({"dataset": "demo", "judge": "none"}),
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "acc_speech" in run.stdout
    rows = [json.loads(line) for line in (out_dir / "knowledge.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(
        r["text"].startswith("heard") and (out_dir / r["audio"]).is_file() for r in rows
    )
    load = calls("AutoModel.from_pretrained")[0]
    assert load["kwargs"]["device_map"] == "{'': 'cpu'}"  # lm-eval's --device reaches the model
