"""``cs3-openai-audio``: any OpenAI-compatible chat-completions endpoint with audio in and audio out.

GPT-4o audio models, or an omni model served by vLLM / SGLang with the OpenAI API. Each request
sends the query as an ``input_audio`` content part (base64 WAV, 16 kHz) plus the task's text
instruction, with ``modalities: ["text", "audio"]``; the reply's ``message.audio.data`` (base64
WAV) is the speech channel and ``message.content`` (else ``message.audio.transcript``) the text
channel.

    lm_eval --model cs3-openai-audio \
        --model_args base_url=https://api.openai.com/v1,model=gpt-4o-audio-preview,voice=alloy \
        --tasks cs3_knowledge

vLLM-Omni (``vllm serve Qwen/Qwen2.5-Omni-7B --omni``) answers in two choices: the text in one, the
spoken answer in another's ``message.audio.data``; every choice is read (``reply_parts``). Its audio input
may also be an ``audio_url`` data URL part (``input_part=audio_url``; default ``input_audio``).
``base_url`` may list several servers separated by ``;`` (``"http://h1:8000/v1;http://h2:8000/v1"``):
requests go round robin, and a request that fails on one server (connection error, timeout, retryable
HTTP status) is sent to the next (``ServerRotation``).

Requests run in a bounded thread pool (``max_concurrency``), each with a ``timeout`` and up to
``max_retries`` retries by the shared policy of ``cs3_tasks.core.chat_api`` (backoff from ``retry_wait``
seconds). An item that still fails is recorded for that item (see ``base.py``); the run continues.
"""

from __future__ import annotations

import base64
import io
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

import numpy as np
from lm_eval.api.registry import register_model

from cs3_tasks.core.audio import SAMPLE_RATE
from cs3_tasks.core.chat_api import EndpointError, RetryPolicy, chat, chat_url
from cs3_tasks.models.base import (
    ItemError,
    Outcome,
    SpeechLM,
    SpeechReply,
    SpeechRequest,
    as_bool,
    generation,
)

log = logging.getLogger(__name__)


def wav_base64(audio: np.ndarray, sample_rate: int = SAMPLE_RATE) -> str:
    """16-bit PCM WAV, base64: the payload of an ``input_audio`` content part."""
    import soundfile as sf

    buffer = io.BytesIO()
    sf.write(buffer, np.clip(audio, -1.0, 1.0), sample_rate, format="WAV", subtype="PCM_16")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


INPUT_PARTS = ("input_audio", "audio_url")


def audio_content_part(audio_b64: str, input_part: str = "input_audio") -> dict:
    """The query audio as a chat content part: OpenAI's ``input_audio`` or an ``audio_url`` data URL
    (vLLM and vLLM-Omni take both)."""
    if input_part == "input_audio":
        return {"type": "input_audio", "input_audio": {"data": audio_b64, "format": "wav"}}
    if input_part == "audio_url":
        return {"type": "audio_url", "audio_url": {"url": f"data:audio/wav;base64,{audio_b64}"}}
    raise ValueError(f"unknown input_part {input_part!r}; choose from {list(INPUT_PARTS)}")


def build_messages(
    instruction: str, audio_b64: str, system_prompt: str | None, input_part: str = "input_audio"
) -> list[dict]:
    content: list[dict] = []
    if instruction.strip():
        content.append({"type": "text", "text": instruction})
    content.append(audio_content_part(audio_b64, input_part))
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return messages + [{"role": "user", "content": content}]


def reply_parts(body: dict) -> tuple[str, dict]:
    """(text, audio part) of a chat-completions reply in either shape.

    OpenAI: one choice whose message has ``content`` (or ``audio.transcript``) and ``audio``. vLLM-Omni:
    the text in one choice and ``message.audio`` in another. The text is the first non-empty ``content``
    of any choice, else the first audio transcript; the audio part is the first ``message.audio`` that
    carries ``data``. Raises ItemError when there is no choice with a message."""
    choices = body.get("choices") if isinstance(body, dict) else None
    messages = [
        c["message"] for c in choices or [] if isinstance(c, dict) and isinstance(c.get("message"), dict)
    ]
    if not messages:
        raise ItemError(f"malformed chat-completions reply (no choices[].message): {str(body)[:300]}")
    texts = [_content_text(m.get("content")) for m in messages]
    audio_parts = [m["audio"] for m in messages if isinstance(m.get("audio"), dict)]
    with_data = [part for part in audio_parts if part.get("data")]
    transcripts = [part.get("transcript") for part in audio_parts if part.get("transcript")]
    text = next((t for t in texts if t.strip()), None) or (transcripts[0] if transcripts else "")
    return text, (with_data[0] if with_data else {})


