"""The one run: one folder scored into a result dir, every set, resumable (``cs3-bench score``).

What hears and judges is given to the run (`Engines`): `LiveEngines` read an outputs dir and run the ASR and
the judge of the run's `ScoringSettings`; `recorded.RecordedEngines` read a published result dir and answer
from its records (``--from-results``). Either way the run is the same: the result dir's lock, the store (the
refusal to write over another system's results, the settings check), the pipeline, the summaries, and one rule
for the exit code (`scoring_outcome`)."""

from __future__ import annotations

import errno
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from typing import Protocol as Protocol_

from cs3_tasks import judge
from cs3_tasks.core import data
from cs3_tasks.core.data import SETS
from cs3_tasks.core.refusal import Refusal
from cs3_tasks.core.text import valid_text
from cs3_tasks.scoring import summary
from cs3_tasks.scoring.bundle import summary_difference
from cs3_tasks.scoring.outputs import (
    ModelOutput,
    authors_file,
    find_output_sets,
    join_problems,
    output_files,
    read_given_transcripts,
    read_outputs,
)
from cs3_tasks.scoring.pipeline import score_batch
from cs3_tasks.scoring.protocols import Protocol
from cs3_tasks.scoring.records import CHANNELS, judge_errors, judge_failures, judge_unparsed
from cs3_tasks.scoring.settings import ScoringError, ScoringSettings
from cs3_tasks.scoring.store import (
    SCORED_DOC_FIELDS,
    RecordsError,
    RecordsFile,
    ResultDirBusy,
    SettingsMismatchError,
    dataset_identity,
    result_dir_lock,
)

# the exit code of a re-score whose summaries differ from the ones it verifies (`scoring_outcome`)
NOT_REPRODUCED = 4


class FileSystemError(ScoringError):
    """A file of the run cannot be written or opened (read-only or full disk, a file where a folder should
    be): every later write would fail alike, so the run stops (``--outputs-root``: every model)."""


class EmptyOutputs(ScoringError):
    """A set's outputs file holds no row: nothing of that set can be scored (the other sets still are)."""


def file_system_error(exc: OSError) -> FileSystemError:
    """An OSError of reading or writing a file (read-only or full disk, a file where a folder should be)
    as one line naming the path and the cause; what was written before it is kept."""
    path = exc.filename if exc.filename is not None else "a file"
    cause = exc.strerror or str(exc)
    if exc.errno == errno.EEXIST and exc.filename is not None and Path(exc.filename).is_file():
        cause = "a file is there, where a folder is needed"  # mkdir's bare "File exists"
    hint = ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM):
        hint = " (what was scored before is kept: fix it and re-run to resume)"
    return FileSystemError(f"{path}: {cause}{hint}")


@dataclass(frozen=True)
class ScoreJob:
    """One folder to score into one result dir (``outputs``: an outputs dir, or with recorded engines a
    result dir): which sets ("all": every set the folder holds), the model's name (live engines; default:
    the outputs dir's name; recorded ones take the name their settings record) and how the run goes
    (restart, wait for the lock, progress bars)."""

    outputs: Path
    out: Path
    set_name: str = "all"
    model_name: str | None = None
    restart: bool = False
    wait: bool = False
    progress: bool = True

    @property
    def model(self) -> str:
        """The model's name as results write it: a name that is not valid Unicode (a folder name that is not
        UTF-8) has U+FFFD for each undecodable byte (`text.valid_text`; `model_note` says so)."""
        return valid_text(self.given_model)[0]

    @property
    def given_model(self) -> str:
        return self.model_name or Path(self.outputs).resolve().name

    @property
    def model_note(self) -> str | None:
        """What was replaced in the model's name (None: nothing)."""
        return valid_text(self.given_model, "the model name (its outputs folder's name)")[1]

    def identity(self) -> dict:
        """The scored system as <set>.settings.json records it (`store.IDENTITY_KEYS`): its name, never a
        folder of this machine (that is kept apart, in `store.LOCAL_FILE`)."""
        return {"model": self.model}


