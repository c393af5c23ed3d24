"""The transformers backend: Whisper through ``transformers.pipeline``, as the CS3-Bench authors run it."""

from __future__ import annotations

from cs3_tasks.asr.config import TRANSFORMERS_PAPER_MODEL, AsrModelError
from cs3_tasks.core.audio import SAMPLE_RATE


class TransformersWhisperRunner:
    """Whisper through ``transformers.pipeline("automatic-speech-recognition")``, set up as the CS3-Bench
    authors' utils/whisper_asr.py does: fp16 on CUDA, fp32 on CPU, safetensors weights, the checkpoint's own
    generation config (no beam or token-cap settings of ours) and no forced language. Clips reach the
    pipeline at 16 kHz (resampled by cs3_tasks.core.audio; the pipeline would need torchaudio for that).
    """

    def __init__(self, model_name: str, device: str):
        try:
            import torch
            from transformers import AutoModelForSpeechSeq2Seq, AutoProcessor, pipeline
        except ImportError as exc:
            raise AsrModelError(
                "the transformers ASR backend needs torch and transformers installed"
            ) from exc
        dtype = torch.float16 if device.startswith("cuda") else torch.float32
        try:
            model = AutoModelForSpeechSeq2Seq.from_pretrained(
                model_name, dtype=dtype, low_cpu_mem_usage=True, use_safetensors=True
            )
            model.to(device)
            processor = AutoProcessor.from_pretrained(model_name)
        except Exception as exc:  # typically: no network to reach the Hub, or not a Whisper checkpoint
            raise AsrModelError(
                f"cannot load transformers Whisper model {model_name!r} ({type(exc).__name__}: {exc}). "
                "Pass a local model directory, or download it where the Hub is reachable "
                f"(huggingface-cli download {TRANSFORMERS_PAPER_MODEL}) and copy the Hugging Face cache here."
            ) from exc
        self.dtype = dtype
        self.pipe = pipeline(
            "automatic-speech-recognition",
            model=model,
            tokenizer=processor.tokenizer,
            feature_extractor=processor.feature_extractor,
            dtype=dtype,
            device=device,
        )

    def transcribe(self, audio, language: str | None) -> tuple[str, str | None]:
        # The pipeline reports no detected language unless asked to return segments, which changes the call
        # the authors make; the language is then unknown (None) unless it was given.
        options = {"generate_kwargs": {"language": language}} if language else {}
        result = self.pipe({"raw": audio, "sampling_rate": SAMPLE_RATE}, **options)
        return str(result.get("text", "")), language
