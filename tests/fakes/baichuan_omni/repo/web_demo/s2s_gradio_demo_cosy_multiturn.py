"""Fake of Baichuan-Omni-1.5 web_demo/s2s_gradio_demo_cosy_multiturn.py.

Same module shape as the official demo: the vocoder and the model load at import, the speech loop is a set
of top-level functions with the official signatures, and a Gradio UI is built at module level. The worker
must run the functions without the UI (gradio is not even installed in the test environment) and with its
own MODEL_PATH / COSY_VOCODER / g_cache_dir.
"""

import sys
import os
import numpy as np
import torch
import soundfile as sf
import gradio as gr
from transformers import AutoTokenizer, AutoModelForCausalLM
from generation import decode_wave_vocoder, GenerationAudioTokens
import re
import json, ujson
from constants import *

sys.path.append(os.path.join(COSY_VOCODER))
from cosy24k_vocoder import Cosy24kVocoder

vocoder = Cosy24kVocoder.from_pretrained(os.path.join(COSY_VOCODER, "hift.pt"))
vocoder = vocoder.cuda()


def init_model():
    model = AutoModelForCausalLM.from_pretrained(
        MODEL_PATH, trust_remote_code=True, torch_dtype=torch.bfloat16
    ).cuda()
    tokenizer = AutoTokenizer.from_pretrained(MODEL_PATH, trust_remote_code=True)
    model.training = False
    model.bind_processor(tokenizer, training=False, relative_path="/")
    return model, tokenizer


model, tokenizer = init_model()

audio_start_token = tokenizer.convert_ids_to_tokens(model.config.audio_config.audio_start_token_id)
audio_end_token = tokenizer.convert_ids_to_tokens(model.config.audio_config.audio_end_token_id)
audiogen_start_token = tokenizer.convert_ids_to_tokens(model.config.audio_config.audiogen_start_token_id)
audiogen_end_token = tokenizer.convert_ids_to_tokens(model.config.audio_config.audiogen_end_token_id)
special_token_partten = re.compile("<\|endoftext\|>|<audiogen_start_baichuan>|<audiogen_end_baichuan>")


def wave_concat(wave_list, start, overlap=400):
    return torch.cat(wave_list[start:], dim=1)


def save_local(wave, local_path):
    sf.write(local_path, torch.cat(wave, dim=0).cpu().numpy().T, sampling_rate)
    return audiogen_start_token + ujson.dumps({"path": local_path}, ensure_ascii=False) + audiogen_end_token


def generate_text_step(pret, plen, kv_cache_flag, audiogen_flag=True):
    from fake_calls import record

    record("generate_text_step", kv_cache_flag=kv_cache_flag, audiogen_flag=audiogen_flag)
    words = f"baichuan heard {pret.n_samples} samples".split(" ")
    text = " ".join(words[:2]) if not kv_cache_flag else " " + " ".join(words[2:])
    return pret, text


def generate_audio_step(pret):
    audioret = GenerationAudioTokens.generate(
        model,
        pret.input_ids,
        max_new_tokens=500,
        do_sample=True,
        temperature=0.5,
        top_k=5,
        top_p=0.85,
        repetition_penalty=1.3,
    )
    return audioret, decode_wave_vocoder(audioret.audios_sequences.clone(), vocoder, model)


def generate_response(content, audiogen_flag=False):
    pret = model.processor([content])
    ret, text_segment = generate_text_step(pret, 0, False, audiogen_flag)
    full_text = show_text = text_segment
    wave_list = []
    if audiogen_flag:
        yield (
            show_text,
            full_text,
            (
                sampling_rate,
                np.zeros(sampling_rate * 2, dtype=np.int16),
            ),
        )
        start = 0
        for i in range(2):
            _, wave_segment = generate_audio_step(ret)
            wave_list.extend(wave_segment)
            full_text += save_local(
                wave_segment, os.path.join(g_cache_dir, f"assistant_turn{g_turn_i}_round{i}.wav")
            )
            show_text += "<audio>"
            wave = wave_concat(wave_list, start, overlap=wave_concat_overlap)
            start = len(wave_list)
            yield (
                show_text,
                full_text,
                (
                    sampling_rate,
                    (torch.clamp(wave.squeeze(), -0.99, 0.99).numpy() * 32768.0).astype(np.int16),
                ),
            )
            if i == 0:
                ret, text_segment = generate_text_step(ret, 0, True, True)
                full_text += text_segment
                show_text += text_segment
    yield show_text, full_text, None


def preprocess_messages(messages, audiogen_flag=True):
    text = ""
    for i, msg in enumerate(messages):
        if audiogen_flag and msg["role"] == "assistant":
            text += role_prefix["audiogen"]
        text += role_prefix[msg["role"]]
        text += msg["content"]
    if audiogen_flag:
        text += role_prefix["audiogen"]
    text += role_prefix["assistant"]
    return text


g_history = []
g_turn_i = 0

with gr.Blocks() as demo:
    system_prompt_input = gr.Textbox(label="System Prompt", value="FAKE: 请用【邻家女声】这个声音回答问题。")

raise RuntimeError("the demo's module-level UI code ran")
