"""``cs3-openai-audio``: any OpenAI-compatible chat-completions endpoint with audio in and audio out.

GPT-4o audio models, or an omni model served by vLLM / SGLang with the OpenAI API. Each request
sends the query as an ``input_audio`` content part (base64 WAV, 16 kHz) plus the task's text
instruction, with ``modalities: ["text", "audio"]``; the reply's ``message.audio.data`` (base64
WAV) is the speech channel and ``message.content`` (else ``message.audio.transcript``) the text
channel.

    lm_eval --model cs3-openai-audio \
        --model_args base_url=https://api.openai.com/v1,model=gpt-4o-audio-preview,voice=alloy \
        --tasks cs3_knowledge

Requests run in a bounded thread pool (``max_concurrency``), each with a ``timeout`` and up to
``max_retries`` retries by the shared policy of ``cs3_tasks.chat_api`` (backoff from ``retry_wait``
seconds). An item that still fails is recorded for that item (see ``base.py``); the run continues.
"""

from __future__ import annotations

import base64
import io
import logging
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

import numpy as np
from lm_eval.api.registry import register_model

from cs3_tasks.audio import SAMPLE_RATE
from cs3_tasks.chat_api import RetryPolicy, chat, chat_url
from cs3_tasks.models.base import ItemError, Outcome, SpeechLM, SpeechReply, SpeechRequest, as_bool

log = logging.getLogger(__name__)


def wav_base64(audio: np.ndarray, sample_rate: int = SAMPLE_RATE) -> str:
    """16-bit PCM WAV, base64: the payload of an ``input_audio`` content part."""
    import soundfile as sf

    buffer = io.BytesIO()
    sf.write(buffer, np.clip(audio, -1.0, 1.0), sample_rate, format="WAV", subtype="PCM_16")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def build_messages(instruction: str, audio_b64: str, system_prompt: str | None) -> list[dict]:
    content: list[dict] = []
    if instruction.strip():
        content.append({"type": "text", "text": instruction})
    content.append({"type": "input_audio", "input_audio": {"data": audio_b64, "format": "wav"}})
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return messages + [{"role": "user", "content": content}]


def parse_reply(body: dict) -> SpeechReply:
    """choices[0].message -> SpeechReply; raises ItemError on a reply with neither text nor audio."""
    import soundfile as sf

    try:
        message = body["choices"][0]["message"]
    except (KeyError, IndexError, TypeError) as error:
        raise ItemError(
            f"malformed chat-completions reply (no choices[0].message): {str(body)[:300]}"
        ) from error
    audio_part = message.get("audio") or {}
    content = message.get("content")
    if isinstance(content, list):  # some servers return content parts
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    text = content if isinstance(content, str) and content.strip() else (audio_part.get("transcript") or "")
    audio, rate = None, SAMPLE_RATE
    if audio_part.get("data"):
        try:
            audio, rate = sf.read(
                io.BytesIO(base64.b64decode(audio_part["data"])), dtype="float32", always_2d=False
            )
        except Exception as error:
            raise ItemError(f"reply audio is not a decodable WAV: {error}") from error
        if audio.ndim == 2:
            audio = audio.mean(axis=1)
    if not text and audio is None:
        raise ItemError("reply has neither text nor audio")
    return SpeechReply(text=text, audio=audio, sample_rate=int(rate))


@register_model("cs3-openai-audio")
class OpenAIAudioLM(SpeechLM):
    model_name = "cs3-openai-audio"

    def __init__(
        self,
        model: str = "gpt-4o-audio-preview",
        base_url: str = "https://api.openai.com/v1",
        api_key_env: str = "OPENAI_API_KEY",
        voice: str = "alloy",
        system_prompt: str | None = None,
        send_instruction: bool = True,
        max_concurrency: int = 8,
        timeout: float = 120.0,
        max_retries: int = 3,
        retry_wait: float = 1.0,
        max_tokens: int | None = None,
        **kwargs: Any,
    ) -> None:
        self.model = str(model)
        super().__init__(**kwargs)
        self.url = chat_url(base_url)
        self.api_key_env = api_key_env
        self.voice = voice
        self.system_prompt = system_prompt or None
        self.send_instruction = as_bool(send_instruction)
        self.max_concurrency = max(1, int(max_concurrency))
        self.timeout = float(timeout)
        self.max_retries = max(0, int(max_retries))
        self.retry_wait = float(retry_wait)
        self.retry_policy = RetryPolicy(self.max_retries, backoff_initial=self.retry_wait, backoff_max=60.0)
        self.max_tokens = int(max_tokens) if max_tokens else None
        import requests

        self._session = requests.Session()  # pooled connections, shared by the worker threads
        if not os.environ.get(api_key_env):
            log.info("cs3-openai-audio: $%s is not set; sending requests without an API key", api_key_env)

    def label(self) -> str:
        return self.model

    def request_body(self, req: SpeechRequest) -> dict:
        audio = self.query_audio(req, SAMPLE_RATE)
        instruction = req.instruction if self.send_instruction else ""
        body: dict[str, Any] = {
            "model": self.model,
            "modalities": ["text", "audio"],
            "audio": {"voice": self.voice, "format": "wav"},
            "messages": build_messages(instruction, wav_base64(audio), self.system_prompt),
        }
        temperature = req.gen_kwargs.get("temperature")
        if temperature is not None:
            body["temperature"] = float(temperature)
        if self.max_tokens:
            body["max_tokens"] = self.max_tokens
        return body

    def ask(self, req: SpeechRequest) -> SpeechReply:
        body = self.request_body(req)  # bad query audio fails here, without a network call
        reply = parse_reply(
            chat(
                self.url,
                body,
                api_key=os.environ.get(self.api_key_env),
                timeout=self.timeout,
                policy=self.retry_policy,
                session=self._session,
            )
        )
        if reply.audio is None:
            log.warning(
                "cs3-openai-audio: %s/%s: reply has text but no audio (speech channel missing)",
                req.task,
                req.qid,
            )
        return reply

    def generate_batch(self, requests: Sequence[SpeechRequest]) -> list[Outcome]:
        outcomes: list[Outcome] = []
        for req in requests:
            try:
                outcomes.append(self.ask(req))
            except Exception as error:  # noqa: BLE001 - recorded for this item only
                outcomes.append(error)
        return outcomes

    def generate_all(
        self, requests: Sequence[SpeechRequest], done: Callable[[SpeechRequest, Outcome], None]
    ) -> None:
        # Each request is independent: a bounded thread pool keeps max_concurrency in flight.
        with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
            futures = {pool.submit(self.ask, req): req for req in requests}
            for future in as_completed(futures):
                error = future.exception()
                done(futures[future], error if error is not None else future.result())
