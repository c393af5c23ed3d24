"""Issue 37 (reliability 4): bad environment values, models on disk, our own state files, a set that fails as
a whole, a judge server that is not there, a transcript cut inside a character. Each test failed before its
fix; the environment and the state files are tested as classes (every variable the package reads, every
state file it reads back)."""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import socket
from contextlib import contextmanager
from pathlib import Path

import pytest

from cs3_tasks import cli
from cs3_tasks.asr import Transcript
from cs3_tasks.cli import score as score_cli
from cs3_tasks.scoring import records as scoring_records

try:  # tests/ is on sys.path under pytest's default import mode
    from test_scoring import FakeASR, FakeJudge, _args, _cli_fixture
except ImportError:  # pragma: no cover
    from tests.test_scoring import FakeASR, FakeJudge, _args, _cli_fixture

PACKAGE = Path(cli.__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CS3_BENCH_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def fakes(monkeypatch):
    asr, judge = FakeASR({}), FakeJudge()
    monkeypatch.setattr("cs3_tasks.asr.transcribe_batch", asr)
    monkeypatch.setattr("cs3_tasks.judge.judge_knowledge", judge.knowledge)
    monkeypatch.setattr("cs3_tasks.judge.judge_open_ended", judge.open_ended)
    return asr, judge


@contextmanager
def _deadline(seconds: int = 20):
    """A read that would wait forever (a FIFO) fails the test instead of hanging it."""

    def expired(*_):
        raise TimeoutError(f"still waiting after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ---------------------------------------------------------------------------------------------------------
# 1. every environment variable the package reads


# Each variable the package reads, by how a bad value is met. Refused: a value outside the allowed ones is one
# line naming the variable and what is allowed. Free-form: a path, a name or a URL, checked where it is used.
REFUSED = {
    "CS3_ASR_NUMERICS": ("portable;rm -rf x", "choose one of portable, native"),
    "CS3_ASR_BACKEND": ("whisper.cpp", "choose one of faster-whisper, openai-whisper, transformers"),
    "CS3_ASR_SHORT_CLIPS": ("sometimes", "choose one of packed, batched"),
    "CS3_ASR_DEVICE": ("tpu", "choose cpu, cuda or cuda:N"),
    "CS3_ASR_IN_PROCESS": ("maybe", "choose one of 1, true, yes, on, 0, false, no, off"),
}
LAUNCHER = {"WORLD_SIZE": "two", "LOCAL_WORLD_SIZE": "-1", "LOCAL_RANK": "first"}  # whole numbers
FREE_FORM = {
    "CS3_ASR_MODEL": "a model name or folder (one the backend cannot load: one line naming what it lacks)",
    "CS3_BENCH_CACHE": "a folder (a file there: one line naming it)",
    "CS3_BENCH_DATASET": "a dataset location (one that cannot be reached: DatasetUnavailableError)",
    "CS3_LANGUAGE_PAIRS": "folders (one that is not a folder: refused naming it)",
    "CS3_JUDGE_BASE_URL": "an http(s) URL (refused naming the variable otherwise)",
    "CS3_JUDGE_MODEL": "a model name",
    "CS3_JUDGE_API_KEY_ENV": "the name of the variable that holds the key (checked by JudgeConfig.validate)",
    "CS3_REFERENCE_SCRIPTS": "the authors' scripts folder (ReferenceScriptsError)",
    "CS3_BENCH_NO_LM_EVAL_HOOK": "read by the start-up hook of every Python process: never refuses there",
    "CS3_COSYVOICE2_MODEL": "a folder (TTS, checked where it loads)",
    "CS3_COSYVOICE_REPO": "a folder (TTS, checked where it loads)",
    "HF_ENDPOINT": "huggingface_hub's own",
    "HF_HUB_OFFLINE": "huggingface_hub's own",
    "RANK": "the launcher's: compared with '0' only",
    "PYTHONPATH": "passed on to worker processes",
}


def _variables_read() -> set[str]:
    """The names of the environment variables the package's modules read (named constants resolved)."""
    texts = [path.read_text(encoding="utf-8") for path in PACKAGE.rglob("*.py")]
    constants = {
        name: value
        for text in texts
        for name, value in re.findall(r'^([A-Z0-9_]*ENV[A-Z0-9_]*) = "([A-Z0-9_]+)"', text, re.M)
    }
    found: set[str] = set()
    for text in texts:
        reads = re.findall(r"os\.environ\.get\(\s*([\w.\"']+)", text)
        reads += re.findall(r"env_(?:choice|flag|int)\(\s*([\w.\"']+)", text)
        for name in (read.strip("\"'").rsplit(".", 1)[-1] for read in reads):
            if name in constants:
                found.add(constants[name])
            elif name.isupper():
                found.add(name)
    return found


def test_every_variable_the_package_reads_is_classified():
    """A new variable says how a bad value is met: refused here, or free-form and checked where used."""
    known = {*REFUSED, *LAUNCHER, *FREE_FORM}
    read = _variables_read()
    assert read >= {*REFUSED, "WORLD_SIZE", "LOCAL_RANK"}, read
    assert read <= known, sorted(read - known)


@pytest.mark.parametrize("variable", sorted(REFUSED))
def test_a_bad_value_of_a_variable_is_one_line_naming_it_and_the_values_allowed(
    variable, tmp_path, fakes, monkeypatch, capsys
):
    asr, _ = fakes
    outputs, dataset = _cli_fixture(tmp_path, asr)
    value, allowed = REFUSED[variable]
    monkeypatch.setenv(variable, value)
    argv = [
        *("score", "--outputs", str(outputs), "--set", "knowledge", "--out", str(tmp_path / "r")),
        *("--dataset", str(dataset), "--no-judge", "--no-progress"),
    ]
    assert cli.main(argv) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"${variable}={value!r} is not allowed: {allowed}" in line
    assert not (tmp_path / "r" / "knowledge.records.jsonl").exists()  # refused before any item


def test_a_bad_value_fails_an_outputs_root_run_once_before_any_model(tmp_path, fakes, monkeypatch, capsys):
    asr, _ = fakes
    (tmp_path / "root").mkdir()
    outputs, dataset = _cli_fixture(tmp_path / "root", asr)
    monkeypatch.setenv("CS3_ASR_NUMERICS", "bogus")
    argv = [
        "score",
        "--outputs-root",
        str(outputs.parent),
        "--out",
        str(tmp_path / "r"),
        "--dataset",
        str(dataset),
    ]
    assert cli.main([*argv, "--no-judge", "--no-progress"]) == 2  # the run's error, not each model's (exit 3)
    assert "$CS3_ASR_NUMERICS='bogus' is not allowed" in _one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("variable", sorted(LAUNCHER))
def test_a_launcher_variable_that_is_not_a_whole_number_is_refused_naming_it(variable, monkeypatch):
    from cs3_tasks.core.environment import EnvironmentValueError
    from cs3_tasks.harness import distributed

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv(variable, LAUNCHER[variable])
    with pytest.raises(EnvironmentValueError, match=rf"\${variable}=.* a whole number >= \d"):
        distributed.launch_world_size()
        distributed.cpu_threads_per_process()
        distributed._group(0, 2)


def test_a_judge_url_or_language_pairs_folder_from_the_environment_is_refused_naming_it(
    tmp_path, fakes, monkeypatch, capsys
):
    asr, _ = fakes
    outputs, dataset = _cli_fixture(tmp_path, asr)
    argv = ["score", "--outputs", str(outputs), "--set", "knowledge", "--out", str(tmp_path / "r")]
    argv += ["--dataset", str(dataset), "--no-progress", "--protocol", "cs3"]
    monkeypatch.setenv("CS3_JUDGE_BASE_URL", "localhost:8000")
    assert cli.main([*argv, "--judge-model", "m"]) == 2
    assert "$CS3_JUDGE_BASE_URL='localhost:8000' is not an http(s) URL" in capsys.readouterr().err
    monkeypatch.delenv("CS3_JUDGE_BASE_URL")
    monkeypatch.setenv("CS3_LANGUAGE_PAIRS", str(tmp_path / "no-such-folder"))
    from cs3_tasks.core import languages
    from cs3_tasks.core.environment import EnvironmentValueError

    with pytest.raises(
        EnvironmentValueError, match=r"\$CS3_LANGUAGE_PAIRS='/.*' is not allowed: each entry must be a folder"
    ):
        languages.search_dirs()


def test_a_variable_a_run_does_not_use_is_not_evaluated(tmp_path, fakes, monkeypatch):
    asr, _ = fakes
    outputs, dataset = _cli_fixture(tmp_path, asr)
    monkeypatch.setenv("CS3_JUDGE_BASE_URL", "bogus")  # no judge in this run
    monkeypatch.setenv("CS3_ASR_NUMERICS", "bogus")  # the transformers backend computes natively
    args = _args(outputs, tmp_path / "r", dataset, no_judge=True, asr_backend="transformers")
    for key in ("judge_base_url", "judge_api_key_env", "judge_model"):
        setattr(args, key, None)
    assert score_cli.run(args) == 0


# ---------------------------------------------------------------------------------------------------------
# 3. every file read back as the package's own state


def _state_readers(tmp_path: Path):
    """(file, read it) for every state file: records, settings, summary, the local outputs file, another
    set's settings, the lock, an export's manifest and journal, a converted model's manifest."""
    from cs3_tasks.asr import convert
    from cs3_tasks.cli import export_questions
    from cs3_tasks.scoring import store, summary

    out = tmp_path / "result"
    out.mkdir()
    model = tmp_path / "converted"
    model.mkdir()
    responses = tmp_path / "outputs" / "knowledge.jsonl"  # a model wrapper's own, compacted on resume
    responses.parent.mkdir()
    from cs3_tasks.models.base import SpeechLM

    return {
        "records": (
            out / "knowledge.records.jsonl",
            lambda: store.read_records(out / "knowledge.records.jsonl"),
        ),
        "settings": (out / "knowledge.settings.json", lambda: store.read_run_settings(out, "knowledge")),
        "summary": (out / "knowledge.summary.json", lambda: summary.read_summary(out, "knowledge")),
        "local": (out / store.LOCAL_FILE, lambda: store.local_outputs(out)),
        "other set": (out / "open_ended.settings.json", lambda: store.check_same_system(out, {"model": "m"})),
        "lock": (out / store.LOCK_FILE, lambda: store.result_dir_lock(out).__enter__()),
        "manifest": (out / export_questions.MANIFEST, lambda: export_questions.read_manifest(out)),
        "journal": (out / export_questions.JOURNAL, lambda: export_questions.read_manifest(out)),
        "model manifest": (model / convert.MANIFEST, lambda: convert.converted_problem(model, "0" * 64)),
        "responses": (responses, lambda: SpeechLM._compact(_Wrapper(responses), {"knowledge"})),
    }


class _Wrapper:
    """What a model wrapper's resume reads its responses file through."""

    def __init__(self, path: Path):
        self.responses_file = lambda task: path


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "folder"])
@pytest.mark.parametrize(
    "name",
    [
        *("records", "settings", "summary", "local", "other set", "lock"),
        *("manifest", "journal", "model manifest", "responses"),
    ],
)
def test_a_state_file_that_is_not_a_regular_file_is_refused_naming_it(name, kind, tmp_path):
    from cs3_tasks.core.statefile import StateFileError

    path, read = _state_readers(tmp_path)[name]
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")
    with _deadline():
        if name == "model manifest":  # a check: the problem, then the model is converted again
            problem = read()
            assert problem and "not a regular file" in problem and str(path) in problem
            return
        with pytest.raises(StateFileError) as refused:
            read()
    assert str(path) in str(refused.value) and "not a regular file" in str(refused.value)
    assert "\n" not in str(refused.value)


