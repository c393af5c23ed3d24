"""Using a recipe adapter at inference (for model wrappers such as ``cs3-vocalnet adapter=DIR``).

A recipe adapter directory is a peft ``save_pretrained`` directory plus the tokenizer with the recipe's
special tokens and ``cs3_recipe.json`` (which transforms it was trained with). Loading it:

    tokenizer = adapter_tokenizer(DIR) or base_tokenizer        # decodes the CoR/KH tokens
    model = apply_adapter(base_model, DIR)                       # resize if needed, LoRA merged
    post = response_postprocessor(DIR)
    r = post(tokenizer.decode(ids, skip_special_tokens=False))   # r.text: user text, r.speech_text: TTS
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cs3_tasks.recipe.transforms import COR_SEPARATOR, SPECIAL_TOKENS, Response, TransformConfig, postprocess

RECIPE_FILE = "cs3_recipe.json"


def read_recipe(adapter_dir: str | os.PathLike) -> dict:
    """The adapter's ``cs3_recipe.json`` ({} for a plain peft adapter not made by the recipe)."""
    path = Path(adapter_dir) / RECIPE_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def adapter_transforms(adapter_dir: str | os.PathLike) -> TransformConfig:
    t = read_recipe(adapter_dir).get("transforms") or {}
    with warnings.catch_warnings():  # the CoR+KH warning is for training, not for loading
        warnings.simplefilter("ignore", UserWarning)
        return TransformConfig(cor=bool(t.get("cor")), kh=bool(t.get("kh")))


def adapter_tokenizer(adapter_dir: str | os.PathLike):
    """The tokenizer saved with the adapter (with the recipe tokens), or None when none was saved."""
    adapter_dir = Path(adapter_dir)
    if not (adapter_dir / "tokenizer_config.json").is_file():
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(adapter_dir))


def apply_adapter(model: Any, adapter_dir: str | os.PathLike, *, merge: bool = True) -> Any:
    """``model`` with the LoRA adapter (and trained special-token rows) applied; merged by default.

    Embeddings are resized first when the adapter's tokenizer is larger than the model's vocabulary
    (Qwen2.5's padded embedding matrix usually has room already, so nothing changes there).
    """
    from peft import PeftModel

    adapter_dir = Path(adapter_dir)
    if not (adapter_dir / "adapter_config.json").is_file():
        raise FileNotFoundError(f"{adapter_dir} is not a peft adapter directory (no adapter_config.json)")
    tok = adapter_tokenizer(adapter_dir)
    if tok is not None and model.get_input_embeddings().num_embeddings < len(tok):
        model.resize_token_embeddings(len(tok))
    peft_model = PeftModel.from_pretrained(model, str(adapter_dir))
    return peft_model.merge_and_unload() if merge else peft_model


def response_postprocessor(adapter_dir: str | os.PathLike) -> Callable[[str], Response]:
    """text generated with the adapter -> Response (CoR prefix removed; KH stripped from the user text)."""
    config = adapter_transforms(adapter_dir)
    return lambda generated: postprocess(generated, config)


def decode_keeping_recipe_tokens(tokenizer, ids) -> str:
    """Decode dropping special tokens except the recipe's (postprocess needs them)."""
    keep = set(tokenizer.convert_tokens_to_ids(list(SPECIAL_TOKENS)))
    drop = set(tokenizer.all_special_ids) - keep
    return tokenizer.decode([i for i in ids if i not in drop], skip_special_tokens=False)


def cor_answer_start(tokenizer, ids) -> int | None:
    """Index in generated ``ids`` of the first answer token after the CoR separator; None without one.

    For wrappers whose speech head reads the LLM's hidden states position by position (VocalNet,
    Qwen2.5-Omni's talker): the positions before this index are the CoR prefix, not the answer.
    """
    separator = tokenizer.convert_tokens_to_ids(COR_SEPARATOR)
    ids = [int(i) for i in ids]
    if separator is None or separator == tokenizer.unk_token_id or separator not in ids:
        return None
    return ids.index(separator) + 1
