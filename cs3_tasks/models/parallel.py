"""lm-eval's data-parallel interface for the cs3 wrappers, from ``cs3_tasks.harness.distributed``.

lm-eval 0.4.13 shards requests by ``rank``/``world_size`` and synchronises with ``all_gather``,
``gather_object`` and ``barrier`` only when the LM reports ``world_size > 1``; the defaults of
``lm_eval.api.model.LM`` say one process, so under ``accelerate launch`` every process would answer every
request. A wrapper that derives from ``DataParallelLM`` answers only its rank's share, on its rank's device,
and writes its own output shard (``shard_suffix``).
"""

from __future__ import annotations

from typing import Any

from lm_eval.api.model import LM

from cs3_tasks.harness import distributed


class DataParallelLM(LM):
    """An lm-eval LM that knows its place in an ``accelerate launch`` / ``torchrun`` launch."""

    def __init__(self, device: str | None = None) -> None:
        super().__init__()
        self.process_group = distributed.process_group()
        self._rank = self.process_group.rank
        self._world_size = self.process_group.world_size
        # lm-eval creates its request-count tensor on lm.device; under a launch it is this rank's device
        self._device = self.process_group.device(device)

    def shard_suffix(self) -> str:
        """ "" in one process, ".rank<k>" in rank k of a data-parallel run: names this rank's output files."""
        return f".rank{self._rank}" if self.process_group.distributed else ""

    def all_gather(self, tensor: Any) -> Any:
        return distributed.all_gather_tensor(tensor)

    def gather_object(self, obj: Any, dst: int = 0) -> list[Any] | None:
        return distributed.gather_object(obj, dst)

    def barrier(self) -> None:
        distributed.barrier()
