"""Data parallelism: which process of a launch this is, and the few collectives lm-eval and the tasks need.

``accelerate launch`` (or ``torchrun``) starts one process per device with ``WORLD_SIZE``/``RANK``/
``LOCAL_RANK`` set. ``process_group()`` joins the launch's process group once (through accelerate's
``PartialState``, or the ``torch.distributed`` group some other code already initialised) and says which
rank this is and which device it owns; without a launcher it is one process, rank 0 of 1, and no
collective communicates.

lm-eval 0.4.13 shards the docs of every task by rank (``doc_iterator``: doc ``i`` goes to rank
``i % world_size``), runs the model and the task filters per rank on that rank's share, gathers the
per-item metric values to rank 0 (``gather_object``) and aggregates there. Whatever a task computes
across items outside that path (the cs-vs-en comparison) gathers its records with ``all_gather_list``.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from cs3_tasks.core.environment import env_int

# A rank can wait at a barrier for as long as its peers generate (hours for a talker on 924 items):
# the default 30 min timeout of torch.distributed would kill long runs.
COLLECTIVE_TIMEOUT = timedelta(days=7)
# How long a finished rank waits for the others at the end of a launch before it ends anyway (its work is
# done: the wait only keeps the group's teardown away from a peer that is still writing results).
END_OF_LAUNCH_TIMEOUT = timedelta(hours=1)


@dataclass(frozen=True)
class ProcessGroup:
    """This process's place in a launch."""

    rank: int = 0  # global index: the share of the docs this process answers
    world_size: int = 1
    local_rank: int = 0  # index on this machine: the device this process owns
    local_world_size: int = 1  # processes on this machine (they share its CPU cores)

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def device(self, requested: str | None = None) -> str:
        """The device of this rank: ``cuda:<local_rank % GPUs>`` for a CUDA request (or none, when CUDA is
        there) under a launcher; otherwise the requested device as given, or "cpu"/"cuda" when none was."""
        gpus = cuda_device_count()
        if requested and not str(requested).startswith("cuda"):
            return str(requested)  # "cpu", "mps", ...: one kind of device for every rank
        if not gpus:
            return "cpu"
        if self.distributed:  # ranks share the GPUs when there are more ranks than GPUs
            return f"cuda:{self.local_rank % gpus}"
        return str(requested or "cuda")


_GROUP: ProcessGroup | None = None


def process_group() -> ProcessGroup:
    """This process's rank and world size; joins the launcher's process group on the first call."""
    global _GROUP
    if _GROUP is not None:
        return _GROUP
    dist = _torch_distributed()
    if dist is not None and not dist.is_initialized() and launch_world_size() > 1:
        backend = collective_backend(local_world_size(), cuda_device_count())
        if backend == "gloo":  # no GPU, or ranks that share one (NCCL refuses two ranks on one GPU)
            dist.init_process_group(backend="gloo", timeout=COLLECTIVE_TIMEOUT)
        else:
            from accelerate import PartialState

            # accelerate sets this rank's CUDA device and joins the group (nccl)
            PartialState(timeout=COLLECTIVE_TIMEOUT)
        if not dist.is_initialized():  # accelerate left it to us (e.g. a launch it does not recognise)
            dist.init_process_group(backend=backend, timeout=COLLECTIVE_TIMEOUT)
    if dist is not None and dist.is_initialized():
        _GROUP = _group(dist.get_rank(), dist.get_world_size())
        if _GROUP.distributed:
            atexit.register(_leave_group)
    else:
        _GROUP = ProcessGroup()
    return _GROUP


def _leave_group() -> None:
    # A process that exits with its gloo group still up can die in C++ ("terminate called without an
    # active exception", SIGABRT) when its peer closes the connection first: leave the group cleanly.
    dist = _torch_distributed()
    if dist is not None and dist.is_initialized():
        dist.destroy_process_group()


