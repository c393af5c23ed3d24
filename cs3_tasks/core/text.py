"""Normalisation and language tagging of mixed text (Mandarin-English by default; any language pair).

Every comparison in the benchmark (keyword matching, PSR, WER, MER, CER, language selection) goes through
this module, so that a model's text response and the ASR transcript of its speech are seen the same way.

Definitions used throughout:

* **CJK character**: a Han ideograph (CJK Unified Ideographs, Extension A and beyond, compatibility
  ideographs, and 〇), after NFKC and OpenCC traditional->simplified conversion. Whisper often prints
  traditional characters; converting both sides to simplified means that is never penalised.
* **English word**: a whitespace token of the Whisper English normaliser's output that contains a Latin
  letter a-z. The normaliser is applied separately to each maximal non-CJK span of the text (so it never
  sees CJK), after brackets are turned into spaces (the Whisper normaliser deletes bracketed text, and
  models often write "自注意力（self-attention）"). It lowercases, expands contractions, removes
  diacritics, spells British spellings the American way and writes numbers as digits
  ("twenty-one" -> "21").
* **Digits**: a normalised token without a Latin letter but with a digit ("21", "3.5", "50%", "$5") is a
  *number*: it is neither an English word nor a CJK character. Numbers are their own ("num") pieces in
  `segments`, are kept as tokens in `mixed_tokens`, and count for neither language in
  `dominant_language`. Chinese numerals (二十一) are CJK characters like any other.
* Anything else (punctuation, symbols, emoji, other scripts such as kana, hangul or Cyrillic) is dropped.

Language pairs: every function that depends on the languages takes an optional ``pair`` (a
`cs3_tasks.core.languages.LanguagePair` or its name). Without one it behaves as the ``zh-en`` pair of
CS3-Bench
(``cs3_tasks/core/language_pairs/zh-en.yaml``), exactly as described above. With another pair, "CJK
character" reads
"character of the pair's matrix script" (for ``tokens: word`` pairs such as Korean, a whitespace word of
that script is one token and spaces are kept), "English word" reads "word of the embedded language" (Latin
script, the pair's embedded normaliser), the matrix normalisers (OpenCC t2s or none) come from the pair,
and the language tags are the pair's language codes.
"""

from __future__ import annotations

import functools
import re
import threading
import unicodedata
from fractions import Fraction
from typing import TYPE_CHECKING

from cs3_tasks.core.english_normalizer import basic_normalizer, english_normalizer
from cs3_tasks.core.languages import LanguagePair, default_pair, load_pair
from cs3_tasks.core.scripts import CJK_CLASS, LATIN_CLASS

if TYPE_CHECKING:  # pragma: no cover
    import opencc
_CJK_CHAR = re.compile(f"[{CJK_CLASS}]")
_CJK_RUN = re.compile(f"([{CJK_CLASS}]+)")
# Whitespace next to a CJK character carries no meaning in Chinese (ASR inserts it at random).
_SPACE_NEXT_TO_CJK = re.compile(f"(?<=[{CJK_CLASS}])\\s+|\\s+(?=[{CJK_CLASS}])")
_SPACES = re.compile(r"\s+")
_CANNOT = re.compile(r"\bcannot\b")  # see _normalize_en_span
_LATIN_LETTER = re.compile(r"[a-z]")
_DIGIT = re.compile(r"[0-9]")
# Brackets of every kind (after NFKC) become spaces before the Whisper normaliser sees the text.
_BRACKETS = re.compile(r"[()\[\]{}<>《》〈〉「」『』【】〔〕〖〗]")
# Raw English word for language dominance: Latin letters with internal apostrophes ("it's" = 1 word).
_DIGIT_GROUP_COMMA = re.compile(r"(?<=[0-9]),(?=[0-9]{3})")
_DECIMAL_POINT = re.compile(r"(?<=[0-9])\.(?=[0-9])")
_RAW_LATIN_WORD = re.compile(r"[a-z]+(?:'[a-z]+)*")
# Where a keyword match may not cross (after NFKC): clause and sentence punctuation, line breaks; a comma
# only outside digit groups (1,000), a full stop only before whitespace, the end or a CJK character (so 3.5,
# D.C. and U.S. stay whole). Middle dots, hyphens, apostrophes, brackets and quotes join, as before.
_KEYWORD_BREAK = re.compile(f"[。、；;:!?！？…\n\r]|(?<![0-9]),|,(?![0-9])|\\.(?=\\s|$|[{CJK_CLASS}])")
KEYWORD_SPAN_SEPARATOR = "|"  # normalize_keyword never outputs it (punctuation becomes a space)

