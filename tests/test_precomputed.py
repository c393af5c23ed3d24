"""cs3-precomputed (pre-generated outputs as an lm-eval model) and the speech-response protocol."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cs3_tasks.harness.speech import decode_payload, decode_response, encode_response, is_speech_response

lm_eval = pytest.importorskip("lm_eval")

from lm_eval.api.instance import Instance  # noqa: E402  (after the importorskip above)

from cs3_tasks.models.precomputed import PrecomputedLM, set_of_task  # noqa: E402

# ---------------------------------------------------------------------------------------------------------
# protocol


def test_encode_decode_round_trip(tmp_path):
    wav = tmp_path / "cs3_knowledge" / "q-1.wav"
    text = '答案是盐湖城 Salt Lake City, "quoted" {braces}'
    encoded = encode_response(text, wav)
    assert "\n" not in encoded
    assert decode_response(encoded) == (text, str(wav.resolve()))
    assert is_speech_response(encoded)


def test_plain_strings_are_text_only_responses():
    for plain in ["盐湖城", "", '{"answer": "json but not ours"}', '{"cs3_speech_response": broken']:
        assert decode_response(plain) == (plain, None)
        assert not is_speech_response(plain)


def test_text_without_audio_and_problem_survive():
    payload = decode_payload(encode_response(None, None, problem="no output for this Qid"))
    assert payload.text is None and payload.audio is None and payload.problem == "no output for this Qid"
    assert decode_response(encode_response("只有文字", None)) == ("只有文字", None)


def test_decode_rejects_non_strings():
    with pytest.raises(TypeError):
        decode_response(b"bytes")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------
# cs3-precomputed


def _write_outputs(root: Path) -> Path:
    import soundfile as sf

    (root / "wav" / "knowledge").mkdir(parents=True)
    sf.write(root / "wav" / "knowledge" / "q-1.wav", np.zeros(1600, dtype=np.float32), 16000)
    rows = [
        {"Qid": "q-1", "text": "答案是盐湖城", "audio": "wav/knowledge/q-1.wav"},
        {"Qid": "q-2", "text": "只有文字", "audio": None},
        {"Qid": "q-3", "text": "声音丢了", "audio": "wav/knowledge/missing.wav"},
    ]
    (root / "knowledge.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
    )
    return root


def _instance(task: str, qid: str | None) -> Instance:
    doc = {"Qid": qid} if qid is not None else {}
    return Instance(
        request_type="generate_until",
        doc=doc,
        arguments=("请回答音频中的问题。", {"until": []}, {"audio": ["/q.flac"]}),
        idx=0,
        metadata=(task, 0, 1),
    )


def test_set_of_task():
    assert set_of_task("cs3_knowledge") == "knowledge"
    assert set_of_task("cs3_knowledge_en_text") == "knowledge_en"
    assert set_of_task("cs3_open_ended") == "open_ended"
    assert set_of_task("mmlu") is None


def test_answers_by_task_and_qid(tmp_path):
    lm = PrecomputedLM(outputs=str(_write_outputs(tmp_path)), batch_size=1, device="cpu")
    answers = lm.generate_until(
        [_instance("cs3_knowledge", q) for q in ("q-1", "q-2", "q-3", "q-9")], disable_tqdm=True
    )
    first = decode_payload(answers[0])
    assert first.text == "答案是盐湖城" and Path(first.audio).is_file() and first.problem is None
    assert decode_payload(answers[1]) == decode_payload(encode_response("只有文字", None))
    third = decode_payload(answers[2])
    # the file is not there: still the item's speech, which the ASR fails naming it (the channel counts it
    # as missing, never as not applicable)
    assert third.audio == str(tmp_path / "wav" / "knowledge" / "missing.wav") and third.problem is None
    missing = decode_payload(answers[3])
    assert missing.text is None and missing.audio is None and "no output for this Qid" in missing.problem


def test_text_only_mode_returns_plain_text(tmp_path):
    lm = PrecomputedLM(outputs=str(_write_outputs(tmp_path)), text_only="true")
    assert lm.generate_until([_instance("cs3_knowledge_text", "q-1")], disable_tqdm=True) == ["答案是盐湖城"]


def test_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="outputs=DIR"):
        PrecomputedLM()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        PrecomputedLM(outputs=str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="unknown set"):
        PrecomputedLM(outputs=str(tmp_path), set="trivia")
    lm = PrecomputedLM(outputs=str(_write_outputs(tmp_path)))
    with pytest.raises(ValueError, match="cannot tell the set"):
        lm.generate_until([_instance("mmlu", "q-1")], disable_tqdm=True)
    with pytest.raises(ValueError, match="no Qid"):
        lm.generate_until([_instance("cs3_knowledge", None)], disable_tqdm=True)
    with pytest.raises(FileNotFoundError, match="no outputs for set 'open_ended'"):
        lm.generate_until([_instance("cs3_open_ended", "q-1")], disable_tqdm=True)


def test_forced_set_serves_renamed_tasks(tmp_path):
    lm = PrecomputedLM(outputs=str(_write_outputs(tmp_path)), set="knowledge")
    assert (
        decode_response(lm.generate_until([_instance("my_copy", "q-2")], disable_tqdm=True)[0])[0]
        == "只有文字"
    )


def test_registered_name_resolves():
    from lm_eval.api.registry import get_model

    assert get_model("cs3-precomputed") is PrecomputedLM
    assert PrecomputedLM.MULTIMODAL is True