def end_of_launch(timeout: timedelta = END_OF_LAUNCH_TIMEOUT, exit_code: int = 0) -> None:
    """End this process of a finished launch: wait until every rank is done (bounded), flush, and exit with
    ``exit_code`` without tearing down in C++. A rank that exits normally destroys torch's and gloo's objects
    at interpreter shutdown, and that has aborted a rank whose work was done ('terminate called without an
    active exception', rarely, even with the group left at exit), after which the launcher stops the others
    before the first rank writes its results. Nothing is left to run: lm-eval has written its results. A
    no-op outside a launch, and in a launch whose group no cs3 model joined (`process_group`): other models'
    runs end as lm-eval ends them."""
    if _GROUP is None or not _GROUP.distributed or not _active():
        return
    import torch.distributed as dist

    try:
        dist.barrier(async_op=True).wait(timeout=timeout)
    except RuntimeError:  # a peer ended or timed out: this rank's work is done either way
        pass
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(exit_code)


def _group(rank: int, world_size: int) -> ProcessGroup:
    local_world = env_int("LOCAL_WORLD_SIZE", world_size, minimum=1)
    local_rank = env_int("LOCAL_RANK", rank % max(1, local_world))
    return ProcessGroup(rank=rank, world_size=world_size, local_rank=local_rank, local_world_size=local_world)


def launch_world_size() -> int:
    """The number of processes the launcher started (``WORLD_SIZE``), read without joining the group."""
    return env_int("WORLD_SIZE", 1, minimum=1)


def _torch_distributed():
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    return dist if dist.is_available() else None


def collective_backend(local_world: int, gpus: int) -> str:
    """The process group's backend: NCCL when each rank on this machine has a GPU of its own, else gloo
    (no GPU; or more ranks than GPUs, which NCCL refuses: "Duplicate GPU detected"). lm-eval's collectives
    here are a few small objects, which gloo carries from any device."""
    return "nccl" if gpus > 0 and local_world <= gpus else "gloo"


def local_world_size() -> int:
    """Processes of this launch on this machine (``LOCAL_WORLD_SIZE``, else ``WORLD_SIZE``)."""
    return env_int("LOCAL_WORLD_SIZE", launch_world_size(), minimum=1)


def cuda_device_count() -> int:
    """CUDA devices torch can use here (0 without torch or CUDA)."""
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


def _active() -> bool:
    dist = _torch_distributed()
    return dist is not None and dist.is_initialized() and dist.get_world_size() > 1


def all_gather_list(items: Sequence[Any]) -> list[Any]:
    """Every rank's ``items`` concatenated in rank order, on every rank (a copy of ``items`` alone)."""
    if not _active():
        return list(items)
    import torch.distributed as dist

    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, list(items))
    return [item for part in gathered for item in part]


def all_gather_tensor(tensor):
    """lm-eval's ``LM.all_gather``: the ranks' tensors concatenated (a 0-d tensor counts as one element).

    Gathered as objects, so it works on every backend whatever device the tensor is on; lm-eval only
    gathers request counts with it.
    """
    if not _active():
        return tensor
    import torch

    parts = all_gather_list([tensor.detach().cpu().reshape(-1)])
    return torch.cat(parts).to(tensor.device)


def gather_object(obj: Any, dst: int = 0) -> list[Any] | None:
    """lm-eval's ``LM.gather_object``: the list of every rank's ``obj`` on ``dst``, None elsewhere."""
    if not _active():
        return [obj]
    import torch.distributed as dist

    result: list[Any] | None = [None] * dist.get_world_size() if dist.get_rank() == dst else None
    dist.gather_object(obj, result, dst=dst)
    return result


def barrier() -> None:
    if _active():
        import torch.distributed as dist

        dist.barrier()


def cpu_threads_per_process() -> int:
    """This process's share of the CPU cores it may run on: the launch's processes on one machine split
    them, so that N ranks on N cores do not each start N threads."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    local_world = env_int("LOCAL_WORLD_SIZE", 1, minimum=1) if launch_world_size() > 1 else 1
    return max(1, cores // max(1, local_world))
