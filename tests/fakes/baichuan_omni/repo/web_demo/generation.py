"""Fake of Baichuan-Omni-1.5 web_demo/generation.py: GenerationAudioTokens.generate and
decode_wave_vocoder with the official signatures (a list of (1, n) waves, None for empty responses)."""

from types import SimpleNamespace

import torch
from fake_calls import record


class GenerationAudioTokens:
    @torch.no_grad()
    def generate(
        self,
        inputs=None,
        generation_config=None,
        logits_processor=None,
        stopping_criteria=None,
        prefix_allowed_tokens_fn=None,
        synced_gpus=None,
        assistant_model=None,
        streamer=None,
        streamer_unit=None,
        negative_prompt_ids=None,
        negative_prompt_attention_mask=None,
        **kwargs,
    ):
        record(
            "GenerationAudioTokens.generate",
            kwargs={
                k: v
                for k, v in kwargs.items()
                if k in ("max_new_tokens", "do_sample", "temperature", "top_k", "top_p", "repetition_penalty")
            },
        )
        n = 40
        return SimpleNamespace(sequences=inputs, past_key_values=None, audios_sequences=torch.ones(1, n, 8))


def decode_wave_vocoder(response, vocoder, model):
    return [vocoder.decode(torch.ones(1, 80, response.shape[1] * 10))]
