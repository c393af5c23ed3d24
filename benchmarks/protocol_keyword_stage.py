"""Where the two protocols' keyword stages differ: reference (the authors' raw substring rule) vs cs3.

    python benchmarks/protocol_keyword_stage.py [--source ../shared/data/cs3bench]

No judge and no scripts are needed: both keyword stages are pure functions. Two inputs:

- the embedded demo systems' text responses (cs3_tasks/demo/responses/demo-*/knowledge*.jsonl);
- the full knowledge set (the shared CS3-Bench source, when present), each item answered with forms of its
  own correct answer that an ASR transcript or a model produces: traditional characters (as Whisper prints
  at times), spaces between characters, full-width Latin letters, the English answer with a hyphen, and a
  comma inserted inside the Chinese answer (not the answer: 盐，湖城).

Prints, per input and form, how many items each rule accepts and how many verdicts differ.
"""

from __future__ import annotations

import argparse
import json
import unicodedata
from pathlib import Path

from cs3_tasks import metrics, reference, text

DEMO = Path(__file__).resolve().parents[1] / "cs3_tasks" / "demo"


def _rules(set_name: str):
    if set_name == "knowledge":
        return (
            lambda r, d: reference.knowledge_keyword_hit(r, d["Answer_zh"], d["Answer_en"]),
            lambda r, d: metrics.knowledge_keyword_hit(r, d["Answer_zh"], d["Answer_en"]),
        )
    return (
        lambda r, d: reference.knowledge_en_keyword_hit(r, d["Answer"]),
        lambda r, d: metrics.english_keyword_hit(r, d["Answer"]),
    )


def _compare(label: str, set_name: str, pairs: list[tuple[str, dict]]) -> None:
    ours_ref, ours_cs3 = _rules(set_name)
    ref = [ours_ref(r, d) for r, d in pairs]
    cs3 = [ours_cs3(r, d) for r, d in pairs]
    differ = [(r, d) for (r, d), a, b in zip(pairs, ref, cs3) if a != b]
    print(
        f"{label:<44} n={len(pairs):4d}  reference {sum(ref):4d}  cs3 {sum(cs3):4d}  differ {len(differ):4d}"
    )
    for response, doc in differ[:2]:
        answer = doc.get("Answer_zh") or doc.get("Answer")
        print(f"    e.g. {response[:40]!r} vs answer {answer!r}")


def _demo() -> None:
    from cs3_tasks.scoring import load_docs

    for set_name in ("knowledge", "knowledge_en"):
        docs = {d["Qid"]: d for d in load_docs(set_name, "demo")}
        for system in sorted((DEMO / "responses").iterdir()):
            rows = [
                json.loads(line) for line in (system / f"{set_name}.jsonl").read_text("utf-8").splitlines()
            ]
            pairs = [
                (r["text"], docs[r["Qid"]]) for r in rows if r.get("text") is not None and r["Qid"] in docs
            ]
            _compare(f"demo {system.name} {set_name} (text)", set_name, pairs)


def _forms(doc: dict) -> dict[str, str]:
    zh, en = doc["Answer_zh"], doc["Answer_en"]
    import opencc

    return {
        "traditional characters": f"答案是{opencc.OpenCC('s2t').convert(zh)}。",
        "spaces between characters": "答案是 " + " ".join(zh),
        "full-width English answer": "答案是"
        + unicodedata.normalize("NFKC", en).translate({c: c + 0xFEE0 for c in range(0x21, 0x7F)}),
        "English answer, hyphenated": "It is " + en.replace(" ", "-"),
        "comma inside the Chinese answer": f"答案是{zh[:1]}，{zh[1:]}。" if len(zh) > 1 else f"答案是{zh}",
    }


def _full(source: Path) -> None:
    docs = json.loads((source / "cs_knowledge.json").read_text("utf-8"))
    forms = [_forms(d) for d in docs]
    for name in forms[0]:
        _compare(f"full knowledge: {name}", "knowledge", [(f[name], d) for f, d in zip(forms, docs)])
    split = sum(1 for d in docs if len(text.normalize_keyword(d["Answer_zh"])) > 1)
    print(f"(knowledge answers of 2+ characters, i.e. open to a comma split: {split} of {len(docs)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--source",
        type=Path,
        default=Path(__file__).resolve().parents[2] / "shared" / "data" / "cs3bench",
        help="folder with cs_knowledge.json (skipped when absent)",
    )
    args = parser.parse_args()
    _demo()
    if (args.source / "cs_knowledge.json").is_file():
        _full(args.source)
    else:
        print(f"no {args.source / 'cs_knowledge.json'}: full-set comparison skipped")


if __name__ == "__main__":
    main()