# Middle dots used in transliterated names (乔治·华盛顿) and their look-alikes; NFKC maps ･ to ・.
MIDDLE_DOTS = "\u00b7\u2022\u30fb\u2027\u2219\u22c5\uff65\u0387\u16eb\u2e31"
# A surrogate code point is not a character: a lone one (half an emoji cut by a byte-level truncation, or
# "\ud83d" in JSON) cannot be encoded as UTF-8, and OpenCC's C++ converter and every file writer need UTF-8.
_SURROGATE = re.compile("[\ud800-\udfff]")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "\uff07": "'", "`": "'"})

_converter: opencc.OpenCC | None = None
_converter_lock = threading.Lock()


def _opencc() -> opencc.OpenCC:
    """The process-wide OpenCC t2s converter (built once; building it reads dictionaries from disk)."""
    global _converter
    if _converter is None:
        with _converter_lock:
            if _converter is None:
                import opencc

                _converter = opencc.OpenCC("t2s")
    return _converter


class _PairSpec:
    """The compiled, text-relevant settings of one language pair."""

    def __init__(self, pair: LanguagePair):
        self.matrix, self.embedded = pair.matrix, pair.embedded
        self.char = re.compile(f"[{pair.script_class}]")
        # runs of letters of either language, for `gloss_language`
        self.letter_runs = re.compile(f"(?P<m>[{pair.script_class}]+)|(?P<e>[{LATIN_CLASS}]+)")
        self.run = re.compile(f"([{pair.script_class}]+)")
        self.word_tokens = pair.tokens == "word"
        # Chinese/Japanese: whitespace next to a script character is noise (ASR inserts it at random);
        # Korean/Hindi: it separates words and is kept.
        self.space_next = (
            None
            if self.word_tokens
            else re.compile(f"(?<=[{pair.script_class}])\\s+|\\s+(?=[{pair.script_class}])")
        )
        self.t2s = "t2s" in pair.normalizers
        self.embedded_normalizer = pair.embedded_normalizer
        self.weight = pair.embedded_word_weight


_SPECS: dict[tuple, _PairSpec] = {}
_DEFAULT_SPEC: _PairSpec | None = None
_specs_lock = threading.Lock()


def _spec(pair: LanguagePair | str | None) -> _PairSpec:
    """Compiled settings of ``pair`` (None: the default zh-en pair, read once from its YAML)."""
    global _DEFAULT_SPEC
    if pair is None:
        if _DEFAULT_SPEC is None:
            spec = _PairSpec(default_pair())
            with _specs_lock:
                _DEFAULT_SPEC = spec
        return _DEFAULT_SPEC
    if isinstance(pair, str):
        pair = load_pair(pair)
    key = (
        pair.matrix,
        pair.embedded,
        pair.script_class,
        pair.tokens,
        tuple(pair.normalizers),
        pair.embedded_normalizer,
        pair.embedded_word_weight,
    )
    spec = _SPECS.get(key)
    if spec is None:
        spec = _PairSpec(pair)
        with _specs_lock:
            _SPECS[key] = spec
    return spec


def lone_surrogates(text: str) -> int:
    """Number of code points of ``text`` that are not valid Unicode text (lone surrogates; a surrogate pair
    counts as the one character it encodes). 0 for every str that can be encoded as UTF-8."""
    if not _SURROGATE.search(text):
        return 0
    return valid_unicode(text).count("\ufffd") - text.count("\ufffd")


