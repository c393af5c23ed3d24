"""What lm-eval records about a cs3 run: the results folder carries the model (issue 23.7), and the
benchmark stays zero-shot (issue 22.6: --num_fewshot would put test answers in the prompt)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from task_yaml import read_task_yaml

from cs3_tasks.cli import evaluate
from cs3_tasks.core import data
from cs3_tasks.harness import lm_eval_hook

lm_eval = pytest.importorskip("lm_eval")

DEMO_READY = (data.demo_dataset_dir() / "README.md").is_file()
needs_demo = pytest.mark.skipif(not DEMO_READY, reason="embedded demo dataset not built")


def _answers(folder: Path) -> Path:
    """A text-only outputs folder for the demo knowledge set: every answer "Paris"."""
    folder.mkdir(parents=True)
    rows = [{"Qid": doc["Qid"], "text": "Paris", "audio": None} for doc in data.load_set("knowledge", "demo")]
    (folder / "knowledge.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return folder


def _evaluate(outputs: Path, **options):
    import cs3_tasks.models.precomputed  # noqa: F401  (registers the name)

    return lm_eval.simple_evaluate(
        model="cs3-precomputed",
        model_args={"outputs": str(outputs), "text_only": "true"},
        tasks=["cs3_knowledge_text"],
        task_manager=evaluate.task_manager(metadata={"dataset": "demo", "judge": "none"}),
        metadata={"dataset": "demo", "judge": "none"},
        bootstrap_iters=0,
        limit=2,
        **options,
    )


@pytest.mark.slow  # lm-eval loads its whole task index (~30 s)
@needs_demo
def test_results_folder_is_named_after_the_model(tmp_path):
    """lm-eval names the folder after model_args' pretrained/model/path, else a seeded "random" id that is
    the same for every run: cs3-precomputed now names it after its outputs folder."""
    from lm_eval.loggers import EvaluationTracker

    tracker = EvaluationTracker(output_path=str(tmp_path / "runs"))
    results = _evaluate(_answers(tmp_path / "my-model"), evaluation_tracker=tracker)
    tracker.save_results_aggregated(results=results, samples=None)
    assert tracker.general_config_tracker.model_name == "my-model"
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["my-model"]


def test_pretrained_names_the_run_of_a_wrapper_without_a_checkpoint(tmp_path):
    from cs3_tasks.models.cascade import CascadeLM
    from cs3_tasks.models.precomputed import PrecomputedLM

    args = {"outputs": str(tmp_path)}
    assert PrecomputedLM.create_from_arg_obj(args).run_name() == tmp_path.name
    assert args["pretrained"] == tmp_path.name  # what lm-eval reads; reusing the args names the run again
    assert PrecomputedLM.create_from_arg_obj(args).run_name() == tmp_path.name
    named = {"outputs": str(tmp_path), "pretrained": "glm-4-voice"}
    assert PrecomputedLM.create_from_arg_obj(named).run_name() == "glm-4-voice"
    cascade_args = {"llm_base_url": "http://127.0.0.1:9/v1", "llm_model": "Qwen/Qwen2.5-7B-Instruct"}
    CascadeLM.create_from_arg_obj(cascade_args)
    assert cascade_args["pretrained"] == "cascade-Qwen2.5-7B-Instruct"


@pytest.mark.slow  # two lm-eval runs (~45 s); test_every_task_refuses_few_shot is the quick check
@needs_demo
def test_num_fewshot_is_refused_before_generation(tmp_path):
    outputs = _answers(tmp_path / "m")
    with pytest.raises(ValueError, match="zero-shot"):
        _evaluate(outputs, num_fewshot=1)
    assert _evaluate(outputs, num_fewshot=0)["results"]["cs3_knowledge_text"]["acc_text,cs3"] >= 0


def test_every_task_refuses_few_shot():
    """Every cs3 and BELLE task (a YAML with `task:`, directly or through its include) names the sampler."""
    folder = lm_eval_hook.task_dir()
    template = read_task_yaml(folder / "_default_template_yaml")
    tasks = 0
    for path in sorted(folder.glob("*.yaml")):
        config = read_task_yaml(path)
        if "task" not in config or "group" in config:
            continue
        tasks += 1
        merged = {**template, **config} if config.get("include") else config
        assert (merged.get("fewshot_config") or {}).get("sampler") == "zero_shot.ZeroShotOnly", path.name
    assert tasks == 8
