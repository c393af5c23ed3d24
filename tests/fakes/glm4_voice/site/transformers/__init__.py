"""Fake transformers for the GLM-4-Voice environment: glm-4-voice-9b's remote code behaviour.

The fake LLM answers ``heard <n> speech tokens`` interleaved with audio tokens (13 text : 26 audio, as the
system prompt asks), then ``<|user|>`` and trailing tokens the caller must ignore.
"""

import re

import torch
from fake_calls import record
from fake_tokenizer import AUDIO_OFFSET, FakeTokenizer


class BitsAndBytesConfig:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


class FakeGLM4Voice:
    def __init__(self):
        self.tokenizer = FakeTokenizer()

    def eval(self):
        return self

    def generate(self, input_ids=None, attention_mask=None, **kwargs):
        prompt = self.tokenizer.decode(input_ids[0])
        n_audio = len(re.findall(r"<\|audio_\d+\|>", prompt))
        record("glm.generate", prompt=prompt, **kwargs)
        text = self.tokenizer.encode(f"heard {n_audio} speech tokens")
        reply = []
        for start in range(0, len(text), 13):
            reply += text[start : start + 13] + [AUDIO_OFFSET + i for i in range(26)]
        reply += [self.tokenizer.convert_tokens_to_ids("<|user|>")] + self.tokenizer.encode("IGNORED")
        reply = reply[: int(kwargs.get("max_new_tokens", 2000))]
        return torch.cat([input_ids, torch.tensor([reply], dtype=torch.long)], dim=1)


class AutoModel:
    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        record(
            "AutoModel.from_pretrained",
            path=pretrained_model_name_or_path,
            kwargs={k: repr(v) for k, v in kwargs.items()},
        )
        return FakeGLM4Voice()


class AutoTokenizer:
    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        return FakeTokenizer()


class WhisperFeatureExtractor:
    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        return cls()
