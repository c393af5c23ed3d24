"""The offline Whisper-base as a transformers checkpoint: the authors' ASR code path
(``transformers.pipeline``) on real weights, offline.

The `offline` extra ships Whisper-base for CTranslate2 only (float16 weights in CTranslate2's ``model.bin``).
``offline_transformers_whisper()`` writes the same weights once as a transformers Whisper checkpoint
(safetensors, float32) with its processor and a generation config derived from the CTranslate2 model's own
config and tokenizer (suppressed tokens, language and task tokens, alignment heads), into
``cache_dir()/models/whisper-base-hf``, under a file lock, through a staging folder renamed into place (as the
offline model is joined). Its encoder gives CTranslate2's encoder output within float tolerance
(tests/test_asr_convert.py). Nothing is downloaded.

The folder's `MANIFEST` (written last) lists every file with its sha256 and the sha256 of the weights it was
converted from. Each use checks the folder against it (`converted_problem`): a file missing, truncated or
changed, or a conversion of other weights, and the checkpoint is converted again once, said on stderr.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any

from filelock import FileLock

from cs3_tasks.asr.errors import AsrModelError
from cs3_tasks.asr.offline import offline_whisper_base
from cs3_tasks.core.cache import cache_dir, files_sha256
from cs3_tasks.core.statefile import read_state_text

TRANSFORMERS_MODEL_DIR = "whisper-base-hf"
MANIFEST = "cs3-model.json"  # written last: {"source_sha256", "files": {name: sha256}}
# CTranslate2's DataType enum, in order (its model.bin names a variable's type by this index)
_CT2_DTYPES = ("float32", "int8", "int16", "int32", "float16", "bfloat16")
WEIGHTS = "model.safetensors"


def offline_transformers_whisper(convert: bool = True) -> Path | None:
    """The offline Whisper-base as a transformers checkpoint folder, converted once from the CTranslate2
    model and checked at each use (None without the `offline` extra). ``convert=False``: the folder only,
    converted or not."""
    if offline_whisper_base(join=False) is None:
        return None
    target = cache_dir() / "models" / TRANSFORMERS_MODEL_DIR
    if not convert:
        return target
    source = Path(offline_whisper_base())  # joined and checked
    source_sha256 = files_sha256([source / "model.bin"])
    if converted_problem(target, source_sha256) is None:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(target.parent / f".{TRANSFORMERS_MODEL_DIR}.lock"):
        problem = converted_problem(target, source_sha256)
        if problem is None:
            return target
        if target.exists():
            print(f"note: the converted Whisper-base at {target} {problem}: converted again", file=sys.stderr)
        _convert_into(source, target, source_sha256)
        problem = converted_problem(target, source_sha256)
        if problem is not None:  # once only: a copy that fails again points at the disk
            raise AsrModelError(f"the Whisper-base converted into {target} {problem} (converted twice)")
    return target


def converted_problem(target: Path, source_sha256: str) -> str | None:
    """What is wrong with the converted checkpoint in ``target`` (None: every file its `MANIFEST` lists is
    there with its sha256, and it was converted from the weights whose sha256 is ``source_sha256``)."""
    if not target.is_dir():
        return "is not there"
    try:
        manifest = json.loads(read_state_text(target / MANIFEST))
    except FileNotFoundError:
        return f"has no {MANIFEST} (an unfinished or older conversion)"
    except ValueError as exc:  # not JSON, or not a regular file of bounded size
        return f"has an unreadable {MANIFEST} ({exc})"
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or WEIGHTS not in files:
        return f"has a {MANIFEST} that lists no weights"
    if manifest.get("source_sha256") != source_sha256:
        return "was converted from other weights"
    for name, digest in sorted(files.items()):
        path = target / name
        if not path.is_file():
            return f"lacks {name}"
        if files_sha256([path]) != digest:
            return f"has a {name} that is not the one written (truncated or changed)"
    return None


def convert_if_offline(model_name: str) -> str:
    """``model_name``, with the converted offline Whisper-base made first when it is that model (only ASR
    needs it)."""
    converted = offline_transformers_whisper(convert=False)
    if converted is not None and Path(model_name).expanduser() == converted:
        offline_transformers_whisper()
    return model_name


def read_ct2_variables(path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """The named arrays of a CTranslate2 ``model.bin`` (version 6: header, then each variable's name, shape,
    type and bytes, then aliases), as numpy arrays; and its aliases (name -> the variable it stands for)."""
    import numpy as np

    blob = Path(path).read_bytes()
    at = 0

    def take(fmt: str) -> int:
        nonlocal at
        (value,) = struct.unpack_from(fmt, blob, at)
        at += struct.calcsize(fmt)
        return value

    def text() -> str:
        nonlocal at
        size = take("H")
        value = blob[at : at + size - 1].decode("utf-8")
        at += size
        return value

    version = take("I")
    if version != 6:
        raise ValueError(f"{path}: CTranslate2 model format version {version}, this reader knows 6")
    text(), take("I")  # the spec's name and revision
    variables = {}
    for _ in range(take("I")):
        name = text()
        shape = [take("I") for _ in range(take("B"))]
        dtype = _CT2_DTYPES[take("B")]
        size = take("I")
        raw = blob[at : at + size]
        at += size
        if dtype == "bfloat16":  # numpy has none: the upper half of a float32
            array = (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            array = np.frombuffer(raw, dtype=dtype)
        variables[name] = array.reshape(shape) if shape else array[0]
    aliases = {text(): text() for _ in range(take("I"))}
    return variables, aliases


def transformers_state(variables: dict[str, Any]) -> tuple[dict[str, Any], dict[str, int]]:
    """The transformers Whisper state dict (float32 arrays) of CTranslate2's Whisper variables, and the sizes
    of the model (layers, heads, widths)."""
    import numpy as np

    def get(name: str):
        return np.asarray(variables[name], dtype=np.float32)

    state: dict[str, Any] = {}

    def linear(target: str, source: str) -> None:
        state[f"{target}.weight"], state[f"{target}.bias"] = get(f"{source}/weight"), get(f"{source}/bias")

    def norm(target: str, source: str) -> None:
        state[f"{target}.weight"], state[f"{target}.bias"] = get(f"{source}/gamma"), get(f"{source}/beta")

    def split(target: str, source: str, parts: tuple[str, ...]) -> None:
        weights = np.split(get(f"{source}/weight"), len(parts))
        biases = np.split(get(f"{source}/bias"), len(parts))
        for part, weight, bias in zip(parts, weights, biases):
            state[f"{target}.{part}.weight"] = weight
            if part != "k_proj":  # Whisper's key projection has no bias (CTranslate2 stores zeros)
                state[f"{target}.{part}.bias"] = bias

    for conv in ("conv1", "conv2"):
        linear(f"model.encoder.{conv}", f"encoder/{conv}")
    state["model.encoder.embed_positions.weight"] = get("encoder/position_encodings/encodings")
    norm("model.encoder.layer_norm", "encoder/layer_norm")
    encoder_layers = _layers(variables, "encoder")
    for i in range(encoder_layers):
        ours, theirs = f"model.encoder.layers.{i}", f"encoder/layer_{i}"
        split(f"{ours}.self_attn", f"{theirs}/self_attention/linear_0", ("q_proj", "k_proj", "v_proj"))
        linear(f"{ours}.self_attn.out_proj", f"{theirs}/self_attention/linear_1")
        norm(f"{ours}.self_attn_layer_norm", f"{theirs}/self_attention/layer_norm")
        linear(f"{ours}.fc1", f"{theirs}/ffn/linear_0")
        linear(f"{ours}.fc2", f"{theirs}/ffn/linear_1")
        norm(f"{ours}.final_layer_norm", f"{theirs}/ffn/layer_norm")
    state["model.decoder.embed_tokens.weight"] = get("decoder/embeddings/weight")
    state["model.decoder.embed_positions.weight"] = get("decoder/position_encodings/encodings")
    norm("model.decoder.layer_norm", "decoder/layer_norm")
    decoder_layers = _layers(variables, "decoder")
    for i in range(decoder_layers):
        ours, theirs = f"model.decoder.layers.{i}", f"decoder/layer_{i}"
        split(f"{ours}.self_attn", f"{theirs}/self_attention/linear_0", ("q_proj", "k_proj", "v_proj"))
        linear(f"{ours}.self_attn.out_proj", f"{theirs}/self_attention/linear_1")
        norm(f"{ours}.self_attn_layer_norm", f"{theirs}/self_attention/layer_norm")
        linear(f"{ours}.encoder_attn.q_proj", f"{theirs}/attention/linear_0")
        split(f"{ours}.encoder_attn", f"{theirs}/attention/linear_1", ("k_proj", "v_proj"))
        linear(f"{ours}.encoder_attn.out_proj", f"{theirs}/attention/linear_2")
        norm(f"{ours}.encoder_attn_layer_norm", f"{theirs}/attention/layer_norm")
        linear(f"{ours}.fc1", f"{theirs}/ffn/linear_0")
        linear(f"{ours}.fc2", f"{theirs}/ffn/linear_1")
        norm(f"{ours}.final_layer_norm", f"{theirs}/ffn/layer_norm")
    sizes = {
        "encoder_layers": encoder_layers,
        "decoder_layers": decoder_layers,
        "encoder_attention_heads": int(variables["encoder/num_heads"]),
        "decoder_attention_heads": int(variables["decoder/num_heads"]),
        "d_model": state["model.encoder.conv1.weight"].shape[0],
        "num_mel_bins": state["model.encoder.conv1.weight"].shape[1],
        "encoder_ffn_dim": state["model.encoder.layers.0.fc1.weight"].shape[0],
        "decoder_ffn_dim": state["model.decoder.layers.0.fc1.weight"].shape[0],
        "vocab_size": state["model.decoder.embed_tokens.weight"].shape[0],
        "max_source_positions": state["model.encoder.embed_positions.weight"].shape[0],
        "max_target_positions": state["model.decoder.embed_positions.weight"].shape[0],
    }
    return state, sizes


def _layers(variables: dict[str, Any], stack: str) -> int:
    return len({m[1] for name in variables if (m := re.match(rf"{stack}/layer_(\d+)/", name))})


def generation_config(ct2_config: dict, tokenizer_json: dict) -> dict:
    """A Whisper generation config from CTranslate2's config.json and the tokenizer: what transformers reads
    to decode as openai's checkpoints do (special tokens, languages, tasks, suppressed tokens)."""
    ids = {token["content"]: token["id"] for token in tokenizer_json["added_tokens"]}
    by_id = {v: k for k, v in ids.items()}
    end = ids["<|endoftext|>"]
    return {
        "alignment_heads": ct2_config["alignment_heads"],
        "begin_suppress_tokens": ct2_config["suppress_ids_begin"],
        "bos_token_id": end,
        "decoder_start_token_id": ids["<|startoftranscript|>"],
        "eos_token_id": end,
        "pad_token_id": end,
        "forced_decoder_ids": [[1, None], [2, ids["<|transcribe|>"]]],
        "is_multilingual": True,
        "lang_to_id": {by_id[i]: i for i in ct2_config["lang_ids"]},
        "task_to_id": {"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]},
        "max_initial_timestamp_index": 50,
        "max_length": 448,
        "no_timestamps_token_id": ids["<|notimestamps|>"],
        "prev_sot_token_id": ids["<|startofprev|>"],
        "return_timestamps": False,
        "suppress_tokens": ct2_config["suppress_ids"],
    }


def write_manifest(folder: Path, source_sha256: str) -> None:
    """The converted checkpoint's `MANIFEST`: every file of ``folder`` with its sha256, and the sha256 of the
    weights it was converted from (written last: a folder without it is an unfinished conversion)."""
    written = {
        p.name: files_sha256([p]) for p in sorted(folder.iterdir()) if p.is_file() and p.name != MANIFEST
    }
    manifest = {"source_sha256": source_sha256, "files": written}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")


def _convert_into(source: Path, target: Path, source_sha256: str) -> None:
    import numpy as np
    import torch
    from safetensors.torch import save_file
    from transformers import (
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperProcessor,
        WhisperTokenizerFast,
    )

    variables, _ = read_ct2_variables(source / "model.bin")
    state, sizes = transformers_state(variables)
    ct2_config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    tokenizer_json = json.loads((source / "tokenizer.json").read_text(encoding="utf-8"))
    generation = generation_config(ct2_config, tokenizer_json)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{TRANSFORMERS_MODEL_DIR}-", dir=target.parent))
    try:
        special = {k: generation[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
        config = WhisperConfig(
            **sizes,
            **special,
            decoder_start_token_id=generation["decoder_start_token_id"],
            architectures=["WhisperForConditionalGeneration"],
            tie_word_embeddings=True,
        )
        config.save_pretrained(staging)
        text = json.dumps(generation, indent=2) + "\n"
        (staging / "generation_config.json").write_text(text, encoding="utf-8")
        tokenizer = WhisperTokenizerFast(
            tokenizer_file=str(source / "tokenizer.json"),
            unk_token="<|endoftext|>",
            bos_token="<|endoftext|>",
            eos_token="<|endoftext|>",
            pad_token="<|endoftext|>",
        )
        features = WhisperFeatureExtractor(feature_size=sizes["num_mel_bins"])
        WhisperProcessor(feature_extractor=features, tokenizer=tokenizer).save_pretrained(staging)
        tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()}
        # one metadata key: safetensors writes its metadata in hash-map order, which changes per process, so
        # two keys would make the weights' sha256 (the model's identity) differ between two conversions
        save_file(tensors, str(staging / WEIGHTS), metadata={"format": "pt"})
        write_manifest(staging, source_sha256)
        if target.exists():  # a partial folder of a killed conversion
            shutil.rmtree(target)
        os.rename(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
