"""``cs3-bench score --outputs-root ROOT --out RESULTS``: score a folder of model outputs, one per model.

Each immediate subfolder of ROOT that holds outputs of some set (either layout, `outputs.find_output_sets`)
is one model, named by its folder (neither layout names the model). It is scored exactly as
``cs3-bench score --outputs ROOT/<model> --out RESULTS/<model> --model-name <model>`` scores it
(`run.score_outputs`), then RESULTS gets the leaderboard of the models scored (`report.write_leaderboard`)
and ``models.json``: per model its status, exit code, sets and error. Hidden folders are passed over; folders
without outputs are skipped and listed.

A model's records depend on its outputs and the settings only: every model is scored with the one
`settings.ScoringSettings` resolved before the first, in name order, each into its own result dir.
Resumable per model: each result dir's records file skips what is done, so a finished model costs reading
its files. One model's failure (bad input, judge failures, a crash) never stops the others; RESULTS is
locked for the run.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cs3_tasks import judge
from cs3_tasks.cli import refusing
from cs3_tasks.core.cache import atomic_write
from cs3_tasks.core.text import valid_text
from cs3_tasks.report import leaderboard as report
from cs3_tasks.report.html import write_report_quietly
from cs3_tasks.report.leaderboard import LEADERBOARD_FILES
from cs3_tasks.scoring.cs_vs_en import cs_vs_en_markdown
from cs3_tasks.scoring.run import (
    NOT_REPRODUCED,
    Engines,
    FileSystemError,
    ScoreJob,
    score_outputs,
)
from cs3_tasks.scoring.settings import ScoringError
from cs3_tasks.scoring.store import result_dir_lock

MODELS_FILE = "models.json"
CS_VS_EN_FILE = "cs_vs_en.md"  # the code-switched vs English table of every model
REPORT_FOLDER = "report"  # the HTML audit report (`report.html`)
# scored: summaries written; incomplete: written, but most judge verdicts failed or most items of a set have
# no response (exit 3 of `score`; models.json's error says which);
# failed: no summary this run (bad input, busy result dir, a crash); pending: not reached (yet)
MODEL_STATUSES = ("scored", "incomplete", "failed", "pending")
# the exit code of a model that crashed (an exception that is not a scoring error)
CRASHED = 1


@dataclass
class ModelStatus:
    """One model's line in models.json (its outputs folder under the outputs root, its result dir under OUT:
    names, so that the file is the same on any machine)."""

    outputs: str
    result_dir: str
    status: str = "pending"
    exit_code: int | None = None
    sets: list[str] = field(default_factory=list)
    error: str | None = None
    note: str | None = None  # what was replaced in the folder's name to write it (`text.valid_text`)

    def as_written(self) -> dict:
        """Its entry in models.json (``note`` only when there is one)."""
        entry = asdict(self)
        if entry["note"] is None:
            del entry["note"]
        return entry


def model_name(folder: Path) -> str:
    """A model's name: its folder's, with U+FFFD for each byte that is not UTF-8 (`text.valid_text`, the one
    rule for text that cannot be written), so that results, models.json and the leaderboard can name it."""
    return valid_text(folder.name)[0]


def find_models(root: Path, engines: Engines, out: Path | None = None) -> tuple[list[Path], dict[str, str]]:
    """(the model folders under ``root`` holding what ``engines`` score, in name order; skipped folder name ->
    why). Hidden folders and ``out`` (when it lies inside ``root``) are passed over without a word."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"--outputs-root {root} is not a folder")
    resolved_out = Path(out).resolve() if out is not None else None
    models: list[Path] = []
    skipped: dict[str, str] = {}
    for folder in sorted(root.iterdir(), key=lambda path: path.name):
        if not folder.is_dir() or folder.name.startswith(".") or folder.resolve() == resolved_out:
            continue
        if engines.sets(folder):
            models.append(folder)
        elif folder.name in result_files():  # a results folder's own (its report): not a model's
            continue
        else:
            skipped[model_name(folder)] = "no {} of any set ({})".format(*engines.holds)
    return models, skipped


def result_files() -> tuple[str, ...]:
    """The files and folders `score_models` writes into the results folder besides the models' result dirs."""

    return (*LEADERBOARD_FILES, MODELS_FILE, CS_VS_EN_FILE, REPORT_FOLDER)


