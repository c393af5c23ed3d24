"""cs3-vocalnet: the not-installed error, and the call path through a fake ``omni_speech`` module."""

from __future__ import annotations

import io
import json
import sys
import types
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import soundfile as sf
from lm_eval.api.instance import Instance

from cs3_tasks.speech import decode_response


def wav_bytes(seconds: float = 0.4, rate: int = 22_050) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    buffer = io.BytesIO()
    sf.write(buffer, (0.2 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), rate, format="WAV")
    return buffer.getvalue()


def instance(qid: str, audio, doc_id: int = 0) -> Instance:
    return Instance(
        request_type="generate_until",
        doc={"Qid": qid},
        idx=0,
        metadata=("cs3_knowledge", doc_id, 1),
        arguments=("Answer the spoken question.", {"until": ["\n\n"]}, {"audio": audio}),
    )


class FakeVocalNetModel:
    """Mimics omni_speech.infer.vocalnet.VocalNetModel's public surface."""

    instances: ClassVar[list] = []

    def __init__(self, model_name_or_path, vocoder_path=None, s2s=True, **kwargs):
        self.path, self.vocoder_path, self.s2s, self.kwargs = model_name_or_path, vocoder_path, s2s, kwargs
        self.calls, self.audio_dir, self.model = [], None, None
        FakeVocalNetModel.instances.append(self)

    def __initilize__(self):
        self.model = FakeVocalNetModel.backbone

    def set_audio_dir(self, audio_dir):
        self.audio_dir = audio_dir

    def __call__(self, messages):
        path = messages[0]["path"]
        samples, rate = sf.read(path)
        self.calls.append({"messages": messages, "rate": rate, "n": len(samples)})
        if "boom" in path:
            raise RuntimeError("CUDA out of memory (fake)")
        result = {"text": f"heard {len(samples)} samples"}
        if self.s2s:
            out = Path(self.audio_dir) / Path(path).name
            sf.write(out, np.zeros(2400, dtype=np.float32) + 0.1, 24_000)
            result["audio"] = str(out)
        return result


@pytest.fixture
def fake_omni_speech(monkeypatch):
    module = types.ModuleType("omni_speech.infer.vocalnet")
    module.VocalNetModel = FakeVocalNetModel
    module.PROMPT_SPEECH = "default.wav"
    for name, mod in [
        ("omni_speech", types.ModuleType("omni_speech")),
        ("omni_speech.infer", types.ModuleType("omni_speech.infer")),
        ("omni_speech.infer.vocalnet", module),
    ]:
        monkeypatch.setitem(sys.modules, name, mod)
    FakeVocalNetModel.instances = []
    FakeVocalNetModel.backbone = object()
    return module


def test_not_installed_error_says_what_to_install(monkeypatch):
    from cs3_tasks.models.vocalnet import VocalNetLM, VocalNetNotInstalled

    monkeypatch.setitem(sys.modules, "omni_speech", None)  # import of omni_speech fails
    with pytest.raises(VocalNetNotInstalled) as info:
        VocalNetLM(pretrained="/ckpt/VocalNet", vocoder="/ckpt/CosyVoice2-0.5B")
    message = str(info.value)
    assert "git clone https://github.com/SJTU-OmniAgent/VocalNet" in message and "pip install -e" in message
    assert "CosyVoice" in message and "Matcha-TTS" in message
    with pytest.raises(ValueError, match="pretrained"):
        VocalNetLM()


def test_call_path_with_fake_omni_speech(fake_omni_speech, tmp_path):
    from cs3_tasks.models.vocalnet import VocalNetLM

    lm = VocalNetLM(
        pretrained="/ckpt/VocalNet-ML",
        vocoder="/ckpt/CosyVoice2-0.5B",
        prompt_speech="spk.wav",
        max_new_tokens=64,
        output_dir=str(tmp_path / "out"),
    )
    fake = FakeVocalNetModel.instances[0]
    assert fake.path == "/ckpt/VocalNet-ML" and fake.vocoder_path == "/ckpt/CosyVoice2-0.5B"
    assert fake.kwargs == {"max_new_tokens": 64, "temperature": 0.0}
    assert fake_omni_speech.PROMPT_SPEECH == "spk.wav"

    out = lm.generate_until(
        [instance("q0", wav_bytes(0.4)), instance("boom", wav_bytes(), 1), instance("q2", wav_bytes(0.2), 2)]
    )
    assert [c["rate"] for c in fake.calls] == [16_000] * 3  # the query is handed over as a 16 kHz wav file
    assert fake.calls[0]["n"] == 6400 and fake.calls[0]["messages"][0]["content"] == "<speech>"
    text, audio_path = decode_response(out[0])
    assert text == "heard 6400 samples" and audio_path.endswith("cs3_knowledge/q0.wav")
    assert sf.info(audio_path).samplerate == 24_000
    assert decode_response(out[1]) == ("", None)
    assert decode_response(out[2])[0] == "heard 3200 samples"
    errors = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert [e["Qid"] for e in errors] == ["boom"] and "out of memory" in errors[0]["error"]


def test_text_only_and_missing_vocoder(fake_omni_speech, tmp_path, monkeypatch):
    from cs3_tasks.models.vocalnet import VocalNetLM

    monkeypatch.delenv("CS3_COSYVOICE2_MODEL", raising=False)
    with pytest.raises(ValueError, match="CosyVoice2"):
        VocalNetLM(pretrained="/ckpt/VocalNet-ML")
    lm = VocalNetLM(pretrained="/ckpt/VocalNet-ML", s2s=False, output_dir=str(tmp_path / "out"))
    text, audio = decode_response(lm.generate_until([instance("q0", wav_bytes())])[0])
    assert text.startswith("heard") and audio is None


def test_lora_adapter_is_merged_into_the_backbone(fake_omni_speech, tmp_path):
    torch = pytest.importorskip("torch")
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from cs3_tasks.models.vocalnet import VocalNetLM

    config = Qwen2Config(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    torch.manual_seed(0)
    base = Qwen2ForCausalLM(config)
    before = base.model.layers[0].self_attn.q_proj.weight.detach().clone()
    trained = get_peft_model(Qwen2ForCausalLM(config), LoraConfig(r=2, target_modules=["q_proj"]))
    with torch.no_grad():
        for name, param in trained.named_parameters():
            if "lora_B" in name:
                param.fill_(0.5)  # a non-zero update, as after training
    trained.save_pretrained(tmp_path / "adapter")

    FakeVocalNetModel.backbone = base
    lm = VocalNetLM(
        pretrained="/ckpt/VocalNet-ML",
        vocoder="/v",
        adapter=str(tmp_path / "adapter"),
        output_dir=str(tmp_path / "out"),
    )
    merged = lm.vocalnet.model
    assert isinstance(merged, Qwen2ForCausalLM)  # merged and unloaded: VocalNet's generate runs unchanged
    assert not torch.allclose(merged.model.layers[0].self_attn.q_proj.weight, before)
    assert lm.label() == "VocalNet-ML+adapter"
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        VocalNetLM(pretrained="/ckpt/VocalNet-ML", vocoder="/v", adapter=str(tmp_path))
