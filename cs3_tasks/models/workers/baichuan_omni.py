"""Baichuan-Omni-1.5 worker: the speech loop of baichuan-inc/Baichuan-Omni-1.5's own web demo.

The speech-to-speech loop exists only in ``web_demo/s2s_gradio_demo_cosy_multiturn.py``, which loads the
model and builds a Gradio UI when imported. We therefore execute (``workerlib.run_definitions``) only its
top-level imports (Gradio left out) and its definitions: ``init_model`` (``AutoModelForCausalLM``
``trust_remote_code`` + ``model.bind_processor(tokenizer, training=False, relative_path="/")``), the
``Cosy24kVocoder`` load, the special-token names, ``preprocess_messages``, ``generate_text_step`` /
``generate_audio_step`` (``GenerationAudioTokens``, ``decode_wave_vocoder``) and ``generate_response``,
with ``MODEL_PATH`` / ``COSY_VOCODER`` / ``g_cache_dir`` set to ours. The conversation is the demo's: the
system prompt (the default of the demo's "System Prompt" box, read from the demo at run time;
``system_prompt=`` replaces it), the user turn ``<audio_start>{"path": wav}<audio_end>``, audio output on.

The spoken answer is the demo's streamed audio (its ``wave_concat`` cross-fades), without the 2 s of
silence the demo yields first to open the player; 24 kHz. The text is the demo's ``full_text`` with the
audio-segment references removed.

Decoding: the demo's sampling (text: temperature 0.8 then 0.3, top_k 20, top_p 0.85; audio: temperature 0.5,
top_k 5); the repository publishes no other setting: sampling is inherent here. Seeded per item. CUDA only
(the demo calls ``.cuda()``); ``device=cuda:N`` selects the GPU. One item at a time, as the demo.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

if __package__:
    from . import workerlib
else:  # started as a script by the model's own Python
    import workerlib

NAME = "baichuan_omni"
OUTPUT_SAMPLE_RATE = 24_000
DEMO = "web_demo/s2s_gradio_demo_cosy_multiturn.py"
DEMO_DEFINITIONS = (
    "vocoder",
    "init_model",
    "model",
    "tokenizer",
    "audio_start_token",
    "audio_end_token",
    "audiogen_start_token",
    "audiogen_end_token",
    "special_token_partten",
    "wave_concat",
    "save_local",
    "generate_text_step",
    "generate_audio_step",
    "generate_response",
    "preprocess_messages",
)
INSTALL = """\
cs3-baichuan-omni needs the baichuan-inc/Baichuan-Omni-1.5 repository (its web_demo/ speech loop and
third_party/cosy24k_vocoder) and its environment in the worker's Python:
  git clone https://github.com/baichuan-inc/Baichuan-Omni-1.5
  conda env create -f Baichuan-Omni-1.5/environment.yml   (or pip install -r baichuan_omni_requirements.txt)
then pass python=<that env>/bin/python,repo=Baichuan-Omni-1.5,
  pretrained=<baichuan-inc/Baichuan-Omni-1d5 dir>."""

DEFAULTS = {
    "pretrained": None,
    "repo": None,
    "vocoder": None,
    "system_prompt": None,
    "device": "cuda",
    "seed": 0,
}


class Backend:
    def __init__(self, options: dict) -> None:
        self.options = opts = {**DEFAULTS, **options}
        if not opts["repo"] or not Path(opts["repo"]).is_dir():
            raise workerlib.ModelCodeMissing(
                f"repo={opts['repo']!r} is not a Baichuan-Omni-1.5 checkout.\n{INSTALL}"
            )
        if not opts["pretrained"]:
            raise ValueError("cs3-baichuan-omni needs pretrained=<Baichuan-Omni-1.5 checkpoint dir>")
        repo = Path(opts["repo"]).resolve()
        demo = workerlib.require_file(repo / DEMO, "Baichuan-Omni-1.5 speech demo", INSTALL)
        vocoder = Path(opts["vocoder"] or repo / "third_party" / "cosy24k_vocoder").resolve()
        workerlib.add_paths([repo / "web_demo", vocoder])
        self.system_prompt = opts["system_prompt"] or workerlib.keyword_string(
            demo, "value", where={"label": "System Prompt"}
        )
        self._scratch = tempfile.TemporaryDirectory(prefix="cs3-baichuan-")  # until the first item

        def official():
            import torch

            device = str(opts["device"])
            if device.startswith("cuda:") and torch.cuda.is_available():
                torch.cuda.set_device(int(device.split(":", 1)[1]))
            overrides = {
                "MODEL_PATH": str(opts["pretrained"]),
                "COSY_VOCODER": str(vocoder),
                "g_cache_dir": self._scratch.name,
                "g_turn_i": 0,
            }
            return workerlib.run_definitions(
                demo, DEMO_DEFINITIONS, {}, overrides=overrides, skip_modules=("gradio",)
            )

        self.demo = workerlib.import_official("Baichuan-Omni-1.5's web demo code", INSTALL, official)
        self.info = {
            "sample_rate": int(self.demo.get("sampling_rate", OUTPUT_SAMPLE_RATE)),
            "max_batch": 1,
            "system_prompt": self.system_prompt,
        }

    def generate_one(self, item: dict) -> dict:
        import numpy as np

        demo = self.demo
        # save_local's segment files: one folder per item, in the client's scratch directory (removed by it)
        cache = Path(item["out"]).parent / (workerlib.safe_key(item["key"]) + "-segments")
        cache.mkdir(parents=True, exist_ok=True)
        demo["g_cache_dir"] = str(cache)
        history = [
            {"role": "system", "content": self.system_prompt},
            {
                "role": "user",
                "content": demo["audio_start_token"]
                + demo["ujson"].dumps({"path": item["audio"]}, ensure_ascii=False)
                + demo["audio_end_token"],
            },
        ]
        message = demo["preprocess_messages"](history, True)
        workerlib.seed_everything(workerlib.item_seed(self.options["seed"], item["key"]))
        full_text, chunks, primer_skipped = "", [], False
        # full_text after the loop is the demo's last (complete) text
        for _show_text, full_text, wave in demo["generate_response"](message, audiogen_flag=True):  # noqa: B007
            if wave is None:
                continue
            if not primer_skipped:  # the demo's first yield: 2 s of zeros that open the audio player
                primer_skipped = True
                continue
            chunks.append(np.asarray(wave[1], dtype=np.float32) / 32768.0)
        segment = re.escape(demo["audiogen_start_token"]) + ".*?" + re.escape(demo["audiogen_end_token"])
        text = re.sub(segment, "", full_text, flags=re.DOTALL).strip()
        audio = workerlib.save_samples(item["out"], np.concatenate(chunks)) if chunks else None
        return {"text": text, "audio": audio, "sample_rate": self.info["sample_rate"]}


if __name__ == "__main__":
    workerlib.serve(NAME, Backend)
