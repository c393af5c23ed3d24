"""A character tokenizer with GLM-4-Voice-style special tokens (<|audio_N|> at AUDIO_OFFSET and above)."""

import re

import torch

AUDIO_OFFSET = 2000
SPECIAL = [
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|begin_of_audio|>",
    "<|end_of_audio|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
]
TOKEN = re.compile(r"<\|audio_(\d+)\|>|<\|[a-z_]+\|>|.", re.DOTALL)


class Encoding(dict):
    """transformers' BatchEncoding: a mapping with attributes and .to(device)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def to(self, device):
        return self


class FakeTokenizer:
    pad_token_id = 0

    def convert_tokens_to_ids(self, token):
        match = re.fullmatch(r"<\|audio_(\d+)\|>", token)
        if match:
            return AUDIO_OFFSET + int(match.group(1))
        return 1 + SPECIAL.index(token)

    def encode(self, text):
        ids = []
        for match in TOKEN.finditer(text):
            piece = match.group(0)
            if match.group(1) is not None:
                ids.append(AUDIO_OFFSET + int(match.group(1)))
            elif piece in SPECIAL:
                ids.append(1 + SPECIAL.index(piece))
            else:  # characters below U+076C only: enough for the fakes' replies
                ids.extend(100 + ord(c) for c in piece)
        return ids

    def __call__(self, text, return_tensors=None, add_special_tokens=True, **kwargs):
        if isinstance(text, list):
            ids = [self.encode(t) for t in text]
            if return_tensors == "pt":
                tensor = torch.tensor(ids, dtype=torch.long)
                return Encoding(input_ids=tensor, attention_mask=torch.ones_like(tensor))
            return Encoding(input_ids=ids, attention_mask=[[1] * len(i) for i in ids])
        return Encoding(input_ids=self.encode(text), attention_mask=[1] * len(self.encode(text)))

    def decode(self, ids, skip_special_tokens=False, **kwargs):
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        out = []
        for i in ids:
            if i >= AUDIO_OFFSET:
                out.append(f"<|audio_{i - AUDIO_OFFSET}|>")
            elif 1 <= i <= len(SPECIAL):
                if not skip_special_tokens:
                    out.append(SPECIAL[i - 1])
            elif i >= 100:
                out.append(chr(i - 100))
        return "".join(out)