@dataclass(frozen=True)
class ScoreOutcome:
    """How `score_outputs` ended (`scoring_outcome`): exit code 0 (scored), 3 (incomplete: the summaries are
    written, and ``message`` says why: most judge verdicts of the run failed or are unparsed, a set had no
    rows, or a set failed as a whole on a channel: one line per set and channel, ``failed_parts``) or
    `NOT_REPRODUCED` (a re-score's summaries differ from the bundle's); and the sets scored."""

    exit_code: int
    sets: tuple[str, ...]
    message: str | None = None
    failed_parts: tuple[str, ...] = ()

    def error_lines(self) -> list[str]:
        """What the command says on stderr, one ``error: `` line each: the run's message, then each set and
        channel that failed as a whole."""
        lines = [self.message] if self.message and self.message != "; ".join(self.failed_parts) else []
        return [f"error: {line}" for line in (*lines, *self.failed_parts)]


@dataclass
class SetInputs:
    """What one set of a run is scored from, whichever engines hear and judge it: the dataset's items, the
    outputs by Qid, the settings its records depend on (the scored system's identity among them), the ASR and
    the judge (live: an `AsrConfig` and a `JudgeConfig`; recorded: `replay.RecordedTranscripts` and
    `replay.RecordedVerdicts`), the protocol and its prompts."""

    docs: list[Mapping]
    outputs: dict[str, ModelOutput]
    settings: dict
    asr: Any
    judge: Any
    protocol: Protocol
    templates: Any = None
    # the outputs folder records name audio relative to, recorded on this machine (`store.LOCAL_FILE`)
    audio_root: Path | None = None
    # recorded results: each Qid's recorded `input_key`, every item scored again (`RecordsFile.score_pending`)
    recorded_keys: Mapping[str, str | None] | None = None
    # what a record keeps beside what the pipeline writes (a recorded record's other fields)
    complete: Callable[[dict], dict] | None = None
    # the summary the scored set must reproduce (a re-score: the bundle's own); None: nothing to verify
    expected: Mapping | None = None


class Engines(Protocol_):
    """What hears and judges a run, live or recorded, and where its inputs come from: the one run
    (`score_outputs`) asks it which sets a folder holds and what each set is scored from."""

    dataset: str | None
    # what the folder of a system holds, for messages: what ("outputs") and its files ("<set>.jsonl")
    holds: tuple[str, str]

    def sets(self, folder: Path) -> list[str]: ...

    def inputs(self, job: ScoreJob, set_name: str) -> SetInputs: ...

    def check_systems(self, folders: Sequence[Path]) -> None: ...

    def secret(self) -> str | None: ...


@dataclass(frozen=True)
class LiveEngines:
    """The ASR and the judge of ``settings`` (`ScoringSettings`, resolved once per run): outputs dirs are
    heard and judged."""

    settings: ScoringSettings
    holds: tuple[str, str] = ("outputs", "json/cs_<set>.json or <set>.jsonl")

    @property
    def dataset(self) -> str | None:
        return self.settings.dataset

    def sets(self, folder: Path) -> list[str]:
        return find_output_sets(folder)

    def check_systems(self, folders: Sequence[Path]) -> None:
        """Nothing to check: each outputs folder is one system, named by its folder."""

    def secret(self) -> str | None:
        return self.settings.judge.api_key() if self.settings.judge is not None else None

    def inputs(self, job: ScoreJob, set_name: str) -> SetInputs:
        run = self.settings
        try:
            docs = data.load_docs(set_name, run.dataset)
            outputs = read_outputs(job.outputs, set_name)
            if run.given_transcripts:
                transcripts = read_given_transcripts(job.outputs, set_name)
                for qid, output in outputs.items():
                    output.transcript = transcripts.get(qid)
                    if output.transcript is None:
                        output.problem = join_problems(output.problem, "no given transcript (json_asr)")
        except (OSError, ValueError, RuntimeError) as exc:  # no dataset / no outputs: nothing to score
            raise ScoringError(str(exc)) from exc
        if not outputs:
            files = [authors_file(job.outputs, "json", set_name)] + output_files(job.outputs, set_name)
            named = ", ".join(str(f) for f in files if f is not None) or str(job.outputs)
            raise EmptyOutputs(f"{set_name}: {named} holds no rows: nothing to score for this set")
        settings = run.record_settings(set_name)
        settings.update(job.identity())
        settings["dataset_sha256"] = dataset_identity(docs)  # the content scored against, wherever it lies
        return SetInputs(
            docs,
            outputs,
            settings,
            run.asr,
            run.judge,
            run.protocol,
            run.templates,
            audio_root=Path(job.outputs),
        )


