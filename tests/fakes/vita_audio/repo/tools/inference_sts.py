"""Fake of VITA-MLLM/VITA-Audio tools/inference_sts.py: the S2SInference class with the official
signatures; like the official script, the module level runs examples (here: raises) when executed."""

import os
import sys

import torch
from fake_calls import duration_tokens, misbehave, record
from fake_tokenizer import FakeTokenizer
from vita_audio.data.processor.audio_processor import add_audio_input_contiguous
from vita_audio.tokenizer import get_audio_tokenizer

torch.manual_seed(1234)

device_map = "cuda:0"
audio_tokenizer_rank = 0
torch_dtype = torch.bfloat16

if True:
    sys.path.append("third_party/GLM-4-Voice/")
    audio_tokenizer_path = "/data/models/THUDM/glm-4-voice-tokenizer"
    flow_path = "/data/models/THUDM/glm-4-voice-decoder"
    audio_tokenizer_type = "sensevoice_glm4voice"
    model_name_or_path = "VITA-MLLM/VITA-Audio-Plus-Vanilla"

output_dir = "/data/output/LM/inference/"


class S2SInference:
    def __init__(self, model_name_or_path, audio_tokenizer_path, audio_tokenizer_type, flow_path=None):
        from evaluation.get_chat_template import qwen2_chat_template as chat_template

        record(
            "S2SInference",
            model_name_or_path=model_name_or_path,
            audio_tokenizer_path=audio_tokenizer_path,
            audio_tokenizer_type=audio_tokenizer_type,
            flow_path=flow_path,
            device_map=device_map,
            torch_dtype=str(torch_dtype),
            audio_tokenizer_rank=audio_tokenizer_rank,
            chat_template=chat_template,
        )
        self.tokenizer = FakeTokenizer()
        self.audio_tokenizer = get_audio_tokenizer(
            audio_tokenizer_path, audio_tokenizer_type, flow_path=flow_path, rank=audio_tokenizer_rank
        )
        self.luke_system_message = [
            {"role": "system", "content": "FAKE Luke: Respond in a text-audio interleaved manner."},
        ]
        self.default_system_message = []

    def run_infer(
        self,
        audio_path=None,
        prompt_audio_path=None,
        stream_stride=4,
        max_returned_tokens=4096,
        sample_rate=16000,
        request_id="",
        audio_feats=None,
        message="",
        use_past=False,
        mode="luke",
        do_sample=False,
        mtp_inference_mode=None,
    ):
        record("run_infer", audio_path=audio_path, mode=mode, do_sample=do_sample, message=message)
        misbehave(audio_path)
        system = self.luke_system_message if mode == "luke" else self.default_system_message
        prompt = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in system)
        prompt += f"<|im_start|>user\n{message}\n<|audio|><|im_end|>\n<|im_start|>assistant\n"
        n = len(duration_tokens(audio_path, per_second=12.5))
        reply = f"vita heard {n}" + "".join(f"<|audio_{i}|>" for i in range(10)) + " frames"
        reply += "".join(f"<|audio_{i}|>" for i in range(10)) + "<|im_end|>"
        output = prompt + reply
        audio_offset = self.tokenizer.convert_tokens_to_ids("<|audio_0|>")
        audio_tokens = [t - audio_offset for t in self.tokenizer.encode(output) if t >= audio_offset]
        tts_speech = self.audio_tokenizer.decode(audio_tokens) if audio_tokens else None
        return output, tts_speech


raise RuntimeError("the module-level examples of inference_sts.py ran")
