"""cs3-vocalnet: the not-installed error, the call path through a fake ``omni_speech`` module, and
``adapter=DIR`` with a real (tiny) recipe adapter: CoR prefix removed and KH stripped from the text,
the speech head run on the answer positions only."""

from __future__ import annotations

import io
import itertools
import json
import sys
import types
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import soundfile as sf
from lm_eval.api.instance import Instance

from cs3_tasks.harness.speech import decode_response


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


@pytest.mark.slow
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


# ---------------------------------------------------------------------------------------------
# adapter=DIR with an adapter made by the enhancement recipe (CoR + KH)

QUERY = "我想用Python读一个文件"
ANSWER = "可以用Python的open函数打开文件。"
PROMPT = "<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n"  # the fake's prompt (speech ignored)
SEGMENT = 4  # the fake splits the generated positions into speech-head segments of this size
SOS, EOS = 90, 91  # speech unit framing ids (VocalNet: unit_vocab_size + 1 / + 2)


def _recipe_transforms():
    import warnings

    from cs3_tasks.recipe import transforms as tf

    with warnings.catch_warnings():  # CoR+KH together: warned about, allowed
        warnings.simplefilter("ignore", UserWarning)
        return tf.TransformConfig(cor=True, kh=True)


@pytest.fixture(scope="module")
def recipe_adapter(tmp_path_factory):
    """A real adapter saved by the recipe's own code (tokenizer + recipe tokens, LoRA, trained token rows,
    cs3_recipe.json) on the tiny backbone, fitted to answer PROMPT with the CoR+KH target of ANSWER."""
    torch = pytest.importorskip("torch")
    from peft import get_peft_model

    from cs3_tasks.recipe import train as rt
    from cs3_tasks.recipe import transforms as tf
    from cs3_tasks.recipe.model import build_tiny_speech_lm

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 2 shared cores: torch's default pool oversubscribes them
    try:
        out = tmp_path_factory.mktemp("recipe") / "adapter"
        texts = [QUERY, ANSWER, PROMPT]
        tok = rt.train_tokenizer(texts, vocab_size=200)
        model = build_tiny_speech_lm(len(tok), tok.pad_token_id, tok.eos_token_id, seed=0)
        model.base_vocab_size = len(tok)
        new_ids = rt.add_recipe_tokens(tok, model.llm)  # resizes beyond the base vocabulary
        settings = rt.LoraSettings(r=16, alpha=32, dropout=0.0)
        model.llm = get_peft_model(model.llm, rt.lora_config(settings, new_ids, ("embed_tokens", "lm_head")))
        target = tf.transform_target(QUERY, ANSWER, _recipe_transforms())
        prompt = tok(PROMPT, add_special_tokens=False)["input_ids"]
        target_ids = tok(target, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        ids = torch.tensor([prompt + target_ids])
        labels = torch.tensor([[-100] * len(prompt) + target_ids])
        optimizer = torch.optim.Adam([p for p in model.llm.parameters() if p.requires_grad], lr=1e-2)
        for _ in range(40):
            model.llm(input_ids=ids, labels=labels).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        cfg = rt.TrainConfig(
            data="train.json", output_dir=str(out), backbone="tiny", cor=True, kh=True, lora=settings
        )
        rt.save_adapter(model, tok, out, cfg)
    finally:
        torch.set_num_threads(threads)
    base_tokenizer = rt.train_tokenizer(texts, vocab_size=200)  # VocalNet's own: no recipe tokens
    return out, base_tokenizer


class FakeSpeechHead:
    """Stands in for VocalNet's ar_mtp speech generator: one unit per hidden row it is given."""

    def __init__(self):
        self.inputs = []

    def predict_mtp(self, hidden, infer_mtp_token_num=0):
        import torch

        self.inputs.append(hidden.detach().clone())
        return torch.tensor([[SOS] + [7] * hidden.shape[1] + [EOS]])


def fake_omni_speech2s_class():
    """A Qwen2ForCausalLM with VocalNet's OmniSpeech2S generate contract: (text ids, speech units)."""
    import torch
    from transformers import Qwen2ForCausalLM

    class FakeOmniSpeech2S(Qwen2ForCausalLM):
        def __init__(self, config):
            super().__init__(config)
            self.config.speech_generator_type = "ar_mtp"
            self.config.speech_sos_token_id, self.config.speech_eos_token_id = SOS, EOS
            object.__setattr__(self, "speech_generator", FakeSpeechHead())  # no weights: not a submodule

        @torch.no_grad()
        def generate(
            self,
            inputs,
            speech=None,
            speech_lengths=None,
            streaming_unit_gen=False,
            infer_mtp_token_num=0,
            streaming=False,
            max_new_tokens=40,
            **kwargs,
        ):
            ids, new, rows = inputs, [], []
            for _ in range(max_new_tokens):  # greedy, like VocalNet with temperature 0
                out = self(input_ids=ids, output_hidden_states=True)
                rows.append(out.hidden_states[-1][:, -1:])  # the state that produced this token
                token = out.logits[:, -1].argmax(-1)
                new.append(int(token))
                ids = torch.cat([ids, token[:, None]], 1)
                if int(token) == self.config.eos_token_id:
                    break
            hidden = torch.cat(rows, 1)
            self.last_hidden = hidden
            # as OmniSpeech2S*.generate: sentence segments of the generated positions, each followed by
            # the text-eos embedding, one speech-head call per segment, units framed [sos] ... [eos]
            bounds = [*range(0, len(new), SEGMENT), len(new)]
            eos_emb = self.get_input_embeddings()(torch.tensor([[self.config.eos_token_id]]))
            units = [torch.tensor([[SOS]])]
            for a, b in itertools.pairwise(bounds):
                segment = torch.cat([hidden[:, a:b], eos_emb], 1)
                units.append(
                    self.speech_generator.predict_mtp(segment, infer_mtp_token_num=infer_mtp_token_num)[
                        :, 1:-1
                    ]
                )
            units.append(torch.tensor([[EOS]]))
            return torch.tensor([new]), torch.cat(units, 1)

    return FakeOmniSpeech2S


class FakeOfficialVocalNet:
    """omni_speech.infer.vocalnet.VocalNetModel's __call__ as the official code writes it: model.generate,
    ``tokenizer.batch_decode(..., skip_special_tokens=True)``, units[:, 1:-1] to the vocoder."""

    base_model = None
    base_tokenizer = None

    def __init__(self, model_name_or_path, vocoder_path=None, s2s=True, **kwargs):
        self.s2s, self.max_new_tokens, self.audio_dir = s2s, kwargs.get("max_new_tokens", 40), None

    def __initilize__(self):
        self.tokenizer, self.model = FakeOfficialVocalNet.base_tokenizer, FakeOfficialVocalNet.base_model

    def set_audio_dir(self, audio_dir):
        self.audio_dir = audio_dir

    def __call__(self, messages):
        import torch

        input_ids = torch.tensor([self.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]])
        output_ids, output_units = self.model.generate(
            input_ids,
            speech=None,
            speech_lengths=None,
            do_sample=False,
            max_new_tokens=self.max_new_tokens,
            use_cache=True,
            streaming_unit_gen=False,
            infer_mtp_token_num=2,
            streaming=False,
        )
        self.official_text = self.tokenizer.batch_decode(output_ids, skip_special_tokens=True)[0].strip()
        self.units = output_units[:, 1:-1]
        out = Path(self.audio_dir) / Path(messages[0]["path"]).name
        sf.write(out, np.full(240 * self.units.shape[1], 0.1, dtype=np.float32), 24_000)  # "vocoder"
        return {"text": self.official_text, "audio": str(out)}