def score_outputs(job: ScoreJob, engines: Engines, held, *, echo: bool = True) -> ScoreOutcome:
    """Score ``job.outputs`` into ``job.out`` with ``engines`` (live: `LiveEngines`; recorded:
    `recorded.RecordedEngines`); ScoringError on bad input. ``held`` (an ExitStack) keeps the result dir's
    lock; ``echo`` prints each summary (markdown) to stdout."""
    if job.set_name == "all":
        set_names = engines.sets(job.outputs)
        if not set_names:
            what, files = engines.holds
            raise ScoringError(f"no {what} of any set ({', '.join(SETS)}) in {job.outputs}: expected {files}")
    else:
        set_names = [job.set_name]
    if echo and job.model_note:
        print(f"note: {job.model_note}: {job.model}", file=sys.stderr)
    out = Path(job.out)
    locked: list[bool] = []

    def lock() -> None:
        """One run at a time per result dir (a second waits with --wait, or is refused): taken once, when
        the first set's inputs are read, so a run that cannot start leaves no result dir behind."""
        if not locked:
            held.enter_context(result_dir_lock(out, wait=job.wait))
            locked.append(True)

    try:
        return _score_sets(job, engines, set_names, lock, echo=echo)
    except OSError as exc:  # the result dir or a cache cannot be written: one line, nothing lost
        raise file_system_error(exc) from exc
    except Refusal as exc:  # e.g. a state file that is a FIFO, a bad environment value: this run's error
        raise ScoringError(str(exc)) from exc


def _score_sets(
    job: ScoreJob, engines: Engines, set_names: list[str], lock: Callable[[], None], *, echo: bool
) -> ScoreOutcome:

    out = Path(job.out)
    summaries: dict[str, dict] = {}
    expected: dict[str, Mapping | None] = {}
    records: list[dict] = []
    empty: list[str] = []
    for set_name in set_names:
        try:
            summaries[set_name], final, expected[set_name] = _run_set(job, set_name, engines, lock)
        except EmptyOutputs as exc:  # that set's error; the other sets are scored
            empty.append(str(exc))
            continue
        records += final
    if not summaries:
        raise ScoringError("; ".join(empty))
    set_names = [s for s in set_names if s in summaries]
    model = summaries[set_names[0]]["model"]
    for other in summary.CS_EN_PAIR:  # the other knowledge set, when this result dir has it
        if other not in summaries and any(s in summary.CS_EN_PAIR for s in summaries):
            found = summary.read_summary(out, other)
            if found is not None and found.get("model") == model:  # never another system's (--restart)
                summaries[other] = found
    summary.attach_cs_vs_en(summaries)
    differences = [
        f"{s}: {found}"
        for s in set_names
        if (found := summary_difference(expected[s], summaries[s])) is not None
    ]
    for set_name, result in summaries.items():
        markdown = summary.write_summary(out, result)
        if echo and set_name in set_names:
            print(markdown)
    return scoring_outcome(out, records, summaries, set_names, empty, differences)


def scoring_outcome(
    out: Path,
    records: list[dict],
    summaries: Mapping[str, dict],
    set_names: list[str],
    empty: list[str],
    differences: Sequence[str] = (),
) -> ScoreOutcome:
    """How a scored run ended (`ScoreOutcome`), the one rule of its exit code: not reproduced
    (`NOT_REPRODUCED`) when a re-score's summaries differ from the ones it verifies (``differences``, per
    set); incomplete (3) when most judge verdicts of the run failed or are unparsed, a set had no rows, or a
    set failed as a whole on a channel (`failed_parts`); else scored (0). ``summaries`` is kept for callers;
    the rule of 3 reads the records."""

    if differences:
        message = (
            f"the re-score does not reproduce the summaries it was given ({'; '.join(differences)}): the "
            f"records do not give those numbers (re-scored into {out})"
        )
        return ScoreOutcome(NOT_REPRODUCED, tuple(set_names), message)
    del summaries  # the rule is a function of the records alone
    parts = tuple(failed_parts(records, out))
    message = None
    failed, asked = judge_failures(records)
    unparsed, _ = judge_unparsed(records)
    if 2 * failed > asked:
        message = (
            f"{failed} of {asked} judge verdicts of this run failed (see the *_error fields of the "
            f"records in {out}); the summary is incomplete. Re-run to retry them."
        )
    elif 2 * unparsed > asked:
        message = (
            f"{unparsed} of {asked} judge verdicts of this run are unparsed (no reply held a verdict; "
            f"counted wrong, as the authors' code does: see the *_raw fields of the records in {out}); the "
            "judge does not follow the prompt's format, so the summary is not the benchmark's number."
        )
    elif empty:
        message = "; ".join(empty) + f" (the other sets are scored into {out})"
    elif parts:
        message = "; ".join(parts)
    return ScoreOutcome(3 if message else 0, tuple(set_names), message, parts)


