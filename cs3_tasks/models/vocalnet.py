"""``cs3-vocalnet``: VocalNet / VocalNet-ML through the official VocalNet inference code.

VocalNet-ML is a Qwen2.5-7B-Instruct backbone with an MTP speech head whose speech tokens the
CosyVoice2 flow + HiFT vocoder turn into 24 kHz audio. We call the authors' own inference class
(``omni_speech.infer.vocalnet.VocalNetModel``: ``__initilize__()``, ``set_audio_dir()``, then
``model([{"role": "user", "content": "<speech>", "path": wav}])`` -> ``{"text", "audio"}``), so the
numbers match theirs; ``infer_module`` / ``infer_class`` point elsewhere if a release moves it.

    lm_eval --model cs3-vocalnet \
        --model_args pretrained=/ckpt/VocalNet-qwen25-7B,vocoder=/ckpt/CosyVoice2-0.5B,adapter=/runs/cs3-lora \
        --device cuda --tasks cs3_knowledge

``adapter=DIR`` applies a LoRA adapter from our recipe (``cs3_tasks.recipe``) to the LLM backbone with
``peft.PeftModel.from_pretrained`` and merges it, so VocalNet's own ``generate`` runs unchanged.
The official code takes one query file per call: batch size is 1.
"""

from __future__ import annotations

import importlib
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lm_eval.api.registry import register_model

from cs3_tasks.audio import write_wav
from cs3_tasks.models.base import ItemError, Outcome, SpeechLM, SpeechReply, SpeechRequest, as_bool, safe_name

log = logging.getLogger(__name__)

COSYVOICE_MODEL_ENV = "CS3_COSYVOICE2_MODEL"  # same variable as cs3_tasks.tts uses for CosyVoice2

INSTALL_HELP = """\
cs3-vocalnet needs the official VocalNet inference code, which is not importable here ({cause}).
Install it (GPU machine):
  git clone https://github.com/SJTU-OmniAgent/VocalNet && pip install -e ./VocalNet
  git clone --recursive https://github.com/FunAudioLLM/CosyVoice && pip install -r CosyVoice/requirements.txt
  export PYTHONPATH=$PWD/CosyVoice:$PWD/CosyVoice/third_party/Matcha-TTS:$PYTHONPATH
and download the VocalNet checkpoint (pretrained=DIR) and CosyVoice2-0.5B (vocoder=DIR or ${env}).
If the inference class lives elsewhere in your VocalNet version, pass infer_module=... and infer_class=...\
"""


class VocalNetNotInstalled(ImportError):
    """The VocalNet inference code (omni_speech) or one of its dependencies cannot be imported."""


def load_inference_class(module_name: str, class_name: str):
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:  # omni_speech itself, or cosyvoice / whisper / hyperpyyaml it imports
        raise VocalNetNotInstalled(INSTALL_HELP.format(cause=f"{type(error).__name__}: {error}",
                                                       env=COSYVOICE_MODEL_ENV)) from error
    if not hasattr(module, class_name):
        raise VocalNetNotInstalled(INSTALL_HELP.format(cause=f"{module_name} has no {class_name}",
                                                       env=COSYVOICE_MODEL_ENV))
    return module, getattr(module, class_name)


def merge_lora(model: Any, adapter: str) -> Any:
    """The model with a LoRA adapter (a peft adapter dir) applied to its LLM weights and merged in."""
    from peft import PeftModel

    if not (Path(adapter) / "adapter_config.json").exists():
        raise FileNotFoundError(f"cs3-vocalnet: {adapter} is not a peft adapter dir (no adapter_config.json)")
    return PeftModel.from_pretrained(model, adapter).merge_and_unload()


@register_model("cs3-vocalnet")
class VocalNetLM(SpeechLM):
    model_name = "cs3-vocalnet"

    def __init__(
        self,
        pretrained: str | None = None,
        vocoder: str | None = None,
        prompt_speech: str | None = None,
        adapter: str | None = None,
        s2s: bool = True,
        max_new_tokens: int = 512,
        temperature: float = 0.0,
        infer_module: str = "omni_speech.infer.vocalnet",
        infer_class: str = "VocalNetModel",
        **kwargs: Any,
    ) -> None:
        if not pretrained:
            raise ValueError("cs3-vocalnet needs pretrained=<VocalNet checkpoint dir>")
        self.pretrained = str(pretrained)
        s2s = as_bool(s2s)
        self.adapter = str(adapter) if adapter else None
        super().__init__(**kwargs)
        module, cls = load_inference_class(infer_module, infer_class)
        vocoder = vocoder or os.environ.get(COSYVOICE_MODEL_ENV)
        if s2s and not vocoder:
            raise ValueError(f"cs3-vocalnet: speech output needs the CosyVoice2-0.5B dir: vocoder=DIR "
                             f"or ${COSYVOICE_MODEL_ENV} (or s2s=false for text only)")
        if prompt_speech:  # the official code reads its speaker prompt from this module global
            module.PROMPT_SPEECH = str(prompt_speech)
        options = {"s2s": s2s, "max_new_tokens": int(max_new_tokens), "temperature": float(temperature)}
        if vocoder:
            options["vocoder_path"] = str(vocoder)
        self.vocalnet = cls(self.pretrained, **options)
        self.vocalnet.__initilize__()  # (sic) the official method name: loads the LLM and the vocoder
        if self.adapter:
            self.vocalnet.model = merge_lora(self.vocalnet.model, self.adapter)
            log.info("cs3-vocalnet: merged LoRA adapter %s", self.adapter)
        self.s2s = s2s
        self._scratch = tempfile.TemporaryDirectory(prefix="cs3-vocalnet-")

    def label(self) -> str:
        name = self.pretrained.rstrip("/").split("/")[-1]
        return f"{name}+{Path(self.adapter).name}" if self.adapter else name

    def generate_batch(self, requests: Sequence[SpeechRequest]) -> list[Outcome]:
        return [self._answer(req) for req in requests]

    def _answer(self, req: SpeechRequest) -> Outcome:
        import soundfile as sf

        try:
            # The official code reads a file and names its output after the input's basename:
            # one private in/out dir pair per item keeps names unique.
            item_dir = Path(self._scratch.name) / safe_name(f"{req.task}-{req.qid}")
            (item_dir / "out").mkdir(parents=True, exist_ok=True)
            query = item_dir / f"{safe_name(req.qid)}.wav"
            write_wav(query, self.query_audio(req, 16_000), 16_000)
            self.vocalnet.set_audio_dir(str(item_dir / "out"))
            result = self.vocalnet([{"role": "user", "content": "<speech>", "path": str(query)}])
            text = str(result.get("text") or "")
            audio, rate = None, 16_000
            if self.s2s:
                if not result.get("audio") or not Path(result["audio"]).exists():
                    raise ItemError(f"{req.task}/{req.qid}: VocalNet returned no speech file ({result.get('audio')})")
                audio, rate = sf.read(result["audio"], dtype="float32", always_2d=False)
                if audio.ndim == 2:
                    audio = audio.mean(axis=1)
            return SpeechReply(text=text, audio=audio, sample_rate=int(rate))
        except Exception as error:  # noqa: BLE001 - recorded for this item only
            return error
