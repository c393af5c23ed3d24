"""``cs3-bench report``: a leaderboard (markdown + CSV) and a figure across scored result dirs.

Input: result dirs written by ``cs3-bench score`` (``<set>.summary.json`` files). One row per model (the
``model`` field of the summaries; a model's sets may sit in one dir or in several). PSR and LSA pool the
two code-switched sets (knowledge and open_ended): PSR = sum recognised / sum English words, LSA = sum
selected / sum judged items, over both sets.
"""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from cs3_tasks.asr import describe_fingerprint
from cs3_tasks.core.cache import atomic_write
from cs3_tasks.core.data import SETS
from cs3_tasks.judge import is_dated_snapshot
from cs3_tasks.scoring.cs_vs_en import compare_cs_en, gap_entry
from cs3_tasks.scoring.formatting import incomplete_entry, is_incomplete
from cs3_tasks.scoring.records import CHANNELS
from cs3_tasks.scoring.summary import read_summary

CS_SETS = ("knowledge", "open_ended")
COLUMNS = (
    "model",
    "acc_text_cs",
    "acc_speech_cs",
    "acc_text_en",
    "acc_speech_en",
    "drop_text",
    "drop_speech",
    "preserve_text",
    "preserve_speech",
    "psr",
    "lsa_text",
    "lsa_speech",
    "understanding_text",
    "understanding_speech",
    "protocol",
    "judge",
    "judge_drift",
)
# the columns that hold names and words, not rates
TEXT_COLUMNS = ("model", "protocol", "judge", "judge_drift")
HEADERS = {
    "model": "model",
    "acc_text_cs": "acc text (cs)",
    "acc_speech_cs": "acc speech (cs)",
    "acc_text_en": "acc text (en)",
    "acc_speech_en": "acc speech (en)",
    "drop_text": "drop text",
    "drop_speech": "drop speech",
    "preserve_text": "preserve text",
    "preserve_speech": "preserve speech",
    "psr": "PSR",
    "lsa_text": "LSA text",
    "lsa_speech": "LSA speech",
    "understanding_text": "understood text",
    "understanding_speech": "understood speech",
    "protocol": "protocol",
    "judge": "judge",
    "judge_drift": "judge drift",
}


def duplicate_system(set_name: str, model: str, result_dir: Path) -> ValueError:
    """The error of a set given twice for one model, with what to do for two runs of one system."""
    return ValueError(
        f"two {set_name} summaries for model {model!r} (second one in {result_dir}); two runs of one "
        "system's outputs: `cs3-bench compare A B` or `cs3-bench report A B --sensitivity --html DIR`"
    )


def load_summaries(result_dirs: Sequence[Path]) -> dict[str, dict[str, dict]]:
    """model -> set -> summary, from every ``<set>.summary.json`` in the dirs (model name: summary or dir)."""
    models: dict[str, dict[str, dict]] = {}
    for result_dir in result_dirs:
        result_dir = Path(result_dir)
        if not result_dir.is_dir():
            raise FileNotFoundError(f"result dir {result_dir} does not exist")
        found = False
        for set_name in SETS:
            summary = read_summary(result_dir, set_name)
            if summary is None:
                continue
            found = True
            model = summary.get("model") or result_dir.resolve().name
            if set_name in models.get(model, {}):
                raise duplicate_system(set_name, model, result_dir)
            models.setdefault(model, {})[set_name] = summary
        if not found:
            raise FileNotFoundError(f"{result_dir} holds no <set>.summary.json: run `cs3-bench score` first")
    return models


def _value(entry: Mapping | None) -> float | None:
    return None if not entry else entry.get("value")


def _pooled(summaries: Mapping[str, dict], key: str, ch: str | None) -> float | None:
    """Pool a rate over the code-switched sets from its counts (hits / n, or recognised / words)."""
    hits = total = 0
    for set_name in CS_SETS:
        summary = summaries.get(set_name)
        if not summary:
            continue
        if key == "psr":
            entry = summary.get("psr") or {}
            hits, total = hits + (entry.get("recognised") or 0), total + (entry.get("words") or 0)
        else:
            entry = (summary.get(ch) or {}).get(key) or {}
            hits, total = hits + (entry.get("hits") or 0), total + (entry.get("n") or 0)
    return hits / total if total else None