def failed_parts(records: Iterable[Mapping], out: Path | str) -> list[str]:
    """The rule of a set that failed as a whole (docs/reliability.md), pure: one line for each set and
    channel where more than half of the judge verdicts asked failed or are unparsed, or more than half of
    the items have no response on the channel (generation, TTS or ASR failed). A channel no item of the set
    has (a text-only model's speech) is not applicable, never failed."""

    by_set: dict[str, list[Mapping]] = {}
    for record in records:
        if not str(record.get("problem") or "").startswith("unknown Qid"):
            by_set.setdefault(str(record.get("set")), []).append(record)
    lines = []
    for set_name, rows in by_set.items():
        for ch in CHANNELS:
            if all((r["text"] if ch == "text" else r["audio"]) is None for r in rows):
                continue  # not applicable
            where = f"{set_name}, {ch} channel"
            missing = [r for r in rows if summary.channel_response(r, ch) is None]
            if 2 * len(missing) > len(rows):
                asr = [str(r["asr_error"]) for r in missing if r.get("asr_error")]
                cause = (
                    f"ASR failed on {len(asr)}: {asr[0][:120]}"
                    if asr
                    else "generation or TTS failed: see the problem field"
                )
                lines.append(
                    f"{where}: {len(missing)} of {len(rows)} items have no response on a channel ({cause}; "
                    f"records in {out})"
                )
                continue
            failed, asked = judge_failures(rows, (ch,))
            unparsed, _ = judge_unparsed(rows, (ch,))
            if asked and 2 * (failed + unparsed) > asked:
                errors = [str(e) for r in rows for e in judge_errors(r, ch)]
                cause = f"{failed} failed" + (f", e.g. {errors[0][:120]}" if errors else "")
                lines.append(
                    f"{where}: {failed + unparsed} of {asked} judge verdicts are missing ({cause}; "
                    f"{unparsed} unparsed: see the *_error and *_raw fields of the records in {out})"
                )
    return lines


def _run_set(
    job: ScoreJob, set_name: str, engines: Engines, lock: Callable[[], None]
) -> tuple[dict, list[dict], Mapping | None]:
    """Score one set of ``job.outputs`` into ``job.out``: its summary, its records and the summary it must
    reproduce (None: nothing to verify); ScoringError on a setup error."""

    inputs = engines.inputs(job, set_name)
    store = RecordsFile(Path(job.out), set_name)
    try:
        lock()
        store.open(inputs.settings, restart=job.restart, outputs=inputs.audio_root)
    except (SettingsMismatchError, ResultDirBusy) as exc:
        raise ScoringError(str(exc)) from exc
    except RecordsError as exc:  # a line that is not a record, not a torn last one: never guessed over
        raise ScoringError(f"{exc}: fix or remove the line, or --restart") from exc
    complete = inputs.complete or (lambda record: record)

    def score(pending_docs: list[Mapping], pending_outputs: list[ModelOutput], append) -> None:
        score_batch(
            set_name,
            pending_docs,
            pending_outputs,
            asr=inputs.asr,
            judge=inputs.judge,
            progress=job.progress,
            on_record=lambda record: append(complete(record)),
            protocol=inputs.protocol,
            templates=inputs.templates,
            audio_root=inputs.audio_root,
        )

    try:
        final = store.score_pending(
            inputs.docs,
            inputs.outputs,
            score,
            doc_id=lambda doc: str(doc["Qid"]),
            label=set_name,
            doc_fields=SCORED_DOC_FIELDS,
            recorded_keys=inputs.recorded_keys,
        )
    except judge.JudgeAuthError as exc:  # every request would fail the same way: stop, keep what is done
        raise ScoringError(str(exc)) from exc
    result = summary.summarize(set_name, final, protocol=inputs.protocol)
    result["model"] = inputs.settings["model"]
    result["settings"] = inputs.settings
    summary.add_comparability(result, inputs.settings)
    return result, final, inputs.expected
