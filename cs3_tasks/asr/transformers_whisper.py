"""The transformers backend: Whisper through ``transformers.pipeline``, as the CS3-Bench authors run it."""

from __future__ import annotations

from collections.abc import Sequence

from cs3_tasks.asr.config import TRANSFORMERS_PAPER_MODEL, AsrModelError
from cs3_tasks.asr.gpu import encoder_probe
from cs3_tasks.core.audio import SAMPLE_RATE


class TransformersWhisperRunner:
    """Whisper through ``transformers.pipeline("automatic-speech-recognition")``, set up as the CS3-Bench
    authors' utils/whisper_asr.py does: fp16 on CUDA, fp32 on CPU, safetensors weights, the checkpoint's own
    generation config (no beam or token-cap settings of ours) and no forced language. Clips reach the
    pipeline at 16 kHz (resampled by cs3_tasks.core.audio; the pipeline would need torchaudio for that).

    The one limit of ours, `fit_to_context`: a decoder whose context is too small for the pipeline's default
    token budget gets a budget that fits (real Whisper checkpoints, 448 positions, are left as they are).
    ``transcribe_many`` hands the pipeline
    several clips at once (its ``batch_size``): on a GPU, where batching pays (benchmarks/gpu_asr.py).
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
        self.device = device
        fit_to_context(model.generation_config, getattr(model.config, "max_target_positions", None))
        self.pipe = pipeline(
            "automatic-speech-recognition",
            model=model,
            tokenizer=processor.tokenizer,
            feature_extractor=processor.feature_extractor,
            dtype=dtype,
            device=device,
        )

    def probe(self) -> dict[str, str]:
        """The encoder over one window of zeros on the model's device; the CUDA libraries it ran with."""
        config = self.pipe.model.config
        frames = 2 * config.max_source_positions  # the encoder halves the frames
        encoder = self.pipe.model.get_encoder()
        return encoder_probe(encoder, config.num_mel_bins, frames, self.dtype, self.device)

    def transcribe(self, audio, language: str | None) -> tuple[str, str | None]:
        # The pipeline reports no detected language unless asked to return segments, which changes the call
        # the authors make; the language is then unknown (None) unless it was given.
        result = self.pipe({"raw": audio, "sampling_rate": SAMPLE_RATE}, **_options(language))
        return str(result.get("text", "")), language

    def transcribe_many(self, audios: Sequence, language: str | None) -> list[tuple[str, str | None]]:
        """The same pipeline call over several clips at once (one batch of ``len(audios)``)."""
        inputs = [{"raw": audio, "sampling_rate": SAMPLE_RATE} for audio in audios]
        results = self.pipe(inputs, batch_size=len(inputs), **_options(language))
        return [(str(result.get("text", "")), language) for result in results]


# <|startoftranscript|><|lang|><|transcribe|><|notimestamps|>: the prompt of every decode
PROMPT_TOKENS = 4
# the new tokens some transformers releases' ASR pipeline asks for where the checkpoint sets no budget
PIPELINE_NEW_TOKENS = 256


def fit_to_context(generation, context: int | None) -> None:
    """Make ``generation`` (a GenerationConfig) ask for no more tokens than the decoder holds: where the
    pipeline's default budget (PIPELINE_NEW_TOKENS) plus the prompt exceeds ``context`` (or the checkpoint's
    own max_length), max_new_tokens is set to what fits; otherwise nothing changes. transformers refuses a
    budget beyond the context as a ValueError, one per clip (a tiny test checkpoint of 64 positions)."""
    if not context:
        return
    room = min(context, generation.max_length or context) - PROMPT_TOKENS
    if (generation.max_new_tokens or PIPELINE_NEW_TOKENS) > room:
        generation.max_new_tokens = max(1, room)


def _options(language: str | None) -> dict:
    return {"generate_kwargs": {"language": language}} if language else {}