def check_result_names(models: Sequence[Path], out: Path) -> None:
    """ScoringError when a model's result dir (``out/<folder name>``) would be one of `result_files`."""
    clashes = [folder for folder in models if model_name(folder) in result_files()]
    if clashes:
        folder = clashes[0]
        raise ScoringError(
            f"model folder {folder} would be scored into {Path(out) / model_name(folder)}, where the "
            f"{model_name(folder)} of the results goes: rename the folder"
        )


def overall_exit_code(statuses: Mapping[str, ModelStatus]) -> int:
    """0: every model scored; `NOT_REPRODUCED`: a re-score of some model does not reproduce its summaries;
    3: most models failed or are incomplete; 1: some did."""
    if any(s.exit_code == NOT_REPRODUCED for s in statuses.values()):
        return NOT_REPRODUCED
    bad = sum(s.status != "scored" for s in statuses.values())
    if not bad:
        return 0
    return 3 if 2 * bad > len(statuses) else 1


@dataclass(frozen=True)
class ModelsJob:
    """A folder of outputs dirs, one per model, to score into one result dir per model under ``out``."""

    root: Path
    out: Path
    set_name: str = "all"
    restart: bool = False
    wait: bool = False
    progress: bool = True

    def model_job(self, folder: Path) -> ScoreJob:
        """What ``cs3-bench score --outputs <folder> --out <out>/<name> --model-name <name>`` scores."""
        return ScoreJob(
            outputs=folder,
            out=Path(self.out) / model_name(folder),
            set_name=self.set_name,
            model_name=model_name(folder),
            restart=self.restart,
            wait=self.wait,
            progress=self.progress,
        )


def score_model(job: ScoreJob, engines: Engines, status: ModelStatus) -> None:
    """Score one model into ``status``; never raises but KeyboardInterrupt and FileSystemError (a file that
    cannot be written fails every model alike)."""

    secret = engines.secret()
    with ExitStack() as held:  # the model's result dir lock, released when its files are written
        try:
            outcome = score_outputs(job, engines, held, echo=False)
        except FileSystemError as exc:
            status.status, status.exit_code, status.error = "failed", exc.exit_code, str(exc)
            raise
        except ScoringError as exc:
            status.status, status.exit_code, status.error = (
                "failed",
                exc.exit_code,
                judge.redact(str(exc), secret),
            )
            return
        except Exception as exc:  # one model's crash must not stop the others
            print(judge.redact(traceback.format_exc(), secret), file=sys.stderr)
            status.status, status.exit_code = "failed", CRASHED
            status.error = judge.redact(f"{type(exc).__name__}: {exc}", secret)
            return
    status.status = "scored" if outcome.exit_code == 0 else "incomplete"
    status.exit_code, status.sets = outcome.exit_code, list(outcome.sets)
    status.error = judge.redact(outcome.message, secret)


def write_models_file(
    out: Path,
    root: Path,
    set_name: str,
    statuses: Mapping[str, ModelStatus],
    skipped: Mapping[str, str],
    exit_code: int | None = None,
) -> None:
    """``<out>/models.json`` (atomically): the run's models with their status, and the skipped folders."""

    content = {
        "outputs_root": Path(root).resolve().name,  # names, never a folder of this machine
        "set": set_name,
        "exit_code": exit_code,  # None while the run goes on
        "models": {name: status.as_written() for name, status in statuses.items()},
        "skipped": dict(skipped),
    }
    atomic_write(Path(out) / MODELS_FILE, json.dumps(content, indent=2, ensure_ascii=False) + "\n")


def leaderboard_notes(statuses: Mapping[str, ModelStatus], skipped: Mapping[str, str]) -> list[str]:
    """The lines under the leaderboard: incomplete, failed and skipped models (see models.json)."""
    notes = []
    statuses = {" ".join(name.splitlines()): s for name, s in statuses.items()}  # a folder name may hold "\n"
    skipped = {" ".join(name.splitlines()): why for name, why in skipped.items()}
    incomplete = [name for name, s in statuses.items() if s.status == "incomplete"]
    if incomplete:
        notes.append(
            "Incomplete (most judge verdicts failed, or most items have no response; see models.json): "
            f"{', '.join(incomplete)}."
        )
    failed = {name: s for name, s in statuses.items() if s.status != "scored" and s.status != "incomplete"}
    if failed:
        notes.append("Not on the leaderboard (failed; see models.json):")
        notes += [f"- {name}: {(s.error or s.status).splitlines()[0]}" for name, s in failed.items()]
    if skipped:
        notes.append(f"Skipped folders (no outputs): {', '.join(skipped)}.")
    return notes


