"""The paper's five other speech-to-speech models, each run by its official code in a worker process
(``cs3_tasks.models.worker``; the worker programs are ``cs3_tasks/models/workers/<model>.py``, whose
docstrings say which official entry points, prompts and decoding settings they use).

    lm_eval --model cs3-glm-4-voice --model_args python=/envs/glm4voice/bin/python,repo=/src/GLM-4-Voice,\\
        decoder=/ckpt/glm-4-voice-decoder --device cuda:0 --tasks cs3

model_args shared by all five: ``python`` (the model environment's interpreter; default: ours),
``pythonpath`` (extra import paths for the worker), ``in_process`` (run the worker code here),
``init_timeout`` / ``item_timeout`` (seconds), ``max_restarts``, and SpeechLM's ``output_dir``,
``batch_size``, ``resume``. Each model's own options are the keys of its worker's ``DEFAULTS``.
"""

from __future__ import annotations

from lm_eval.api.registry import register_model

from cs3_tasks.models.worker import WorkerLM


@register_model("cs3-glm-4-voice")
class GLM4VoiceLM(WorkerLM):
    model_name = "cs3-glm-4-voice"
    worker = "glm4_voice"


@register_model("cs3-kimi-audio")
class KimiAudioLM(WorkerLM):
    model_name = "cs3-kimi-audio"
    worker = "kimi_audio"


@register_model("cs3-minicpm-o")
class MiniCPMOLM(WorkerLM):
    model_name = "cs3-minicpm-o"
    worker = "minicpm_o"


@register_model("cs3-baichuan-omni")
class BaichuanOmniLM(WorkerLM):
    model_name = "cs3-baichuan-omni"
    worker = "baichuan_omni"

    def label(self) -> str:
        return "Baichuan-Omni-1.5" if not self.options.get("pretrained") else super().label()


@register_model("cs3-vita-audio")
class VitaAudioLM(WorkerLM):
    model_name = "cs3-vita-audio"
    worker = "vita_audio"
