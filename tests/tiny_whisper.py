"""A randomly initialised Whisper saved as a local transformers checkpoint, with a byte-level tokenizer of
Whisper's special tokens: nothing downloaded. The tests use a 1-layer one (plumbing only: its transcripts
are noise); benchmarks/gpu_asr.py builds one of a real checkpoint's sizes (with the byte-level vocabulary)."""

from __future__ import annotations

from pathlib import Path


def byte_symbols() -> list[str]:
    """GPT-2's byte-to-unicode table: the 256 base symbols of a byte-level BPE vocabulary."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    codes, extra = list(printable), 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    return [chr(c) for c in codes]


def build_whisper(
    directory: Path,
    *,
    d_model: int = 16,
    layers: int = 1,
    heads: int = 1,
    ffn: int = 16,
    mels: int = 80,
    max_target_positions: int = 64,
    max_length: int = 20,
) -> str:
    """Save a random Whisper of these sizes (model, generation config, processor) into ``directory``."""
    import torch
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperProcessor,
        WhisperTokenizer,
    )
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    tokenizer = WhisperTokenizer(vocab={s: i for i, s in enumerate(byte_symbols())}, merges=[])
    languages = [f"<|{code}|>" for code in LANGUAGES]
    specials = [
        "<|startoftranscript|>",
        *languages,
        "<|translate|>",
        "<|transcribe|>",
        "<|startoflm|>",
        "<|startofprev|>",
        "<|nocaptions|>",
        "<|notimestamps|>",
    ]
    tokenizer.add_special_tokens({"additional_special_tokens": specials})
    tokenizer.pad_token = tokenizer.eos_token  # as Whisper's own: the pipeline batches only with one
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in [*specials, "<|endoftext|>"]}
    eot, sot = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    config = WhisperConfig(
        vocab_size=len(tokenizer),
        num_mel_bins=mels,
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ffn,
        decoder_ffn_dim=ffn,
        max_source_positions=1500,
        max_target_positions=max_target_positions,
        pad_token_id=eot,
        bos_token_id=eot,
        eos_token_id=eot,
        decoder_start_token_id=sot,
    )
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=sot,
        eos_token_id=eot,
        pad_token_id=eot,
        bos_token_id=eot,
        max_length=max_length,
        lang_to_id={token: ids[token] for token in languages},
        task_to_id={"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]},
        is_multilingual=True,
        no_timestamps_token_id=ids["<|notimestamps|>"],
        begin_suppress_tokens=[],
        suppress_tokens=[],
    )
    directory = Path(directory)
    WhisperProcessor(
        feature_extractor=WhisperFeatureExtractor(feature_size=mels), tokenizer=tokenizer
    ).save_pretrained(directory)
    model.save_pretrained(directory, safe_serialization=True)
    return str(directory)
