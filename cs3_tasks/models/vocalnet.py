"""``cs3-vocalnet``: VocalNet / VocalNet-ML through the official VocalNet inference code.

VocalNet-ML is a Qwen2.5-7B-Instruct backbone with an MTP speech head whose speech tokens the
CosyVoice2 flow + HiFT vocoder turn into 24 kHz audio. We call the authors' own inference class
(``omni_speech.infer.vocalnet.VocalNetModel``: ``__initilize__()``, ``set_audio_dir()``, then
``model([{"role": "user", "content": "<speech>", "path": wav}])`` -> ``{"text", "audio"}``), so the
numbers match theirs; ``infer_module`` / ``infer_class`` point elsewhere if a release moves it.

    lm_eval --model cs3-vocalnet \
        --model_args pretrained=/ckpt/VocalNet-qwen25-7B,vocoder=/ckpt/CosyVoice2-0.5B,adapter=/runs/lora \
        --device cuda --tasks cs3_knowledge

``adapter=DIR`` loads an adapter made by our enhancement recipe (``cs3-bench recipe train``,
``cs3_tasks.recipe``) through ``cs3_tasks.recipe.adapter``, the one implementation every wrapper uses:

- ``apply_adapter``: embeddings resized if the adapter tokenizer is larger, LoRA (and the trained rows of
  the recipe tokens <|cor_sep|>, <|kw_start|>, <|kw_end|>) merged into VocalNet's LLM, so VocalNet's
  own ``generate`` runs unchanged;
- ``adapter_tokenizer``: VocalNet's tokenizer is replaced by the one saved with the adapter (it knows
  the recipe tokens); the generated ids are captured and decoded with ``decode_keeping_recipe_tokens``
  (the official code decodes with ``skip_special_tokens=True``, which would drop the CoR separator);
- ``response_postprocessor``: the text response is ``.text`` (CoR prefix removed, KH markers stripped).

Speech of a CoR adapter. VocalNet's speech head (``ar_mtp`` speech generator) reads the LLM's hidden
states of the generated tokens, not a text, so it would also speak the recognised CoR prefix. We
therefore defer the speech head's calls during ``generate`` and then run them on the answer positions
only (the hidden states after <|cor_sep|>, the same states VocalNet computed, in the same sentence
segments, trimmed): the spoken answer matches the text answer. The speech head still receives the
KH-highlighted answer (the indicator tokens' hidden states are part of it): that is how "the speech
generator gets the highlighted text" reaches a hidden-state speech head. When the model generates no
separator, the speech head runs on everything exactly as VocalNet does. For other speech generator
types (``ctc``, plain ``ar``) the calls are left as they are and the speech includes the CoR prefix
(a warning says so at load).

The official code takes one query file per call: batch size is 1.
"""

from __future__ import annotations

import importlib
import logging
import os
import tempfile
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lm_eval.api.registry import register_model

from cs3_tasks.build.tts import COSYVOICE_MODEL_ENV  # the vocoder is the CosyVoice2 model the TTS uses
from cs3_tasks.core.audio import SAMPLE_RATE, write_wav
from cs3_tasks.models.base import ItemError, Outcome, SpeechLM, SpeechReply, SpeechRequest, as_bool, safe_name
from cs3_tasks.recipe import adapter as recipe_adapter
from cs3_tasks.recipe.transforms import Response

log = logging.getLogger(__name__)


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
        raise VocalNetNotInstalled(
            INSTALL_HELP.format(cause=f"{type(error).__name__}: {error}", env=COSYVOICE_MODEL_ENV)
        ) from error
    if not hasattr(module, class_name):
        raise VocalNetNotInstalled(
            INSTALL_HELP.format(cause=f"{module_name} has no {class_name}", env=COSYVOICE_MODEL_ENV)
        )
    return module, getattr(module, class_name)


def check_adapter_dir(adapter: str) -> None:
    """Fail before loading a 7B model when ``adapter`` is not an adapter directory."""
    if not (Path(adapter) / "adapter_config.json").is_file():
        raise FileNotFoundError(f"cs3-vocalnet: {adapter} is not a peft adapter dir (no adapter_config.json)")


# The official ar_mtp speech generator's entry points (omni_speech/model/speech_generator/
# speech_generator_ar_mtp.py) as OmniSpeech2S*ForCausalLM.generate calls them, one sentence segment
# of hidden states (+ the text-eos embedding as last row) per call.
SPEECH_HEAD_METHODS = ("predict", "predict_mtp", "predict_mtp_speculative", "pseudo_streaming_predict_mtp")


