"""Unicode character classes of the scripts a language pair can name (regex character-class bodies).

The one home of CJK_CLASS: the Mandarin normaliser (`cs3_tasks.core.text`) and the language-pair reader
(`cs3_tasks.core.languages`, its ``script: han``) both read it from here; and of LATIN_CLASS, the letters
of an embedded Latin-script language.
"""

from __future__ import annotations

# Han ideographs: 〇, Extension A, URO, compatibility ideographs, and the supplementary planes (Ext. B-H,
# compatibility supplement). Kangxi radicals need no range: NFKC maps them to URO ideographs.
CJK_CLASS = "\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003ffff"

# Letters of the Latin script of an embedded language (English): ASCII letters, Latin-1 and Latin
# Extended-A/B, either case (the gloss rule of `cs3_tasks.core.text` reads text as written).
LATIN_CLASS = "A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f"

# Named scripts. A pair may instead give its own class in `script_class`.
SCRIPTS: dict[str, str] = {
    "han": CJK_CLASS,
    # Hangul syllables, jamo and compatibility jamo.
    "hangul": "\uac00-\ud7a3\u1100-\u11ff\u3130-\u318f\ua960-\ua97f\ud7b0-\ud7ff",
    # Hiragana, katakana (incl. the prolonged sound mark) and Han: written Japanese.
    "japanese": "\u3041-\u309f\u30a1-\u30fa\u30fc-\u30ff\u31f0-\u31ff" + CJK_CLASS,
    "devanagari": "\u0900-\u097f\ua8e0-\ua8ff",
    "cyrillic": "\u0400-\u04ff",
    "arabic": "\u0600-\u06ff\u0750-\u077f",
    "thai": "\u0e00-\u0e7f",
}
