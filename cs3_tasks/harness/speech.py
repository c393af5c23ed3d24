"""The speech-response protocol between cs3 model wrappers and the cs3 lm-eval tasks.

lm-eval models return one string per request. A speech-to-speech wrapper saves the waveform it spoke
under its run's output directory (``<output_dir>/<task>/<Qid>.wav``, see ``speech_output_path``) and
returns ``encode_response(text, audio_path)``: a one-line JSON object that carries both channels::

    {"cs3_speech_response": 1, "text": "盐湖城 Salt Lake City", "audio": "/abs/out/cs3_knowledge/q-000.wav"}

The task filters call ``decode_response``; any other string is a plain text-only response
(``audio`` None), so every lm-eval text model (``hf``, ``local-chat-completions``...) works unchanged
and its speech-channel metrics are reported as not applicable.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

MARKER = "cs3_speech_response"
PROTOCOL_VERSION = 1


@dataclass(frozen=True)
class SpeechPayload:
    """A decoded response: the text channel, the spoken waveform's path, and an input problem if any."""

    text: str | None  # None: the producer had no text response (e.g. an empty answer)
    audio: str | None
    problem: str | None = None  # e.g. cs3-precomputed: "no output for this Qid"


def encode_response(
    text: str | None, audio_path: str | os.PathLike | None, *, problem: str | None = None
) -> str:
    """One string carrying the text channel and the path of the spoken waveform (None: no speech).

    ``problem`` lets a wrapper say why an item has no usable output (it lands in the item's record).
    """
    audio = None if audio_path is None else str(Path(audio_path).expanduser().resolve())
    payload = {MARKER: PROTOCOL_VERSION, "text": text, "audio": audio}
    if problem:
        payload["problem"] = str(problem)
    return json.dumps(payload, ensure_ascii=False)


def decode_payload(response: str | None) -> SpeechPayload:
    """The full decoded response; a plain string is a text-only response."""
    if response is None:
        return SpeechPayload("", None, "no response")
    if not isinstance(response, str):
        raise TypeError(f"a model response must be a string, got {type(response).__name__}")
    stripped = response.strip()
    # cheap test first: most text-model answers are not JSON at all
    if stripped.startswith("{") and MARKER in stripped:
        try:
            payload = json.loads(stripped)
        except json.JSONDecodeError:
            return SpeechPayload(response, None)
        if isinstance(payload, dict) and MARKER in payload:
            audio = payload.get("audio")
            text = payload.get("text")
            return SpeechPayload(
                None if text is None else str(text),
                str(audio) if audio else None,
                payload.get("problem") or None,
            )
    return SpeechPayload(response, None)


def decode_response(response: str | None) -> tuple[str, str | None]:
    """(text, audio_path | None) of a model response; a plain string is a text-only response."""
    payload = decode_payload(response)
    return payload.text or "", payload.audio


def is_speech_response(response: str | None) -> bool:
    """True when ``response`` was made by ``encode_response`` (whether or not it holds audio)."""
    if not isinstance(response, str) or MARKER not in response:
        return False
    try:
        payload = json.loads(response.strip())
    except json.JSONDecodeError:
        return False
    return isinstance(payload, dict) and MARKER in payload


def speech_output_path(output_dir: str | os.PathLike, task: str, qid: str, suffix: str = ".wav") -> Path:
    """Where a wrapper saves the waveform it spoke for one item: ``<output_dir>/<task>/<Qid><suffix>``."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(qid)).strip("._") or "item"
    return Path(output_dir) / task / f"{safe}{suffix}"