def answer_only_speech_supported(model: Any) -> bool:
    config = getattr(model, "config", None)
    return (
        getattr(model, "speech_generator", None) is not None
        and "ar_mtp" in str(getattr(config, "speech_generator_type", ""))
        and getattr(config, "speech_sos_token_id", None) is not None
        and getattr(config, "speech_eos_token_id", None) is not None
    )


class RecipeGeneration:
    """Wraps the VocalNet model's ``generate`` (as an instance attribute) for a recipe adapter.

    - keeps the generated ids of the last call (``self.ids``) for decoding with the adapter tokenizer;
    - with ``answer_only_speech``: the speech head's calls are deferred during ``generate`` and then
      replayed on the hidden states after the CoR separator only (see the module docstring).
    """

    def __init__(self, model: Any, tokenizer: Any, answer_only_speech: bool) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.original = model.generate
        self.answer_only_speech = answer_only_speech
        self.ids: list[int] | None = None
        self.speech_from: int | None = None  # last call: first generated position the speech head read
        model.generate = self.generate

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        self.ids, self.speech_from = None, None
        calls: list[tuple[str, tuple, dict]] = []
        if self.answer_only_speech:
            with self._deferred_speech_head(calls):
                out = self.original(*args, **kwargs)
        else:
            out = self.original(*args, **kwargs)
        sequences = out[0] if isinstance(out, tuple) else getattr(out, "sequences", out)
        self.ids = [int(i) for i in sequences[0].tolist()]
        if not calls:
            return out
        units, ratios = self._replay(calls, recipe_adapter.cor_answer_start(self.tokenizer, self.ids) or 0)
        return (out[0], units, ratios) if len(out) > 2 else (out[0], units)

    @contextmanager
    def _deferred_speech_head(self, calls: list):
        import torch

        head = self.model.speech_generator
        sos, eos = self.model.config.speech_sos_token_id, self.model.config.speech_eos_token_id

        def deferred(name: str):
            def record(hidden, *args, **kwargs):
                calls.append((name, (hidden, *args), kwargs))
                # an empty segment in the official framing ([sos] units [eos], sliced [:, 1:-1] by the caller)
                empty = torch.tensor([[sos, eos]], dtype=torch.long, device=hidden.device)
                return (empty, 1.0) if name == "predict_mtp_speculative" else empty

            return record

        patched = [name for name in SPEECH_HEAD_METHODS if hasattr(head, name)]
        for name in patched:
            setattr(head, name, deferred(name))  # instance attributes shadow the class methods
        try:
            yield
        finally:
            for name in patched:
                delattr(head, name)

    def _replay(self, calls: list, answer_start: int):
        """The speech head's calls on positions >= answer_start; units framed as VocalNet frames them."""
        import torch

        head = self.model.speech_generator
        sizes = [call[1][0].shape[1] - 1 for call in calls]  # last row: the text-eos embedding
        if sum(sizes) != len(self.ids):
            log.warning(
                "cs3-vocalnet: the speech head read %d positions for %d generated tokens; "
                "speaking the whole sequence (CoR prefix included)",
                sum(sizes),
                len(self.ids),
            )
            answer_start = 0
        self.speech_from = answer_start
        device = calls[0][1][0].device
        pieces = [torch.tensor([[self.model.config.speech_sos_token_id]], device=device)]
        ratios = []
        start = 0
        for (name, (hidden, *rest), kwargs), size in zip(calls, sizes):
            skip, start = max(0, answer_start - start), start + size
            if skip >= size:
                continue  # this segment is all CoR prefix
            if skip:
                hidden = torch.cat([hidden[:, skip:size], hidden[:, size:]], dim=1)
            units = getattr(head, name)(hidden, *rest, **kwargs)
            if isinstance(units, tuple):  # predict_mtp_speculative: (units, speed-up ratio)
                units, ratio = units[0], units[1]
                ratios.append(ratio)
            pieces.append(units[:, 1:-1])
        pieces.append(torch.tensor([[self.model.config.speech_eos_token_id]], device=device))
        return torch.cat(pieces, dim=1).contiguous(), ratios


