"""Run under a 2-process launcher by tests/test_data_parallel.py: exercises the collectives on gloo."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from cs3_tasks.harness import distributed
from cs3_tasks.models.precomputed import PrecomputedLM

lm = PrecomputedLM(outputs=sys.argv[1])
group = distributed.process_group()
counts = lm.all_gather(torch.tensor(group.rank + 5))
gathered = lm.gather_object({"rank": group.rank})
lm.barrier()
sys.path.insert(0, sys.argv[2])  # the task folder: its utils.gathered_records is what the filters call
import utils  # noqa: E402 - the task folder is put on sys.path first

records = utils.gathered_records([{"qid": f"q{group.rank}", "n": group.rank}, {"qid": "shared", "n": 0}])
probe = {
    "rank": lm.rank,
    "world_size": lm.world_size,
    "device": str(lm.device),
    "suffix": lm.shard_suffix(),
    "counts": counts.tolist(),
    "gathered": gathered,
    "records": sorted(r["qid"] for r in records),
    "threads": distributed.cpu_threads_per_process(),
    "backend": str(torch.distributed.get_backend()),
}
# one file per rank: two processes printing to one pipe can interleave their lines
(Path(sys.argv[3]) / f"probe-{group.rank}.json").write_text(json.dumps(probe), encoding="utf-8")
# the end of a launch: both ranks end together (exit 0), with what they printed flushed and nothing after it
sys.stdout.write(f"rank {group.rank} done\n")  # a pipe: block-buffered, flushed by end_of_launch
distributed.end_of_launch()
print(f"rank {group.rank} went on after end_of_launch")
