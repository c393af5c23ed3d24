"""cs3-qwen2.5-omni on a tiny randomly initialised Qwen2.5-Omni (thinker + talker + token2wav) built here.

Nothing is downloaded: the config, the weights, the speaker dict, a character-level tokenizer and a
Whisper feature extractor are all made in a tmp dir and loaded by the wrapper from that path.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import soundfile as sf

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "Qwen2_5OmniForConditionalGeneration"):
    pytest.skip("this transformers has no Qwen2.5-Omni", allow_module_level=True)

from lm_eval.api.instance import Instance  # noqa: E402 - only once torch/transformers are known to work

from cs3_tasks.harness.speech import decode_payload, decode_response  # noqa: E402

SPECIAL = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|AUDIO|>",
    "<|IMAGE|>",
    "<|VIDEO|>",
    "<|audio_bos|>",
    "<|audio_eos|>",
    "<|vision_bos|>",
    "<|vision_eos|>",
]
VOCAB = 128  # 10 special tokens + 95 printable ASCII characters + unused ids (speaker/tts tokens)
MROPE = {"mrope_section": [1, 1, 2], "rope_type": "default", "type": "default"}
IDS = {
    "audio_token_index": 3,
    "image_token_index": 4,
    "video_token_index": 5,
    "audio_start_token_id": 6,
    "audio_end_token_id": 7,
    "vision_start_token_id": 8,
    "vision_end_token_id": 9,
}


def tiny_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import Qwen2TokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIAL + [chr(c) for c in range(32, 127)])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="?"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")  # one token per character
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(SPECIAL)
    return Qwen2TokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")


def tiny_config(audio_output: bool = True):
    from transformers import Qwen2_5OmniConfig

    thinker = {
        "audio_config": {
            "d_model": 32,
            "encoder_attention_heads": 4,
            "encoder_ffn_dim": 32,
            "encoder_layers": 2,
            "num_mel_bins": 20,
            "max_source_positions": 1500,
            "n_window": 100,
            "output_dim": 32,
        },
        "vision_config": {
            "depth": 1,
            "embed_dim": 32,
            "hidden_size": 32,
            "intermediate_size": 32,
            "num_heads": 4,
            "out_hidden_size": 32,
            "fullatt_block_indexes": [0],
        },
        "text_config": {
            "vocab_size": VOCAB,
            "hidden_size": 32,
            "intermediate_size": 37,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 4096,
            "rope_scaling": MROPE,
        },
        "user_token_id": 1,
        **IDS,
    }
    talker = {
        "vocab_size": 64,
        "embedding_size": 32,
        "hidden_size": 32,
        "intermediate_size": 37,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "max_position_embeddings": 4096,
        "rope_scaling": MROPE,
        "tts_text_start_token_id": 120,
        "tts_text_end_token_id": 121,
        "tts_text_pad_token_id": 119,
        "tts_codec_start_token_id": 61,
        "tts_codec_end_token_id": 62,
        "tts_codec_pad_token_id": 60,
        "tts_codec_mask_token_id": 63,
        **IDS,
    }
    token2wav = {
        "dit_config": {
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "ff_mult": 1,
            "emb_dim": 16,
            "head_dim": 16,
            "num_embeds": 64,
            "mel_dim": 20,
            "enc_emb_dim": 16,
            "enc_dim": 16,
            "enc_channels": [16, 16, 16, 16, 48],
            "enc_attention_channels": 8,
            "enc_se_channels": 8,
            "look_ahead_layers": [1],
            "look_backward_layers": [0],
            "block_size": 4,
        },
        "bigvgan_config": {
            "mel_dim": 20,
            "upsample_initial_channel": 64,
            "resblock_kernel_sizes": [3],
            "resblock_dilation_sizes": [[1, 3, 5]],
            "upsample_rates": [5, 3, 2, 2, 2, 2],
            "upsample_kernel_sizes": [11, 7, 4, 4, 4, 4],
        },
    }
    return Qwen2_5OmniConfig(
        thinker_config=thinker,
        talker_config=talker,
        token2wav_config=token2wav,
        enable_audio_output=audio_output,
    )


@pytest.fixture(scope="module")
def tiny_omni_dir(tmp_path_factory):
    from transformers import Qwen2_5OmniForConditionalGeneration, WhisperFeatureExtractor

    path = tmp_path_factory.mktemp("tiny-qwen2.5-omni")
    torch.manual_seed(0)
    Qwen2_5OmniForConditionalGeneration(tiny_config()).save_pretrained(path)
    # speaker: text bos id for the talker, a speaker embedding (enc_emb_dim) and a reference mel (mel_dim)
    torch.save(
        {"Chelsie": {"bos_token": 118, "cond": torch.randn(1, 16), "ref_mel": torch.randn(1, 30, 20)}},
        path / "spk_dict.pt",
    )
    tiny_tokenizer().save_pretrained(path)
    WhisperFeatureExtractor(feature_size=20).save_pretrained(path)
    return path


def wav_bytes(seconds: float, rate: int = 22_050, freq: float = 220.0) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    buffer = io.BytesIO()
    sf.write(buffer, (0.2 * np.sin(2 * np.pi * freq * t)).astype(np.float32), rate, format="WAV")
    return buffer.getvalue()


def instance(qid: str, audio, doc_id: int = 0, instruction: str = "Answer the question.") -> Instance:
    return Instance(
        request_type="generate_until",
        doc={"Qid": qid},
        idx=0,
        metadata=("cs3_knowledge", doc_id, 1),
        arguments=(instruction, {"until": ["\n\n"], "max_gen_toks": 6}, {"audio": audio}),
    )


def make_lm(path, tmp_path, **overrides):
    from cs3_tasks.models.qwen_omni import QwenOmniLM

    args = {
        "pretrained": str(path),
        "output_dir": str(tmp_path / "out"),
        "device": "cpu",
        "talker_max_new_tokens": 12,
        "token2wav_num_steps": 2,
        "batch_size": 2,
    }
    args.update(overrides)
    return QwenOmniLM(**args)


@pytest.mark.slow
def test_prompt_matches_qwen_chatml_and_audio_span(tiny_omni_dir, tmp_path):
    from cs3_tasks.models.qwen_omni import OFFICIAL_SYSTEM_PROMPT, QwenOmniLM, audio_token_count

    lm = make_lm(tiny_omni_dir, tmp_path)
    assert isinstance(lm, QwenOmniLM) and lm.system_prompt == OFFICIAL_SYSTEM_PROMPT
    assert lm.prompt("Hi", 2) == (
        f"<|im_start|>system\n{OFFICIAL_SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n"
        "<|audio_bos|><|AUDIO|><|AUDIO|><|audio_eos|>Hi<|im_end|>\n<|im_start|>assistant\n"
    )
    from cs3_tasks.models.base import speech_request

    inputs = lm.build_inputs(
        [
            speech_request(instance("a", wav_bytes(1.0)), 0),
            speech_request(instance("b", wav_bytes(0.5), 1), 1),
        ]
    )
    n_audio = (inputs["input_ids"] == 3).sum(-1).tolist()
    frames = inputs["feature_attention_mask"].sum(-1).tolist()
    assert frames == [100, 50]  # 10 ms hop at 16 kHz
    assert n_audio == [audio_token_count(100), audio_token_count(50)] == [25, 12]
    assert inputs["attention_mask"][1, 0] == 0  # left padding of the shorter prompt


@pytest.mark.slow
def test_speech_and_text_from_tiny_model(tiny_omni_dir, tmp_path):
    lm = make_lm(tiny_omni_dir, tmp_path)
    requests = [
        instance("q0", wav_bytes(1.0)),
        instance("q1", wav_bytes(0.6, freq=330), 1),
        instance("broken", b"not audio", 2),
    ]
    out = lm.generate_until(requests)
    for response, qid in zip(out[:2], ["q0", "q1"]):
        text, audio_path = decode_response(response)
        assert isinstance(text, str)
        samples, rate = sf.read(audio_path)
        assert rate == 24_000 and len(samples) > 0 and np.all(np.isfinite(samples))
        assert audio_path.endswith(f"cs3_knowledge/{qid}.wav")
    assert decode_response(out[2]) == ("", None)
    errors = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert [e["Qid"] for e in errors] == ["broken"] and "query audio" in errors[0]["error"]


@pytest.mark.slow
def test_text_only_mode_and_bad_speaker(tiny_omni_dir, tmp_path):
    lm = make_lm(tiny_omni_dir, tmp_path, return_audio=False)
    assert not lm.model.has_talker
    payload = decode_payload(lm.generate_until([instance("q0", wav_bytes(0.5))])[0])
    # an answer, not a failure recorded as empty text (transformers 5.x's generate fails without the talker)
    assert payload.problem is None and payload.audio is None and payload.text is not None
    with pytest.raises(ValueError, match="unknown speaker"):
        make_lm(tiny_omni_dir, tmp_path, speaker="Nobody")


@pytest.mark.slow
def test_lm_eval_default_cuda_device_falls_back_to_cpu(tiny_omni_dir, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: cuda:0 is honoured")
    lm = make_lm(tiny_omni_dir, tmp_path, device="cuda:0", return_audio=False)  # lm-eval's default --device
    assert lm.device == "cpu" and next(lm.model.parameters()).device.type == "cpu"


@pytest.mark.gpu
@pytest.mark.slow
def test_speech_and_text_on_the_gpu(tiny_omni_dir, tmp_path):
    lm = make_lm(tiny_omni_dir, tmp_path, device="cuda:0")
    assert next(lm.model.parameters()).is_cuda
    out = lm.generate_until([instance("q0", wav_bytes(1.0)), instance("q1", wav_bytes(0.6, freq=330), 1)])
    for response in out:
        text, audio_path = decode_response(response)
        assert isinstance(text, str) and audio_path and sf.read(audio_path)[1] == 24_000
    text_only = make_lm(tiny_omni_dir, tmp_path, device="cuda:0", return_audio=False)
    assert decode_payload(text_only.generate_until([instance("q2", wav_bytes(0.5))])[0]).problem is None


@pytest.mark.gpu
@pytest.mark.slow
def test_through_lm_eval_with_device_cuda(tiny_omni_dir, tmp_path):
    """``lm_eval --model cs3-qwen2.5-omni --device cuda`` on two demo items, the speech channel heard by the
    transformers ASR backend on the GPU too (a tiny Whisper: the numbers are noise, the path is real)."""
    from lm_eval_runner import run_lm_eval
    from tiny_whisper import build_whisper

    whisper = build_whisper(tmp_path / "tiny-whisper")
    args = f"pretrained={tiny_omni_dir},output_dir={tmp_path / 'out'},talker_max_new_tokens=12"
    metadata = {"dataset": "demo", "judge": "none", "asr_backend": "transformers", "asr_model": whisper}
    run = run_lm_eval(
        "run",
        "--model",
        "cs3-qwen2.5-omni",
        "--model_args",
        f"{args},token2wav_num_steps=2",
        "--device",
        "cuda",
        "--tasks",
        "cs3_knowledge",
        "--limit",
        "2",
        "--metadata",
        json.dumps({**metadata, "asr_device": "cuda"}),
        "--output_path",
        str(tmp_path / "results"),
    )
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "out" / "knowledge.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(row.get("audio") for row in rows)
    assert "acc_speech" in run.stdout
