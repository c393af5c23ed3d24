"""Re-scoring a published result dir from its own records (``cs3-bench score --from-results DIR``).

A result dir's records carry every item's text response, transcript and judge verdicts, and its settings
say how they were made (protocol, the ASR's and the judge's fingerprints, the dataset's identity). Replaying
them through the one scoring pipeline (`pipeline.score_batch` with `RecordedTranscripts` and
`RecordedVerdicts`: the keyword stage, the metrics and the summaries are computed again; nothing is heard or
asked) needs no model and no key, and gives the same records and byte-identical summaries on any machine.
The dataset must be the one the run scored against (its ``dataset_sha256``): the keyword stage reads it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from cs3_tasks.core.cache import atomic_write
from cs3_tasks.core.data import SETS, load_docs
from cs3_tasks.scoring import summary as summaries
from cs3_tasks.scoring.outputs import ModelOutput, join_problems
from cs3_tasks.scoring.pipeline import asr_failed_problem, no_output_problem, score_batch, unknown_id_problem
from cs3_tasks.scoring.records import UNNAMED_PROTOCOL
from cs3_tasks.scoring.replay import RecordedTranscripts, RecordedVerdicts
from cs3_tasks.scoring.run import ScoreOutcome, scoring_outcome
from cs3_tasks.scoring.settings import ScoringError
from cs3_tasks.scoring.store import dataset_identity, read_records, read_run_settings


def scored_sets(result_dir: Path) -> list[str]:
    """The sets a result dir holds records of, in `SETS` order."""
    return [s for s in SETS if (Path(result_dir) / f"{s}.records.jsonl").is_file()]


def run_settings_of(result_dir: Path, set_name: str) -> dict:
    """The settings a set of a result dir was scored with: ``<set>.settings.json``, else its summary's."""
    settings = read_run_settings(result_dir, set_name)
    if settings is None:  # no settings file: the summary's copy (read only then)
        settings = read_run_settings(result_dir, set_name, summaries.read_summary(result_dir, set_name))
    if settings is None:
        raise ScoringError(
            f"{result_dir}: {set_name} has records but no settings (no {set_name}.settings.json or summary)"
        )
    return settings


def recorded_output(record: Mapping, set_name: str) -> ModelOutput | None:
    """The model output a record was scored from (None: the item had none); its problem is the one the
    output carried, without what scoring added (unknown Qid, ASR failure)."""
    problem = record.get("problem")
    if record.get("text") is None and record.get("audio") is None and problem == no_output_problem():
        return None
    if problem and record.get("asr_error"):
        problem = _without(problem, asr_failed_problem(record["asr_error"]))
    if problem and problem.startswith(unknown_id_problem("Qid", record["qid"], set_name)):
        problem = _without(problem, unknown_id_problem("Qid", record["qid"], set_name))
    # the audio is named for the record only: the recorded transcript stands for what it says
    given = record.get("transcript") if record.get("audio") is None else None
    return ModelOutput(record["qid"], record.get("text"), record.get("audio"), problem or None, given)


def _without(problem: str, part: str) -> str | None:
    kept = [p for p in problem.split("; ") if p != part]
    return join_problems(*kept)


def rescore_set(result_dir: Path, set_name: str, dataset: str | None) -> tuple[dict, list[dict]]:
    """The summary and records of one set, computed again from the records of ``result_dir``."""
    settings = run_settings_of(result_dir, set_name)
    recorded = read_records(Path(result_dir) / f"{set_name}.records.jsonl")
    try:
        docs = load_docs(set_name, dataset)
    except (OSError, ValueError, RuntimeError) as exc:
        raise ScoringError(f"{set_name}: {exc}") from exc
    expected = settings.get("dataset_sha256")
    if expected and dataset_identity(docs) != expected:
        raise ScoringError(
            f"{result_dir}: {set_name} was scored against another dataset (dataset_sha256 "
            f"{expected[:12]}..., this one {dataset_identity(docs)[:12]}...): pass --dataset with that one"
        )
    outputs = [o for o in (recorded_output(r, set_name) for r in recorded.values()) if o is not None]
    records = score_batch(
        set_name,
        docs,
        outputs,
        asr=RecordedTranscripts(recorded),
        judge=RecordedVerdicts(recorded) if settings.get("judge") else None,
        progress=False,
        protocol=settings.get("protocol") or UNNAMED_PROTOCOL,
    )
    for record in records:  # what scoring adds beside the pipeline (`input_key`, lm-eval's `variant`)
        for key, value in (recorded.get(record["qid"]) or {}).items():
            record.setdefault(key, value)
    result = summaries.summarize(set_name, records, protocol=settings.get("protocol") or UNNAMED_PROTOCOL)
    found = summaries.read_summary(result_dir, set_name) or {}
    result["model"] = settings.get("model") or found.get("model")
    result["settings"] = settings
    summaries.add_comparability(result, settings)
    return result, records


def rescore_dir(result_dir: Path, out: Path, dataset: str | None) -> tuple[dict[str, dict], ScoreOutcome]:
    """Re-score every set of ``result_dir`` into ``out`` (records, settings, summaries): the summaries, and
    how the run ends (incomplete, as the original run was, when most verdicts failed...)."""

    sets = scored_sets(result_dir)
    if not sets:
        raise ScoringError(f"{result_dir} holds no records (<set>.records.jsonl) to re-score")
    out = Path(out)
    found: dict[str, dict] = {}
    every: list[dict] = []
    for set_name in sets:
        result, records = rescore_set(result_dir, set_name, dataset)
        found[set_name], every = result, every + records
        lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        atomic_write(out / f"{set_name}.records.jsonl", lines)
        settings = json.dumps(result["settings"], indent=2, ensure_ascii=False) + "\n"
        atomic_write(out / f"{set_name}.settings.json", settings)
    summaries.attach_cs_vs_en(found)
    for result in found.values():
        summaries.write_summary(out, result)
    return found, scoring_outcome(out, every, found, sets, [])