def test_the_lock_is_never_written_through_a_link(tmp_path):
    from cs3_tasks.core.statefile import StateFileError
    from cs3_tasks.scoring import store

    precious = tmp_path / "precious.txt"
    precious.write_text("not ours")
    out = tmp_path / "result"
    out.mkdir()
    (out / store.LOCK_FILE).symlink_to(precious)
    with pytest.raises(StateFileError, match="is a link"):
        store.result_dir_lock(out).__enter__()
    assert precious.read_text() == "not ours"


def test_a_state_file_larger_than_its_bound_is_refused(tmp_path, monkeypatch):
    from cs3_tasks.core import statefile
    from cs3_tasks.core.statefile import StateFileError
    from cs3_tasks.scoring import summary

    (tmp_path / "knowledge.summary.json").write_text("{}" + " " * 100)
    monkeypatch.setattr(statefile, "JSON_LIMIT", 10)
    monkeypatch.setattr(summary, "read_state_text", lambda p: statefile.read_state_text(p, 10))
    monkeypatch.setattr(summary, "check_state_file", lambda p: statefile.check_state_file(p, 10))
    with pytest.raises(StateFileError, match="more than the 10"):
        summary.read_summary(tmp_path, "knowledge")


def test_the_commands_refuse_a_fifo_in_one_line(tmp_path, fakes, capsys):
    asr, _ = fakes
    outputs, dataset = _cli_fixture(tmp_path, asr)
    out = tmp_path / "r"
    out.mkdir()
    os.mkfifo(out / "knowledge.records.jsonl")
    with _deadline():
        assert score_cli.run(_args(outputs, out, dataset)) == 2
    assert "knowledge.records.jsonl is a FIFO (named pipe)" in _one_error_line(capsys.readouterr().err)
    questions = tmp_path / "q"
    questions.mkdir()
    (questions / ".cs3-questions.json").symlink_to("/dev/zero")
    with _deadline():
        argv = ["export-questions", "--out", str(questions), "--dataset", "demo", "--set", "knowledge_en"]
        assert cli.main(argv) == 2
    assert "is a character device (a link to /dev/zero)" in capsys.readouterr().err