def leaderboard_rows(models: Mapping[str, Mapping[str, dict]]) -> list[dict]:
    """One row per model (COLUMNS), sorted by speech then text accuracy on the code-switched set."""
    rows = []
    for model, summaries in models.items():
        cs, en, oe = summaries.get("knowledge"), summaries.get("knowledge_en"), summaries.get("open_ended")
        comparison = compare_cs_en(cs or {}, en or {})
        # the scoring protocol of the model's summaries ("reference", "cs3"; "mixed" when they differ)
        protocols = sorted({s.get("protocol") or "cs3" for s in summaries.values() if s})
        row: dict = {"model": model, "protocol": protocols[0] if len(protocols) == 1 else "mixed"}
        for ch in CHANNELS:
            row[f"acc_{ch}_cs"] = _value(((cs or {}).get(ch) or {}).get("accuracy"))
            row[f"acc_{ch}_en"] = _value(((en or {}).get(ch) or {}).get("accuracy"))
            row.update(incomplete_cells(ch, summaries, comparison))
            row[f"drop_{ch}"] = comparison[ch]["drop_abs"]
            row[f"preserve_{ch}"] = comparison[ch]["preserve"]
            row[f"lsa_{ch}"] = _pooled(summaries, "lsa", ch)
            row[f"understanding_{ch}"] = _value(((oe or {}).get(ch) or {}).get("understanding_rate"))
        row["psr"] = _pooled(summaries, "psr", None)
        # verdicts no judge reply held (reference: counted wrong, as the authors' code does): said, not hidden
        row["judge_unparsed"] = sum((s or {}).get("n_judge_unparsed") or 0 for s in summaries.values())
        row["judge_verdicts"] = sum((s or {}).get("n_judge_verdicts") or 0 for s in summaries.values())
        # which ASR heard the speech channel, by identity (`asr.fingerprint`): rows compare only if equal
        heard_by = sorted(
            {describe_fingerprint((s.get("settings") or {}).get("asr")) for s in summaries.values() if s}
        )
        row["asr"] = heard_by[0] if len(heard_by) == 1 else "mixed: " + " / ".join(heard_by)
        row.update(judge_cells(summaries))
        rows.append(row)

    def sort_key(row: dict) -> tuple:
        return tuple(-(row[k] if row[k] is not None else -1.0) for k in ("acc_speech_cs", "acc_text_cs"))

    return sorted(rows, key=sort_key)


def judge_cells(summaries: Mapping[str, Mapping]) -> dict:
    """``judge``: the judge model asked for ("none": keyword stage only; "mixed: a / b" when the model's sets
    differ); ``judge_drift``: why its verdicts may not hold on another day ("undated alias": a name without
    a date, `judge.is_dated_snapshot`; "answered as X": the API answered as another model), None when none."""
    asked = {
        ((s.get("settings") or {}).get("judge") or {}).get("model") or "none" for s in summaries.values() if s
    }
    named = sorted(asked - {"none"})
    drift = [
        f"undated alias {m}" if len(named) > 1 else "undated alias" for m in named if not is_dated_snapshot(m)
    ]
    answered = sorted(
        {m for s in summaries.values() if s for m in s.get("judge_answered_models") or {}}
        - asked
        - {"unknown"}
    )
    drift += [f"answered as {', '.join(answered)}"] if answered else []
    return {
        "judge": sorted(asked)[0] if len(asked) == 1 else "mixed: " + " / ".join(sorted(asked)),
        "judge_drift": "; ".join(drift) or None,
    }


def incomplete_cells(ch: str, summaries: Mapping[str, dict], comparison: Mapping) -> dict:
    """``<column>_incomplete``: the bounds to show instead of a value that lacks verdicts (a bare number would
    hide that the missing ones may all be wrong): the accuracies, the drop and preserve rate made of them,
    the pooled LSA and the understanding rate."""

    entries = {
        f"acc_{ch}_cs": ((summaries.get("knowledge") or {}).get(ch) or {}).get("accuracy"),
        f"acc_{ch}_en": ((summaries.get("knowledge_en") or {}).get(ch) or {}).get("accuracy"),
        f"drop_{ch}": gap_entry(comparison[ch], "drop_abs"),
        f"preserve_{ch}": gap_entry(comparison[ch], "preserve"),
        f"lsa_{ch}": _pooled_lsa(summaries, ch),
        f"understanding_{ch}": ((summaries.get("open_ended") or {}).get(ch) or {}).get("understanding_rate"),
    }
    return {
        f"{column}_incomplete": incomplete_entry(entry, unit="" if column.startswith("drop") else "%")
        for column, entry in entries.items()
        if is_incomplete(entry)
    }


