"""The openai-whisper backend (the paper's ASR): one clip at a time."""

from __future__ import annotations

from pathlib import Path

from cs3_tasks.asr.config import DECODING, AsrModelError, max_new_tokens
from cs3_tasks.asr.gpu import encoder_probe


class OpenAIWhisperRunner:
    def __init__(self, model_name: str, device: str):
        try:
            import whisper  # lazy: importing openai-whisper pulls in torch
        except ImportError as exc:
            raise AsrModelError("openai-whisper is not installed: pip install openai-whisper") from exc
        path = Path(model_name).expanduser()
        if not path.is_file() and model_name not in whisper.available_models():
            raise AsrModelError(
                f"openai-whisper model {model_name!r} is neither a checkpoint file nor one of "
                f"{', '.join(whisper.available_models())}"
            )
        try:
            self.model = whisper.load_model(str(path) if path.is_file() else model_name, device=device)
        except Exception as exc:  # typically: no network to download the checkpoint
            raise AsrModelError(
                f"cannot load openai-whisper model {model_name!r} ({type(exc).__name__}: {exc}). "
                "On a machine without internet, download the checkpoint elsewhere "
                "(python -c \"import whisper; whisper.load_model('large-v3')\") and copy "
                "~/.cache/whisper/*.pt here, or pass the .pt path as the model."
            ) from exc
        self.fp16 = device.startswith("cuda")
        self.device = device

    def probe(self) -> dict[str, str]:
        """The encoder over one window of zeros on the model's device; the CUDA libraries it ran with."""
        import torch

        dims = self.model.dims
        dtype = torch.float16 if self.fp16 else torch.float32
        return encoder_probe(self.model.encoder, dims.n_mels, 2 * dims.n_audio_ctx, dtype, self.device)

    def transcribe(self, audio, language: str | None) -> tuple[str, str | None]:
        result = self.model.transcribe(
            audio,
            language=language,
            beam_size=DECODING.beam_size,
            temperature=DECODING.temperature,
            condition_on_previous_text=DECODING.condition_on_previous_text,
            fp16=self.fp16,
            sample_len=max_new_tokens(audio),
            verbose=None,
        )
        return str(result.get("text", "")), result.get("language") or language
