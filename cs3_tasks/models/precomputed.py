"""``cs3-precomputed``: pre-generated outputs as an lm-eval model.

For models that run through their own inference scripts: generate once, then evaluate with lm-eval::

    lm_eval --model cs3-precomputed --model_args outputs=runs/glm4voice --tasks cs3

``outputs`` is a directory with one file per set, in the layouts of ``cs3-bench score``
(``cs3_tasks.scoring.outputs.read_outputs``): ours ``<set>.jsonl`` (``{Qid, text, audio}``) or the authors'
``json/<set>.json`` + ``wav/<Qid>.wav``. Each request is matched to its output by the request's doc
(``Qid``) and task (``cs3_knowledge`` -> set ``knowledge``); the answer is the speech protocol string
``cs3_tasks.harness.speech.encode_response(text, wav path)``. An item without output is answered with no text,
no audio and the problem named, so its record says "no output for this Qid" and it is excluded, as in
``cs3-bench score``.

model_args: ``outputs`` (required), ``set`` (force one set for every task, for renamed tasks),
``text_only`` (true: drop the audio, i.e. behave as a text-only model; speech metrics become n/a).
lm-eval's ``--use_cache`` keys requests by their arguments, not by ``outputs``: a cache database is
bound to the first outputs directory answered through it, and another directory refuses it. Under
``accelerate launch`` each process answers its rank's share of the requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lm_eval.api.registry import register_model

from cs3_tasks.core.data import SETS
from cs3_tasks.harness.speech import encode_response
from cs3_tasks.models.base import as_bool, set_of_task
from cs3_tasks.models.parallel import DataParallelLM
from cs3_tasks.scoring.outputs import read_outputs

__all__ = ["DOC_SET_KEY", "PrecomputedLM", "set_of_task"]

# doc field naming the outputs set of tasks outside SETS (task_configs/conversation_utils.py)
DOC_SET_KEY = "cs3_set"
# entry of lm-eval's --use_cache database naming the outputs folder its answers came from
CACHE_OUTPUTS_KEY = "cs3-precomputed:outputs"


@register_model("cs3-precomputed")
class PrecomputedLM(DataParallelLM):
    """Answers cs3 requests from a directory of pre-generated outputs."""

    MULTIMODAL = True  # lm-eval hands audio tasks only to models that declare this

    def __init__(
        self,
        outputs: str | None = None,
        set: str | None = None,
        text_only: Any = False,
        **lm_eval_kwargs: Any,
    ) -> None:
        # lm_eval_kwargs: batch_size, max_batch_size, device... which lm-eval passes to every model
        super().__init__(lm_eval_kwargs.get("device"))
        if not outputs:
            raise ValueError(
                "cs3-precomputed needs model_args outputs=DIR (a directory of <set>.jsonl "
                "files or the authors' json/<set>.json + wav/)"
            )
        self.outputs_dir = Path(outputs).expanduser().resolve()
        if not self.outputs_dir.is_dir():
            raise FileNotFoundError(f"cs3-precomputed: outputs directory {self.outputs_dir} does not exist")
        if set is not None and set not in SETS:
            raise ValueError(f"cs3-precomputed: unknown set {set!r}; choose from {list(SETS)}")
        self.forced_set = set
        self.text_only = as_bool(text_only)
        self._outputs: dict[str, dict] = {}

    def run_name(self) -> str:
        """lm-eval's results folder is named after the outputs folder (``DataParallelLM``)."""
        return self.named_run or self.outputs_dir.name

    def set_cache_hook(self, cache_hook: Any) -> None:
        """lm-eval's ``--use_cache`` keys answers by the request alone, and every outputs folder gets the
        same requests: the cache is bound to one outputs folder (a marker entry), another folder refuses."""
        dbdict = getattr(cache_hook, "dbdict", None)
        if dbdict is not None:
            held = dbdict.get(CACHE_OUTPUTS_KEY)
            if held is None and len(dbdict):
                raise ValueError(
                    "cs3-precomputed: this --use_cache database holds answers but not the outputs folder "
                    f"they came from; use a fresh --use_cache path for {self.outputs_dir}"
                )
            if held is not None and held != str(self.outputs_dir):
                raise ValueError(
                    f"cs3-precomputed: this --use_cache database holds the answers of {held}, not of "
                    f"{self.outputs_dir}; use one --use_cache path per outputs folder"
                )
            dbdict[CACHE_OUTPUTS_KEY] = str(self.outputs_dir)
        super().set_cache_hook(cache_hook)

    def outputs_of(self, set_name: str) -> dict:
        """Qid -> outputs.ModelOutput of one set (read once)."""
        if set_name not in self._outputs:
            # a set declared by the task's own docs (DOC_SET_KEY, e.g. belle_eval_s2s) is accepted as is
            self._outputs[set_name] = read_outputs(self.outputs_dir, set_name, known_sets=(*SETS, set_name))
        return self._outputs[set_name]

    def answer(self, instance: Any) -> str:

        doc = instance.doc if isinstance(instance.doc, Mapping) else {}
        qid = doc.get("Qid")
        set_name = (
            self.forced_set or set_of_task(getattr(instance, "task_name", None)) or doc.get(DOC_SET_KEY)
        )  # conversation / language-pair tasks declare their set per doc
        if set_name is None:
            raise ValueError(
                f"cs3-precomputed: cannot tell the set of task {instance.task_name!r}; "
                "pass model_args set=knowledge|knowledge_en|open_ended"
            )
        if qid is None:
            raise ValueError(f"cs3-precomputed: a {instance.task_name} request has no Qid in its doc")
        output = self.outputs_of(set_name).get(str(qid))
        if output is None:
            return encode_response(None, None, problem=f"no output for this Qid in {self.outputs_dir}")
        audio = None if self.text_only else output.audio
        if audio is not None and not isinstance(audio, (str, Path)):
            raise TypeError(f"cs3-precomputed: Qid {qid}: audio must be a file path")
        if self.text_only:
            return output.text or ""
        return encode_response(output.text, audio, problem=output.problem)

    def generate_until(self, requests: list, disable_tqdm: bool = False) -> list[str]:
        from tqdm import tqdm

        return [
            self.answer(instance) for instance in tqdm(requests, disable=disable_tqdm, desc="cs3-precomputed")
        ]

    def loglikelihood(self, requests: list, disable_tqdm: bool = False) -> list:
        raise NotImplementedError("cs3-precomputed only answers generate_until requests (the cs3 tasks)")

    def loglikelihood_rolling(self, requests: list, disable_tqdm: bool = False) -> list:
        raise NotImplementedError("cs3-precomputed only answers generate_until requests (the cs3 tasks)")
