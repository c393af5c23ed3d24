"""Fake of MoonshotAI/Kimi-Audio kimia_infer/api/kimia.py: KimiAudio with the official signatures.

``generate`` returns ``(generated_wav, generated_text)``: a (1, n) float tensor at 24 kHz (None unless
output_type == "both") and a str.
"""

import torch
from fake_calls import duration_tokens, misbehave, record


class KimiAudio(object):
    def __init__(self, model_path: str, load_detokenizer: bool = True):
        record("KimiAudio", model_path=model_path, load_detokenizer=load_detokenizer)
        self.detokenizer = object() if load_detokenizer else None

    @torch.inference_mode()
    def generate(
        self,
        chats: list[dict],
        output_type="text",
        audio_temperature=0.0,
        audio_top_k=5,
        text_temperature=0.0,
        text_top_k=5,
        audio_repetition_penalty=1.0,
        audio_repetition_window_size=64,
        text_repetition_penalty=1.0,
        text_repetition_window_size=16,
        max_new_tokens=-1,
    ):
        assert output_type in ["text", "both"]
        record(
            "KimiAudio.generate",
            chats=chats,
            output_type=output_type,
            audio_temperature=audio_temperature,
            audio_top_k=audio_top_k,
            text_temperature=text_temperature,
            text_top_k=text_top_k,
            audio_repetition_penalty=audio_repetition_penalty,
            audio_repetition_window_size=audio_repetition_window_size,
            text_repetition_penalty=text_repetition_penalty,
            text_repetition_window_size=text_repetition_window_size,
            max_new_tokens=max_new_tokens,
        )
        audio = [c["content"] for c in chats if c["message_type"] == "audio"][-1]
        misbehave(audio)
        n = len(duration_tokens(audio, per_second=12.5))
        text = f"kimi heard {n} frames"
        wav = None
        if self.detokenizer is not None and output_type == "both":
            wav = 0.1 * torch.ones(1, n * 1920)  # 12.5 tokens/s at 24 kHz
        return wav, text
