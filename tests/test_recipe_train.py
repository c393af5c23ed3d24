"""LoRA training end to end on CPU: real constructed items (loopback LLM + espeak + Whisper round trip) ->
tiny randomly initialised speech LLM (Whisper encoder -> projector -> Qwen2) -> loss decreases -> adapter
saved in peft's layout -> reloaded -> generation with the CoR prefix removed and KH stripped."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
import torch
import yaml
from judge_server import FakeJudgeServer
from test_recipe_data import CONVERSATIONS, _needs_speech_tools, build_small_dataset, fake_llm

from cs3_tasks import cli
from cs3_tasks.recipe import train as rt
from cs3_tasks.recipe import transforms as tf


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    _needs_speech_tools()
    tmp = tmp_path_factory.mktemp("recipe")
    with FakeJudgeServer(fake_llm) as server:
        result = build_small_dataset(tmp, server)
    assert result.train_items == 2
    return result.out


@pytest.fixture
def one_thread():
    # 2 shared cores: torch's default thread pool oversubscribes them and a step gets ~20x slower
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _tiny_config(tmp: Path, data: Path, **extra) -> Path:
    cfg = {
        "backbone": "tiny",
        "data": str(data / "train.json"),
        "output_dir": str(tmp / "adapter"),
        "cor": True,
        "kh": True,
        "seed": 0,
        # alpha 128 (not the paper's 16): a random tiny base must move fast in a few CPU steps
        "lora": {"r": 64, "alpha": 128, "dropout": 0.05},
        "training": {
            "max_steps": 60,
            "per_device_train_batch_size": 2,
            "learning_rate": 3e-3,
            "lr_scheduler_type": "constant",
            "logging_steps": 5,
            "use_cpu": True,
            "disable_tqdm": True,
        },
        **extra,
    }
    path = tmp / "train.yaml"
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    return path


@pytest.mark.slow
def test_train_save_reload_generate(built, tmp_path, capsys, one_thread):
    config = _tiny_config(tmp_path, built)
    with pytest.warns(UserWarning, match="2510.07881"):  # CoR+KH together: allowed, warned
        assert cli.main(["recipe", "train", "--config", str(config)]) == 0
    out = "\n" + capsys.readouterr().out  # Trainer's log lines first, then our indented JSON result
    result = json.loads(out[out.rindex("\n{\n") + 1 :])
    losses = result["losses"]
    assert len(losses) == 12 and losses[-1] < 0.3 * losses[0], losses
    # speech encoder frozen; LoRA'd LLM and projector trained
    assert not any(m.startswith("encoder") for m in result["trainable_modules"]), result["trainable_modules"]
    assert "projector.linear1" in result["trainable_modules"]

    adapter = tmp_path / "adapter"
    for name in (
        "adapter_config.json",
        "adapter_model.safetensors",
        "tokenizer.json",
        rt.PROJECTOR_FILE,
        rt.RECIPE_FILE,
    ):
        assert (adapter / name).is_file(), name
    acfg = json.loads((adapter / "adapter_config.json").read_text())
    assert acfg["peft_type"] == "LORA" and acfg["r"] == 64 and acfg["lora_alpha"] == 128

    model, tok, meta = rt.load_trained(adapter)
    special_ids = tok.convert_tokens_to_ids(list(tf.SPECIAL_TOKENS))
    # the special tokens are new rows: embeddings resized beyond the base vocabulary, rows trained
    assert min(special_ids) >= meta["tiny_base_vocab"]
    assert model.llm.get_base_model().config.vocab_size == len(tok) == meta["tiny_base_vocab"] + 3
    assert sorted(acfg["trainable_token_indices"]["embed_tokens"]) == sorted(special_ids)

    items = json.loads((built / "train.json").read_text(encoding="utf-8"))
    with pytest.warns(UserWarning):
        cfg = tf.TransformConfig(cor=True, kh=True)
    responses = rt.generate(model, tok, [built / i["speech"] for i in items], cfg, max_new_tokens=80)
    expected = {i["conversations"][1]["value"]: tf.cor_prefix(i["query_text"]) for i in items}
    for r in responses:
        # the tiny model reproduces a training target: CoR prefix split off, KH stripped from the text
        assert r.text in expected, r
        assert r.recognised == expected[r.text]
        assert not any(t in r.text for t in tf.SPECIAL_TOKENS)
        assert tf.strip_kh(r.speech_text) == r.text
        assert tf.highlighted_keywords(r.speech_text) == tf.highlighted_keywords(tf.apply_kh(r.text))
        assert tf.highlighted_keywords(r.speech_text), "the speech channel keeps the highlights"
    # the loaded adapter is what was trained: its loss on the training batch is near the last train loss
    collator = rt.SpeechCollator(tok, rt_feature_extractor(model), rt_parts())
    examples = rt.load_examples(built / "train.json", None, cfg)
    with torch.no_grad():
        assert model(**collator(examples))["loss"].item() < 0.5 * losses[0]


def rt_feature_extractor(model):
    from cs3_tasks.recipe.model import whisper_feature_extractor

    return whisper_feature_extractor(model.encoder.config)


def rt_parts():
    from cs3_tasks.recipe.model import SpeechLMParts

    return SpeechLMParts()


@pytest.mark.slow
def test_vocalnet_backbone_needs_official_code(built, tmp_path):
    try:
        import omni_speech  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("omni_speech is importable here; this test checks the error without it")
    config = _tiny_config(tmp_path, built, backbone="vocalnet", vocalnet_model="x", cor=False, kh=True)
    with pytest.raises(rt.RecipeConfigError, match="omni_speech"):
        rt.train(rt.load_config(config))


@pytest.mark.slow
def test_config_errors_name_the_key(tmp_path, built):
    bad = tmp_path / "bad.yaml"
    bad.write_text("data: x.json\noutput_dir: o\nlearning_rate: 1\n", encoding="utf-8")
    with pytest.raises(rt.RecipeConfigError, match="learning_rate"):
        rt.load_config(bad)
    bad.write_text("output_dir: o\n", encoding="utf-8")
    with pytest.raises(rt.RecipeConfigError, match="`data` is required"):
        rt.load_config(bad)
    missing = tmp_path / "m.json"
    missing.write_text(
        json.dumps(
            [
                {
                    "id": "z9",
                    "speech": "nope.wav",
                    "conversations": [{"from": "human", "value": "<speech>"}, {"from": "gpt", "value": "a"}],
                }
            ]
        ),
        encoding="utf-8",
    )
    with pytest.raises(rt.RecipeConfigError, match="item z9: speech file not found"):
        rt.load_examples(missing, None, tf.TransformConfig())


def test_paper_configs_load():
    configs = resources.files("cs3_tasks.recipe").joinpath("configs")
    for name in ("vocalnet_ml_qwen25_7b_4gpu.yaml", "ours_qwen25_7b_4gpu.yaml"):
        cfg = rt.load_config(Path(str(configs.joinpath(name))))
        assert (cfg.lora.r, cfg.lora.alpha, cfg.lora.dropout) == (64, 16, 0.05)
        assert not (cfg.cor and cfg.kh)
        assert Path(cfg.training["deepspeed"]).is_file()
    mix = resources.files("cs3_tasks.recipe").joinpath("configs", "mix_paper.yaml")
    from cs3_tasks.recipe.mixing import load_mix_config

    assert {s.kind for s in load_mix_config(Path(str(mix))).sources} == {
        "code_switching",
        "speech_translation",
        "speech_instruction",
    }
    assert CONVERSATIONS  # the shared fixture data is importable


@pytest.mark.slow
def test_adapter_helpers_for_wrappers(built, tmp_path, one_thread):
    """What a wrapper (cs3-vocalnet adapter=DIR) does: tokenizer + merged LoRA + postprocessing."""
    from cs3_tasks.recipe import adapter as ad
    from cs3_tasks.recipe.model import build_tiny_speech_lm

    config = _tiny_config(
        tmp_path,
        built,
        cor=False,
        kh=True,
        training={
            "max_steps": 4,
            "per_device_train_batch_size": 2,
            "learning_rate": 3e-3,
            "use_cpu": True,
            "disable_tqdm": True,
        },
    )
    rt.train(rt.load_config(config))
    out = tmp_path / "adapter"
    tok = ad.adapter_tokenizer(out)
    meta = ad.read_recipe(out)
    assert meta["transforms"] == {"cor": False, "kh": True}
    unmerged, _, _ = rt.load_trained(out)
    base = build_tiny_speech_lm(meta["tiny_base_vocab"], tok.pad_token_id, tok.eos_token_id, seed=0).llm
    merged = ad.apply_adapter(base, out)  # resized to the adapter tokenizer, LoRA merged
    ids = torch.tensor([tok("用<|kw_start|>Python<|kw_end|>读文件")["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(merged(input_ids=ids).logits, unmerged.llm(input_ids=ids).logits, atol=1e-4)
    post = ad.response_postprocessor(out)
    r = post("用<|kw_start|>Python<|kw_end|>读文件")
    assert (r.text, r.recognised) == ("用Python读文件", None)
    with pytest.raises(FileNotFoundError):
        ad.apply_adapter(base, tmp_path)


@pytest.mark.slow
def test_batch_with_different_instructions_matches_single_rows(built, one_thread):
    """Rows with different prompts (code-switching vs translation items) batch without shifting anything."""
    import dataclasses

    from cs3_tasks.recipe.model import SpeechLMParts, build_tiny_speech_lm, whisper_feature_extractor

    ex = rt.load_examples(built / "train.json", None, tf.TransformConfig())
    ex = [ex[0], dataclasses.replace(ex[1], prompt_text="Translate the speech into English.")]
    tok = rt.train_tokenizer([e.target for e in ex] + [e.prompt_text for e in ex])
    model = build_tiny_speech_lm(len(tok), tok.pad_token_id, tok.eos_token_id).eval()
    col = rt.SpeechCollator(tok, whisper_feature_extractor(model.encoder.config), SpeechLMParts())
    with torch.no_grad():
        embeds, mask, labels = model.build_inputs(**col(ex))
        full = model.llm(inputs_embeds=embeds, attention_mask=mask).logits
        for i, e in enumerate(ex):
            e1, m1, l1 = model.build_inputs(**col([e]))
            single = model.llm(inputs_embeds=e1, attention_mask=m1).logits
            n = m1.shape[1]
            assert torch.allclose(full[i, :n], single[0], atol=1e-4)
            assert torch.equal(labels[i, :n], l1[0]) and bool((labels[i, n:] == -100).all())
    assert mask[0].sum() != mask[1].sum()  # the rows really differ in length


@pytest.mark.gpu
@pytest.mark.slow
def test_a_lora_step_in_bf16_on_the_gpu(tmp_path):
    """The recipe's LoRA training on a GPU in bfloat16 (the paper's precision): a few steps on two synthetic
    items (tones for speech; no TTS or ASR needed), the adapter saved and reloaded on the GPU."""
    import numpy as np

    from cs3_tasks.core.audio import write_wav

    (tmp_path / "clips").mkdir()
    items = []
    for i, (question, answer) in enumerate(
        [("Mormon church的总部在哪里？", "盐湖城。"), ("Nile在哪？", "非洲。")]
    ):
        tone = 0.2 * np.sin(2 * np.pi * (220 + 110 * i) * np.arange(16_000) / 16_000)
        write_wav(tmp_path / "clips" / f"q{i}.wav", tone.astype(np.float32), 16_000)
        items.append(
            {
                "id": f"q{i}",
                "speech": f"clips/q{i}.wav",
                "query_text": question,
                "conversations": [{"from": "human", "value": "<speech>"}, {"from": "gpt", "value": answer}],
            }
        )
    (tmp_path / "train.json").write_text(json.dumps(items, ensure_ascii=False), encoding="utf-8")
    cfg = yaml.safe_load(_tiny_config(tmp_path, tmp_path).read_text(encoding="utf-8"))
    cfg["training"].update({"max_steps": 4, "use_cpu": False, "bf16": True, "logging_steps": 1})
    config = tmp_path / "gpu.yaml"
    config.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    with pytest.warns(UserWarning, match="2510.07881"):
        assert cli.main(["recipe", "train", "--config", str(config)]) == 0
    model, tok, meta = rt.load_trained(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file() and len(tok) > meta[
        "tiny_base_vocab"
    ]
