"""Our minimal speech LLM: Whisper encoder -> downsampling projector -> causal LM.

It lets the whole recipe (data, CoR/KH, LoRA, save/reload, generation) run without VocalNet. The
layout mirrors VocalNet stage 1 (speech query -> text answer): a frozen Whisper encoder, a trainable
projector that stacks ``downsample`` consecutive frames, and a causal LM that gets LoRA adapters.

Prompt layout (token ids, speech embeddings spliced in):
    [prompt_prefix] [speech frames] [prompt_suffix] [target] [eos]
Only the target and eos carry labels.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from cs3_tasks.core.audio import SAMPLE_RATE

IGNORE_INDEX = -100


@dataclass
class SpeechLMParts:
    prompt_prefix: str = "<|im_start|>user\n"
    prompt_suffix: str = "<|im_end|>\n<|im_start|>assistant\n"


class DownsampleProjector(nn.Module):
    """Stack ``k`` consecutive encoder frames, then a 2-layer MLP into the LM's hidden size."""

    def __init__(self, encoder_dim: int, llm_dim: int, k: int = 5):
        super().__init__()
        self.k = k
        self.linear1 = nn.Linear(encoder_dim * k, llm_dim)
        self.act = nn.ReLU()
        self.linear2 = nn.Linear(llm_dim, llm_dim)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        b, t, d = frames.shape
        t = t - t % self.k
        stacked = frames[:, :t].reshape(b, t // self.k, d * self.k)
        return self.linear2(self.act(self.linear1(stacked)))


class SpeechLM(nn.Module):
    """Whisper encoder + projector + causal LM; ``forward`` returns {"loss", "logits"} for Trainer."""

    def __init__(
        self,
        encoder: nn.Module,
        llm: nn.Module,
        projector: DownsampleProjector,
        pad_token_id: int,
        eos_token_id: int,
    ):
        super().__init__()
        self.encoder = encoder
        self.llm = llm
        self.projector = projector
        self.pad_token_id = pad_token_id
        self.eos_token_id = eos_token_id

    # -- building blocks ---------------------------------------------------------------------

    def freeze_encoder(self) -> None:
        self.encoder.requires_grad_(False)
        self.encoder.eval()

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None) -> None:
        """Trainer's ``gradient_checkpointing: true`` lands here: checkpoint the LLM's layers."""
        self.llm.gradient_checkpointing_enable(gradient_checkpointing_kwargs=gradient_checkpointing_kwargs)

    def speech_embeddings(self, input_features: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():  # the encoder is frozen: no activations kept for it
            frames = self.encoder(input_features).last_hidden_state
        return self.projector(frames.to(self.projector.linear1.weight.dtype))

    def _embed_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        return self.llm.get_input_embeddings()(ids)

    def build_inputs(
        self, input_features, prefix_ids, suffix_ids, target_ids=None, target_mask=None, suffix_mask=None
    ):
        """inputs_embeds, attention_mask, labels for a batch.

        ``prefix_ids`` (b, p) is the same template for every row; ``suffix_ids`` (b, s) and ``target_ids``
        (b, n) are right-padded, with ``suffix_mask``/``target_mask`` 0 at padding (rows may carry
        different instructions, e.g. translation items). Each row is assembled contiguously
        [prefix][speech][suffix][target] and padded at its end, so positions stay consecutive.
        """
        speech = self.speech_embeddings(input_features)
        b = speech.shape[0]
        prefix, suffix = self._embed_tokens(prefix_ids), self._embed_tokens(suffix_ids)
        s_len = (
            suffix_mask.sum(1)
            if suffix_mask is not None
            else torch.full((b,), suffix_ids.shape[1], device=speech.device)
        ).tolist()
        if target_ids is None:
            if len(set(s_len)) != 1:
                raise ValueError("generation needs one prompt layout per batch")
            return (
                torch.cat([prefix, speech, suffix[:, : s_len[0]]], 1),
                speech.new_ones((b, prefix.shape[1] + speech.shape[1] + s_len[0]), dtype=torch.long),
                None,
            )
        target = self._embed_tokens(target_ids)
        t_len = target_mask.sum(1).tolist()
        rows, labels = [], []
        for i in range(b):
            rows.append(torch.cat([prefix[i], speech[i], suffix[i, : s_len[i]], target[i, : t_len[i]]], 0))
            n_prompt = prefix.shape[1] + speech.shape[1] + s_len[i]
            labels.append(
                torch.cat([target_ids.new_full((n_prompt,), IGNORE_INDEX), target_ids[i, : t_len[i]]])
            )
        width = max(r.shape[0] for r in rows)
        embeds = speech.new_zeros((b, width, speech.shape[-1]))
        mask = target_ids.new_zeros((b, width))
        label_t = target_ids.new_full((b, width), IGNORE_INDEX)
        for i, (row, lab) in enumerate(zip(rows, labels)):
            embeds[i, : row.shape[0]] = row
            mask[i, : row.shape[0]] = 1
            label_t[i, : lab.shape[0]] = lab
        return embeds, mask, label_t

    def forward(self, input_features, prefix_ids, suffix_ids, target_ids, target_mask, suffix_mask=None, **_):
        embeds, mask, labels = self.build_inputs(
            input_features, prefix_ids, suffix_ids, target_ids, target_mask, suffix_mask
        )
        out = self.llm(inputs_embeds=embeds, attention_mask=mask)
        logits = out.logits[:, :-1].float()
        loss = nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=IGNORE_INDEX
        )
        return {"loss": loss, "logits": out.logits}

    @torch.no_grad()
    def generate_ids(
        self, input_features, prefix_ids, suffix_ids, max_new_tokens: int = 64
    ) -> list[list[int]]:
        """Greedy decoding (no KV cache: this model is for the recipe's plumbing and small runs)."""
        embeds, mask, _ = self.build_inputs(input_features, prefix_ids, suffix_ids)
        out_ids: list[list[int]] = [[] for _ in range(embeds.shape[0])]
        done = [False] * embeds.shape[0]
        for _ in range(max_new_tokens):
            logits = self.llm(inputs_embeds=embeds, attention_mask=mask).logits[:, -1]
            nxt = logits.argmax(-1)
            for i, tok in enumerate(nxt.tolist()):
                if not done[i]:
                    if tok == self.eos_token_id:
                        done[i] = True
                    else:
                        out_ids[i].append(tok)
            if all(done):
                break
            embeds = torch.cat([embeds, self._embed_tokens(nxt[:, None])], 1)
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], 1)
        return out_ids