class RecipeAdapter:
    """An enhancement-recipe adapter applied to a loaded ``VocalNetModel``."""

    def __init__(self, vocalnet: Any, adapter_dir: str) -> None:
        self.adapter_dir = adapter_dir
        recipe = recipe_adapter.read_recipe(adapter_dir)
        if recipe and recipe.get("backbone") != "vocalnet":
            log.warning(
                "cs3-vocalnet: adapter %s was trained on the %r backbone, not VocalNet: its LoRA "
                "loads onto VocalNet's LLM but it was trained behind another speech front-end",
                adapter_dir,
                recipe.get("backbone"),
            )
        self.transforms = recipe_adapter.adapter_transforms(adapter_dir)
        self.postprocess = recipe_adapter.response_postprocessor(adapter_dir)
        self.tokenizer = recipe_adapter.adapter_tokenizer(adapter_dir)
        vocalnet.model = recipe_adapter.apply_adapter(vocalnet.model, adapter_dir)
        self.generation: RecipeGeneration | None = None
        if self.tokenizer is not None:
            vocalnet.tokenizer = self.tokenizer  # VocalNet's own tokenizer does not know the recipe tokens
            answer_only = self.transforms.cor and answer_only_speech_supported(vocalnet.model)
            if (
                self.transforms.cor
                and getattr(vocalnet.model, "speech_generator", None) is not None
                and not answer_only
            ):
                log.warning(
                    "cs3-vocalnet: speech generator type %r: the speech will include the CoR prefix",
                    getattr(vocalnet.model.config, "speech_generator_type", None),
                )
            self.generation = RecipeGeneration(vocalnet.model, self.tokenizer, answer_only)
        self.last: Response | None = None

    def response(self, official_text: str) -> Response:
        """The last generation as a recipe Response (CoR prefix removed, KH stripped from ``.text``)."""
        if self.generation is not None and self.generation.ids is not None:
            generated = recipe_adapter.decode_keeping_recipe_tokens(self.tokenizer, self.generation.ids)
            self.generation.ids = None  # never reused for the next item
        else:
            if self.generation is not None:
                log.warning(
                    "cs3-vocalnet: no generated ids captured; using VocalNet's decoded text "
                    "(recipe tokens already dropped)"
                )
            generated = official_text
        self.last = self.postprocess(generated)
        return self.last


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
        if self.adapter:
            check_adapter_dir(self.adapter)
        module, cls = load_inference_class(infer_module, infer_class)
        vocoder = vocoder or os.environ.get(COSYVOICE_MODEL_ENV)
        if s2s and not vocoder:
            raise ValueError(
                f"cs3-vocalnet: speech output needs the CosyVoice2-0.5B dir: vocoder=DIR "
                f"or ${COSYVOICE_MODEL_ENV} (or s2s=false for text only)"
            )
        if prompt_speech:  # the official code reads its speaker prompt from this module global
            module.PROMPT_SPEECH = str(prompt_speech)
        options = {"s2s": s2s, "max_new_tokens": int(max_new_tokens), "temperature": float(temperature)}
        if vocoder:
            options["vocoder_path"] = str(vocoder)
        self.vocalnet = cls(self.pretrained, **options)
        self.vocalnet.__initilize__()  # (sic) the official method name: loads the LLM and the vocoder
        self.recipe = RecipeAdapter(self.vocalnet, self.adapter) if self.adapter else None
        if self.recipe is not None:
            log.info(
                "cs3-vocalnet: applied adapter %s (transforms: %s)", self.adapter, self.recipe.transforms.name
            )
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
            write_wav(query, self.query_audio(req, SAMPLE_RATE), SAMPLE_RATE)
            self.vocalnet.set_audio_dir(str(item_dir / "out"))
            result = self.vocalnet([{"role": "user", "content": "<speech>", "path": str(query)}])
            text = str(result.get("text") or "")
            if self.recipe is not None:
                text = self.recipe.response(text).text
            audio, rate = None, SAMPLE_RATE
            if self.s2s:
                if not result.get("audio") or not Path(result["audio"]).exists():
                    raise ItemError(
                        f"{req.task}/{req.qid}: VocalNet returned no speech file ({result.get('audio')})"
                    )
                audio, rate = sf.read(result["audio"], dtype="float32", always_2d=False)
                if audio.ndim == 2:
                    audio = audio.mean(axis=1)
            return SpeechReply(text=text, audio=audio, sample_rate=int(rate))
        except Exception as error:  # noqa: BLE001 - recorded for this item only
            return error
