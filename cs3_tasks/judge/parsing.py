"""Strict reading of judge replies (cs3 protocol): a verdict or a score, or UnparseableReply saying why."""

from __future__ import annotations

import re
import unicodedata


class UnparseableReply(ValueError):
    """A judge reply holds no unambiguous verdict; the message says why."""


_VERDICT_TOKENS = {
    "zh": {"不正确": False, "正确": True, "错误": False},
    "en": {"true": True, "false": False},
}
_LABELS = {
    "zh": r"(?:最终)?(?:判断结果|判断|判定|结论|评估结果|评测结果|评估|评判|结果)",
    "en": r"(?:final\s+)?(?:verdict|judge?ment|conclusion|answer|result|decision|evaluation)",
}
_DECOR = r"[\s*_`#>\-\"'“”‘’「」『』【】\[\]()（）]*"
_AFTER_LABEL = {"zh": r"[\s*_`]*(?::|为|是)[\s*_`]*", "en": r"[\s*_`]*:[\s*_`]*"}


def parse_knowledge_verdict(reply: str, language: str = "zh") -> bool:
    """The verdict of a knowledge judge reply: 正确/错误 (zh) or True/False (en).

    Verdict positions: the reply's first word (after markdown decoration and an optional label such as
    "判断：" / "Verdict:"), a labelled verdict anywhere ("结论：错误", "Final answer: True"), a bracketed
    or bold verdict (【正确】, **False**), or a line holding only the verdict. Verdict words inside the
    explanation ("正确答案是…", "没有错误") do not count. No verdict, contradicting verdicts, or an
    echo of the format ("正确/错误") raise UnparseableReply.
    """
    if language not in _VERDICT_TOKENS:
        raise ValueError(
            f"knowledge judge language must be one of {sorted(_VERDICT_TOKENS)}, got {language!r}"
        )
    tokens = _VERDICT_TOKENS[language]
    text = unicodedata.normalize("NFKC", reply or "")
    flags = re.IGNORECASE if language == "en" else 0
    tok = "(" + "|".join(sorted(map(re.escape, tokens), key=len, reverse=True)) + r")(?!\w)"
    label, after = _LABELS[language], _AFTER_LABEL[language]

    def value(word: str) -> bool:
        return tokens[word.lower()]

    echo = re.search(tok.replace(r"(?!\w)", "") + r"\s*(?:/|\||或者?|or)\s*" + tok, text, flags)
    if echo and value(echo.group(1)) != value(echo.group(2)):
        raise UnparseableReply(f"the reply echoes the format ({echo.group(0)!r}) instead of a verdict")

    found: list[bool] = []
    lead = re.match(r"\s*" + _DECOR + r"(?:" + label + after + _DECOR + r")?" + tok, text, flags)
    if lead:
        found.append(value(lead.group(1)))
    found += [value(m.group(1)) for m in re.finditer(label + after + _DECOR + tok, text, flags)]
    bracketed = r"(?:【|\[|「|『|\*\*)\s*" + tok + r"\s*(?:】|\]|」|』|\*\*)"
    found += [value(m.group(1)) for m in re.finditer(bracketed, text, flags)]
    for line in text.splitlines():
        bare = line.strip(" \t*_`#>-\"'“”‘’「」『』【】[]()（）.。!！:：")
        if bare.lower() in tokens:
            found.append(value(bare))

    if not found:
        words = "正确/错误" if language == "zh" else "True/False"
        raise UnparseableReply(f"no {words} verdict found")
    if len(set(found)) > 1:
        raise UnparseableReply("contradicting verdicts in one reply")
    return found[0]


_SCORE_LABEL = r"(?:最终)?(?:得分|评分|分数|打分)|(?:final\s+)?(?:score|rating)"
_BRACKET_NUMBER = r"[\[【]\s*([+-]?\d+(?:\.\d+)?)\s*[\]】]"


def parse_score(reply: str, low: int = 1, high: int = 5) -> int:
    """The ``[n]`` score of a judge reply, an integer in [low, high].

    A labelled score ("得分：[4]", "Score: [4]") wins over bare bracketed numbers elsewhere; all
    candidates of the winning kind must agree. No score, different scores, a non-integer or an
    out-of-range score raise UnparseableReply.
    """
    text = unicodedata.normalize("NFKC", reply or "")
    labelled = re.findall(
        r"(?:" + _SCORE_LABEL + r")[\s*_`]*(?::|为|是)?[\s*_`]*" + _BRACKET_NUMBER, text, re.IGNORECASE
    )
    candidates = labelled or re.findall(_BRACKET_NUMBER, text)
    if not candidates:
        raise UnparseableReply("no [n] score found")
    if len({float(c) for c in candidates}) > 1:
        raise UnparseableReply(f"several different scores: {', '.join(f'[{c}]' for c in candidates)}")
    number = candidates[-1]
    if not re.fullmatch(r"[+-]?\d+", number):
        raise UnparseableReply(f"score [{number}] is not an integer")
    score = int(number)
    if not low <= score <= high:
        raise UnparseableReply(f"score [{score}] is out of range {low}-{high}")
    return score