def test_an_export_killed_after_its_first_file_never_overwrites_what_the_user_put_there(
    tmp_path, monkeypatch
):
    from cs3_tasks.cli import export_questions

    out = tmp_path / "q"
    written = []
    real = export_questions.write_question_wav

    def killed_after_one(audio, path, item):
        if written:
            raise KeyboardInterrupt("killed")
        written.append(path)
        real(audio, path, item)

    docs = [{"Qid": f"q{i}", "Question": "问题"} for i in range(3)]
    monkeypatch.setattr(export_questions, "load_set", lambda name, dataset: _Rows(docs))
    monkeypatch.setattr(export_questions, "write_question_wav", killed_after_one)
    with pytest.raises(KeyboardInterrupt):
        export_questions.export_questions(out, ["knowledge"])
    # the user answers into the folder: their answers file and a spoken answer of their own
    (out / "knowledge.jsonl").write_text('{"Qid": "q0", "text": "mine"}\n')
    (out / "knowledge" / "q1.wav").write_bytes(b"RIFF my answer")
    monkeypatch.setattr(export_questions, "write_question_wav", real)
    with pytest.raises(export_questions.ExportRefused, match="knowledge.jsonl"):
        export_questions.export_questions(out, ["knowledge"])
    assert (out / "knowledge" / "q1.wav").read_bytes() == b"RIFF my answer"
    assert (out / "knowledge.jsonl").read_text() == '{"Qid": "q0", "text": "mine"}\n'
    # what the dead export did write is its own: listed (journal), the same content, replaced freely
    assert export_questions.read_manifest(out) == {
        "knowledge/q0.wav": export_questions.file_sha256(out / "knowledge" / "q0.wav")
    }