def _pooled_lsa(summaries: Mapping[str, dict], ch: str) -> dict | None:
    """LSA pooled over the code-switched sets as an entry, with its bounds when items lack a language."""
    hits = n = missing = 0
    for set_name in CS_SETS:
        entry = ((summaries.get(set_name) or {}).get(ch) or {}).get("lsa") or {}
        hits, n = hits + (entry.get("hits") or 0), n + (entry.get("n") or 0)
        missing += entry.get("n_missing_verdict") or 0
    if not missing or n + missing == 0:
        return None
    bounds = [hits / (n + missing), (hits + missing) / (n + missing)]
    return {
        "value": hits / n if n else None,
        "complete": False,
        "bounds": bounds,
        "n_missing_verdict": missing,
    }


def _cell(value: float | str | None) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, str):  # a model name is a folder name: "|" or a line break would end the cell
        return " ".join(value.replace("\\", "\\\\").replace("|", "\\|").splitlines())
    return f"{100 * value:.1f}"


def leaderboard_markdown(rows: Sequence[dict], notes: Sequence[str] = ()) -> str:
    """The leaderboard table and its legend; ``notes``: lines added after it (e.g. models that failed)."""
    lines = [
        "| " + " | ".join(HEADERS[c] for c in COLUMNS) + " |",
        "| " + " | ".join("---" if c in TEXT_COLUMNS else "---:" for c in COLUMNS) + " |",
    ]
    lines += [
        "| "
        + " | ".join(
            row.get(f"{c}_incomplete") or ("" if c in TEXT_COLUMNS and row[c] is None else _cell(row[c]))
            for c in COLUMNS
        )
        + " |"
        for row in rows
    ]
    legend = [
        "",
        (
            "All values in %. cs = code-switched knowledge set, en = its English twin. "
            "drop = acc(en) - acc(cs) "
            "(points); preserve = acc(cs) / acc(en). PSR and LSA pool the code-switched sets (knowledge, "
            "open_ended); understood = share of open-ended items with relevance > 3. n/a = not applicable "
            "(e.g. speech of a text-only model) or set not scored. protocol: reference = the authors' "
            "scoring (quote these next to the paper), cs3 = our stricter audit scoring. judge: the model "
            "asked for (none = keyword stage only); judge drift: why its verdicts may not hold on another "
            "day (an undated alias, whose provider can move it to other weights; the API answered as "
            "another model)."
        ),
    ]
    unparsed = [
        f"{row['model']}: {row['judge_unparsed']} of {row['judge_verdicts']} judge verdicts unparsed "
        "(counted wrong, as the authors' code does)"
        for row in rows
        if row.get("judge_unparsed")
    ]
    extra = ["", *unparsed, *notes] if notes or unparsed else []
    return "\n".join(lines + legend + asr_lines(rows) + extra) + "\n"


def asr_lines(rows: Sequence[dict]) -> list[str]:
    """What transcribed the speech channel: one line when every row shares it, else one per model (its
    speech numbers are then not comparable across rows)."""
    heard_by = {row.get("asr") for row in rows if row.get("asr")}
    if not heard_by:
        return []
    if len(heard_by) == 1:
        return ["", f"Speech channel ASR: {next(iter(heard_by))}."]
    lines = ["", "Speech channel ASR differs between rows (their speech numbers are not comparable):"]
    return lines + [f"- {_cell(row['model'])}: {row.get('asr')}" for row in rows]


def write_csv(path: Path, rows: Sequence[dict]) -> None:
    """The leaderboard's numbers (fractions) and, in ``incomplete``, each value that lacks verdicts with its
    bounds (``acc_speech_cs: incomplete: 20.0-80.0% (12 verdicts missing)``; empty when none does)."""
    handle = io.StringIO(newline="")
    writer = csv.DictWriter(handle, fieldnames=[*COLUMNS, "incomplete"])
    writer.writeheader()
    for row in rows:
        cells = {c: ("" if row[c] is None else row[c]) for c in COLUMNS}
        marks = [f"{c}: {row[f'{c}_incomplete']}" for c in COLUMNS if row.get(f"{c}_incomplete")]
        writer.writerow({**cells, "incomplete": "; ".join(marks)})
    atomic_write(path, handle.getvalue())


