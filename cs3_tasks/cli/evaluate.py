"""lm-eval runs over saved outputs, for ``cs3-bench demo`` (cli/demo.py) and ``cs3-bench eval`` (cli/eval.py),
and the Python API (``task_manager()``): ``evaluate_outputs`` runs the real lm-eval pipeline
(``lm_eval.simple_evaluate``) through ``cs3-precomputed`` and writes, per system, the per-item records and
summaries in the layout of ``cs3-bench score`` (`write_scored_dir`); `cs_vs_en_markdown` is the demo's table.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cs3_tasks.core.cache import atomic_write
from cs3_tasks.core.data import SETS, load_docs
from cs3_tasks.harness.lm_eval_hook import is_our_task, with_our_tasks
from cs3_tasks.harness.lm_eval_hook import task_dir as _task_dir
from cs3_tasks.harness.quiet import quiet_lm_eval
from cs3_tasks.scoring.cs_vs_en import cs_vs_en_markdown as markdown_of_cs_vs_en
from cs3_tasks.scoring.outputs import audio_label
from cs3_tasks.scoring.store import dataset_identity, write_local_outputs
from cs3_tasks.scoring.summary import add_comparability, attach_cs_vs_en, summarize, write_summary

DEMO_RESPONSES = Path(__file__).resolve().parents[1] / "demo" / "responses"


def task_dir() -> Path:
    """The folder of the cs3 lm-eval task YAMLs."""

    return _task_dir()


def task_manager(
    include_path: str | Path | Sequence[str | Path] | None = None,
    *,
    include_defaults: bool = False,
    **kwargs: Any,
):
    """An ``lm_eval.tasks.TaskManager`` that knows the cs3 tasks (with or without the start-up hook).

    ``include_path`` adds more task folders; ``include_defaults=True`` adds lm-eval's own tasks (indexing
    their YAML files is most of lm-eval's start-up time, so they are left out unless asked for); other
    keyword arguments go to TaskManager (``metadata``...).
    """
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=with_our_tasks(include_path), include_defaults=include_defaults, **kwargs)


# ---------------------------------------------------------------------------------------------------------
# results of an lm-eval run -> records, summaries, comparison


def set_of_task(task_name: str) -> tuple[str, str] | None:
    """``cs3_knowledge_en_text`` -> ("knowledge_en", "text"); None for a task that is not ours."""
    name = task_name.removeprefix("cs3_")
    variant = "text" if name.endswith("_text") else "audio"
    name = name.removesuffix("_text")
    return (name, variant) if task_name.startswith("cs3_") and name in SETS else None


def records_from_samples(samples: Mapping[str, Sequence[Mapping]]) -> dict[tuple[str, str], list[dict]]:
    """(set, variant) -> per-item records, read back from lm-eval's logged samples (filtered responses)."""
    found: dict[tuple[str, str], list[dict]] = {}
    for task_name, task_samples in samples.items():
        key = set_of_task(task_name)
        if key is None:
            continue
        records = []
        for sample in sorted(task_samples, key=lambda s: s["doc_id"]):
            filtered = sample["filtered_resps"]
            records.append(json.loads(filtered[0] if isinstance(filtered, list) else filtered))
        found[key] = records
    return found