class _Rows(list):
    """A loaded set as export_questions reads it: rows, and columns by name."""

    def __init__(self, docs):
        import io

        import numpy as np
        import soundfile as sf

        wav = io.BytesIO()
        sf.write(wav, np.zeros(1600, dtype=np.float32), 16000, format="WAV")
        super().__init__({**doc, "audio": {"bytes": wav.getvalue(), "path": None}} for doc in docs)

    def __getitem__(self, key):
        return [row[key] for row in self] if isinstance(key, str) else super().__getitem__(key)


# ---------------------------------------------------------------------------------------------------------
# 4. a set (or a channel) that failed as a whole fails the run


def _records(set_name: str, n: int, *, text_error: str | None = None, speech: bool = True) -> list[dict]:
    out = []
    for i in range(n):
        record = scoring_records.blank_record(set_name, f"{set_name}-{i}", "Acoustic", None, "cs3")
        record.update(text=f"answer {i}", text_judge="raw", text_status="judge", text_correct=True)
        if text_error:
            record.update(text_judge=None, text_judge_error=text_error, text_status="judge_error")
            record["text_correct"] = None
        if speech:
            record.update(audio="a.wav", transcript="heard", speech_judge="raw", speech_status="judge")
            record["speech_correct"] = True
        out.append(record)
    return out


