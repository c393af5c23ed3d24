"""``cs3-qwen2.5-omni``: Qwen2.5-Omni through transformers (thinker text + talker speech at 24 kHz).

    lm_eval --model cs3-qwen2.5-omni \
        --model_args pretrained=Qwen/Qwen2.5-Omni-7B,speaker=Chelsie,batch_size=4 \
        --device cuda --tasks cs3_knowledge

The prompt is Qwen's ChatML with the official system prompt (the talker only speaks under it), the
query audio as an ``<|audio_bos|><|AUDIO|>...<|audio_eos|>`` span and the task's instruction after it,
exactly what ``Qwen2_5OmniProcessor.apply_chat_template`` produces for an audio + text user turn. We
build the inputs from the checkpoint's tokenizer and Whisper feature extractor ourselves instead of
the full processor, because the processor also constructs a video processor that needs torchvision,
which an audio-only benchmark should not require.

Text decoding is greedy (thinker); the talker samples as in the official example.
``return_audio=false`` gives a text-only run (the talker is dropped from memory).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from lm_eval.api.registry import register_model

from cs3_tasks.core.audio import SAMPLE_RATE
from cs3_tasks.models.base import (
    Outcome,
    SpeechLM,
    SpeechReply,
    SpeechRequest,
    as_bool,
    generation,
    pick_device,
)

log = logging.getLogger(__name__)

# Required verbatim for audio output (Qwen2.5-Omni model card).
OFFICIAL_SYSTEM_PROMPT = (
    "You are Qwen, a virtual human developed by the Qwen Team, Alibaba Group, capable of perceiving "
    "auditory and visual inputs, as well as generating text and speech."
)
OUTPUT_SAMPLE_RATE = 24_000


def audio_token_count(feature_frames: int) -> int:
    """Audio-encoder output length for ``feature_frames`` mel frames (two stride-2 stages)."""
    after_conv = (feature_frames - 1) // 2 + 1
    return (after_conv - 2) // 2 + 1


@register_model("cs3-qwen2.5-omni")
class QwenOmniLM(SpeechLM):
    model_name = "cs3-qwen2.5-omni"

    def __init__(
        self,
        pretrained: str = "Qwen/Qwen2.5-Omni-7B",
        speaker: str = "Chelsie",
        system_prompt: str | None = None,
        return_audio: bool = True,
        dtype: str = "auto",
        attn_implementation: str | None = None,
        max_new_tokens: int | None = None,
        talker_max_new_tokens: int = 4096,
        talker_do_sample: bool = True,
        token2wav_num_steps: int | None = None,
        seed: int = 0,
        **kwargs: Any,
    ) -> None:
        self.pretrained = str(pretrained)
        super().__init__(**kwargs)
        import torch
        from transformers import AutoTokenizer, Qwen2_5OmniForConditionalGeneration, WhisperFeatureExtractor

        self._device = pick_device(self.device_name)
        if dtype == "auto":
            torch_dtype = torch.bfloat16 if str(self.device).startswith("cuda") else torch.float32
        else:
            torch_dtype = getattr(torch, str(dtype))
        load_kwargs: dict[str, Any] = {"dtype": torch_dtype}
        if attn_implementation:
            load_kwargs["attn_implementation"] = attn_implementation
        self.model = Qwen2_5OmniForConditionalGeneration.from_pretrained(self.pretrained, **load_kwargs)
        self.model.to(self.device).eval()
        self.return_audio = as_bool(return_audio)
        if self.return_audio and not self.model.has_talker:
            raise ValueError(
                f"{self.pretrained} has no talker (enable_audio_output=false): use return_audio=false"
            )
        if not self.return_audio and self.model.has_talker:
            self.model.disable_talker()  # frees the talker and token2wav weights
        if speaker not in self.model.speaker_map:
            raise ValueError(
                f"unknown speaker {speaker!r}; this checkpoint has {sorted(self.model.speaker_map)}"
            )
        self.speaker = speaker
        self.system_prompt = system_prompt or OFFICIAL_SYSTEM_PROMPT
        if self.return_audio and self.system_prompt != OFFICIAL_SYSTEM_PROMPT:
            log.warning("cs3-qwen2.5-omni: a non-official system prompt; Qwen2.5-Omni may not produce speech")

        self.tokenizer = AutoTokenizer.from_pretrained(self.pretrained)
        self.tokenizer.padding_side = "left"
        self.feature_extractor = WhisperFeatureExtractor.from_pretrained(self.pretrained)
        thinker = self.model.config.thinker_config
        tokens = self.tokenizer.convert_ids_to_tokens(
            [thinker.audio_start_token_id, thinker.audio_token_index, thinker.audio_end_token_id]
        )
        self.audio_bos, self.audio_token, self.audio_eos = tokens
        talker = self.model.config.talker_config
        # The talker stops on codec pad or codec end (the official defaults [8292, 8294], read from config).
        self.talker_eos = [talker.tts_codec_pad_token_id, talker.tts_codec_end_token_id]
        self.max_new_tokens = int(max_new_tokens) if max_new_tokens else None
        self.talker_max_new_tokens = int(talker_max_new_tokens)
        self.talker_do_sample = as_bool(talker_do_sample)
        self.token2wav_num_steps = int(token2wav_num_steps) if token2wav_num_steps else None
        self.seed = int(seed)

    def label(self) -> str:
        return self.pretrained.rstrip("/").split("/")[-1]

    def run_name(self) -> str:
        return self.pretrained

    def default_batch_size(self) -> int:
        return 1

    def prompt(self, instruction: str, n_audio_tokens: int) -> str:
        audio = f"{self.audio_bos}{self.audio_token * n_audio_tokens}{self.audio_eos}"
        return (
            f"<|im_start|>system\n{self.system_prompt}<|im_end|>\n"
            f"<|im_start|>user\n{audio}{instruction}<|im_end|>\n<|im_start|>assistant\n"
        )

    def build_inputs(self, requests: Sequence[SpeechRequest]) -> dict:
        audios = [self.query_audio(req, SAMPLE_RATE) for req in requests]
        features = self.feature_extractor(
            audios,
            sampling_rate=SAMPLE_RATE,
            return_attention_mask=True,
            padding="max_length",
            return_tensors="pt",
        )
        frames = features["attention_mask"].sum(-1).tolist()
        prompts = [
            self.prompt(req.instruction, audio_token_count(int(n))) for req, n in zip(requests, frames)
        ]
        text = self.tokenizer(prompts, return_tensors="pt", padding=True)
        return {
            "input_ids": text["input_ids"].to(self.device),
            "attention_mask": text["attention_mask"].to(self.device),
            "input_features": features["input_features"].to(self.device, self.model.dtype),
            "feature_attention_mask": features["attention_mask"].to(self.device),
        }

    def generate_batch(self, requests: Sequence[SpeechRequest]) -> list[Outcome]:
        import torch

        inputs = self.build_inputs(requests)
        # one generate call decodes the batch: the first request's lm-eval gen_kwargs (one task's)
        max_new = generation(requests[0].gen_kwargs).cap(self.max_new_tokens) or 512
        torch.manual_seed(self.seed)  # the talker samples and token2wav starts from noise
        with torch.inference_mode():
            if self.return_audio:
                kwargs: dict[str, Any] = {
                    "speaker": self.speaker,
                    "thinker_max_new_tokens": max_new,
                    "thinker_do_sample": False,
                    "talker_max_new_tokens": self.talker_max_new_tokens,
                    "talker_eos_token_id": self.talker_eos,
                    "talker_do_sample": self.talker_do_sample,
                }
                if self.token2wav_num_steps:
                    kwargs["token2wav_num_steps"] = self.token2wav_num_steps
                output = self.model.generate(**inputs, **kwargs)
            else:
                # Text only is the thinker alone, which is all the model's generate runs then; transformers
                # 5.x's generate reads the dropped talker's pad token first and fails on every item.
                output = self.model.thinker.generate(
                    **inputs, max_new_tokens=max_new, do_sample=False, use_audio_in_video=False
                )
        if self.return_audio:
            sequences, wavs = output
            if isinstance(wavs, torch.Tensor):
                wavs = [wavs] if len(requests) == 1 else list(wavs)
        else:
            sequences = output.sequences if hasattr(output, "sequences") else output
            wavs = [None] * len(requests)
        new_tokens = sequences[:, inputs["input_ids"].shape[1] :]
        texts = self.tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
        return [
            SpeechReply(
                text=text.strip(),
                audio=None if wav is None else wav.reshape(-1).float().cpu().numpy(),
                sample_rate=OUTPUT_SAMPLE_RATE,
            )
            for text, wav in zip(texts, wavs)
        ]
