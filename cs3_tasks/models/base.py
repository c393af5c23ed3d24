"""Shared plumbing of the speech-to-speech lm-eval wrappers.

A wrapper subclass only turns a batch of ``SpeechRequest`` into ``SpeechReply`` (or an exception per
item). This base class does the rest, identically for every wrapper:

- lm-eval ``Instance`` -> ``SpeechRequest`` (query audio, Qid, task name, instruction, gen kwargs);
- batching (``batch_size``), with a fall-back to one-by-one when a whole batch fails, so one bad
  item cannot take its neighbours down;
- saving the spoken waveform as ``<output_dir>/<task>/<Qid>.wav`` and a ``<output_dir>/<set>.jsonl``
  row ``{Qid, text, audio}`` per item (``audio`` relative to output_dir: the layout ``cs3-bench score``
  and ``cs3-precomputed`` read), so a killed run loses nothing and ``resume=True`` skips items already
  answered;
- a per-item failure: logged, appended to ``<output_dir>/errors.jsonl``, and returned as an encoded
  response with empty text and no audio; the run continues. When more than half of the items failed, the
  run stops there with ``RunMostlyFailed`` (lm-eval exits non-zero; everything generated is saved);
- a tqdm progress bar;
- data parallelism (``DataParallelLM``): under ``accelerate launch`` each rank answers its share of the
  requests on its own device and writes its own ``<set>.rank<k>.jsonl`` and ``errors.rank<k>.jsonl``
  (wavs are named by Qid, which no two ranks share); readers take the union of the shards.

The returned string is ``cs3_tasks.harness.speech.encode_response(text, wav_path)``.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cs3_tasks.core.audio import SAMPLE_RATE, AudioSource, load_audio, write_wav
from cs3_tasks.core.cache import atomic_write
from cs3_tasks.core.data import SETS
from cs3_tasks.core.statefile import RECORDS_LIMIT, read_state_text
from cs3_tasks.harness.distributed import all_gather_list
from cs3_tasks.harness.speech import encode_response, speech_output_path
from cs3_tasks.judge.arguments import score_command
from cs3_tasks.models.parallel import DataParallelLM
from cs3_tasks.scoring.outputs import failed_item, output_files

log = logging.getLogger(__name__)

ERRORS_FILE = "errors.jsonl"


@dataclass(frozen=True)
class SpeechRequest:
    """One lm-eval generate_until request, in the terms a speech model needs."""

    index: int  # position in the lm-eval request list
    task: str  # lm-eval task name, e.g. "cs3_knowledge"
    qid: str  # item id, names the saved wav
    instruction: str  # the context lm-eval built (doc_to_text); may be ""
    audio: AudioSource | None  # the query audio as the task gave it (bytes or a path)
    gen_kwargs: Mapping[str, Any] = field(default_factory=dict)
    # the doc's language pair (conversation tasks such as belle_s2s_zh2en): the task scores the answer's
    # language, which its instruction names; None on the cs3 sets
    pair: str | None = None


@dataclass(frozen=True)
class Generation:
    """lm-eval's generation kwargs of a request (the task's ``generation_kwargs`` updated by
    ``--gen_kwargs``), in the terms a wrapper's decoder needs."""

    max_tokens: int | None  # lm-eval's max_gen_toks; None when the task gives none
    until: tuple[str, ...]  # stop strings
    do_sample: bool
    temperature: float

    def cap(self, model_arg: int | None) -> int | None:
        """The token cap of this request: the smaller of lm-eval's max_gen_toks and a wrapper's own
        ``max_new_tokens`` model_arg (either may be absent)."""
        caps = [int(cap) for cap in (self.max_tokens, model_arg) if cap]
        return min(caps) if caps else None

    def cut(self, text: str) -> str:
        """``text`` up to the first stop string of ``until`` (lm-eval's rule for generate_until)."""
        for stop in self.until:
            if stop and stop in text:
                text = text.split(stop, 1)[0]
        return text