def valid_unicode(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (a symbol, dropped by every normaliser) and each
    surrogate pair joined into its character; any other str is returned as it is.

    Every public function of this module (and so of `cs3_tasks.core.metrics`) applies it to its input first:
    text that cannot be encoded is scored as the rest of its characters, never a crash. Readers of model
    outputs call `lone_surrogates` to record the repair on the item.
    """
    if not _SURROGATE.search(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def valid_text(text: str, what: str = "text") -> tuple[str, str | None]:
    """How text that Python can hold but UTF-8 cannot is stored, everywhere (records, caches, summaries,
    models.json, file names it names): ``text`` with each lone surrogate replaced by U+FFFD
    (`valid_unicode`), and the note to record with it, "<what> has N lone surrogates, replaced by U+FFFD"
    (None when ``text`` was valid). Readers of outside text (outputs rows, judge replies, dataset items,
    folder names) call it where the text comes in, so that what is scored, cached and written is the same
    text and the record says what was replaced."""
    bad = lone_surrogates(text)
    return valid_unicode(text), (f"{what} has {bad} lone surrogates, replaced by U+FFFD" if bad else None)


def is_cjk(char: str) -> bool:
    """True for a single Han ideograph (see CJK_CLASS)."""
    return bool(_CJK_CHAR.fullmatch(char))


def to_simplified(text: str) -> str:
    """OpenCC traditional -> simplified Chinese; non-Chinese text passes through unchanged."""
    if not text:
        return text
    text = valid_unicode(text)
    if "\x00" in text:  # the C++ converter works on C strings: convert around NULs, keep them
        return "\x00".join(to_simplified(part) for part in text.split("\x00"))
    return _opencc().convert(text)


def _width_and_script(text: str, spec: _PairSpec | None = None) -> str:
    """Valid Unicode, NFKC (full-width -> half-width, compatibility forms), then the pair's normalisers (zh:
    t2s).

    The one entry of every normalising function of this module."""
    text = unicodedata.normalize("NFKC", valid_unicode(text))
    return to_simplified(text) if (spec or _spec(None)).t2s else text


def _drop_space_next_to_cjk(text: str, spec: _PairSpec | None = None) -> str:
    spec = spec or _spec(None)
    if spec.space_next is not None:
        text = spec.space_next.sub("", text)
    return _SPACES.sub(" ", text).strip()


def normalize_zh(text: str, pair: LanguagePair | str | None = None) -> str:
    """Normalised form of (mostly Chinese) text for character-level comparison.

    NFKC (full-width -> half-width), OpenCC t2s, lowercase; punctuation, symbols, control characters and
    middle dots (· • ・ ‧) become spaces, apostrophes are dropped ("it's" -> "its"), a decimal point
    between digits is kept and a comma between digits removed; whitespace next to a CJK character is
    removed and other runs of whitespace collapse to one space (so English words stay separated). No
    number or spelling rewriting.
    With a ``pair``: its script, its normalisers, and spaces kept between words of ``tokens: word`` scripts.
    """
    spec = _spec(pair)
    text = _width_and_script(text.replace("\x00", " "), spec).lower().translate(_APOSTROPHES)
    text = _DIGIT_GROUP_COMMA.sub("", text)  # 1,000 -> 1000
    text = _DECIMAL_POINT.sub("\x00", text)  # protect 3.5 from the punctuation pass
    text = "".join(
        "" if c == "'" else " " if c != "\x00" and unicodedata.category(c)[0] in "PSCZ" else c for c in text
    )
    return _drop_space_next_to_cjk(text.replace("\x00", "."), spec)


def normalize_matrix(text: str, pair: LanguagePair | str | None = None) -> str:
    """`normalize_zh` under its general name: normalised text of the pair's matrix language."""
    return normalize_zh(text, pair)


@functools.lru_cache(maxsize=65536)
def _normalize_en_span(span: str, normalizer: str = "whisper_english") -> str:
    span = _BRACKETS.sub(" ", span.translate(_APOSTROPHES))
    span = "".join(" " if unicodedata.category(c)[0] == "C" else c for c in span)  # controls, unassigned
    if normalizer == "whisper_basic":  # non-English embedded language: no English spelling/number rules
        return _SPACES.sub(" ", basic_normalizer()(span).lower()).strip()
    # Whisper's normaliser expands "can't" to "can not" but leaves "cannot": make the three one spelling
    return _CANNOT.sub("can not", _SPACES.sub(" ", english_normalizer()(span)).strip())


