"""The speech-to-speech wrapper template examples/my_s2s_model.py (issue 23.5a): a SpeechLM that lm-eval runs
on the demo set, registered by importing the file (or by running it as lm-eval's command line)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from lm_eval.api.instance import Instance

from cs3_tasks.cli import evaluate
from cs3_tasks.core import data
from cs3_tasks.harness.speech import decode_response

TEMPLATE = Path(__file__).resolve().parents[1] / "examples" / "my_s2s_model.py"
needs_demo = pytest.mark.skipif(
    not (data.demo_dataset_dir() / "README.md").is_file(), reason="embedded demo dataset not built"
)


@pytest.fixture(scope="module")
def template():
    spec = importlib.util.spec_from_file_location("my_s2s_model", TEMPLATE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_template_is_small_and_subclasses_the_wrapper_base(template):
    from cs3_tasks.models.base import SpeechLM

    assert issubclass(template.MyS2SModel, SpeechLM)
    assert len(TEMPLATE.read_text().splitlines()) <= 50


@needs_demo
def test_template_answers_and_saves_in_the_outputs_layout(template, tmp_path):
    item = next(iter(data.load_set("knowledge", "demo")))
    request = Instance(
        request_type="generate_until",
        doc={"Qid": item["Qid"]},
        idx=0,
        metadata=("cs3_knowledge", 0, 1),
        arguments=("请回答音频中的问题。", {"until": [], "max_gen_toks": 512}, {"audio": item["audio"]}),
    )
    lm = template.MyS2SModel(output_dir=str(tmp_path / "out"))
    text, audio = decode_response(lm.generate_until([request])[0])
    assert text == "I do not know." and Path(audio).is_file()
    row = json.loads((tmp_path / "out" / "knowledge.jsonl").read_text())
    assert row == {"Qid": item["Qid"], "text": text, "audio": f"cs3_knowledge/{item['Qid']}.wav"}


@pytest.mark.slow  # lm-eval loads its whole task index (~30 s)
@needs_demo
def test_template_runs_through_lm_eval_on_the_demo_set(template, tmp_path, fake_asr):
    import lm_eval

    fake_asr(lambda audio, language: "heard")
    settings = {"dataset": "demo", "judge": "none", "asr_model": "fake-asr"}
    results = lm_eval.simple_evaluate(
        model="my-s2s-model",
        model_args={"output_dir": str(tmp_path / "out")},
        tasks=["cs3_knowledge"],
        task_manager=evaluate.task_manager(metadata=settings),
        metadata=settings,
        bootstrap_iters=0,
        limit=3,
    )
    metrics = results["results"]["cs3_knowledge"]
    assert metrics["acc_text,cs3"] == 0.0  # "I do not know." answers nothing
    assert results["config"]["model_args"]["pretrained"] == "my-s2s-model"  # names lm-eval's results folder
    assert len((tmp_path / "out" / "knowledge.jsonl").read_text().splitlines()) == 3


def test_running_the_template_is_lm_eval_with_the_model_registered():
    """`python examples/my_s2s_model.py ARGS` is `lm_eval ARGS` with my-s2s-model registered."""
    import subprocess

    run = subprocess.run(
        [sys.executable, str(TEMPLATE), "--help"], capture_output=True, text=True, timeout=300, check=False
    )
    assert run.returncode == 0 and "lm-eval" in run.stdout, run.stderr[-2000:]
    check = f"import runpy; ns = runpy.run_path({str(TEMPLATE)!r}); from lm_eval.api import registry; "
    check += "print(registry.get_model('my-s2s-model') is ns['MyS2SModel'])"
    registered = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300)
    assert registered.stdout.strip().endswith("True"), registered.stderr[-2000:]
