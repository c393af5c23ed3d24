"""Result dirs of the two demo systems, scored in seconds for the report tests: ``cs3-bench score
--outputs-root`` on the bundled demo responses with the ``fake_asr`` fixture and ``--no-judge``; and the
stand-in ASR's hearing, which the golden scoring test shares.

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

DEMO = Path(cli.__file__).resolve().parents[1] / "demo" / "responses"
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


def score_demo(fake_asr, out: Path) -> Path:
    """Score both demo systems into ``out`` (``out/<system>/`` + the leaderboard + ``out/report/``)."""
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
