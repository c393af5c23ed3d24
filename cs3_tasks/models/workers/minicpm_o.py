"""MiniCPM-o 2.6 worker: the checkpoint's remote code (openbmb/MiniCPM-o-2_6), as the 2.6 README's
"Speech Conversation as an AI Assistant" example runs it.

``AutoModel.from_pretrained(pretrained, trust_remote_code=True, attn_implementation="sdpa",
torch_dtype=bfloat16, init_vision=True, init_audio=True, init_tts=True)``, ``model.init_tts()``,
``model.tts.float()``; the system message is the model's own
``model.get_sys_prompt(ref_audio=..., mode="audio_assistant", language=...)`` with the README's reference
voice (``assets/input_examples/assistant_female_voice.wav`` of the OpenBMB/MiniCPM-o repo: ``repo=`` or
``ref_audio=``); per item ``model.chat(msgs=[sys_msg, {"role": "user", "content": [audio_16k]}],
tokenizer=..., sampling=True, max_new_tokens=128, use_tts_template=True, generate_audio=True,
temperature=0.3, output_audio_path=...)`` -> ``OmniOutput(text, audio_wav, sampling_rate)`` (24 kHz).

Decoding: the README's speech settings. Sampling is inherent: ``chat(sampling=False)`` is not greedy but
3-beam search with repetition penalty 1.2 (``sampling=false`` selects it). Seeded per item. The remote
code wants transformers 4.44 (requirements_o2.6.txt). ``chat`` takes a batch of conversations only for text
output, so speech is generated one item at a time.
"""

from __future__ import annotations

from pathlib import Path

if __package__:
    from . import workerlib
else:  # started as a script by the model's own Python
    import workerlib

NAME = "minicpm_o"
OUTPUT_SAMPLE_RATE = 24_000
REFERENCE_VOICE = "assets/input_examples/assistant_female_voice.wav"  # in the OpenBMB/MiniCPM-o repo
INSTALL = """\
cs3-minicpm-o needs MiniCPM-o 2.6's remote code and its pinned dependencies in the worker's Python:
  git clone https://github.com/OpenBMB/MiniCPM-o
  python -m venv minicpmo-env && minicpmo-env/bin/pip install -r MiniCPM-o/requirements_o2.6.txt
  (transformers==4.44.2, vocos, vector-quantize-pytorch, librosa, soundfile)
then pass python=minicpmo-env/bin/python,repo=MiniCPM-o (for the reference voice) and
pretrained=openbmb/MiniCPM-o-2_6 or a local copy."""

DEFAULTS = {
    "pretrained": "openbmb/MiniCPM-o-2_6",
    "repo": None,
    "ref_audio": None,
    "language": "zh",
    "mode": "audio_assistant",
    "device": "cuda",
    "dtype": "bfloat16",
    "attn_implementation": "sdpa",
    "sampling": True,
    "temperature": 0.3,
    "max_new_tokens": 128,
    "seed": 0,
}


class Backend:
    def __init__(self, options: dict) -> None:
        self.options = opts = {**DEFAULTS, **options}

        def official():
            import librosa
            import torch
            from transformers import AutoModel, AutoTokenizer

            return librosa, torch, AutoModel, AutoTokenizer

        self.librosa, torch, AutoModel, AutoTokenizer = workerlib.import_official(
            "MiniCPM-o 2.6's dependencies", INSTALL, official
        )
        self.torch = torch
        ref_audio = opts["ref_audio"] or (Path(opts["repo"]) / REFERENCE_VOICE if opts["repo"] else None)
        if ref_audio is None:
            raise ValueError(
                "cs3-minicpm-o: the reference voice of the system prompt is needed: pass "
                f"repo=<OpenBMB/MiniCPM-o checkout> (uses {REFERENCE_VOICE}) or ref_audio=FILE"
            )
        ref_audio = workerlib.require_file(ref_audio, "MiniCPM-o reference voice", INSTALL)
        self.model = AutoModel.from_pretrained(
            str(opts["pretrained"]),
            trust_remote_code=True,
            attn_implementation=str(opts["attn_implementation"]),
            torch_dtype=getattr(torch, str(opts["dtype"])),
            init_vision=True,
            init_audio=True,
            init_tts=True,
        )
        self.model = self.model.eval().to(str(opts["device"]))
        self.tokenizer = AutoTokenizer.from_pretrained(str(opts["pretrained"]), trust_remote_code=True)
        self.model.init_tts()
        self.model.tts.float()
        voice, _ = self.librosa.load(str(ref_audio), sr=16000, mono=True)
        self.sys_msg = self.model.get_sys_prompt(
            ref_audio=voice, mode=str(opts["mode"]), language=str(opts["language"])
        )
        self.info = {
            "sample_rate": OUTPUT_SAMPLE_RATE,
            "max_batch": 1,
            "ref_audio": str(ref_audio),
            "decoding": {k: opts[k] for k in ("sampling", "temperature", "max_new_tokens")},
        }

    def generate_one(self, item: dict) -> dict:
        opts = self.options
        audio_input, _ = self.librosa.load(item["audio"], sr=16000, mono=True)
        workerlib.seed_everything(workerlib.item_seed(opts["seed"], item["key"]))
        wav_path = str(Path(item["out"]).with_suffix(".wav"))
        res = self.model.chat(
            msgs=[self.sys_msg, {"role": "user", "content": [audio_input]}],
            tokenizer=self.tokenizer,
            sampling=bool(opts["sampling"]),
            max_new_tokens=int(opts["max_new_tokens"]),
            use_tts_template=True,
            generate_audio=True,
            temperature=float(opts["temperature"]),
            output_audio_path=wav_path,
        )
        Path(wav_path).unlink(missing_ok=True)  # the same samples are in res.audio_wav
        audio = None
        if res.audio_wav is not None and len(res.audio_wav) > 0:
            audio = workerlib.save_samples(item["out"], res.audio_wav)
        rate = int(res.sampling_rate or OUTPUT_SAMPLE_RATE)
        return {"text": str(res.text or "").strip(), "audio": audio, "sample_rate": rate}


if __name__ == "__main__":
    workerlib.serve(NAME, Backend)
