"""Fake of Baichuan-Omni-1.5 third_party/cosy24k_vocoder/cosy24k_vocoder.py."""

import torch
from torch import nn


class Cosy24kVocoder(nn.Module):
    def __init__(self):
        super().__init__()

    def decode(self, mel, device="cuda"):
        return 0.1 * torch.ones(1, mel.shape[-1] * 480)  # hop 480 at 24 kHz

    @classmethod
    def from_pretrained(cls, model_path: str):
        from fake_calls import record

        record("Cosy24kVocoder.from_pretrained", model_path=model_path)
        return cls()
