"""Chain of Recognition (CoR) and Keyword Highlighting (KH): pure string transforms of training targets.

CoR: the target starts with the English content recognised in the spoken query (at most four words)
and a separator token; the model thus "says back" the English it heard before answering. At inference
the prefix is generated and removed before the answer is used.

KH: English keywords of the target are wrapped in indicator tokens. The text channel the user reads
has them stripped; the speech generator receives the highlighted text (so it can treat those words
as English to pronounce).

The paper (CS3-Bench, arXiv 2510.07881, Table on VocalNet-ML knowledge accuracy) reports
26.24 (base) -> 41.99 (+data) -> 43.37 (+CoR) / 46.13 (+KH), and CoR+KH together worse than either
alone; combining them is allowed here but warned about.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass

COR_SEPARATOR = "<|cor_sep|>"
KH_START = "<|kw_start|>"
KH_END = "<|kw_end|>"
SPECIAL_TOKENS: tuple[str, ...] = (COR_SEPARATOR, KH_START, KH_END)
COR_MAX_WORDS = 4

COMBINED_WARNING = (
    "CoR and KH are both enabled. The CS3-Bench paper (arXiv 2510.07881) reports that combining them is "
    "worse than either alone on VocalNet-ML knowledge accuracy (26.24 base -> 41.99 with data -> 43.37 "
    "with CoR / 46.13 with KH; CoR+KH below both). Proceeding as asked."
)

# A surface Latin word as written ("Taurus", "5G", "AT&T", "U.S.", "e-mail", "don't"). Surface forms,
# not text.english_words' normalised ones: the prefix and the highlights must reproduce the input text.
_LATIN_WORD = r"[0-9]*[A-Za-z][A-Za-z0-9]*(?:[-'\u2019.&][A-Za-z0-9]+)*\.?"
_LATIN_SPAN = re.compile(rf"{_LATIN_WORD}(?:[ \t]+{_LATIN_WORD})*")


def english_spans(text: str) -> list[tuple[int, int]]:
    """Character offsets (start, end) of the maximal runs of Latin words in ``text``, in order."""
    return [(m.start(), m.end()) for m in _LATIN_SPAN.finditer(text)]


def surface_english_words(text: str) -> list[str]:
    """English words of ``text`` as written (case and punctuation inside words kept), in order."""
    return [w for s, e in english_spans(text) for w in text[s:e].split()]


# ---------------------------------------------------------------------------------------------
# Chain of Recognition


def cor_prefix(query: str, max_words: int = COR_MAX_WORDS) -> str:
    """The English content of the query the model should recognise first: its first ``max_words`` words."""
    return " ".join(surface_english_words(query)[:max_words])


def apply_cor(query: str, target: str, max_words: int = COR_MAX_WORDS) -> str:
    """``target`` prefixed by the query's English words and the separator.

    The separator is emitted even when the query has no English (empty prefix), so that the model
    always produces the same shape and removal at inference is unambiguous.
    """
    if COR_SEPARATOR in target:
        raise ValueError(f"target already contains the CoR separator {COR_SEPARATOR!r}: {target[:80]!r}")
    return f"{cor_prefix(query, max_words)}{COR_SEPARATOR}{target}"


def split_cor(generated: str) -> tuple[str | None, str]:
    """(recognised prefix, answer) of a generated CoR response.

    The prefix is None when the model did not emit the separator; the whole text is then the answer
    (a model that skipped the chain still answered).
    """
    head, sep, tail = generated.partition(COR_SEPARATOR)
    if not sep:
        return None, generated
    return head.strip(), tail.lstrip()


def remove_cor(generated: str) -> str:
    """The answer part of a generated CoR response (the prefix and separator removed)."""
    return split_cor(generated)[1]


# ---------------------------------------------------------------------------------------------
# Keyword Highlighting


def apply_kh(target: str, keywords: Iterable[str] | None = None) -> str:
    """``target`` with its English keywords wrapped in KH_START ... KH_END.

    Without ``keywords`` every maximal run of English words is a keyword (in code-switched Mandarin
    the English runs are the terms). With ``keywords`` only runs sharing a word with one of them
    (case-insensitive) are highlighted.
    """
    if KH_START in target or KH_END in target:
        raise ValueError(f"target already contains KH indicator tokens: {target[:80]!r}")
    wanted = None
    if keywords is not None:
        wanted = {w.lower() for k in keywords for w in surface_english_words(k)}
    pieces: list[str] = []
    last = 0
    for start, end in english_spans(target):
        span = target[start:end]
        if wanted is not None and not {w.lower() for w in span.split()} & wanted:
            continue
        pieces += [target[last:start], KH_START, span, KH_END]
        last = end
    pieces.append(target[last:])
    return "".join(pieces)


def strip_kh(text: str) -> str:
    """The user-facing text: KH indicator tokens removed."""
    return text.replace(KH_START, "").replace(KH_END, "")


def highlighted_keywords(text: str) -> list[str]:
    """The keywords wrapped in indicator tokens, in order."""
    return re.findall(re.escape(KH_START) + "(.*?)" + re.escape(KH_END), text)


# ---------------------------------------------------------------------------------------------
# Both, as used by the dataset and at inference


@dataclass(frozen=True)
class TransformConfig:
    cor: bool = False
    kh: bool = False
    cor_max_words: int = COR_MAX_WORDS

    def __post_init__(self) -> None:
        if self.cor and self.kh:
            warnings.warn(COMBINED_WARNING, UserWarning, stacklevel=3)

    @property
    def name(self) -> str:
        return "+".join([n for n, on in (("cor", self.cor), ("kh", self.kh)) if on]) or "none"


def transform_target(query_text: str | None, target: str, config: TransformConfig) -> str:
    """The training target under ``config``: KH applied to the answer, then the CoR prefix."""
    out = apply_kh(target) if config.kh else target
    if config.cor:
        out = apply_cor(query_text or "", out, config.cor_max_words)
    return out


@dataclass(frozen=True)
class Response:
    text: str  # what the user reads: CoR prefix removed, KH tokens stripped
    speech_text: str  # what the speech generator receives: CoR prefix removed, KH kept
    recognised: str | None  # the generated CoR prefix (None: CoR off, or no separator generated)


def postprocess(generated: str, config: TransformConfig) -> Response:
    """Split a generated response into its user text and its speech-generator text."""
    recognised, answer = split_cor(generated) if config.cor else (None, generated)
    # Stray separators (CoR off, or a second one) never reach the user.
    answer = answer.replace(COR_SEPARATOR, "")
    return Response(text=strip_kh(answer).strip(), speech_text=answer.strip(), recognised=recognised)
