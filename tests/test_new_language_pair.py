"""A new language pair by configuration only: Korean-English, end to end through the real `lm_eval` CLI.

The test writes, in a temporary folder and nowhere else: a pair YAML (Hangul script, word tokens, ASR hint
"ko", expected answer language "ko", espeak-ng voice "ko"), its judge prompt file, a source JSON and a task
YAML. It builds the dataset with our builder, makes pre-generated answers (text + espeak-ng speech), and
runs `lm_eval --model cs3-precomputed` in a subprocess with a loopback judge. Whisper-base is not expected
to understand espeak Korean: the test checks plumbing and that the pair's settings are what flowed through.
Runtime here: ~40-60 s (lm_eval start-up, 2 ASR clips).
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cs3_tasks.build import tts
from cs3_tasks.build.conversation_data import build_conversation_set, read_source_json
from cs3_tasks.core import audio, metrics, text
from cs3_tasks.core.languages import LanguagePairError, load_pair

sys.path.insert(0, str(Path(__file__).resolve().parent))
from judge_server import FakeJudgeServer, Reply
from lm_eval_runner import run_lm_eval

PROMPT_MARKER = "KO-EN-PAIR-PROMPT"
CONFIG = "ko_en_chat"

PAIR_YAML = """\
name: ko-en
description: Korean-English code-switching conversation (test pair)
matrix: {code: ko, name: Korean}
embedded: {code: en, name: English}
script: hangul
tokens: word
embedded_normalizer: whisper_english
embedded_word_weight: 1
response_language: ko
asr_language: ko
query_language: ko
tts_voice: ko
prompts:
  conversation: conversation_ko.txt
"""

PROMPT = f"""{PROMPT_MARKER}
Rate how helpful the answer is. It should be in {{target_language}}.
End with "Score: [n]", n from 1 to 5.
Question: {{question}}
Response: {{response}}
"""

SOURCE = [
    {"id": "ko-1", "text": "서울에서 가장 유명한 coffee shop은 어디인가요?"},
    {"id": "ko-2", "text": "machine learning을 쉽게 설명해 주세요."},
]
ANSWERS = {  # id -> (text response, espeak voice of its speech)
    "ko-1": ("서울에는 유명한 coffee shop이 많이 있습니다.", "ko"),
    "ko-2": ("Machine learning is a way for computers to learn from data.", "en-us"),  # off target
}

TASK_YAML = f"""\
task: {CONFIG}
dataset_path: local
custom_dataset: !function cs3_tasks.task_configs.conversation_utils.load_conversation
dataset_kwargs:
  config: {CONFIG}
  pair: ko-en
test_split: test
output_type: generate_until
doc_to_text: "질문에 한국어로 답하세요."
doc_to_audio: !function cs3_tasks.task_configs.conversation_utils.doc_to_audio
doc_to_target: !function cs3_tasks.task_configs.conversation_utils.doc_to_target
generation_kwargs:
  until: []
  max_gen_toks: 256
filter_list:
  - name: cs3
    filter:
      - function: !function cs3_tasks.task_configs.conversation_utils.ScoreConversation
process_results: !function cs3_tasks.task_configs.conversation_utils.process_results
metric_list:
  - metric: gpt_score_text
    aggregation: !function cs3_tasks.task_configs.conversation_utils.agg_gpt_score_text
    higher_is_better: true
  - metric: gpt_score_speech
    aggregation: !function cs3_tasks.task_configs.conversation_utils.agg_gpt_score_speech
    higher_is_better: true
  - metric: asr_error_rate
    aggregation: !function cs3_tasks.task_configs.conversation_utils.agg_asr_error_rate
    higher_is_better: false
  - metric: off_target_text
    aggregation: !function cs3_tasks.task_configs.conversation_utils.agg_off_target_text
    higher_is_better: false
  - metric: off_target_speech
    aggregation: !function cs3_tasks.task_configs.conversation_utils.agg_off_target_speech
    higher_is_better: false
  - metric: judge_errors
    aggregation: !function cs3_tasks.task_configs.conversation_utils.agg_judge_errors
    higher_is_better: false
  - metric: asr_errors
    aggregation: !function cs3_tasks.task_configs.conversation_utils.agg_asr_errors
    higher_is_better: false
metadata:
  version: 1.0
