"""What lm-eval writes and prints for our tasks: samples that name files by content, never a local folder
(harness/portable.py), and none of lm-eval's notices that do not concern our users (harness/quiet.py)."""

from __future__ import annotations

import hashlib
import json
import logging
import os

from cs3_tasks.cli.evaluate import without_local_folders
from cs3_tasks.harness import quiet
from cs3_tasks.harness.lm_eval_hook import is_our_task
from cs3_tasks.harness.portable import portable


def test_a_sample_names_its_files_by_content(tmp_path):
    query, spoken = tmp_path / "home" / "cache" / "q.wav", tmp_path / "clone" / "out" / "a.wav"
    for path, data in ((query, b"question"), (spoken, b"answer")):
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
    response = json.dumps({"cs3_speech_response": 1, "text": "坦桑尼亚", "audio": str(spoken)})
    sample = {
        "doc": {"Qid": "q-1", "audio": str(query)},
        "arguments": [["ask", {"until": []}, {"audio": [str(query)]}]],
        "resps": [[response]],
        "filtered_resps": [json.dumps({"qid": "q-1", "audio": str(spoken), "text": "坦桑尼亚"})],
        "note": "/not/a/file stays as it is",
    }
    written = json.dumps(portable([sample]), ensure_ascii=False)
    assert str(tmp_path) not in written
    (logged,) = json.loads(written)
    assert logged["doc"]["audio"] == logged["arguments"][0][2]["audio"][0]
    assert logged["doc"]["audio"] == "sha256:" + hashlib.sha256(b"question").hexdigest()
    assert json.loads(logged["resps"][0][0])["text"] == "坦桑尼亚"
    assert json.loads(logged["filtered_resps"][0])["audio"].startswith("sha256:")
    assert logged["note"] == sample["note"] and sample["doc"]["audio"] == str(query)  # the input untouched


def test_lm_evals_notice_about_its_own_tasks_is_dropped_for_ours_only(caplog):
    quiet.install_log_filter(is_our_task)
    quiet.install_log_filter(is_our_task)  # once per process
    logger = logging.getLogger(quiet.TASK_LOGGER)
    assert sum(isinstance(f, quiet.OurTasksNotice) for f in logger.filters) == 1
    with caplog.at_level(logging.WARNING, logger=quiet.TASK_LOGGER):
        logger.warning("cs3_knowledge: Custom kwargs can be passed to `--metadata` in console ...")
        logger.warning("arc_easy: Custom kwargs can be passed to `--metadata` in console ...")
        logger.warning("cs3_knowledge: something else")
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["arc_easy", "cs3_knowledge"]


def test_our_runs_keep_gits_complaint_and_lm_evals_request_bars_out(tmp_path, capfd, monkeypatch):
    import lm_eval.api.task
    import lm_eval.evaluator

    monkeypatch.chdir(tmp_path)  # not a git repository
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    with quiet.quiet_lm_eval(is_our_task):
        assert lm_eval.evaluator.get_git_commit_hash() is None
        assert list(lm_eval.api.task.tqdm(range(3), total=3)) == [0, 1, 2]
    err = capfd.readouterr().err
    assert "fatal" not in err and "3/3" not in err
    assert not getattr(lm_eval.api.task.tqdm, "keywords", None)  # restored after


def test_the_demos_lm_eval_results_name_no_folder_of_this_machine(tmp_path):
    from cs3_tasks.cli.evaluate import DEMO_RESPONSES, task_dir

    text = json.dumps(
        {
            "model_args": {"outputs": str(DEMO_RESPONSES / "demo-strong")},
            "config_source": str(task_dir() / "cs3_knowledge.yaml"),
            "elsewhere": str(tmp_path / "answers" / "knowledge.jsonl"),
            "home": os.path.expanduser("~/x"),
        }
    )
    named = json.loads(without_local_folders(text, tmp_path / "answers"))
    assert named == {
        "model_args": {"outputs": "<cs3-bench>/cs3_tasks/demo/responses/demo-strong"},
        "config_source": "<cs3-bench>/task_configs/cs3_knowledge.yaml",
        "elsewhere": "<outputs>/knowledge.jsonl",
        "home": "~/x",
    }