def write_scored_dir(
    records: Mapping[str, Sequence[dict]],
    out: Path,
    model: str,
    metadata: Mapping[str, Any] | None = None,
    outputs: Path | None = None,
) -> dict[str, dict]:
    """Write ``<set>.records.jsonl`` / ``.summary.json`` / ``.summary.md`` (the ``cs3-bench score``
    layout, so ``cs3-bench report`` reads it) and return the summaries, with the cs-vs-en comparison.
    ``metadata``: the lm-eval run's, for the settings and the comparability with the paper. ``outputs``: the
    folder the responses came from (records name their audio relative to it, as ``cs3-bench score`` does)."""
    from cs3_tasks.task_configs.utils import scoring_settings  # deferred: it imports lm_eval

    out.mkdir(parents=True, exist_ok=True)
    if outputs is not None:
        records = {
            s: [{**r, "audio": audio_label(r.get("audio"), outputs)} for r in rs] for s, rs in records.items()
        }
        write_local_outputs(out, outputs)
    summaries = {}
    for set_name, set_records in records.items():
        summary = summarize(set_name, list(set_records))
        summary["model"] = model
        if (
            metadata is not None
        ):  # what `cs3-bench score` records: the run's settings, the system, the dataset
            settings = {**scoring_settings(metadata, set_name), "model": model}
            settings["dataset_sha256"] = dataset_identity(load_docs(set_name, metadata.get("dataset")))
            atomic_write(
                out / f"{set_name}.settings.json", json.dumps(settings, indent=2, ensure_ascii=False) + "\n"
            )
            summary["settings"] = settings
            add_comparability(summary, settings)
        summaries[set_name] = summary
        lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in set_records)
        atomic_write(out / f"{set_name}.records.jsonl", lines)
    attach_cs_vs_en(summaries)
    for summary in summaries.values():
        write_summary(out, summary)
    return summaries


def cs_vs_en_markdown(per_model: Mapping[str, Mapping[str, dict]]) -> str:
    """One row per model and channel: accuracy on code-switched vs English questions, drop, preserve rate
    (`scoring.cs_vs_en.cs_vs_en_markdown`: a value that lacks verdicts shows its bounds)."""

    return markdown_of_cs_vs_en(per_model)


def without_local_folders(text: str, outputs: Path) -> str:
    """lm-eval's results (JSON text) of our own run with this machine's folders named portably: this
    checkout (the task YAMLs lm-eval names as ``config_source``, the bundled demo responses) as
    ``<cs3-bench>``, an outputs folder elsewhere as ``<outputs>``, HOME as ``~``."""
    checkout = Path(__file__).resolve().parents[2]
    roots = {str(_task_dir().resolve().parent): "<cs3-bench>", str(checkout): "<cs3-bench>"}
    if len(Path.home().parts) > 1:  # a HOME of "/" names no folder of its own
        roots[str(Path.home())] = "~"
    outputs = Path(outputs).resolve()
    if not outputs.is_relative_to(checkout):
        roots[str(outputs)] = "<outputs>"
    for root in sorted(roots, key=len, reverse=True):  # the deepest folder names its files
        text = text.replace(json.dumps(root, ensure_ascii=False)[1:-1], roots[root])
    return text


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    return str(value)


def _strip_nan(value: Any) -> Any:
    """NaN (not applicable) -> None, so result files are strict JSON."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _strip_nan(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strip_nan(v) for v in value]
    return value


def evaluate_outputs(
    outputs: Path,
    out: Path,
    *,
    model: str,
    tasks: str | Sequence[str] = "cs3",
    metadata: Mapping[str, Any] | None = None,
    limit: int | None = None,
) -> dict[str, dict]:
    """Run lm-eval (``cs3-precomputed`` over ``outputs``) and write lm-eval's results plus the
    ``cs3-bench score`` layout into ``out``; returns the summaries per set."""
    import lm_eval
    from lm_eval.utils import make_table

    import cs3_tasks.models.precomputed  # noqa: F401  (registers cs3-precomputed even with the hook off)

    metadata = dict(metadata or {})
    task_list = [tasks] if isinstance(tasks, str) else list(tasks)
    with quiet_lm_eval(is_our_task):  # lm-eval's notices about its own tasks, its request-building bars
        results = lm_eval.simple_evaluate(
            model="cs3-precomputed",
            model_args={"outputs": str(outputs)},
            tasks=task_list,
            task_manager=task_manager(metadata=metadata),
            metadata=metadata,
            log_samples=True,
            bootstrap_iters=0,
            limit=limit,
        )
    print(make_table(results))
    if results.get("groups"):
        print(make_table(results, "groups"))
    samples = results.pop("samples", {}) or {}
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_strip_nan(results), indent=2, ensure_ascii=False, default=_json_default) + "\n"
    (out / "lm_eval_results.json").write_text(without_local_folders(text, Path(outputs)), encoding="utf-8")
    records = {s: r for (s, variant), r in records_from_samples(samples).items() if variant == "audio"}
    return write_scored_dir(records, out, model, metadata, outputs=Path(outputs))