def score_root(job: ModelsJob, engines: Engines) -> int:
    """Every model folder under ``job.root`` into ``job.out``, heard and judged by ``engines`` (live, or
    recorded: ``--from-results``): the exit code of `overall_exit_code`, or 2 on bad input (no model folder,
    ``out`` is ``root``, ``out`` busy, two folders of one system)."""
    root, out = Path(job.root), Path(job.out)
    if out.resolve() == root.resolve():
        raise ScoringError(
            f"--out {out} is the folder scored: the result dirs would go into the model folders; "
            "choose another --out"
        )
    with refusing(FileNotFoundError):
        models, skipped = find_models(root, engines, out)
    check_result_names(models, out)
    if not models:
        listed = f" (skipped: {', '.join(skipped)})" if skipped else ""
        raise ScoringError(
            f"no model folder in {root}: expected one folder per model holding {engines.holds[1]}{listed}"
        )
    # RESULTS read-only or full: one line (each model's files are kept); busy: a refusal (`ResultDirBusy`)
    with ExitStack() as held, refusing(OSError):
        engines.check_systems(models)
        held.enter_context(result_dir_lock(out, wait=job.wait))  # models.json and the leaderboard: one run
        return score_models(job, engines, models, skipped)


def score_models(job: ModelsJob, engines: Engines, models: Sequence[Path], skipped: Mapping[str, str]) -> int:

    root, out = Path(job.root), Path(job.out)
    set_name = job.set_name
    for name in skipped:
        print(f"skipped {root / name}: {skipped[name]}", file=sys.stderr)
    statuses: dict[str, ModelStatus] = {}
    keys: dict[Path, str] = {}  # folder -> its name in models.json
    for folder in models:
        name = keys[folder] = model_name(folder)
        if name in statuses:  # two names that differ only in bytes that are not UTF-8: the first is scored
            keys[folder] = os.fsencode(folder.name).decode("utf-8", "backslashreplace")
            error = (
                f"its name as written (U+FFFD for each byte that is not UTF-8) is model {name}'s: rename one "
                "of the two folders"
            )
            statuses[keys[folder]] = ModelStatus(keys[folder], keys[folder], "failed", 2, error=error)
        else:
            note = valid_text(folder.name, "the folder name (not UTF-8)")[1]
            statuses[name] = ModelStatus(outputs=name, result_dir=name, note=note)
    write_models_file(out, root, set_name, statuses, skipped)
    for k, folder in enumerate(models, start=1):
        name = keys[folder]
        status = statuses[name]
        print(f"[{k}/{len(models)}] model {name}", file=sys.stderr)
        if status.status == "failed":  # refused above
            print(f"error: model {name}: {status.error}", file=sys.stderr)
            continue
        score_model(job.model_job(folder), engines, status)
        write_models_file(out, root, set_name, statuses, skipped)  # a killed run keeps what is known
        if status.status == "scored":
            print(f"model {name}: scored ({', '.join(status.sets)})", file=sys.stderr)
        else:
            print(
                f"error: model {name}: {status.status} (exit {status.exit_code}): {status.error}",
                file=sys.stderr,
            )
    on_board = [out / name for name, s in statuses.items() if s.status in ("scored", "incomplete")]
    try:
        summaries = report.load_summaries(on_board) if on_board else {}
    except (FileNotFoundError, ValueError) as exc:  # a result dir edited by hand: the records are kept
        print(f"error: cannot write the leaderboard: {exc}", file=sys.stderr)
        write_models_file(out, root, set_name, statuses, skipped, exit_code=2)
        return 2
    print(report.write_leaderboard(out, summaries, leaderboard_notes(statuses, skipped)))
    atomic_write(out / CS_VS_EN_FILE, cs_vs_en_markdown(summaries))
    write_report_quietly(out / REPORT_FOLDER, on_board, engines.dataset)
    code = overall_exit_code(statuses)
    write_models_file(out, root, set_name, statuses, skipped, exit_code=code)
    bad = [name for name, s in statuses.items() if s.status != "scored"]
    if bad:
        print(
            f"error: {len(bad)} of {len(statuses)} models not fully scored: {', '.join(bad)} "
            f"(see {out / MODELS_FILE})",
            file=sys.stderr,
        )
    return code