def generation(gen_kwargs: Mapping[str, Any]) -> Generation:
    """The Generation of lm-eval's gen_kwargs (greedy unless do_sample is true)."""
    until = gen_kwargs.get("until") or ()
    until = (until,) if isinstance(until, str) else tuple(str(stop) for stop in until)
    max_tokens = gen_kwargs.get("max_gen_toks")
    do_sample = as_bool(gen_kwargs.get("do_sample", False))
    return Generation(
        max_tokens=int(max_tokens) if max_tokens not in (None, "") else None,
        until=until,
        do_sample=do_sample,
        temperature=float(gen_kwargs.get("temperature") or 0.0) if do_sample else 0.0,
    )


@dataclass
class SpeechReply:
    """A model's answer: its text channel and, for speech models, the waveform it spoke."""

    text: str
    audio: np.ndarray | None = None
    sample_rate: int = SAMPLE_RATE
    # why a speech model has no waveform for this answer (e.g. its TTS failed): the item is recorded as a
    # failure of the speech channel while its text channel is still scored
    speech_error: str | None = None


Outcome = SpeechReply | BaseException


class ItemError(RuntimeError):
    """A failure attributable to one item (its message names the Qid)."""


class RunMostlyFailed(RuntimeError):
    """More than half of a run's items failed: raised after every output and error is saved, so that the
    run exits non-zero instead of scoring the few items that worked."""


def speech_request(instance: Any, index: int) -> SpeechRequest:
    """Unpack an lm-eval Instance whose args are (context, gen_kwargs[, {"audio": ...}])."""
    args = instance.args
    context = args[0] if args else ""
    gen_kwargs = args[1] if len(args) > 1 and isinstance(args[1], Mapping) else {}
    aux = args[2] if len(args) > 2 and isinstance(args[2], Mapping) else {}
    audio = aux.get("audio")
    # lm-eval's doc_to_audio may give a list (one entry per configured feature): we take one query.
    if isinstance(audio, (list, tuple)) and not _is_array_tuple(audio):
        audio = audio[0] if audio else None
    doc = instance.doc if isinstance(instance.doc, Mapping) else {}
    doc_id = getattr(instance, "doc_id", None)
    qid = doc.get("Qid") or doc.get("qid") or (f"doc{doc_id}" if doc_id is not None else f"request{index}")
    return SpeechRequest(
        index=index,
        task=instance.task_name or "task",
        qid=str(qid),
        instruction=context if isinstance(context, str) else "",
        audio=audio,
        gen_kwargs=dict(gen_kwargs),
        pair=str(doc["cs3_pair"]) if doc.get("cs3_pair") else None,
    )


def repeated_requests(requests: Sequence[Any]) -> dict[int, int]:
    """{j: i} for each request j that is the same object as an earlier request i.

    Under data parallelism lm-eval pads a rank's request list with copies of its last request so that
    every rank runs as many requests; they are answered once (our wrappers are deterministic, and
    ``repeats`` is 1 in the cs3 tasks)."""
    first: dict[int, int] = {}
    copies: dict[int, int] = {}
    for j, request in enumerate(requests):
        i = first.setdefault(id(request), j)
        if i != j:
            copies[j] = i
    return copies


def _is_array_tuple(value: Any) -> bool:
    return isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], np.ndarray)


def set_of_task(task_name: str | None) -> str | None:
    """``cs3_knowledge_en`` / ``cs3_knowledge_en_text`` -> ``knowledge_en``; None for other tasks."""
    if not task_name:
        return None
    name = task_name.removeprefix("cs3_").removesuffix("_text")
    return name if name in SETS else None


def safe_name(text: str) -> str:
    """A file-system-safe name for a Qid, task or model label."""
    name = re.sub(r"[^\w.\-]+", "_", str(text)).strip("._")
    return name or "unnamed"