@pytest.fixture
def official_vocalnet(monkeypatch, recipe_adapter):
    from cs3_tasks.recipe import adapter as ad
    from cs3_tasks.recipe.model import build_tiny_speech_lm

    adapter_dir, base_tokenizer = recipe_adapter
    meta = ad.read_recipe(adapter_dir)
    llm = build_tiny_speech_lm(
        meta["tiny_base_vocab"], base_tokenizer.pad_token_id, base_tokenizer.eos_token_id, seed=meta["seed"]
    ).llm  # the base the adapter was trained on
    model = fake_omni_speech2s_class()(llm.config)
    model.load_state_dict(llm.state_dict())
    FakeOfficialVocalNet.base_model, FakeOfficialVocalNet.base_tokenizer = model.eval(), base_tokenizer
    module = types.ModuleType("omni_speech.infer.vocalnet")
    module.VocalNetModel = FakeOfficialVocalNet
    for name, mod in [
        ("omni_speech", types.ModuleType("omni_speech")),
        ("omni_speech.infer", types.ModuleType("omni_speech.infer")),
        ("omni_speech.infer.vocalnet", module),
    ]:
        monkeypatch.setitem(sys.modules, name, mod)
    return adapter_dir


@pytest.mark.slow
def test_recipe_adapter_text_and_answer_only_speech(official_vocalnet, tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    from cs3_tasks.models.vocalnet import VocalNetLM
    from cs3_tasks.recipe import adapter as ad
    from cs3_tasks.recipe import transforms as tf

    lm = VocalNetLM(
        pretrained="/ckpt/VocalNet-qwen25-7B",
        vocoder="/v",
        adapter=str(official_vocalnet),
        output_dir=str(tmp_path / "out"),
    )
    fake = lm.vocalnet
    assert type(fake.model).__name__ == "FakeOmniSpeech2S"  # merged and unloaded: no peft wrapper left
    assert fake.tokenizer.convert_tokens_to_ids(tf.COR_SEPARATOR) >= len(FakeOfficialVocalNet.base_tokenizer)
    head = fake.model.speech_generator

    text, audio_path = decode_response(lm.generate_until([instance("q0", wav_bytes())])[0])
    # the text channel: CoR prefix removed, KH markers stripped
    assert text == ANSWER, (text, fake.official_text)
    assert fake.official_text != ANSWER  # what VocalNet's own decoding makes of it: prefix glued on
    last = lm.recipe.last
    assert last.recognised == "Python" and tf.highlighted_keywords(last.speech_text) == ["Python", "open"]

    # the speech head ran once per segment overlapping the answer, on the answer positions only
    assert lm.recipe.generation.ids is None  # consumed by the response: never reused for the next item
    hidden = fake.model.last_hidden
    n = hidden.shape[1]
    start = lm.recipe.generation.speech_from
    assert 0 < start < n and start % SEGMENT != 0  # the cut falls inside a segment: it is trimmed
    assert len(head.inputs) == len(range(start // SEGMENT * SEGMENT, n, SEGMENT))
    spoken = torch.cat([h[:, :-1] for h in head.inputs], 1)  # without each segment's text-eos row
    assert torch.equal(spoken, hidden[:, start:])
    assert fake.units.shape[1] == (n - start) + len(head.inputs)  # one fake unit per row read
    assert sf.info(audio_path).frames == 240 * fake.units.shape[1]

    # no separator generated: the speech head reads everything, exactly as VocalNet does
    assert ad.cor_answer_start(fake.tokenizer, fake.tokenizer(ANSWER)["input_ids"]) is None
    head.inputs.clear()
    monkeypatch.setattr(ad, "cor_answer_start", lambda tokenizer, ids: None)
    prompt = torch.tensor([fake.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]])
    _, units = fake.model.generate(prompt, infer_mtp_token_num=2)
    _, official_units = lm.recipe.generation.original(prompt, infer_mtp_token_num=2)
    assert lm.recipe.generation.speech_from == 0 and torch.equal(units, official_units)