def whisper_feature_extractor(encoder_config, chunk_seconds: float | None = None):
    """A WhisperFeatureExtractor matching the encoder (built locally: no download)."""
    from transformers import WhisperFeatureExtractor

    frames = 2 * encoder_config.max_source_positions  # conv stride 2
    chunk = chunk_seconds or frames * 160 / SAMPLE_RATE  # hop 160 samples
    return WhisperFeatureExtractor(feature_size=encoder_config.num_mel_bins, chunk_length=round(chunk))


def build_tiny_speech_lm(
    vocab_size: int,
    pad_token_id: int,
    eos_token_id: int,
    *,
    seed: int = 0,
    max_source_positions: int = 500,
    downsample: int = 5,
) -> SpeechLM:
    """A tiny randomly initialised instance (tests and smoke runs): ~0.2 M parameters."""
    from transformers import Qwen2Config, Qwen2ForCausalLM, WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    torch.manual_seed(seed)
    enc_cfg = WhisperConfig(
        d_model=32,
        encoder_layers=1,
        encoder_attention_heads=2,
        encoder_ffn_dim=64,
        num_mel_bins=80,
        max_source_positions=max_source_positions,
        vocab_size=8,
        decoder_layers=1,
        decoder_attention_heads=2,
        decoder_ffn_dim=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
        suppress_tokens=None,
        begin_suppress_tokens=None,
    )
    encoder = WhisperEncoder(enc_cfg)
    llm_cfg = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        pad_token_id=pad_token_id,
        eos_token_id=eos_token_id,
        bos_token_id=eos_token_id,
        tie_word_embeddings=False,
        # a wide init: with LoRA the final norm and lm_head stay frozen, and the default
        # 0.02 caps logits near 1, so a tiny random model could not fit anything sharply
        initializer_range=0.2,
    )
    llm = Qwen2ForCausalLM(llm_cfg)
    return SpeechLM(encoder, llm, DownsampleProjector(32, 64, downsample), pad_token_id, eos_token_id)


def build_pretrained_speech_lm(
    llm_path: str, encoder_path: str, tokenizer, *, downsample: int = 5, torch_dtype: str = "bfloat16"
) -> SpeechLM:
    """Pretrained parts from local dirs / Hub ids (e.g. Qwen2.5-7B-Instruct + whisper-large-v3)."""
    from transformers import AutoModelForCausalLM, WhisperModel

    dtype = getattr(torch, torch_dtype)
    llm = AutoModelForCausalLM.from_pretrained(llm_path, torch_dtype=dtype)
    encoder = WhisperModel.from_pretrained(encoder_path, torch_dtype=dtype).get_encoder()
    projector = DownsampleProjector(encoder.config.d_model, llm.config.hidden_size, downsample)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return SpeechLM(encoder, llm, projector, pad, tokenizer.eos_token_id)
