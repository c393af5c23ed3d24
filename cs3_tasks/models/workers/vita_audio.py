"""VITA-Audio worker: ``S2SInference`` of VITA-MLLM/VITA-Audio's ``tools/inference_sts.py``.

That script runs its examples (and creates ``/data/output/...``) at module level, so it cannot be imported:
we execute only its imports and the ``S2SInference`` class (``workerlib.run_definitions``) with its module
globals ``device_map`` / ``torch_dtype`` / ``audio_tokenizer_rank`` set from ``device=``, and put the repo
and its GLM-4-Voice submodule (``third_party/GLM-4-Voice``, ``cosyvoice``, ``Matcha-TTS``) on sys.path as
the script does, with absolute paths.

``S2SInference(model_name_or_path, audio_tokenizer_path, audio_tokenizer_type="sensevoice_glm4voice",
flow_path=...)``; per item ``output, tts_speech = s2s.run_infer(audio_path=wav, mode="luke",
do_sample=False)``: the "luke" system message (speech in a text-audio interleaved manner) is the class's
own. ``tts_speech`` (GLM-4-Voice decoder) is 22.05 kHz. ``output`` is the decoded sequence, prompt
included: the text channel is the reply after the last ``<|im_start|>assistant``, its text tokens (ids
below ``<|audio_0|>``) decoded with ``skip_special_tokens=True``, as ``evaluation/evaluate_sqa.py`` does.

Decoding: greedy (``do_sample=False``, the class's generation config: num_beams 1), as the authors'
``run_infer`` default and their evaluation. The class loads with ``attn_implementation="flash_attention_2"``
and runs on CUDA. ``run_infer`` takes one query per call.
"""

from __future__ import annotations

from pathlib import Path

if __package__:
    from . import workerlib
else:  # started as a script by the model's own Python
    import workerlib

NAME = "vita_audio"
OUTPUT_SAMPLE_RATE = 22_050
SCRIPT = "tools/inference_sts.py"
ASSISTANT_TURN = "<|im_start|>assistant\n"
INSTALL = """\
cs3-vita-audio needs the VITA-MLLM/VITA-Audio repository (with its GLM-4-Voice submodule) and its
environment in the worker's Python:
  git clone --recurse-submodules https://github.com/VITA-MLLM/VITA-Audio
  python -m venv vita-env && vita-env/bin/pip install -r VITA-Audio/requirements_ds_gpu.txt && \\
      vita-env/bin/pip install -e VITA-Audio
then pass python=vita-env/bin/python,repo=VITA-Audio,audio_tokenizer=<THUDM/glm-4-voice-tokenizer dir>,
flow_path=<THUDM/glm-4-voice-decoder dir> (pretrained=VITA-MLLM/VITA-Audio-Plus-Vanilla by default)."""

DEFAULTS = {
    "pretrained": "VITA-MLLM/VITA-Audio-Plus-Vanilla",
    "audio_tokenizer": "THUDM/glm-4-voice-tokenizer",
    "audio_tokenizer_type": "sensevoice_glm4voice",
    "flow_path": "THUDM/glm-4-voice-decoder",
    "repo": None,
    "device": "cuda:0",
    "mode": "luke",
    "do_sample": False,
    "seed": 0,
}


class Backend:
    def __init__(self, options: dict) -> None:
        self.options = opts = {**DEFAULTS, **options}
        if not opts["repo"] or not Path(opts["repo"]).is_dir():
            raise workerlib.ModelCodeMissing(
                f"repo={opts['repo']!r} is not a VITA-Audio checkout.\n{INSTALL}"
            )
        repo = Path(opts["repo"]).resolve()
        script = workerlib.require_file(repo / SCRIPT, "VITA-Audio inference script", INSTALL)
        glm = repo / "third_party" / "GLM-4-Voice"
        workerlib.add_paths([repo, glm, glm / "cosyvoice", glm / "third_party" / "Matcha-TTS"])
        device = str(opts["device"])
        if device == "cuda":
            device = "cuda:0"

        def official():
            import torch

            rank = int(device.split(":", 1)[1]) if device.startswith("cuda:") else 0
            overrides = {"device_map": device, "torch_dtype": torch.bfloat16, "audio_tokenizer_rank": rank}
            return workerlib.run_definitions(script, ["S2SInference"], {}, overrides=overrides)

        namespace = workerlib.import_official("VITA-Audio's S2SInference", INSTALL, official)
        self.s2s = namespace["S2SInference"](
            str(opts["pretrained"]),
            str(opts["audio_tokenizer"]),
            str(opts["audio_tokenizer_type"]),
            flow_path=str(opts["flow_path"]),
        )
        self.audio_offset = self.s2s.tokenizer.convert_tokens_to_ids("<|audio_0|>")
        self.info = {
            "sample_rate": OUTPUT_SAMPLE_RATE,
            "max_batch": 1,
            "decoding": {"do_sample": bool(opts["do_sample"]), "mode": opts["mode"]},
        }

    def reply_text(self, output: str) -> str:
        reply = output.rsplit(ASSISTANT_TURN, 1)[-1]
        ids = self.s2s.tokenizer(reply, add_special_tokens=False).input_ids
        text_ids = [i for i in ids if i < self.audio_offset]
        return self.s2s.tokenizer.decode(text_ids, skip_special_tokens=True).strip()

    def generate_one(self, item: dict) -> dict:
        workerlib.seed_everything(workerlib.item_seed(self.options["seed"], item["key"]))
        output, tts_speech = self.s2s.run_infer(
            audio_path=item["audio"], mode=self.options["mode"], do_sample=bool(self.options["do_sample"])
        )
        audio = None if tts_speech is None else workerlib.save_samples(item["out"], tts_speech)
        return {"text": self.reply_text(output), "audio": audio, "sample_rate": OUTPUT_SAMPLE_RATE}


if __name__ == "__main__":
    workerlib.serve(NAME, Backend)