def as_bool(value: Any) -> bool:
    """A model_arg flag: lm-eval parses "true"/"false", the Python API may pass either form."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def pick_device(requested: str | None) -> str:
    """The torch device to use: lm-eval passes --device (default "cuda:0" even without a GPU)."""
    import torch

    if requested and not (str(requested).startswith("cuda") and not torch.cuda.is_available()):
        return str(requested)
    if requested:
        log.warning("device %s requested but CUDA is not available: using cpu", requested)
    return "cuda" if torch.cuda.is_available() else "cpu"


def chunked(items: Sequence, size: int) -> Iterator[Sequence]:
    size = max(1, int(size))
    for start in range(0, len(items), size):
        yield items[start : start + size]


class SpeechLM(DataParallelLM):
    """Base of the cs3 speech-to-speech wrappers; subclasses implement ``generate_batch``."""

    MULTIMODAL = True  # lets lm-eval hand us tasks that carry doc_to_audio

    #: registered lm-eval name; also the default output sub-directory
    model_name: str = "cs3-speech"

    def __init__(
        self,
        output_dir: str | None = None,
        batch_size: int | str | None = 1,
        resume: bool = False,
        max_batch_size: int | None = None,  # passed by lm-eval; unused
        device: str | None = None,
        **unknown: Any,
    ) -> None:
        super().__init__(device)
        if unknown:
            raise TypeError(f"{self.model_name}: unknown model_args {sorted(unknown)}")
        self.output_dir = Path(output_dir or Path("cs3_outputs") / safe_name(self.label()))
        # lm-eval passes batch_size as a str ("auto", "8"); "auto" means the wrapper's own default.
        self.batch_size = int(batch_size) if str(batch_size).isdigit() else self.default_batch_size()
        self.resume = as_bool(resume)
        # one device per rank under a launcher (cuda:<local rank>); as requested in one process
        self.device_name = self._device if self.process_group.distributed else device
        self._write_lock = threading.Lock()

    # -- subclass API -------------------------------------------------------------------------

    def label(self) -> str:
        """Names the default output directory ./cs3_outputs/<label>."""
        return self.model_name

    def run_name(self) -> str:
        """What lm-eval's results folder is named after (``DataParallelLM.create_from_arg_obj``)."""
        return self.named_run or self.label()

    def default_batch_size(self) -> int:
        return 1

    def generate_batch(self, requests: Sequence[SpeechRequest]) -> list[Outcome]:
        """One outcome per request: a SpeechReply or the exception that item raised."""
        raise NotImplementedError

    def generate_all(
        self, requests: Sequence[SpeechRequest], done: Callable[[SpeechRequest, Outcome], None]
    ) -> None:
        """Run every request, calling ``done`` once per item. Default: chunks of ``batch_size``.

        A chunk that raises as a whole is retried item by item, so the failure lands on the item that
        caused it. Wrappers with their own scheduling (thread pools, pipeline stages) override this.
        """
        for chunk in chunked(requests, self.batch_size):
            try:
                outcomes = self.generate_batch(chunk)
                if len(outcomes) != len(chunk):
                    raise RuntimeError(f"backend returned {len(outcomes)} results for {len(chunk)} requests")
            except Exception as batch_error:  # noqa: BLE001 - retried item by item below
                if len(chunk) == 1:
                    outcomes = [batch_error]
                else:
                    log.warning(
                        "%s: batch of %d failed (%s); retrying one by one",
                        self.model_name,
                        len(chunk),
                        batch_error,
                    )
                    outcomes = [self._one(req) for req in chunk]
            for req, outcome in zip(chunk, outcomes):
                done(req, outcome)

    def _one(self, req: SpeechRequest) -> Outcome:
        try:
            return self.generate_batch([req])[0]
        except Exception as error:  # noqa: BLE001 - recorded for this item only
            return error

    # -- helpers for subclasses ---------------------------------------------------------------

    @staticmethod
    def query_audio(req: SpeechRequest, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
        """The query waveform; a clear error naming the Qid when it is missing or unreadable."""
        if req.audio is None:
            raise ItemError(
                f"{req.task}/{req.qid}: the request carries no query audio (does the task set doc_to_audio?)"
            )
        try:
            return load_audio(req.audio, sample_rate)
        except Exception as error:
            raise ItemError(f"{req.task}/{req.qid}: cannot read the query audio: {error}") from error

    # -- lm-eval API --------------------------------------------------------------------------

    def generate_until(self, requests: list, disable_tqdm: bool = False) -> list[str]:
        from tqdm import tqdm

        reqs = [speech_request(instance, i) for i, instance in enumerate(requests)]
        results: list[str | None] = [None] * len(reqs)
        copies = repeated_requests(requests)
        previous = self._previous_answers(reqs) if self.resume else {}
        todo = []
        for req in reqs:
            if req.index in copies:
                continue
            if (req.task, req.qid) in previous:
                results[req.index] = previous[(req.task, req.qid)]
            else:
                todo.append(req)
        if previous:
            log.info(
                "%s: resume: %d of %d items already answered in %s",
                self.model_name,
                len(reqs) - len(todo),
                len(reqs),
                self.output_dir,
            )

        bar = tqdm(total=len(todo), desc=f"{self.model_name} speech generation", disable=disable_tqdm)

        failed: list[str] = []

        def done(req: SpeechRequest, outcome: Outcome) -> None:
            results[req.index], ok = self._finish(req, outcome, requests[req.index])
            if not ok:
                failed.append(req.qid)
            bar.update(1)

        try:
            self.generate_all(todo, done)
        finally:
            bar.close()
        for copy, original in copies.items():
            results[copy] = results[original]
        missing = [reqs[i].qid for i, r in enumerate(results) if r is None]
        for i, r in enumerate(results):
            if r is None:  # a subclass that forgot an item: record it rather than crash lm-eval
                results[i], _ = self._finish(
                    reqs[i], ItemError(f"{reqs[i].qid}: no result produced"), requests[i]
                )
        if missing:
            log.error("%s: %d items produced no result: %s", self.model_name, len(missing), missing[:5])
        with self._write_lock:
            self._compact({req.task for req in todo})
        self._check_not_mostly_failed(len(failed) + len(missing), len(reqs) - len(copies))
        return results  # type: ignore[return-value]

    def _check_not_mostly_failed(self, n_failed: int, n_items: int) -> None:
        """RunMostlyFailed when more than half of the run's items (every rank's) failed. A collective: every
        rank gets here once per generate_until, as it does in the task filters."""

        counts = all_gather_list([(n_failed, n_items)])
        n_failed, n_items = sum(f for f, _ in counts), sum(n for _, n in counts)
        if 2 * n_failed <= n_items:
            return
        raise RunMostlyFailed(
            f"{self.model_name}: {n_failed} of {n_items} items failed; the causes are in the errors*.jsonl "
            f"of {self.output_dir}, where everything generated is saved. Fix the "
            "cause and re-run with resume=true (only the failed items are generated again), or score what "
            f"there is with `{score_command(str(self.output_dir))}`."
        )

    def loglikelihood(self, requests: list, disable_tqdm: bool = False) -> list:
        raise NotImplementedError(
            f"{self.model_name} is a speech-to-speech generation wrapper: loglikelihood is not supported. "
            "Use it with generate_until tasks (cs3_knowledge, cs3_knowledge_en, cs3_open_ended)."
        )

    def loglikelihood_rolling(self, requests: list, disable_tqdm: bool = False) -> list:
        raise NotImplementedError(
            f"{self.model_name} is a speech-to-speech generation wrapper: loglikelihood_rolling "
            "(perplexity) is not supported."
        )

    # -- saving -------------------------------------------------------------------------------

    def wav_path(self, req: SpeechRequest) -> Path:

        return speech_output_path(self.output_dir, req.task, req.qid)

    def _finish(self, req: SpeechRequest, outcome: Outcome, instance: Any) -> tuple[str, bool]:
        """The encoded response of an item (saved first), and whether it succeeded."""

        text, audio_path, error = "", None, None
        if isinstance(outcome, BaseException):
            error = outcome
        else:
            try:
                text = outcome.text or ""
                if outcome.audio is not None and np.asarray(outcome.audio).size > 0:
                    path = self.wav_path(req)
                    write_wav(path, np.asarray(outcome.audio, dtype=np.float32), outcome.sample_rate)
                    audio_path = str(path)
            except Exception as save_error:  # noqa: BLE001 - e.g. NaN samples: the item fails, run goes on
                text, audio_path, error = "", None, save_error
            if error is None and outcome.speech_error:
                error = ItemError(outcome.speech_error)
        if error is not None:
            self._record_failure(req, error)
        self._append_row(req, text, audio_path, error)
        # A failed item carries its cause, so the scorer records it as a failure (a missing verdict), never
        # as a wrong answer; lm-eval's response and the saved row (`outputs._parse_line`) by one rule.
        if error is not None:
            kept, problem = failed_item(text, f"{type(error).__name__}: {error}")
            return encode_response(kept, audio_path, problem=problem), False
        response = encode_response(text, audio_path)
        # lm-eval's --use_cache stores responses it gets from us; partial adds make a killed run resumable.
        self.cache_hook.add_partial("generate_until", instance.args, response)
        return response, True

    def _record_failure(self, req: SpeechRequest, error: BaseException) -> None:
        message = f"{type(error).__name__}: {error}"
        log.warning("%s: item %s/%s failed: %s", self.model_name, req.task, req.qid, message)
        row = {
            "task": req.task,
            "Qid": req.qid,
            "model": self.label(),
            "error": message,
            "traceback": "".join(traceback.format_exception(error))[-4000:],
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        self._append_jsonl(self.output_dir / f"{Path(ERRORS_FILE).stem}{self.shard_suffix()}.jsonl", row)

    def responses_file(self, task: str) -> Path:
        """``<output_dir>/<set>.jsonl`` (``cs3_knowledge`` -> ``knowledge.jsonl``): the layout that
        ``cs3-bench score`` and ``cs3-precomputed`` read, so a run's outputs can be re-scored as they are.
        Rank k of a data-parallel run writes ``<set>.rank<k>.jsonl``."""
        return self.output_dir / f"{self.set_name(task)}{self.shard_suffix()}.jsonl"

    @staticmethod
    def set_name(task: str) -> str:
        return set_of_task(task) or safe_name(task)

    def _append_row(self, req: SpeechRequest, text: str, audio_path: str | None, error: BaseException | None):
        audio = Path(audio_path).resolve() if audio_path else None
        root = self.output_dir.resolve()
        if audio is not None and audio.is_relative_to(root):
            audio = audio.relative_to(root)
        row = {"Qid": req.qid, "text": text, "audio": str(audio) if audio else None}
        if error is not None:
            row["error"] = f"{type(error).__name__}: {error}"
        self._append_jsonl(self.responses_file(req.task), row)

    def _compact(self, tasks: set[str]) -> None:
        """Keep one row per Qid (the latest) in each responses file: readers keep the first row."""
        for task in tasks:
            path = self.responses_file(task)
            if not path.exists():
                continue
            latest: dict[str, str] = {}
            for line in read_state_text(path, RECORDS_LIMIT).splitlines():
                try:
                    latest[str(json.loads(line)["Qid"])] = line
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue  # a half-written line of a killed run
            atomic_write(path, "".join(line + "\n" for line in latest.values()))

    def _append_jsonl(self, path: Path, row: dict) -> None:
        with self._write_lock:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")

    def _previous_answers(self, reqs: Sequence[SpeechRequest]) -> dict[tuple[str, str], str]:
        """(task, Qid) -> encoded response, for items answered without error in an earlier run."""

        found: dict[tuple[str, str], str] = {}
        for task in {req.task for req in reqs}:
            # every rank's shard, oldest file first: an item answered by any rank of an earlier run
            # (whatever its process count) is not asked again
            for line in (
                line
                for path in output_files(self.output_dir, self.set_name(task))
                for line in read_state_text(path, RECORDS_LIMIT).splitlines()
            ):
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a half-written last line of a killed run
                if row.get("error"):
                    found.pop((task, row.get("Qid")), None)  # the latest row wins
                    continue
                audio = str(self.output_dir / row["audio"]) if row.get("audio") else None
                if audio is None or Path(audio).exists():
                    found[(task, str(row.get("Qid")))] = encode_response(row.get("text", ""), audio)
        return found