def test_a_set_whose_judge_verdicts_all_failed_fails_the_run_with_one_line_per_set_and_channel(tmp_path):
    from cs3_tasks.scoring.run import failed_parts, scoring_outcome

    fine = _records("knowledge", 24)  # 48 verdicts, all there
    broken = _records("knowledge_en", 24, text_error="judge_error: unparseable reply", speech=True)
    records = fine + broken  # 24 of 96 verdicts failed: not most of the run's
    outcome = scoring_outcome(tmp_path, records, {}, ["knowledge", "knowledge_en"], [])
    assert outcome.exit_code == 3
    assert failed_parts(records, tmp_path) == list(outcome.failed_parts)
    [line] = outcome.failed_parts
    assert line.startswith(
        "knowledge_en, text channel: 24 of 24 judge verdicts are missing (24 failed, e.g. "
    )
    assert outcome.error_lines() == [f"error: {line}"]
    assert scoring_outcome(tmp_path, fine, {}, ["knowledge"], []).exit_code == 0


def test_a_run_whose_every_clip_failed_asr_exits_3_naming_the_speech_channel(tmp_path, fakes, capsys):
    asr, _ = fakes
    outputs, dataset = _cli_fixture(tmp_path, asr)
    for wav in (outputs / "wav").glob("*.wav"):
        wav.write_bytes(b"not audio")  # every clip fails ASR; the text channel is fine
    assert score_cli.run(_args(outputs, tmp_path / "r", dataset)) == 3
    err = capsys.readouterr().err
    assert (
        "error: knowledge, speech channel: 6 of 6 items have no response on a channel (ASR failed on 6" in err
    )
    assert "text channel" not in err


@pytest.mark.parametrize("how", ["deleted from the authors' layout", "named relative to another folder"])
def test_a_set_whose_every_audio_file_is_missing_fails_on_the_speech_channel_not_skips_it(
    how, tmp_path, fakes, capsys
):
    """Outputs that name a speech file for every item when none is there (deleted, or paths written relative
    to another folder: a new user's slip) are a speech channel with no response, exit 3, never a text-only
    model's "not applicable" (before: speech n/a, exit 0)."""
    asr, _ = fakes
    outputs, dataset = _cli_fixture(tmp_path, asr)
    if how.startswith("deleted"):
        for wav in (outputs / "wav").rglob("*.wav"):
            wav.unlink()
    else:  # our layout, each wav named relative to a folder that is not the outputs folder
        outputs = tmp_path / "ours"
        outputs.mkdir()
        docs = json.loads(dataset.read_text(encoding="utf-8"))
        rows = [{"Qid": d["Qid"], "text": "答案", "audio": f"elsewhere/{d['Qid']}.wav"} for d in docs]
        (outputs / "knowledge.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8"
        )
    assert score_cli.run(_args(outputs, tmp_path / "r", dataset)) == 3
    err = capsys.readouterr().err
    assert (
        "error: knowledge, speech channel: 6 of 6 items have no response on a channel (ASR failed on 6: "
        in err
    )
    assert "missing audio file" in err and "text channel" not in err
    summary = json.loads((tmp_path / "r" / "knowledge.summary.json").read_text(encoding="utf-8"))
    assert summary["speech"]["n_missing"] == 6 and summary["speech"]["accuracy"]["complete"] is False
    records = (tmp_path / "r" / "knowledge.records.jsonl").read_text(encoding="utf-8")
    assert str(tmp_path) not in records  # the error names each file by its label, not by this machine's path
    if not how.startswith("deleted"):
        assert "missing audio file: elsewhere/k-000.wav" in records