def _bar(entry: Mapping | None) -> tuple[float, float, float]:
    """(value, lower error, upper error) in %; NaN (no bar drawn) when not applicable or not scored."""
    if not entry or entry.get("value") is None:
        return (float("nan"), float("nan"), float("nan"))
    value = 100 * entry["value"]
    low = 100 * entry["ci_low"] if entry.get("ci_low") is not None else value
    high = 100 * entry["ci_high"] if entry.get("ci_high") is not None else value
    return (value, max(value - low, 0.0), max(high - value, 0.0))


def plot_accuracy(models: Mapping[str, Mapping[str, dict]], path: Path) -> None:
    """Accuracy by category (and overall), code-switched vs English, text vs speech, 95% CI error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = sorted(models)
    fig, axes = plt.subplots(len(names), 1, figsize=(9, 3.2 * len(names)), squeeze=False)
    series = [(s, ch) for s in ("knowledge", "knowledge_en") for ch in CHANNELS]
    labels = {
        ("knowledge", "text"): "cs text",
        ("knowledge", "speech"): "cs speech",
        ("knowledge_en", "text"): "en text",
        ("knowledge_en", "speech"): "en speech",
    }
    colors = {
        ("knowledge", "text"): "#1f77b4",
        ("knowledge", "speech"): "#9ecae1",
        ("knowledge_en", "text"): "#d62728",
        ("knowledge_en", "speech"): "#fc9272",
    }
    for ax, name in zip(axes[:, 0], names):
        summaries = models[name]
        categories = sorted(
            {
                c
                for s in ("knowledge", "knowledge_en")
                for ch in CHANNELS
                for c in (((summaries.get(s) or {}).get(ch) or {}).get("by_category") or {})
            }
        )
        groups = ["Overall", *categories]
        x = np.arange(len(groups))
        width = 0.8 / len(series)
        for k, (set_name, ch) in enumerate(series):
            channel = (summaries.get(set_name) or {}).get(ch) or {}
            entries = [channel.get("accuracy")] + [
                (channel.get("by_category") or {}).get(c) for c in categories
            ]
            bars = [_bar(e) for e in entries]
            ax.bar(
                x + (k - (len(series) - 1) / 2) * width,
                [b[0] for b in bars],
                width,
                yerr=[[b[1] for b in bars], [b[2] for b in bars]],
                capsize=2,
                label=labels[(set_name, ch)],
                color=colors[(set_name, ch)],
            )
        ax.set_xticks(x, groups)
        ax.set_xlim(-0.5, len(groups) - 0.5)
        ax.set_ylim(0, 100)
        ax.set_ylabel("accuracy (%)")
        ax.set_title(f"{name}: knowledge accuracy (95% bootstrap CI; no bar = not applicable)")
    handles, legend_labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, legend_labels, loc="upper center", ncol=4, fontsize="small")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / (3.2 * len(names))))
    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=120)
    plt.close(fig)
    atomic_write(path, image.getvalue())


LEADERBOARD_FILES = ("leaderboard.md", "leaderboard.csv", "accuracy.png")


def write_leaderboard(out: Path, models: Mapping[str, Mapping[str, dict]], notes: Sequence[str] = ()) -> str:
    """Write `LEADERBOARD_FILES` into ``out`` (each atomically) for ``models`` (model -> set -> summary);
    returns the markdown. ``notes``: lines under the table."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = leaderboard_rows(models)
    markdown = leaderboard_markdown(rows, notes)
    md, csv_file, png = (out / name for name in LEADERBOARD_FILES)
    atomic_write(md, markdown)
    write_csv(csv_file, rows)
    if models:
        plot_accuracy(models, png)
    else:  # no model to draw: an old figure would show models that are not on this leaderboard
        png.unlink(missing_ok=True)
    print(
        f"wrote {', '.join(str(out / name) for name in LEADERBOARD_FILES if (out / name).exists())}",
        file=sys.stderr,
    )
    return markdown
