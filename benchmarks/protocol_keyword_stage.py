"""Where the two protocols' keyword stages differ: reference (the authors' raw substring rule) vs cs3.

    python benchmarks/protocol_keyword_stage.py [--source ../shared/data/cs3bench]

No judge and no scripts are needed: both keyword stages are pure functions. Two inputs:

- the embedded demo systems' text responses (cs3_tasks/demo/responses/demo-*/knowledge*.jsonl);
- the full knowledge set (the shared CS3-Bench source, when present), each item answered with forms of its
  own correct answer that an ASR transcript or a model produces: traditional characters (as Whisper prints
  at times), spaces between characters, full-width Latin letters, the English answer with a hyphen, and a
  comma inserted inside the Chinese answer (not the answer: 盐，湖城).

Prints, per input and form, how many items each rule accepts and how many verdicts differ.

With ``--end-to-end`` it also scores the same inputs through ``scoring.score_batch`` under both protocols,
text channel, with the same scripted loopback judge (replies chosen per item by a hash of its Qid: plain
verdicts, a bold verdict, a label before the verdict, an empty reply; open-ended: ``[4]``, two bracketed
scores, ``[0]``, a score without brackets), and prints the headline numbers of each protocol. The
reference protocol needs the authors' scripts (``--reference-scripts``, default
../shared/reference/vocalbench-zh).
"""

from __future__ import annotations

import argparse
import json
import unicodedata
from pathlib import Path

from cs3_tasks.core import metrics, text
from cs3_tasks.scoring.protocols import reference

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
    from cs3_tasks.core.data import load_docs

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


# ---------------------------------------------------------------------------------------------------
# end to end: both protocols, one scripted judge

KNOWLEDGE_REPLIES = {
    "zh": ["正确 一致", "正确 一致", "正确 一致", "正确 一致", "**正确** 与答案一致", "判断：正确"]
    + ["错误 不一致", "错误 不一致", "错误 不一致", ""],
    "en": ["True consistent", "True consistent", "True consistent", "True consistent", "**True** consistent"]
    + ["Judgement: True", "False wrong", "False wrong", "False wrong", ""],
}
OPEN_ENDED_REPLIES = ["[4] 相关", "评分 [5]，参考 [2]", "[0] 无关", "4 分", "[3]"]


def _scripted_judge(docs_by_set: dict[str, list[dict]]):
    """A loopback-judge handler: the reply for a prompt depends only on the item (found by its Question) and
    on the kind of prompt (verdict or score), so both protocols get the same replies for the same item."""
    import hashlib

    questions = [(d["Question"], set_name, d["Qid"]) for set_name, ds in docs_by_set.items() for d in ds]
    questions.sort(key=lambda q: -len(q[0]))  # the longest question first: no prefix clash

    def handler(request) -> str:
        prompt = request.prompt
        found = next(((s, q) for text_, s, q in questions if text_ and text_ in prompt), None)
        if found is None:
            return ""
        set_name, qid = found
        h = int(hashlib.sha256(qid.encode()).hexdigest(), 16)
        if set_name == "open_ended":
            return OPEN_ENDED_REPLIES[h % len(OPEN_ENDED_REPLIES)]
        replies = KNOWLEDGE_REPLIES["en" if set_name == "knowledge_en" else "zh"]
        return replies[h % len(replies)]

    return handler


def _headline(set_name: str, summary: dict) -> str:
    text_ = summary["text"] or {}
    if set_name == "open_ended":
        parts = [
            f"understood {_pct(text_['understanding_rate'])}",
            f"relevance {_num(text_['mean_relevance'])}",
            f"semantic {_num(text_['mean_semantic'])}",
            f"judge errors {text_['n_relevance_error'] + text_['n_semantic_error']}",
        ]
    else:
        counts = text_["status_counts"]
        parts = [
            f"accuracy {_pct(text_['accuracy'])}",
            f"keyword {counts['keyword']}",
            f"judged right/wrong {counts['judge_correct']}/{counts['judge_wrong']}",
            f"unparsed {counts['judge_unparsed']}",
            f"judge errors {counts['judge_error']}",
        ]
    if summary.get("protocol") == "reference":
        parts.append("complete" if summary.get("complete") else "INCOMPLETE")
    return ", ".join(parts)