def normalize_en(text: str, pair: LanguagePair | str | None = None) -> str:
    """Whisper's EnglishTextNormalizer, made safe for mixed text.

    Brackets become spaces first (the Whisper normaliser would delete bracketed words) and curly apostrophes
    become straight ones (so contractions are expanded). CJK runs are passed through untouched and the
    normaliser is applied to each non-CJK span on its own; CJK is converted to simplified. Output: lowercase,
    single-spaced, no whitespace next to CJK. With a ``pair``: its script and its embedded normaliser.
    """
    spec = _spec(pair)
    text = _width_and_script(text, spec)
    pieces = []
    for piece in spec.run.split(text):
        if not piece:
            continue
        is_matrix = spec.char.match(piece)
        pieces.append(piece if is_matrix else _normalize_en_span(piece, spec.embedded_normalizer))
    return _drop_space_next_to_cjk(" ".join(pieces), spec)


def segments(text: str, pair: LanguagePair | str | None = None) -> list[tuple[str, str]]:
    """Ordered language-tagged pieces of normalised text.

    ("zh", run) for each maximal run of consecutive simplified CJK characters (punctuation or any other
    non-CJK character ends a run), ("en", word) for each English word, and ("num", token) for each number
    token (digits without Latin letters, e.g. "21", "3.5", "50%"). Everything else is dropped.
    With a ``pair`` the tags are its language codes (matrix run, embedded word) and "num".
    """
    spec = _spec(pair)
    text = _width_and_script(text, spec)
    out: list[tuple[str, str]] = []
    for piece in spec.run.split(text):
        if not piece:
            continue
        if spec.char.match(piece):
            out.append((spec.matrix, piece))
            continue
        for token in _normalize_en_span(piece, spec.embedded_normalizer).split():
            if _LATIN_LETTER.search(token):
                out.append((spec.embedded, token))
            elif _DIGIT.search(token):
                out.append(("num", token))
    return out


def english_words(text: str, pair: LanguagePair | str | None = None) -> list[str]:
    """Normalised lowercase English (embedded-language) words, in order (numbers and CJK excluded)."""
    spec = _spec(pair)
    return [piece for tag, piece in segments(text, pair) if tag == spec.embedded]


embedded_words = english_words  # the general name, for pairs whose embedded language is not English


def cjk_chars(text: str, pair: LanguagePair | str | None = None) -> list[str]:
    """Simplified CJK characters (characters of the pair's matrix script), in order."""
    spec = _spec(pair)
    return spec.char.findall(_width_and_script(text, spec))


def matrix_tokens(text: str, pair: LanguagePair | str | None = None) -> list[str]:
    """Tokens of the matrix language, in order: characters (``tokens: char``, zh) or words (``word``)."""
    spec = _spec(pair)
    if not spec.word_tokens:
        return cjk_chars(text, pair)
    return [piece for tag, piece in segments(text, pair) if tag == spec.matrix]


def mixed_tokens(text: str, pair: LanguagePair | str | None = None) -> list[str]:
    """Tokens for the mixed error rate, in order: each CJK character, each English word, each number.

    With a ``tokens: word`` pair, a matrix-script word (not each character) is one token.
    """
    spec = _spec(pair)
    tokens: list[str] = []
    for tag, piece in segments(text, pair):
        tokens.extend(piece if tag == spec.matrix and not spec.word_tokens else [piece])
    return tokens


def raw_english_word_count(text: str) -> int:
    """Number of English words as written (before the Whisper normaliser, which expands contractions).

    A word is a run of Latin letters with internal apostrophes, after NFKC, lowercasing and removal of
    diacritics; a hyphen separates words ("self-attention" = 2), as in the Whisper normaliser.
    """
    text = unicodedata.normalize("NFKC", valid_unicode(text)).lower().translate(_APOSTROPHES)
    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if unicodedata.category(c) != "Mn")
    return len(_RAW_LATIN_WORD.findall(text))


# One English word weighs as much as 1.5 CJK characters: an English word has ~1.5 syllables on average
# and a CJK character is one syllable; likewise a Chinese word averages ~1.5 characters. A Fraction keeps
# the comparison, and so the tie, exact.
ENGLISH_WORD_WEIGHT = Fraction(3, 2)