"""


def _espeak_voice_available(voice: str) -> bool:
    if shutil.which("espeak-ng") is None:
        return False
    listed = subprocess.run(["espeak-ng", "--voices"], capture_output=True, text=True, check=False).stdout
    return any(line.split()[1:2] == [voice] for line in listed.splitlines()[1:])


@pytest.fixture(scope="module")
def pair_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ko_en_pair")
    (folder / "ko-en.yaml").write_text(PAIR_YAML, encoding="utf-8")
    (folder / "conversation_ko.txt").write_text(PROMPT, encoding="utf-8")
    (folder / "source.json").write_text(json.dumps(SOURCE, ensure_ascii=False), encoding="utf-8")
    (folder / "tasks").mkdir()
    (folder / "tasks" / f"{CONFIG}.yaml").write_text(TASK_YAML, encoding="utf-8")
    return folder


def test_pair_is_found_through_the_search_path_and_reads_hangul(pair_dir, monkeypatch):
    with pytest.raises(LanguagePairError, match="unknown language pair 'ko-en'"):
        load_pair("ko-en")
    monkeypatch.setenv("CS3_LANGUAGE_PAIRS", str(pair_dir))
    pair = load_pair("ko-en")
    assert (pair.matrix, pair.embedded, pair.asr_language, pair.response_language) == ("ko", "en", "ko", "ko")
    assert PROMPT_MARKER in pair.prompt_template("conversation")  # the pair's own prompt file
    answer = ANSWERS["ko-1"][0]
    assert text.segments(answer, pair)[:3] == [("ko", "서울에는"), ("ko", "유명한"), ("en", "coffee")]
    assert text.mixed_tokens(answer, pair) == [
        "서울에는",
        "유명한",
        "coffee",
        "shop",
        "이",
        "많이",
        "있습니다",
    ]
    assert text.dominant_language(answer, pair) == "ko"
    assert metrics.off_target(ANSWERS["ko-2"][0], "ko", pair) is True
    # the default zh-en pair sees no Korean at all: the pair is what makes the difference
    assert text.dominant_language(answer) == "en" and text.response_language("서울에는", None) == "other"


@pytest.mark.slow
def test_korean_english_pair_runs_through_lm_eval(pair_dir, tmp_path, monkeypatch):
    if not _espeak_voice_available("ko"):
        pytest.skip("espeak-ng with the Korean voice `ko` is not installed")
    monkeypatch.setenv("CS3_LANGUAGE_PAIRS", str(pair_dir))
    pair = load_pair("ko-en")

    # 1. the dataset, with our builder (espeak-ng `ko` from the pair config), as a config of a build folder
    build_dir = tmp_path / "dataset"
    result = build_conversation_set(
        read_source_json(pair_dir / "source.json"), build_dir, CONFIG, pair, jobs=1, progress=False
    )
    assert result.complete and result.rows == 2 and result.synthesized == 2
    assert CONFIG in (build_dir / "README.md").read_text(encoding="utf-8")
    import pyarrow.parquet as pq

    table = pq.read_table(build_dir / CONFIG / "test-00000-of-00001.parquet").to_pylist()
    assert [row["id"] for row in table] == ["ko-1", "ko-2"]
    import soundfile as sf

    assert sf.info(io.BytesIO(table[0]["audio"]["bytes"])).samplerate == 16_000

    # 2. pre-generated answers: text + speech (espeak-ng), in our outputs layout
    outputs = tmp_path / "outputs"
    (outputs / "wav").mkdir(parents=True)
    with open(outputs / f"{CONFIG}.jsonl", "w", encoding="utf-8") as handle:
        for qid, (answer, voice) in ANSWERS.items():
            wave, rate = tts.synthesize(answer, backend="espeak", voice=voice)
            audio.write_wav(outputs / "wav" / f"{qid}.wav", audio.resample(wave, rate, 16_000))
            handle.write(
                json.dumps({"Qid": qid, "text": answer, "audio": f"wav/{qid}.wav"}, ensure_ascii=False) + "\n"
            )

    # 3. lm_eval, the real CLI, with a loopback judge that only likes the pair's own prompt in Korean
    def judge(request):
        ok = PROMPT_MARKER in request.prompt and "in Korean" in request.prompt
        return Reply.text("Score: [4]" if ok else "Score: [1]")

    env = {"CS3_LANGUAGE_PAIRS": str(pair_dir), "CS3_BENCH_CACHE": str(tmp_path / "cache")}
    results_dir = tmp_path / "results"
    with FakeJudgeServer(judge) as server:
        metadata = {"dataset": str(build_dir), "judge_base_url": server.base_url, "judge_model": "fake-judge"}
        run = run_lm_eval(
            "--model",
            "cs3-precomputed",
            "--model_args",
            f"outputs={outputs}",
            "--tasks",
            CONFIG,
            "--include_path",
            str(pair_dir / "tasks"),
            "--metadata",
            json.dumps(metadata),
            "--output_path",
            str(results_dir),
            "--log_samples",
            env=env,
        )
        assert run.returncode == 0, textwrap.shorten(run.stderr[-3000:], 3000)
        assert server.request_count == 4  # 2 items x (text, speech transcript)

    results_file = next(results_dir.rglob("results_*.json"))
    values = json.loads(results_file.read_text(encoding="utf-8"))["results"][CONFIG]
    assert values["gpt_score_text,cs3"] == 4.0  # the pair's prompt file and target language reached the judge
    assert values["off_target_text,cs3"] == 0.5  # Korean answer on target, English answer off target
    samples_file = next(results_dir.rglob(f"samples_{CONFIG}_*.jsonl"))
    records = [
        json.loads(json.loads(line)["filtered_resps"][0]) for line in samples_file.read_text().splitlines()
    ]
    assert [r["qid"] for r in records] == ["ko-1", "ko-2"]
    for record in records:
        assert record["pair"] == "ko-en"
        assert (
            record["asr_language_hint"] == "ko" and record["asr_language"] == "ko"
        )  # the hint reached Whisper
        assert record["expected_language"] == "ko"
        assert record["transcript"] is not None and record["asr_error"] is None
        # the ASR error rate was computed with the pair's word tokens
        assert record["asr_error_rate"] == pytest.approx(
            metrics.mixed_error_rate(record["text"], record["transcript"], pair)
        )
    assert [r["text_language"] for r in records] == ["ko", "en"]
    assert [r["text_off_target"] for r in records] == [False, True]
