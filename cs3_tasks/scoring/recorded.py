"""The recorded engines of a run (``cs3-bench score --from-results``): a published result dir scored again
through the one run (`run.score_outputs`), its transcripts and judge verdicts read from its records.

A result dir's records carry every item's text response, transcript and verdicts, and its settings say how
they were made (protocol, the ASR's and the judge's fingerprints, the dataset's identity). Scored again with
`replay.RecordedTranscripts` and `replay.RecordedVerdicts` (nothing is heard or asked: no model, no key),
the keyword stage, the metrics and the summaries are computed again, and must equal the bundle's own: a set
whose summary differs is said, and the run ends `run.NOT_REPRODUCED`. The bundle is untrusted input
(`bundle`): every field is checked before it counts, and nothing outside it is read. The dataset must be the
one it names (``dataset_sha256``): the keyword stage reads it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cs3_tasks.core.data import SETS, load_docs
from cs3_tasks.scoring import bundle
from cs3_tasks.scoring.outputs import ModelOutput, join_problems
from cs3_tasks.scoring.pipeline import asr_failed_problem, no_output_problem, unknown_id_problem
from cs3_tasks.scoring.protocols import protocol_for
from cs3_tasks.scoring.records import UNNAMED_PROTOCOL
from cs3_tasks.scoring.replay import RecordedTranscripts, RecordedVerdicts
from cs3_tasks.scoring.run import ScoreJob, SetInputs
from cs3_tasks.scoring.settings import ScoringError
from cs3_tasks.scoring.store import dataset_identity


def scored_sets(result_dir: Path) -> list[str]:
    """The sets a result dir holds records of, in `SETS` order."""
    folder = Path(result_dir)
    return [s for s in SETS if (folder / f"{s}.records.jsonl").is_file()]


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


@dataclass(frozen=True)
class RecordedEngines:
    """The ASR and the judge of the result dirs under ``root``, as their records hold them; ``dataset``:
    the dataset they were scored against (``--dataset``; refused when its identity is not the one named)."""

    root: Path
    dataset: str | None = None
    holds: tuple[str, str] = ("records", "<set>.records.jsonl")

    def sets(self, folder: Path) -> list[str]:
        return scored_sets(folder)

    def secret(self) -> str | None:
        return None  # no judge is asked: no key

    def model_of(self, folder: Path) -> str:
        """The system a result dir holds results of, as its settings name it."""
        return str(bundle.bundle_settings(self.root, folder, self.sets(folder)[0])["model"])

    def check_systems(self, folders: Sequence[Path]) -> None:
        """The whole bundle checked before anything is written (a bundle is verified whole: one bad field
        refuses it, exit 2): every folder inside it, one system each, every set's inputs."""
        for folder in folders:
            bundle.inside(self.root, folder)
        bundle.distinct_systems(folders, self.model_of)
        for folder in folders:
            for set_name in self.sets(folder):
                self.inputs(ScoreJob(folder, folder), set_name)

    def inputs(self, job: ScoreJob, set_name: str) -> SetInputs:
        folder = Path(job.outputs)
        settings = bundle.bundle_settings(self.root, folder, set_name)
        protocol = protocol_for(settings.get("protocol") or UNNAMED_PROTOCOL)
        try:
            docs = load_docs(set_name, self.dataset)
        except (OSError, ValueError, RuntimeError) as exc:
            raise ScoringError(f"{set_name}: {exc}") from exc
        if dataset_identity(docs) != settings["dataset_sha256"]:
            raise bundle.BundleError(
                f"{folder / set_name}.settings.json: dataset_sha256: {set_name} was scored against another "
                f"dataset ({settings['dataset_sha256'][:12]}..., this one {dataset_identity(docs)[:12]}...): "
                "pass --dataset with that one"
            )
        recorded = bundle.bundle_records(self.root, folder, set_name, protocol.name)
        bundle.check_known_qids(
            folder / f"{set_name}.records.jsonl",
            recorded,
            {str(doc["Qid"]) for doc in docs},
            lambda qid: unknown_id_problem("Qid", qid, set_name),
        )
        outputs = {
            qid: output
            for qid, output in ((q, recorded_output(r, set_name)) for q, r in recorded.items())
            if output is not None
        }

        def complete(record: dict) -> dict:
            """What scoring adds beside the pipeline (lm-eval's ``variant``...), as recorded."""
            for key, value in (recorded.get(record["qid"]) or {}).items():
                record.setdefault(key, value)
            return record

        return SetInputs(
            docs,
            outputs,
            settings,
            RecordedTranscripts(recorded),
            RecordedVerdicts(recorded) if settings.get("judge") else None,
            protocol,
            recorded_keys={qid: record.get("input_key") for qid, record in recorded.items()},
            complete=complete,
            expected=bundle.bundle_summary(self.root, folder, set_name),
        )
