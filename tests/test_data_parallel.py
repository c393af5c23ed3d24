"""Data parallelism: ranks, shards, union reading, gathered cross-task records; and real 2-process lm-eval
runs (cs3-precomputed, cs3-cascade with a tiny LLM) giving exactly the 1-process metrics.

The launched runs take minutes on 2 idle cores (each process starts lm-eval; ASR of the clips of a
--limit'ed demo set, cold cache per run). ``accelerate launch --cpu`` starts ONE process (accelerate
1.15 runs several CPU processes only through mpirun), so the runs use ``--multi_gpu``, which on a
machine without GPUs starts N processes on torch's elastic launcher, joined over gloo.

Each run has a cold cs3-bench cache of its own, so the equal metrics also say that a transcript (default
batched ASR) follows neither its batch neighbours, which differ per rank, nor the per-process thread count
the launcher sets (OMP_NUM_THREADS=1).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lm_eval.api.instance import Instance

from cs3_tasks.cli import evaluate
from cs3_tasks.core import data
from cs3_tasks.harness import distributed
from cs3_tasks.models.base import SpeechLM, SpeechReply, repeated_requests
from cs3_tasks.scoring.outputs import output_files, read_output_union, read_outputs

REPO = Path(__file__).resolve().parents[1]
STRONG = evaluate.DEMO_RESPONSES / "demo-strong"


def instance(qid: str, task: str = "cs3_knowledge", doc_id: int = 0) -> Instance:
    return Instance(
        request_type="generate_until",
        doc={"Qid": qid},
        idx=0,
        metadata=(task, doc_id, 1),
        arguments=("instruction", {"until": []}, {"audio": None}),
    )


class CountingLM(SpeechLM):
    model_name = "cs3-counting"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.asked: list[str] = []

    def generate_batch(self, requests):
        self.asked.extend(req.qid for req in requests)
        return [SpeechReply(text=f"answer {req.qid}") for req in requests]


def test_one_process_is_rank_0_of_1(tmp_path):
    lm = CountingLM(output_dir=str(tmp_path))
    assert (lm.rank, lm.world_size, lm.shard_suffix()) == (0, 1, "")
    assert lm.gather_object({"a": 1}) == [{"a": 1}]
    assert distributed.all_gather_list([1, 2]) == [1, 2]
    lm.barrier()


def test_process_group_devices(monkeypatch):
    one, rank1 = distributed.ProcessGroup(), distributed.ProcessGroup(rank=3, world_size=4, local_rank=1)
    assert one.device("cpu") == "cpu" and rank1.device("cpu") == "cpu"
    monkeypatch.setattr(distributed, "cuda_device_count", lambda: 0)
    assert one.device("cuda:0") == "cpu" and rank1.device(None) == "cpu"
    monkeypatch.setattr(distributed, "cuda_device_count", lambda: 1)  # 4 ranks, one GPU: they share it
    assert rank1.device(None) == "cuda:0" and rank1.device("cuda") == "cuda:0"


def test_ranks_that_share_a_gpu_use_gloo_not_nccl():
    # NCCL refuses two ranks on one GPU ("Duplicate GPU detected"): such a launch runs its collectives on gloo
    assert distributed.collective_backend(local_world=2, gpus=1) == "gloo"
    assert distributed.collective_backend(local_world=2, gpus=0) == "gloo"
    assert distributed.collective_backend(local_world=2, gpus=2) == "nccl"
    assert distributed.collective_backend(local_world=1, gpus=8) == "nccl"


def test_padded_copies_are_answered_once():
    a, b = instance("q1"), instance("q2", doc_id=1)
    assert repeated_requests([a, b, b, b]) == {2: 1, 3: 1}
    assert repeated_requests([a, b]) == {}


def fake_rank(monkeypatch, rank: int, world_size: int = 2):
    group = distributed.ProcessGroup(
        rank=rank, world_size=world_size, local_rank=rank, local_world_size=world_size
    )
    monkeypatch.setattr(distributed, "process_group", lambda: group)


def test_rank_writes_its_own_shard_and_resume_reads_every_shard(tmp_path, monkeypatch):
    fake_rank(monkeypatch, 1)
    lm = CountingLM(output_dir=str(tmp_path), resume=True)
    assert (lm.rank, lm.world_size, lm.shard_suffix()) == (1, 2, ".rank1")
    q1, q3 = instance("q1", doc_id=1), instance("q3", doc_id=3)
    out = lm.generate_until([q1, q3, q3])  # lm-eval pads this rank with a copy of its last request
    assert lm.asked == ["q1", "q3"] and out[1] == out[2]
    assert [p.name for p in output_files(tmp_path, "knowledge")] == ["knowledge.rank1.jsonl"]
    assert not (tmp_path / "knowledge.jsonl").exists()

    fake_rank(monkeypatch, 0)  # a resumed run with other shares: rank 0 now gets q1, answered by rank 1
    lm0 = CountingLM(output_dir=str(tmp_path), resume=True)
    lm0.generate_until([instance("q0"), q1])
    assert lm0.asked == ["q0"]
    assert sorted(read_outputs(tmp_path, "knowledge")) == ["q0", "q1", "q3"]


def test_union_takes_each_qid_from_the_newest_file(tmp_path):
    (tmp_path / "knowledge.rank0.jsonl").write_text(
        '{"Qid": "a", "text": "old"}\n{"Qid": "b", "text": "b0"}\n'
    )
    time.sleep(0.01)
    (tmp_path / "knowledge.rank1.jsonl").write_text(
        '{"Qid": "a", "text": "new"}\n{"Qid": "c", "text": "c1"}\n'
    )
    (tmp_path / "knowledge.rankX.jsonl").write_text('{"Qid": "z", "text": "not a shard"}\n')
    os.utime(tmp_path / "knowledge.rank0.jsonl", ns=(1, 1))  # the older one, whatever the clock resolution
    files = output_files(tmp_path, "knowledge")
    assert [p.name for p in files] == ["knowledge.rank0.jsonl", "knowledge.rank1.jsonl"]
    union = read_output_union(files, tmp_path, "knowledge")
    assert {q: o.text for q, o in union.items()} == {"a": "new", "b": "b0", "c": "c1"}
    assert read_outputs(tmp_path, "knowledge").keys() == union.keys()
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "knowledge.json").write_text('{"Qid": "a", "Response": "x"}\n')
    with pytest.raises(ValueError, match="keep one"):
        read_outputs(tmp_path, "knowledge")


def test_gathered_records_in_one_process_keep_one_per_qid():
    sys.path.insert(0, str(REPO / "task_configs"))
    try:
        import utils
    finally:
        sys.path.pop(0)
    records = [{"qid": "a", "v": 1}, {"qid": "b", "v": 2}, {"qid": "a", "v": 3}]
    assert utils.gathered_records(records) == [{"qid": "a", "v": 3}, {"qid": "b", "v": 2}]


# ---------------------------------------------------------------------------------------------------------
# launched processes

needs_demo = pytest.mark.skipif(
    not (data.demo_dataset_dir() / "README.md").is_file() or not (STRONG / "knowledge.jsonl").is_file(),
    reason="demo set not built",
)


def launch(
    nproc: int, args: list[str], env: dict[str, str], module: str = "lm_eval"
) -> subprocess.CompletedProcess:
    """``python -m lm_eval ARGS`` in one process, or under ``accelerate launch --multi_gpu`` in ``nproc``."""
    child = {k: v for k, v in os.environ.items() if k not in ("CS3_JUDGE_MODEL", "CS3_JUDGE_BASE_URL")}
    child.update(env)
    prefix = (
        [sys.executable, "-m", module]
        if nproc == 1
        else [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--multi_gpu",
            "--num_processes",
            str(nproc),
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            "--main_process_port",
            str(_free_port()),
            "-m",
            module,
        ]
    )
    return subprocess.run(prefix + args, env=child, capture_output=True, text=True, timeout=1800, check=False)


def _free_port() -> int:
    """A TCP port free right now (a fixed port collides with another run on the same machine)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
