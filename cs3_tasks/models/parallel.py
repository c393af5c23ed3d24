"""lm-eval's data-parallel interface for the cs3 wrappers, from ``cs3_tasks.harness.distributed``.

lm-eval 0.4.13 shards requests by ``rank``/``world_size`` and synchronises with ``all_gather``,
``gather_object`` and ``barrier`` only when the LM reports ``world_size > 1``; the defaults of
``lm_eval.api.model.LM`` say one process, so under ``accelerate launch`` every process would answer every
request. A wrapper that derives from ``DataParallelLM`` answers only its rank's share, on its rank's device,
and writes its own output shard (``shard_suffix``).

It also names the run for lm-eval's results folder (``--output_path DIR`` -> ``DIR/<name>/results_*.json``):
lm-eval takes the name from the first of ``RUN_NAME_KEYS`` in model_args, else a random id that its fixed
seed makes the same for every run, so every cs3 run would land in one folder. ``create_from_arg_obj`` (the
path of the ``lm_eval`` CLI, which hands model_args over as a dict) adds ``pretrained=<run_name()>`` to the
model_args lm-eval records when none of the keys is there. A wrapper without a ``pretrained`` argument
(cs3-cascade, cs3-precomputed) takes ``pretrained=NAME`` as the run's name only.
"""

from __future__ import annotations

import inspect
from typing import Any

from lm_eval.api.model import LM

from cs3_tasks.harness import distributed

# the model_args lm-eval names a run after, in its order (lm_eval.loggers.evaluation_tracker
# GeneralConfigTracker._get_model_name)
RUN_NAME_KEYS = ("peft", "delta", "pretrained", "model", "path", "engine")


class DataParallelLM(LM):
    """An lm-eval LM that knows its place in an ``accelerate launch`` / ``torchrun`` launch."""

    #: ``pretrained=NAME`` given to a wrapper without a pretrained argument (see the module docstring)
    named_run: str | None = None

    @classmethod
    def takes_pretrained(cls) -> bool:
        """Whether ``pretrained`` is one of this wrapper's own model_args."""
        return "pretrained" in inspect.signature(cls.__init__).parameters

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict[str, Any], additional_config: dict | None = None):
        args = dict(arg_dict)
        named = None if cls.takes_pretrained() else args.pop("pretrained", None)
        lm = super().create_from_arg_obj(args, additional_config)
        if named:
            lm.named_run = str(named)
        if isinstance(arg_dict, dict) and not any(key in arg_dict for key in RUN_NAME_KEYS):
            arg_dict["pretrained"] = lm.run_name()  # what lm-eval names the results folder after
        return lm

    def run_name(self) -> str:
        """The model this run evaluates, as lm-eval's results folder is named (subclasses say which)."""
        return self.named_run or type(self).__name__

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
