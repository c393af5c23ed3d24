"""A loopback fake of an OpenAI-compatible chat-completions endpoint with audio in/out, for tests.

It checks the request shape (modalities, an ``input_audio`` part whose data is base64 of a readable
WAV), records every request, and replies with a 24 kHz sine WAV and a transcript echoing the text
instruction. Behaviour by instruction text, so a test can target single items:

- contains ``FAIL500ONCE``: the first request for that instruction gets HTTP 500, the next one is ok;
- contains ``ALWAYS500``: always HTTP 500 (a permanent failure);
- contains ``BADREQUEST``: HTTP 400 (not retryable).

Options: ``shape="vllm-omni"`` answers as vLLM-Omni does (text in choice 0, the audio in choice 1's
``message.audio``); ``input_part`` is the one audio part kind the server accepts (``input_audio`` or
``audio_url``, a base64 WAV data URL); ``die_after=N`` answers N requests, then drops every connection
and shuts down (a server that dies mid-run).

It also serves plain text chat completions (no ``modalities``): the reply echoes the last user text,
so the same server stands in for a text LLM.
"""

from __future__ import annotations

import base64
import io
import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import soundfile as sf

REPLY_RATE = 24_000


def sine_wav(seconds: float = 0.5, rate: int = REPLY_RATE) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    buffer = io.BytesIO()
    sf.write(buffer, (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), rate, format="WAV")
    return buffer.getvalue()


def spoken_wav(text: str) -> bytes:
    """``text`` spoken by espeak-ng (English voice) as WAV bytes: Whisper transcribes it quickly."""
    from cs3_tasks.build.tts import synthesize

    audio, rate = synthesize(text, voice="en-us")
    buffer = io.BytesIO()
    sf.write(buffer, audio, rate, format="WAV")
    return buffer.getvalue()


def _audio_data(part: dict) -> str:
    if part["type"] == "input_audio":
        assert part["input_audio"]["format"] == "wav"
        return part["input_audio"]["data"]
    url = part["audio_url"]["url"]
    assert url.startswith("data:audio/wav;base64,"), url[:40]
    return url.split(",", 1)[1]


class FakeAudioServer:
    def __init__(
        self,
        speak: bool = False,
        shape: str = "openai",
        input_part: str = "input_audio",
        die_after: int | None = None,
    ) -> None:
        self.speak = speak  # True: reply audio is espeak-ng speech, else a 440 Hz tone
        self.shape, self.input_part, self.die_after = shape, input_part, die_after
        self.answered = 0  # requests answered (with any status)
        self.dead = threading.Event()
        self.requests: list[dict] = []  # every JSON body received
        self.problems: list[str] = []  # request-shape problems found
        self.seen = Counter()  # instruction -> times seen
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if not self.dead.is_set():
            self.dead.set()
            self.httpd.shutdown()
            self.httpd.server_close()

    def check(self, body: dict) -> tuple[int, dict]:
        """(status, reply) for one request body."""
        messages = body.get("messages") or []
        user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
        if user is None:
            return 400, {"error": "no user message"}
        content = user["content"]
        parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
        text = " ".join(p.get("text", "") for p in parts if p.get("type") == "text")
        audio_parts = [p for p in parts if p.get("type") in ("input_audio", "audio_url")]
        with self.lock:
            self.seen[text] += 1
            first_time = self.seen[text] == 1
        if "modalities" not in body:  # a plain text LLM request
            return 200, {"choices": [{"message": {"role": "assistant", "content": f"answer to: {text}"}}]}
        problem = None
        if body.get("modalities") != ["text", "audio"]:
            problem = f"modalities is {body.get('modalities')!r}"
        elif len(audio_parts) != 1 or audio_parts[0]["type"] != self.input_part:
            problem = f"expected one {self.input_part} part, got {[p['type'] for p in audio_parts]}"
        else:
            try:
                raw = base64.b64decode(_audio_data(audio_parts[0]), validate=True)
                samples, _ = sf.read(io.BytesIO(raw))
                assert len(samples) > 0
            except Exception as error:  # noqa: BLE001 - any decoding problem is a shape problem
                problem = f"{self.input_part} is not base64 WAV: {error}"
        if problem:
            with self.lock:
                self.problems.append(problem)
            return 400, {"error": problem}
        if "BADREQUEST" in text:
            return 400, {"error": "bad request (test)"}
        if "ALWAYS500" in text or ("FAIL500ONCE" in text and first_time):
            return 500, {"error": "server error (test)"}
        transcript = f"spoken: {text}"
        wav = spoken_wav("The answer is Salt Lake City.") if self.speak else sine_wav()
        audio = {"id": "a1", "data": base64.b64encode(wav).decode(), "transcript": transcript}
        if self.shape == "vllm-omni":  # text and speech in two choices; no transcript on the audio
            audio.pop("transcript")
            return 200, {
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": transcript}},
                    {"index": 1, "message": {"role": "assistant", "content": "", "audio": audio}},
                ]
            }
        return 200, {"choices": [{"message": {"role": "assistant", "content": None, "audio": audio}}]}

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with server.lock:
                    dying = server.die_after is not None and server.answered >= server.die_after
                    server.answered += 1
                if dying:  # drop the connection unanswered, and stop listening
                    self.close_connection = True
                    threading.Thread(target=server.stop, daemon=True).start()
                    return
                with server.lock:
                    server.requests.append(body)
                status, reply = server.check(body)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # keep pytest output clean
                pass

        return Handler
