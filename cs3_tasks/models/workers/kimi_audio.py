"""Kimi-Audio worker: ``kimia_infer.api.kimia.KimiAudio`` (MoonshotAI/Kimi-Audio),
as its ``infer.py`` runs it.

``KimiAudio(model_path=..., load_detokenizer=True)``; per item
``wav, text = model.generate([{"role": "user", "message_type": "audio", "content": path}],
**sampling_params, output_type="both")``; ``wav`` is saved at 24 kHz as ``infer.py`` saves it.

Decoding: ``infer.py``'s sampling parameters (the README's, and those of the authors' evaluation toolkit
Kimi-Audio-Evalkit). Text is greedy (``text_temperature 0``);
the audio tokens are sampled (``audio_temperature 0.8``, ``audio_top_k 10``): sampling is inherent to
Kimi-Audio's speech output. Seeded per item. Kimi-Audio's code runs on CUDA only
(``torch.cuda.current_device()``); ``device=cuda:N`` selects the GPU. Generation length is fixed by the
official code for speech output (12.5 tokens/s x 120 s, minus the prompt). ``generate`` takes one
conversation per call.
"""

from __future__ import annotations

from pathlib import Path

if __package__:
    from . import workerlib
else:  # started as a script by the model's own Python
    import workerlib

NAME = "kimi_audio"
OUTPUT_SAMPLE_RATE = 24_000
INSTALL = """\
cs3-kimi-audio needs MoonshotAI/Kimi-Audio's kimia_infer package (CUDA, flash-attn) in the worker's Python:
  git clone --recurse-submodules https://github.com/MoonshotAI/Kimi-Audio
  python -m venv kimi-env && kimi-env/bin/pip install -r Kimi-Audio/requirements.txt && \\
      kimi-env/bin/pip install -e Kimi-Audio
then pass python=kimi-env/bin/python (repo=Kimi-Audio if it is not pip-installed) and
pretrained=moonshotai/Kimi-Audio-7B-Instruct or a local copy."""

# infer.py's sampling_params
SAMPLING = {
    "audio_temperature": 0.8,
    "audio_top_k": 10,
    "text_temperature": 0.0,
    "text_top_k": 5,
    "audio_repetition_penalty": 1.0,
    "audio_repetition_window_size": 64,
    "text_repetition_penalty": 1.0,
    "text_repetition_window_size": 16,
}
DEFAULTS = {
    "pretrained": "moonshotai/Kimi-Audio-7B-Instruct",
    "repo": None,
    "device": "cuda",
    "seed": 0,
    **SAMPLING,
}


class Backend:
    def __init__(self, options: dict) -> None:
        self.options = {**DEFAULTS, **options}
        if self.options["repo"]:
            workerlib.add_paths([Path(self.options["repo"]).resolve()])

        def official():
            import torch
            from kimia_infer.api.kimia import KimiAudio

            return torch, KimiAudio

        torch, KimiAudio = workerlib.import_official("Kimi-Audio (kimia_infer)", INSTALL, official)
        device = str(self.options["device"])
        if device.startswith("cuda:") and torch.cuda.is_available():
            torch.cuda.set_device(int(device.split(":", 1)[1]))
        self.model = KimiAudio(model_path=str(self.options["pretrained"]), load_detokenizer=True)
        self.sampling = {k: type(v)(self.options[k]) for k, v in SAMPLING.items()}
        self.info = {"sample_rate": OUTPUT_SAMPLE_RATE, "max_batch": 1, "decoding": self.sampling}

    def generate_one(self, item: dict) -> dict:
        workerlib.seed_everything(workerlib.item_seed(self.options["seed"], item["key"]))
        messages = [{"role": "user", "message_type": "audio", "content": item["audio"]}]
        wav, text = self.model.generate(messages, **self.sampling, output_type="both")
        audio = None if wav is None else workerlib.save_samples(item["out"], wav.detach().cpu().view(-1))
        return {"text": str(text or "").strip(), "audio": audio, "sample_rate": OUTPUT_SAMPLE_RATE}


if __name__ == "__main__":
    workerlib.serve(NAME, Backend)