@needs_demo
def test_collectives_across_two_processes(tmp_path):
    """torchrun this time (the lm-eval runs below use accelerate): the wrappers join the group either way; the
    end of a launch ends both ranks together, exit 0, with their output flushed."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_port",
            str(_free_port()),
            str(REPO / "tests" / "dp_collectives_probe.py"),
            str(STRONG),
            str(REPO / "task_configs"),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    probes = [json.loads(path.read_text(encoding="utf-8")) for path in sorted(tmp_path.glob("probe-*.json"))]
    assert [p["rank"] for p in probes] == [0, 1]
    gpus = distributed.cuda_device_count()
    for p in probes:
        device = f"cuda:{p['rank'] % gpus}" if gpus else "cpu"  # two ranks on one GPU share it
        assert p["world_size"] == 2 and p["suffix"] == f".rank{p['rank']}" and p["device"] == device
        assert p["backend"] == distributed.collective_backend(2, gpus)
        assert p["counts"] == [5, 6] and p["records"] == ["q0", "q1", "shared"]
        assert p["threads"] == max(1, len(os.sched_getaffinity(0)) // 2)
    assert probes[0]["gathered"] == [{"rank": 0}, {"rank": 1}] and probes[1]["gathered"] is None
    assert "rank 0 done" in result.stdout and "rank 1 done" in result.stdout
    assert "went on" not in result.stdout


@pytest.mark.gpu
@pytest.mark.slow
def test_two_ranks_on_a_machine_with_fewer_gpus_share_them(tmp_path):
    """On a one-GPU machine: two ranks of torchrun share the GPU, their collectives on gloo (NCCL refuses
    them: "Duplicate GPU detected"), exit 0."""
    test_collectives_across_two_processes(tmp_path)


def metrics_of(out: Path) -> dict:
    results = json.loads(next(out.rglob("results_*.json")).read_text(encoding="utf-8"))["results"]
    return {
        task: {k: ("nan" if isinstance(v, float) and math.isnan(v) else v) for k, v in values.items()}
        for task, values in results.items()
    }


def run_both(tmp_path: Path, model: str, model_args: str, limit: int) -> tuple[dict, dict, dict]:
    metrics, logs = {}, {}
    for nproc in (1, 2):
        out = tmp_path / f"results-{nproc}"
        env = {
            "CS3_BENCH_CACHE": str(tmp_path / f"cache-{nproc}"),
            "CS3_BENCH_DATASET": "demo",
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
        }
        args = [
            "run",
            "--model",
            model,
            "--model_args",
            model_args,
            "--device",
            "cpu",
            "--tasks",
            "cs3",
            "--metadata",
            json.dumps({"judge": "none"}),
            "--limit",
            str(limit),
            "--output_path",
            str(out),
            "--log_samples",
        ]
        result = launch(nproc, args, env)
        assert result.returncode == 0, result.stderr[-4000:]
        metrics[nproc], logs[nproc] = metrics_of(out), result.stderr
    return metrics[1], metrics[2], logs


def samples_by_task(out: Path) -> dict[str, list[str]]:
    found = {}
    for path in out.rglob("samples_*.jsonl"):
        task = path.name.removeprefix("samples_").rsplit("_", 1)[0]
        found[task] = [
            json.loads(line)["doc"]["Qid"] for line in path.read_text(encoding="utf-8").splitlines()
        ]
    return found


@pytest.mark.slow
@needs_demo
def test_precomputed_two_processes_give_the_one_process_metrics(tmp_path):
    limit = 5  # odd: rank 1 gets one doc fewer, so lm-eval pads its requests
    one, two, _ = run_both(tmp_path, "cs3-precomputed", f"outputs={STRONG}", limit)
    assert one == two
    assert one["cs3_knowledge_en"]["drop_text,cs3"] not in (None, "nan")  # the cs-vs-en comparison ran
    for nproc in (1, 2):
        samples = samples_by_task(tmp_path / f"results-{nproc}")
        assert sorted(samples) == ["cs3_knowledge", "cs3_knowledge_en", "cs3_open_ended"]
        for qids in samples.values():  # every doc scored once, none twice
            assert len(qids) == len(set(qids)) == limit


@pytest.mark.slow
@needs_demo
@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
def test_cascade_two_processes_answer_each_request_once_with_the_one_process_metrics(tmp_path):
    """benchmarks/data_parallel_cascade.py, run as from a fresh clone: its 1-process and 2-process runs of
    cs3-cascade with a tiny LLM (cold cache each) give identical metrics; each request is answered once."""
    limit = 3
    scratch = tmp_path / "cwd"
    scratch.mkdir()
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "data_parallel_cascade.py"), "--limit", str(limit),
         "--workdir", str(tmp_path)],
        cwd=scratch, capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    assert "metrics identical: True" in result.stdout, result.stdout[-2000:]
    assert sorted(p.name for p in (tmp_path / "out-1").glob("*.jsonl") if p.name != "errors.jsonl") == [
        "knowledge.jsonl",
        "knowledge_en.jsonl",
        "open_ended.jsonl",
    ]
    for set_name in ("knowledge", "knowledge_en", "open_ended"):
        shards = output_files(tmp_path / "out-2", set_name)
        assert sorted(p.name for p in shards) == [f"{set_name}.rank0.jsonl", f"{set_name}.rank1.jsonl"]
        rows = [
            json.loads(line)["Qid"] for p in shards for line in p.read_text(encoding="utf-8").splitlines()
        ]
        single = read_outputs(tmp_path / "out-1", set_name)
        assert sorted(rows) == sorted(single) and len(rows) == len(set(rows)) == limit  # answered once
        union = read_outputs(tmp_path / "out-2", set_name)
        assert {q: o.text for q, o in union.items()} == {q: o.text for q, o in single.items()}
