"""Result dirs of the two demo systems, scored in seconds for the report tests: ``cs3-bench score
--outputs-root`` on the bundled demo responses with the ``fake_asr`` fixture and ``--no-judge``; and the
stand-in ASR's hearing, which the golden scoring test shares; or the pinned engine's own hearing
(`pinned_texts`, from tests/golden/asr_transcripts.json), for the README's screenshot.

The stand-in ASR hears each clip as the demo text of its response, with the English words dropped from every
third clip (by content hash), so that the speech channel loses some items the text channel got right.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from cs3_tasks import cli
from cs3_tasks.core.audio import content_hash
from cs3_tasks.scoring.records import ASR_LANGUAGE_HINT

DEMO = Path(cli.__file__).resolve().parents[1] / "demo" / "responses"
GOLDEN_TRANSCRIPTS = Path(__file__).resolve().parent / "golden" / "asr_transcripts.json"
ENGLISH = re.compile(r"[A-Za-z][A-Za-z'\-]*")


def heard_texts() -> dict[str, str]:
    """content hash of each demo clip -> what the stand-in ASR hears."""
    heard = {}
    for jsonl in sorted(DEMO.glob("*/*.jsonl")):
        for line in jsonl.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if not row.get("audio"):
                continue
            key = content_hash(str(jsonl.parent / row["audio"]))
            text = row.get("text") or ""
            drop = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % 3 == 0
            heard[key] = ENGLISH.sub("", text) if drop else text
    return heard


def pinned_texts() -> dict[tuple[str, str | None], str]:
    """(content hash, language hint) of each demo clip -> what the pinned ASR engine hears, as the golden
    file of its demo transcripts holds it (tests/test_reproducible.py checks that file against the engine)."""
    golden = json.loads(GOLDEN_TRANSCRIPTS.read_text(encoding="utf-8"))["demo"]
    heard = {}
    for key, transcript in golden.items():
        system, set_name, qid = key.split("/", 2)
        rows = (DEMO / system / f"{set_name}.jsonl").read_text(encoding="utf-8").splitlines()
        (audio,) = [row["audio"] for row in map(json.loads, rows) if row["Qid"] == qid]
        heard[(content_hash(str(DEMO / system / audio)), ASR_LANGUAGE_HINT[set_name])] = transcript
    return heard


def score_demo(fake_asr, out: Path, *, pinned: bool = False) -> Path:
    """Score both demo systems into ``out`` (``out/<system>/`` + the leaderboard + ``out/report/``), heard
    by the stand-in ASR, or (``pinned``) as the pinned engine hears them."""
    if pinned:
        by_clip = pinned_texts()
        fake_asr(lambda audio, language: by_clip.get((content_hash(audio), language), "<unknown clip>"))
    else:
        heard = heard_texts()
        fake_asr(lambda audio, language: heard.get(content_hash(audio), "<unknown clip>"))
    argv = ["score", "--outputs-root", str(DEMO), "--out", str(out), "--dataset", "demo", "--set", "all"]
    argv += ["--asr-model", "fake-asr", "--protocol", "cs3", "--no-judge", "--no-progress"]
    assert cli.main(argv) == 0
    return out


def read_items(report: Path) -> dict:
    """The JSON the report's items.js holds."""
    text = (report / "items.js").read_text(encoding="utf-8").strip()
    prefix = "window.CS3_ITEMS=JSON.parse("
    assert text.startswith(prefix) and text.endswith(");")
    return json.loads(json.loads(text[len(prefix) : -2]))
