"""Fake of GLM-4-Voice flow_inference.py: AudioDecoder with the official signatures."""

import torch
from fake_calls import record


class AudioDecoder:
    def __init__(self, config_path, flow_ckpt_path, hift_ckpt_path, device="cuda"):
        record(
            "AudioDecoder",
            config_path=config_path,
            flow_ckpt_path=flow_ckpt_path,
            hift_ckpt_path=hift_ckpt_path,
            device=device,
        )
        self.device = device

    def token2wav(
        self,
        token,
        uuid,
        prompt_token=torch.zeros(1, 0, dtype=torch.int32),  # noqa: B008 - official signature
        prompt_feat=torch.zeros(1, 0, 80),
        embedding=torch.zeros(1, 192),
        finalize=False,
    ):  # noqa: B008
        n = token.shape[1] * 882  # 25 tokens/s at 22050 Hz
        tts_speech = 0.1 * torch.sin(torch.arange(n, dtype=torch.float32) / 10).unsqueeze(0)
        return tts_speech, torch.zeros(1, 80, token.shape[1] * 2)

    def offline_inference(self, token):
        record("offline_inference", n_tokens=int(token.shape[1]))
        tts_speech, _tts_mel = self.token2wav(token, uuid="fake", finalize=True)
        return tts_speech.cpu()
