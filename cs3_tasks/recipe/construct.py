"""Code-switching training data: Mandarin conversations -> Rewriter -> Checker -> TTS -> ASR round trip.

1. The first user turn of each conversation (moss-003-sft-data style JSON lines) is rewritten by the
   Rewriter LLM to embed English terms naturally (prompt ``prompts/recipe_rewriter.txt``);
2. the Checker LLM accepts or rejects the rewrite for naturalness and meaning
   (``prompts/recipe_checker.txt``). Both go through the judge module's OpenAI-compatible client
   (``judge.ask_batch``: sqlite cache, retries, concurrency), so a re-run asks nothing twice;
3. accepted rewrites are synthesized (content-cached like the benchmark build) and verified by the
   same TTS -> ASR round trip (``build.qc.qc_scores``: CER of the Chinese, recall of the English words).

Every candidate ends with a status; nothing is dropped silently: the report lists each one.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cs3_tasks import asr, judge
from cs3_tasks.asr import AsrConfig
from cs3_tasks.build import qc as build_qc
from cs3_tasks.build import synthesis as build
from cs3_tasks.core import audio
from cs3_tasks.core.cache import AudioCache
from cs3_tasks.judge import UnparseableReply
from cs3_tasks.recipe.transforms import surface_english_words

REWRITER_PROMPT = "recipe_rewriter"
CHECKER_PROMPT = "recipe_checker"
# statuses, in pipeline order; only "ok" items go to training
STATUSES = (
    "rewrite_error",
    "no_english",
    "check_error",
    "rejected",
    "tts_error",
    "asr_error",
    "qc_failed",
    "ok",
)

_MOSS_ROLE_PREFIX = re.compile(r"^\s*<\|(?:Human|MOSS)\|>\s*[:：]\s*")
_MOSS_END = re.compile(r"\s*<(?:eoh|eom|eoc|eot|eor)>\s*$")


class MossFormatError(ValueError):
    """An input line that is not a usable conversation; names the line and the cause."""


@dataclass(frozen=True)
class Conversation:
    id: str
    query: str  # first user turn (Mandarin)
    response: str  # the assistant's reply to it: the training target


@dataclass
class Candidate:
    """One conversation through the pipeline; ``status`` says how far it got and why it stopped."""

    id: str
    original: str
    response: str
    rewritten: str | None = None
    english_terms: list[str] = field(default_factory=list)
    check_reason: str | None = None
    status: str = "pending"
    error: str | None = None
    speech: str | None = None  # relative to the output dir
    transcript: str | None = None
    cer: float | None = None
    english_recall: float | None = None


# ---------------------------------------------------------------------------------------------
# input


def _clean_turn(text: str) -> str:
    return _MOSS_END.sub("", _MOSS_ROLE_PREFIX.sub("", text or "")).strip()


def parse_conversation(record: dict, where: str) -> Conversation:
    """The first (user, assistant) turn of a moss-003-sft-data record.

    Accepted shapes: moss-003 ``{"conversation_id", "chat": {"turn_1": {"Human", "MOSS"}, ...}}`` and
    ``{"conversation_id"|"id", "conversation": [{"human", "assistant"}, ...]}``.
    """
    cid = str(record.get("conversation_id", record.get("id", where)))
    if isinstance(record.get("chat"), dict) and record["chat"]:
        turns = sorted(record["chat"], key=lambda k: int(re.sub(r"\D", "", k) or 0))
        first = record["chat"][turns[0]]
        query, response = first.get("Human"), first.get("MOSS")
    elif isinstance(record.get("conversation"), list) and record["conversation"]:
        first = record["conversation"][0]
        query, response = first.get("human"), first.get("assistant")
    else:
        raise MossFormatError(f"{where} (id {cid}): no `chat` turns or `conversation` list")
    query, response = _clean_turn(query), _clean_turn(response)
    if not query or not response:
        raise MossFormatError(f"{where} (id {cid}): first turn has an empty user or assistant text")
    return Conversation(cid, query, response)


def read_conversations(path: str | os.PathLike, limit: int | None = None) -> list[Conversation]:
    """Conversations of a JSON-lines file; a bad line raises MossFormatError naming it."""
    out: list[Conversation] = []
    seen: set[str] = set()
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise MossFormatError(f"{where}: not JSON ({exc})") from exc
            conv = parse_conversation(record, where)
            if conv.id in seen:
                raise MossFormatError(f"{where}: duplicate conversation id {conv.id}")
            seen.add(conv.id)
            out.append(conv)
            if limit is not None and len(out) >= limit:
                break
    return out


# ---------------------------------------------------------------------------------------------
# LLM replies (strict parsers: an unparseable reply is re-asked, then recorded as an error)


def _json_object(reply: str) -> dict:

    match = re.search(r"\{.*\}", reply, re.DOTALL)
    if not match:
        raise UnparseableReply("no JSON object in the reply")
    try:
        obj = json.loads(match.group(0))
    except json.JSONDecodeError as exc:
        raise UnparseableReply(f"invalid JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise UnparseableReply("the JSON is not an object")
    return obj


def parse_rewrite(reply: str) -> dict:
    """{"rewritten": str, "english_terms": list[str]} from a Rewriter reply."""

    obj = _json_object(reply)
    rewritten = obj.get("rewritten")
    if not isinstance(rewritten, str) or not rewritten.strip():
        raise UnparseableReply("`rewritten` is missing or empty")
    terms = obj.get("english_terms") or []
    if not isinstance(terms, list) or not all(isinstance(t, str) for t in terms):
        raise UnparseableReply("`english_terms` is not a list of strings")
    return {"rewritten": rewritten.strip(), "english_terms": [t.strip() for t in terms if t.strip()]}


def parse_check(reply: str) -> dict:
    """{"accept": bool, "reason": str} from a Checker reply."""

    obj = _json_object(reply)
    accept = obj.get("accept")
    if isinstance(accept, str) and accept.strip().lower() in ("true", "false"):
        accept = accept.strip().lower() == "true"
    if not isinstance(accept, bool):
        raise UnparseableReply("`accept` is not true/false")
    return {"accept": accept, "reason": str(obj.get("reason", ""))}


def rewrite_and_check(
    conversations: Sequence[Conversation], rewriter, checker, *, progress: bool = False
) -> list[Candidate]:
    """Rewriter then Checker over all conversations (two batched, cached LLM passes)."""

    cands = [Candidate(c.id, c.query, c.response) for c in conversations]
    template = judge.load_prompt(REWRITER_PROMPT)
    rewrites = judge.ask_batch(
        [judge.render_prompt(template, query=c.original) for c in cands],
        parse_rewrite,
        rewriter,
        progress=progress,
        desc="rewriter",
    )
    to_check: list[Candidate] = []
    for cand, verdict in zip(cands, rewrites):
        if not verdict.ok:
            cand.status, cand.error = "rewrite_error", verdict.error
            continue
        cand.rewritten, cand.english_terms = verdict.value["rewritten"], verdict.value["english_terms"]
        if not surface_english_words(cand.rewritten):
            cand.status, cand.error = "no_english", "the rewrite contains no English word"
            continue
        to_check.append(cand)
    template = judge.load_prompt(CHECKER_PROMPT)
    checks = judge.ask_batch(
        [judge.render_prompt(template, original=c.original, rewritten=c.rewritten) for c in to_check],
        parse_check,
        checker,
        progress=progress,
        desc="checker",
    )
    for cand, verdict in zip(to_check, checks):
        if not verdict.ok:
            cand.status, cand.error = "check_error", verdict.error
        else:
            cand.check_reason = verdict.value["reason"]
            cand.status = "accepted" if verdict.value["accept"] else "rejected"
    return cands


# ---------------------------------------------------------------------------------------------
# speech: synthesis + ASR round trip


@dataclass
class SpeechSettings:
    tts_backend: str = "espeak"
    voice: str | None = None
    seed: int = 0
    asr: AsrConfig = field(default_factory=AsrConfig)
    max_cer: float | None = 0.2  # None: not checked
    min_english_recall: float | None = 0.8  # None: not checked
    progress: bool = False


def synthesize_and_verify(cands: Sequence[Candidate], out_dir: Path, settings: SpeechSettings) -> None:
    """Accepted candidates -> ``out_dir/audio/<id>.wav`` (16 kHz) and a QC status, in place."""

    cache = AudioCache(out_dir / ".cache" / "tts")
    (out_dir / "audio").mkdir(parents=True, exist_ok=True)
    spoken: list[tuple[Candidate, bytes]] = []
    for cand in cands:
        if cand.status != "accepted":
            continue
        job = build.SynthesisJob(
            "recipe",
            cand.id,
            cand.rewritten,
            settings.tts_backend,
            settings.voice,
            None,
            None,
            settings.seed,
            (),
        )
        try:
            flac, _ = build.synthesize_job(job, cache)
        except (RuntimeError, ValueError, OSError) as exc:  # TTSError/AudioError: recorded, others go on
            cand.status, cand.error = "tts_error", f"{type(exc).__name__}: {exc}"
            continue
        rel = f"audio/{_safe_name(cand.id)}.wav"
        audio.write_wav(out_dir / rel, audio.load_audio(flac))
        cand.speech = rel
        spoken.append((cand, flac))
    if not spoken:
        return
    heard = asr.transcribe_batch(
        [f for _, f in spoken],
        language="zh",
        asr=AsrConfig(
            model=settings.asr.model, backend=settings.asr.backend, short_clips=settings.asr.short_clips
        ),
        progress=settings.progress,
    )
    for (cand, _), transcript in zip(spoken, heard):
        if transcript.error is not None:
            cand.status, cand.error = "asr_error", transcript.error
            continue
        cand.transcript = transcript.text
        cand.cer, cand.english_recall = build_qc.qc_scores(cand.rewritten, transcript.text)
        reasons = []
        if settings.max_cer is not None and cand.cer is not None and cand.cer > settings.max_cer:
            reasons.append(f"CER {cand.cer:.2f} > {settings.max_cer}")
        if (
            settings.min_english_recall is not None
            and cand.english_recall is not None
            and cand.english_recall < settings.min_english_recall
        ):
            reasons.append(f"English recall {cand.english_recall:.2f} < {settings.min_english_recall}")
        cand.status, cand.error = ("qc_failed", "; ".join(reasons)) if reasons else ("ok", None)


def _safe_name(item_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", item_id)


def vocalnet_item(cand: Candidate, prefix: str = "cs") -> dict[str, Any]:
    """A VocalNet training item (id, speech, conversations) + ``query_text`` for CoR."""
    return {
        "id": f"{prefix}-{cand.id}",
        "speech": cand.speech,
        "conversations": [{"from": "human", "value": "<speech>"}, {"from": "gpt", "value": cand.response}],
        "query_text": cand.rewritten,
        "source": "code_switching",
    }


def status_counts(cands: Sequence[Candidate]) -> dict[str, int]:
    counts = Counter(c.status for c in cands)
    return {s: counts.get(s, 0) for s in STATUSES if counts.get(s)} | {"total": len(cands)}


def candidate_records(cands: Sequence[Candidate]) -> list[dict]:
    return [asdict(c) for c in cands]
