"""Fake of VITA-Audio vita_audio/tokenizer.py: get_audio_tokenizer(...) -> an audio tokenizer whose
decode(audio_tokens, option_steps=10, **kwargs) gives a 1-D float tensor at 22.05 kHz (as
SenseVoiceGLM4VoiceTokenizer.decode: the GLM-4-Voice flow decoder)."""

import torch
from fake_calls import record


class FakeSenseVoiceGLM4VoiceTokenizer:
    def encode(self, audio_path, is_discrete=False, is_contiguous=True, **kwargs):
        return []

    def decode(self, audio_tokens, option_steps=10, **kwargs):
        return 0.1 * torch.ones(len(audio_tokens) * 882)

    def apply_to_role(self, role, **kwargs):
        is_discrete = kwargs.get("is_discrete", False)
        if is_discrete and role in ["assistant", "gpt"]:
            return True
        is_contiguous = kwargs.get("is_contiguous", False)
        if is_contiguous and role in ["user", "human"]:
            return True
        return False


def get_audio_tokenizer(model_name_or_path, model_type, flow_path=None, rank=None):
    record("get_audio_tokenizer", model_name_or_path=model_name_or_path, model_type=model_type,
           flow_path=flow_path, rank=rank)
    return FakeSenseVoiceGLM4VoiceTokenizer()