def _pct(entry: dict) -> str:
    value = entry.get("value")
    text_ = "n/a" if value is None else f"{100 * value:.1f}%"
    if entry.get("low") is not None and entry.get("low") != entry.get("high"):
        text_ += f" [{100 * entry['low']:.1f}, {100 * entry['high']:.1f}]"
    return f"{text_} (n={entry.get('n_all', entry.get('n'))})"


def _num(entry: dict) -> str:
    return "n/a" if entry.get("value") is None else f"{entry['value']:.3f}"


def _end_to_end(inputs: list[tuple[str, str, list[dict], dict[str, str]]], scripts: Path) -> None:
    """Score each (label, set, docs, Qid -> text response) under both protocols with one scripted judge."""
    import sys
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from judge_server import FakeJudgeServer

    from cs3_tasks.judge import JudgeConfig
    from cs3_tasks.scoring import pipeline as scoring
    from cs3_tasks.scoring import records as scoring_records
    from cs3_tasks.scoring import summary
    from cs3_tasks.scoring.outputs import ModelOutput

    docs_by_set: dict[str, list[dict]] = {}
    for _, set_name, docs, _ in inputs:
        known = {d["Qid"] for d in docs_by_set.setdefault(set_name, [])}
        docs_by_set[set_name] += [d for d in docs if d["Qid"] not in known]
    templates = reference.load_templates(scripts)
    with tempfile.TemporaryDirectory() as tmp, FakeJudgeServer(_scripted_judge(docs_by_set)) as server:
        for label, set_name, docs, responses in inputs:
            outputs = [ModelOutput(qid, response, None) for qid, response in responses.items()]
            for protocol in scoring_records.PROTOCOLS:
                config = JudgeConfig(
                    base_url=server.base_url,
                    model="scripted-judge",
                    api_key_env="",
                    cache_path=Path(tmp) / f"{protocol}.sqlite",
                    max_retries=1,
                    backoff_initial=0.01,
                    backoff_max=0.02,
                )
                server.reset()
                records = scoring.score_batch(
                    set_name,
                    docs,
                    outputs,
                    judge=config,
                    progress=False,
                    protocol=protocol,
                    templates=templates if protocol == "reference" else None,
                )
                result = summary.summarize(set_name, records)
                headline = _headline(set_name, result)
                print(f"{label:<40} {protocol:<9} {headline}; requests {server.request_count}")


def _demo_inputs() -> list[tuple[str, str, list[dict], dict[str, str]]]:
    from cs3_tasks.core.data import load_docs

    inputs = []
    for set_name in ("knowledge", "knowledge_en", "open_ended"):
        docs = load_docs(set_name, "demo")
        for system in sorted((DEMO / "responses").iterdir()):
            rows = [
                json.loads(line) for line in (system / f"{set_name}.jsonl").read_text("utf-8").splitlines()
            ]
            responses = {r["Qid"]: r["text"] for r in rows if r.get("text") is not None}
            inputs.append((f"demo {system.name} {set_name}", set_name, docs, responses))
    return inputs


def _full_inputs(source: Path) -> list[tuple[str, str, list[dict], dict[str, str]]]:
    docs = json.loads((source / "cs_knowledge.json").read_text("utf-8"))
    forms = {d["Qid"]: _forms(d) for d in docs}
    return [
        (f"full knowledge: {name}", "knowledge", docs, {q: f[name] for q, f in forms.items()})
        for name in ("traditional characters", "comma inside the Chinese answer")
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--source",
        type=Path,
        default=Path(__file__).resolve().parents[2] / "shared" / "data" / "cs3bench",
        help="folder with cs_knowledge.json (skipped when absent)",
    )
    parser.add_argument(
        "--end-to-end", action="store_true", help="also score both protocols with a scripted loopback judge"
    )
    parser.add_argument(
        "--reference-scripts",
        type=Path,
        default=Path(__file__).resolve().parents[2] / "shared" / "reference" / "vocalbench-zh",
        help="the authors' VocalBench-zh checkout (for --end-to-end)",
    )
    args = parser.parse_args()
    full = (args.source / "cs_knowledge.json").is_file()
    _demo()
    if full:
        _full(args.source)
    else:
        print(f"no {args.source / 'cs_knowledge.json'}: full-set comparison skipped")
    if args.end_to_end:
        print("\nend to end, text channel, same scripted loopback judge:")
        _end_to_end(_demo_inputs() + (_full_inputs(args.source) if full else []), args.reference_scripts)


if __name__ == "__main__":
    main()