@pytest.mark.parametrize("command", ["lm_eval", "cs3-bench eval"])
def test_an_lm_eval_run_whose_set_failed_as_a_whole_exits_3_naming_the_task_and_channel(
    command, tmp_path, monkeypatch
):
    """The same rule under ``lm_eval`` and ``cs3-bench eval``: the results are written, then one line per
    failed task and channel on stderr and exit 3 (before, exit 0 and nothing said). A run that is whole
    exits 0 (the other lm-eval tests)."""
    import shutil
    import subprocess
    import sys

    from lm_eval_runner import JUDGE_ENV

    outputs = tmp_path / "outputs"
    shutil.copytree(PACKAGE / "demo" / "responses" / "demo-strong", outputs)
    for clip in (outputs / "wav" / "knowledge").iterdir():
        clip.write_bytes(b"not audio")  # every clip of the set fails ASR; its text channel is fine
    args = ["--model", "cs3-precomputed", "--model_args", f"outputs={outputs}", "--tasks", "cs3_knowledge"]
    args += ["--metadata", '{"dataset": "demo", "judge": "none"}', "--output_path", str(tmp_path / "r")]
    program = (
        [sys.executable, "-m", "lm_eval", "run"]
        if command == "lm_eval"
        else [sys.executable, "-m", "cs3_tasks.cli", "eval"]
    )
    env = {k: v for k, v in os.environ.items() if k not in JUDGE_ENV}
    env["CS3_BENCH_CACHE"] = str(tmp_path / "cache")
    done = subprocess.run(
        [*program, *args], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 3, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(
        "error: cs3_knowledge: knowledge, speech channel: 24 of 24 items have no response on a channel "
        "(ASR failed on 24: "
    ), errors
    assert list((tmp_path / "r").rglob("results_*.json")), "the results are written first"
    assert "acc_text" in done.stdout and "Traceback" not in done.stderr


def test_the_rule_is_documented():
    doc = (PACKAGE.parent / "docs" / "reliability.md").read_text(encoding="utf-8")
    assert "failed as a whole" in doc and "exits 3" in doc and "failed_parts" in doc


# ---------------------------------------------------------------------------------------------------------
# 5. a judge server that is not there


def test_a_judge_server_that_is_not_listening_is_refused_in_one_line_before_the_first_item(
    tmp_path, monkeypatch, capsys
):
    asr = FakeASR({})
    monkeypatch.setattr("cs3_tasks.asr.transcribe_batch", asr)
    outputs, dataset = _cli_fixture(tmp_path, asr)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = _args(outputs, tmp_path / "r", dataset, judge_base_url=f"http://127.0.0.1:{port}/v1")
    assert score_cli.run(args) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"at http://127.0.0.1:{port}/v1 cannot be reached" in line and "Connection refused" in line


# ---------------------------------------------------------------------------------------------------------
# 6. a transcript cut by the token cap inside a character


def test_a_transcript_cut_inside_a_character_is_trimmed_and_noted(tmp_path, monkeypatch):
    import numpy as np
    import soundfile as sf

    from cs3_tasks import asr
    from cs3_tasks.asr import transcribe

    class Looping:
        def transcribe(self, audio, language):
            return "循环循环循环" + "\ufffd", "zh"  # the cap fell between the two bytes of a character

    monkeypatch.setattr(transcribe, "cached_runner", lambda *a, **k: Looping())
    wav = tmp_path / "a.wav"
    sf.write(wav, np.random.default_rng(0).normal(0, 0.1, 16000).astype(np.float32), 16000)
    config = asr.AsrConfig(backend="openai-whisper", model="tiny")
    for _ in range(2):  # decoded, then from the cache
        [heard] = asr.transcribe_batch([wav], asr=config, progress=False)
        assert heard.text == "循环循环循环" and "\ufffd" not in heard.text
        assert "cut inside a character" in heard.note
    assert transcribe.whole_characters(Transcript("完整", "zh")) == Transcript("完整", "zh")


# ---------------------------------------------------------------------------------------------------------
# 2. models on disk


def _fake_offline(root: Path, monkeypatch) -> None:
    try:  # two small packages laid out like the offline extra's parts
        from test_asr import _fake_offline_parts
    except ImportError:  # pragma: no cover
        from tests.test_asr import _fake_offline_parts

    _fake_offline_parts(root, monkeypatch)


def test_a_joined_model_changed_in_place_is_joined_again_once_said_on_stderr(tmp_path, monkeypatch, capsys):
    from cs3_tasks.asr import fingerprint, offline

    _fake_offline(tmp_path / "site", monkeypatch)
    path = offline.offline_whisper_base()
    good = (path / "model.bin").read_bytes()
    identity = fingerprint.model_identity(str(path))
    for damage in (
        lambda: (path / "model.bin").write_bytes(b"\0" * len(good)),  # same size, other bytes
        lambda: (path / "model.bin").write_bytes(good[:100]),  # truncated
        lambda: (path / "tokenizer.json").unlink(),
    ):
        damage()
        assert offline.offline_whisper_base() == path
        assert (path / "model.bin").read_bytes() == good and (path / "tokenizer.json").is_file()
        assert "joined again from its parts" in capsys.readouterr().err
        assert fingerprint.model_identity(str(path)) == identity  # named by its content, as before
    assert offline.offline_whisper_base() == path and capsys.readouterr().err == ""


def _fake_conversion(calls: list):
    from cs3_tasks.asr import convert

    def convert_into(source, target, source_sha256):
        calls.append(target)
        staging = target.parent / ".staging"
        staging.mkdir(parents=True)
        for name in ("config.json", "processor_config.json", "tokenizer.json"):
            (staging / name).write_text("{}")
        (staging / "model.safetensors").write_bytes(b"weights" * 1000)
        convert.write_manifest(staging, source_sha256)
        if target.exists():
            import shutil

            shutil.rmtree(target)
        staging.rename(target)

    return convert_into


def test_the_converted_model_is_named_by_identity_from_its_first_run_and_repaired(
    tmp_path, monkeypatch, capsys
):
    from cs3_tasks.asr import convert, fingerprint

    _fake_offline(tmp_path / "site", monkeypatch)
    calls: list = []
    monkeypatch.setattr(convert, "_convert_into", _fake_conversion(calls))
    folder = convert.offline_transformers_whisper(convert=False)
    assert not folder.exists()
    first = fingerprint.model_identity(str(folder))  # the first run's settings
    assert first["name"] == "whisper-base-hf" and first["sha256"] and str(tmp_path) not in json.dumps(first)
    assert fingerprint.model_identity(str(folder)) == first and len(calls) == 1  # a resume: the same
    for damage, said in (
        (lambda: (folder / "model.safetensors").write_bytes(b"weights"), "truncated or changed"),
        (lambda: (folder / "tokenizer.json").unlink(), "lacks tokenizer.json"),
        (lambda: (folder / convert.MANIFEST).unlink(), "has no cs3-model.json"),
    ):
        damage()
        assert fingerprint.model_identity(str(folder)) == first
        assert said in capsys.readouterr().err and convert.converted_problem(folder, _source_sha()) is None
    assert len(calls) == 4


def _source_sha() -> str:
    from cs3_tasks.asr import offline
    from cs3_tasks.core.cache import files_sha256

    return files_sha256(offline.offline_weight_parts())


@pytest.mark.parametrize("backend", ["faster-whisper", "transformers"])
def test_a_model_folder_the_backend_cannot_load_is_one_line_naming_what_it_lacks(backend, tmp_path, capsys):
    from cs3_tasks.asr import AsrConfig, transcribe_batch
    from cs3_tasks.asr.config import AsrModelError

    empty = tmp_path / "my-model"
    empty.mkdir()
    wav = tmp_path / "a.wav"
    import numpy as np
    import soundfile as sf

    sf.write(wav, np.random.default_rng(0).normal(0, 0.1, 16000).astype(np.float32), 16000)
    with pytest.raises(AsrModelError) as refused:
        transcribe_batch([wav], asr=AsrConfig(backend=backend, model=str(empty)), progress=False)
    message = str(refused.value)
    assert f"ASR model folder {empty} is not a {backend} model: it lacks " in message and "\n" not in message
    assert "config.json" in message


def test_a_model_name_no_file_system_takes_is_not_a_path():
    from cs3_tasks.asr import fingerprint

    name = "x" * 300
    assert fingerprint.model_identity(name) == {"name": name, "sha256": None}


def test_store_and_summary_read_their_files_only_through_the_checked_reader():
    for path in (PACKAGE / "scoring" / "store.py", PACKAGE / "scoring" / "summary.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        reads = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "read_text"]
        assert not reads, path


def test_a_cache_opened_by_several_processes_at_once_waits_out_sqlites_immediate_lock_answer(tmp_path):
    """Processes opening one new cache file at once: sqlite answers one of them "database is locked"
    without its busy wait while another switches the file to WAL (CI saw it once in ~200 such opens).
    The open retries that answer; any other error is not retried."""
    import sqlite3

    from cs3_tasks.core import cache as cache_module

    class LockedTwice:
        def __init__(self, conn):
            self.conn, self.calls = conn, 0

        def __enter__(self):
            return self.conn.__enter__()

        def __exit__(self, *exc):
            return self.conn.__exit__(*exc)

        def execute(self, sql, *args):
            self.calls += 1
            if self.calls <= 2:
                raise sqlite3.OperationalError("database is locked")
            return self.conn.execute(sql, *args)

    conn = sqlite3.connect(str(tmp_path / "c.sqlite"))
    flaky = LockedTwice(conn)
    cache_module._set_up_on_open(flaky)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT COUNT(*) FROM cache").fetchone()[0] == 0

    class Broken(LockedTwice):
        def execute(self, sql, *args):
            self.calls += 1
            raise sqlite3.OperationalError("disk I/O error")

    broken = Broken(conn)
    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        cache_module._set_up_on_open(broken)
    assert broken.calls == 1
