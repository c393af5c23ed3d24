"""Fake transformers for the Baichuan-Omni-1.5 environment: the checkpoint's remote code surface used by
the web demo (``bind_processor``, ``processor``, ``config.audio_config``, ``generate``)."""

import json
import re
from types import SimpleNamespace

import soundfile as sf
import torch
from fake_calls import misbehave, record

TOKENS = {
    101: "<audio_start_baichuan>",
    102: "<audio_end_baichuan>",
    103: "<audiogen_start_baichuan>",
    104: "<audiogen_end_baichuan>",
}


class FakeTokenizer:
    eos_token_id = 2

    def convert_ids_to_tokens(self, ids):
        return TOKENS[ids]

    def decode(self, ids, **kwargs):
        return "".join(chr(int(i)) for i in ids.tolist() if int(i) > 200)


class FakeBaichuanOmni:
    def __init__(self):
        self.config = SimpleNamespace(
            audio_config=SimpleNamespace(
                audio_start_token_id=101,
                audio_end_token_id=102,
                audiogen_start_token_id=103,
                audiogen_end_token_id=104,
            )
        )
        self.training = True

    def cuda(self):
        return self

    def bind_processor(self, tokenizer, **kwargs):
        record("bind_processor", kwargs=kwargs)
        self.processor = FakeProcessor()
        return self.processor


class FakeProcessor:
    def __call__(self, texts):
        record("processor", texts=texts)
        match = re.search(r"<audio_start_baichuan>(.*?)<audio_end_baichuan>", texts[0])
        path = json.loads(match.group(1))["path"]
        misbehave(path)
        ids = torch.tensor([[ord(c) for c in texts[0]]])
        return SimpleNamespace(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            audios=None,
            encoder_length=None,
            bridge_length=None,
            n_samples=sf.info(path).frames,
        )


class AutoModelForCausalLM:
    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        record(
            "AutoModelForCausalLM.from_pretrained",
            path=pretrained_model_name_or_path,
            kwargs={k: repr(v) for k, v in kwargs.items()},
        )
        return FakeBaichuanOmni()


class AutoTokenizer:
    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        return FakeTokenizer()