def gloss_language(text: str, pair: LanguagePair | str | None = None) -> str | None:
    """The language of a response that names its answer in both languages, one glossing the other.

    Such a response has exactly two runs of letters, one in each language of the pair, set apart by
    punctuation or brackets: "黑海，Black Sea。", "坦桑尼亚（Tanzania）", "Black Sea (黑海)". Its language is
    that of the first run; the second glosses it (the answer given first, then its name in the other
    language). None for any other text: one language, more runs, or runs joined by nothing but spaces, as in
    a sentence with an English term ("Python是一种语言"), which the weighted count of `dominant_language`
    decides.
    """
    spec = _spec(pair)
    runs: list[str] = []
    last_end, gap_has_punctuation = 0, False
    normalised = _width_and_script(text, spec)
    for match in spec.letter_runs.finditer(normalised):
        language = spec.matrix if match.lastgroup == "m" else spec.embedded
        if runs and runs[-1] == language:
            last_end = match.end()
            continue
        gap = normalised[last_end : match.start()]
        if runs:  # a change of language: does punctuation or a bracket set the runs apart?
            if len(runs) == 2:
                return None
            gap_has_punctuation = any(unicodedata.category(c)[0] in "PS" for c in gap)
        runs.append(language)
        last_end = match.end()
    return runs[0] if len(runs) == 2 and gap_has_punctuation else None


def dominant_language(text: str, pair: LanguagePair | str | None = None) -> str:
    """Dominant language: "zh", "en", "mixed" (exact tie) or "none" (no CJK characters, no English words).

    Rule: an answer named in both languages, one glossing the other ("黑海，Black Sea。"), is in the
    language of its first name (`gloss_language`). Otherwise compare C = number of CJK characters with
    1.5 x W, W = number of English words as written (`raw_english_word_count`); "zh" if C > 1.5 W, "en"
    if 1.5 W > C, "mixed" if equal and non-zero. Numbers, punctuation and other scripts count for neither
    language.

    With a ``pair``: C = number of matrix tokens (`matrix_tokens`), the weight is the pair's
    ``embedded_word_weight`` (zh-en: 3/2), and the answer is the pair's matrix or embedded language code.
    """
    spec = _spec(pair)
    glossed = gloss_language(text, pair)
    if glossed is not None:
        return glossed
    matrix_weight = len(matrix_tokens(text, pair))
    embedded_weight = spec.weight * raw_english_word_count(text)
    if matrix_weight == 0 and embedded_weight == 0:
        return "none"
    if matrix_weight > embedded_weight:
        return spec.matrix
    if embedded_weight > matrix_weight:
        return spec.embedded
    return "mixed"


def response_language(text: str, pair: LanguagePair | str | None = None) -> str:
    """`dominant_language`, except that a text with letters but none of the pair's two languages (e.g.
    a Japanese-kana or Cyrillic answer to a zh-en question) is "other" instead of "none".

    "none" then only means: no letters at all (empty, digits, punctuation, emoji).
    """
    dominant = dominant_language(text, pair)
    if dominant == "none" and any(unicodedata.category(c).startswith("L") for c in valid_unicode(text or "")):
        return "other"
    return dominant


def normalize_keyword(text: str) -> str:
    """Form in which keyword answers are searched in responses (substring matching).

    NFKC (width), OpenCC t2s, lowercase; punctuation, symbols, control characters, middle dots and
    book-title marks become spaces; whitespace next to CJK removed, other whitespace collapsed. Words stay
    separated, so "Salt-Lake City" and "salt lake city." both read "salt lake city", and 喬治·華盛頓,
    乔治 华盛顿 and 乔治华盛顿 all read 乔治华盛顿. Unlike `normalize_en`, no spelling or number rewriting:
    the keyword stage follows the authors' literal matching.
    """
    return normalize_zh(text)


def normalize_keyword_spans(text: str) -> str:
    """`normalize_keyword` of each punctuation-separated span of ``text``, joined by "|" (empty spans
    dropped).

    A keyword searched in this form cannot join characters across a comma or a full stop: "盐，湖城" reads
    "盐|湖城" and no longer contains "盐湖城", while "乔治·华盛顿" still reads "乔治华盛顿".
    """
    spans = (normalize_keyword(span) for span in _KEYWORD_BREAK.split(unicodedata.normalize("NFKC", text)))
    return KEYWORD_SPAN_SEPARATOR.join(span for span in spans if span)


def split_middle_dot(text: str) -> list[str]:
    """Split on any middle-dot variant (乔治·华盛顿 -> ["乔治", "华盛顿"]); parts are not stripped."""
    return re.split(f"[{MIDDLE_DOTS}]", unicodedata.normalize("NFKC", valid_unicode(text)))