def _content_text(content: Any) -> str:
    if isinstance(content, list):  # some servers return content parts
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def parse_reply(body: dict) -> SpeechReply:
    """A chat-completions reply (either shape, see ``reply_parts``) -> SpeechReply; raises ItemError on a
    reply with neither text nor audio."""
    import soundfile as sf

    text, audio_part = reply_parts(body)
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


class ServerRotation:
    """Several servers of one model: each request starts at the next server (round robin) and fails
    over to the others in turn. Thread-safe."""

    def __init__(self, base_urls: str | Sequence[str]) -> None:
        self.urls = [chat_url(url) for url in split_base_urls(base_urls)]
        if not self.urls:
            raise ValueError("no server URL given (base_url)")
        self._turn = itertools.count()
        self._lock = threading.Lock()

    def order(self) -> list[str]:
        """Every server once, starting at this request's turn."""
        with self._lock:
            start = next(self._turn) % len(self.urls)
        return self.urls[start:] + self.urls[:start]

    def send(self, post: Callable[[str], dict], rounds: int = 1, wait: float = 0.0) -> dict:
        """``post(url)`` on the servers of ``order()`` until one answers; a non-retryable EndpointError
        (e.g. HTTP 400: the request itself is wrong) is raised at once. Up to ``rounds`` passes over the
        servers, ``wait * 2**k`` seconds apart; the last failure is raised."""
        order = self.order()
        last: EndpointError | None = None
        for attempt in range(max(1, rounds)):
            if attempt:
                time.sleep(min(60.0, wait * 2 ** (attempt - 1)))
            for url in order:
                try:
                    return post(url)
                except EndpointError as error:
                    if not error.retryable:
                        raise
                    log.warning("%s failed (%s); trying the next server", url, error)
                    last = error
        assert last is not None
        raise last


def split_base_urls(base_urls: str | Sequence[str]) -> list[str]:
    """``"http://h1/v1;http://h2/v1"`` (model_args cannot hold commas) or a list -> the URLs."""
    parts = base_urls.split(";") if isinstance(base_urls, str) else list(base_urls)
    return [str(part).strip() for part in parts if str(part).strip()]


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
        input_part: str = "input_audio",
        **kwargs: Any,
    ) -> None:
        self.model = str(model)
        super().__init__(**kwargs)
        self.servers = ServerRotation(base_url)
        self.url = self.servers.urls[0]
        if input_part not in INPUT_PARTS:
            raise ValueError(
                f"cs3-openai-audio: input_part must be one of {list(INPUT_PARTS)}, not {input_part!r}"
            )
        self.input_part = input_part
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
            "messages": build_messages(instruction, wav_base64(audio), self.system_prompt, self.input_part),
        }
        # lm-eval's gen_kwargs: greedy unless do_sample, stop strings as `stop`. Its max_gen_toks is not
        # sent: an audio reply's tokens count against max_tokens (model_arg max_tokens sets it)
        gen = generation(req.gen_kwargs)
        body["temperature"] = gen.temperature
        if gen.until:
            body["stop"] = list(gen.until)
        if self.max_tokens:
            body["max_tokens"] = self.max_tokens
        return body

    def ask(self, req: SpeechRequest) -> SpeechReply:
        body = self.request_body(req)  # bad query audio fails here, without a network call
        reply = parse_reply(self.post(body))
        if reply.audio is None:
            log.warning(
                "cs3-openai-audio: %s/%s: reply has text but no audio (speech channel missing)",
                req.task,
                req.qid,
            )
        return reply

    def post(self, body: dict) -> dict:
        """One server: the shared retry policy. Several: one try per server, up to max_retries+1 passes."""
        several = len(self.servers.urls) > 1
        policy = RetryPolicy(0, self.retry_wait, 60.0) if several else self.retry_policy

        def post_to(url: str) -> dict:
            return chat(
                url,
                body,
                api_key=os.environ.get(self.api_key_env),
                timeout=self.timeout,
                policy=policy,
                session=self._session,
            )

        return self.servers.send(post_to, rounds=self.max_retries + 1 if several else 1, wait=self.retry_wait)

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
