"""Fake of GLM-4-Voice speech_tokenizer/modeling_whisper.py (WhisperVQEncoder, a PreTrainedModel)."""

from fake_calls import record


class WhisperVQEncoder:
    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        record("WhisperVQEncoder.from_pretrained", path=pretrained_model_name_or_path)
        return cls()

    def eval(self):
        return self

    def to(self, device):
        self.device = device
        return self
