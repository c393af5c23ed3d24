"""Fake of VITA-Audio vita_audio/tokenizer.py: get_audio_tokenizer(...) -> an audio tokenizer whose
decode(audio_tokens, source_speech_16k=None) gives a 1-D float tensor at 22.05 kHz."""

import torch
from fake_calls import record


class FakeSenseVoiceGLM4VoiceTokenizer:
    def apply_to_role(self, role, **kwargs):
        return kwargs.get("is_contiguous", False) and role == "user"

    def encode(self, audio_path):
        return []

    def decode(self, audio_tokens, source_speech_16k=None):
        return 0.1 * torch.ones(len(audio_tokens) * 882)


def get_audio_tokenizer(model_name_or_path, model_type, flow_path=None, rank=0):
    record(
        "get_audio_tokenizer",
        model_name_or_path=model_name_or_path,
        model_type=model_type,
        flow_path=flow_path,
        rank=rank,
    )
    return FakeSenseVoiceGLM4VoiceTokenizer()
