"""cs3_tasks.core.english_normalizer gives openai-whisper's normalised text without importing torch.

The comparison imports ``whisper.normalizers`` the ordinary way (torch included), so this file takes ~10 s;
the pure text and metric tests do not pay for it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from shared_data import CS3_SOURCE as CS3BENCH
from shared_data import need

from cs3_tasks.core.english_normalizer import basic_normalizer, english_normalizer
from cs3_tasks.core.scripts import CJK_CLASS

ROOT = Path(__file__).resolve().parents[1]
DEMO_RESPONSES = ROOT / "cs3_tasks" / "demo" / "responses"
_CJK_RUN = re.compile(f"[{CJK_CLASS}]+")
# What the torch-free copy is checked against beyond the data: every rule family of the normaliser.
HAND_CASES = [
    "I can't colour twenty-one self-attention models, 'cause they're kinda sorta dunno.",
    "The main cause was $20 million in the 1960s; one oh one; 3.5%; two and a half.",
    "Mr. Smith's café: naïve résumé [laughs] (aside) hmm uh um",
    "",
]


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def _cs3bench_english() -> list[str]:
    """Every Answer/Answer_en string of the three source files, and the non-CJK spans of every question."""
    texts: list[str] = []
    for path in sorted(CS3BENCH.glob("cs_*.json")):
        for row in json.loads(path.read_text(encoding="utf-8")):
            texts += _strings(row.get("Answer")) + _strings(row.get("Answer_en"))
            for field in ("Question", "Question_en", "Question_zh"):
                for question in _strings(row.get(field)):
                    texts += [span for span in _CJK_RUN.split(question) if span.strip()]
    return texts


def _demo_responses() -> list[str]:
    texts = []
    for path in sorted(DEMO_RESPONSES.glob("*/*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                texts += _strings(json.loads(line).get("text"))
    return texts


def _assert_same_as_whisper(texts: list[str]) -> None:
    from whisper.normalizers import BasicTextNormalizer, EnglishTextNormalizer  # imports torch

    theirs_en, theirs_basic = EnglishTextNormalizer(), BasicTextNormalizer(remove_diacritics=True)
    ours_en, ours_basic = english_normalizer(), basic_normalizer()
    differ = [t for t in texts if ours_en(t) != theirs_en(t) or ours_basic(t) != theirs_basic(t)]
    assert not differ, f"{len(differ)} of {len(texts)} texts normalise differently, e.g. {differ[:3]}"


@pytest.mark.slow
@pytest.mark.shared
def test_equals_whisper_on_every_english_answer_of_cs3bench():
    need(CS3BENCH)
    texts = _cs3bench_english()
    assert len(texts) > 900, f"only {len(texts)} English texts read from {CS3BENCH}"
    _assert_same_as_whisper(texts + HAND_CASES)


def test_equals_whisper_on_the_demo_responses():
    texts = _demo_responses()
    assert len(texts) > 100, f"only {len(texts)} demo responses read from {DEMO_RESPONSES}"
    _assert_same_as_whisper(texts + HAND_CASES)


def test_normalising_imports_no_torch():
    code = (
        "import sys\n"
        "from cs3_tasks.core import metrics, text\n"
        "assert text.english_words(\"I can't colour twenty-one 自注意力\") == ['i', 'can', 'not', 'color']\n"
        "from cs3_tasks.core.english_normalizer import basic_normalizer\n"
        "assert basic_normalizer()('Naïve Résumé!') == 'naive resume '\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith(('torch.', 'whisper'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout
