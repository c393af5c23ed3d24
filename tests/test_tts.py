"""cs3_tasks.build.tts: espeak-ng for real; CosyVoice2 up to its Python API boundary (a fake module records
calls).

CosyVoice2 itself (model weights, GPU) cannot run here: these tests check that we call its real API
(CosyVoice2(model_dir, ...), inference_zero_shot(tts_text, prompt_text, prompt_speech_16k, stream=False, ...),
cosyvoice.utils.file_utils.load_wav(path, 16000), set_all_random_seed) with the right arguments.
"""

from __future__ import annotations

import shutil
import sys
import types

import numpy as np
import pytest

from cs3_tasks.build import tts

needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")


@needs_espeak
def test_espeak_mandarin_with_english_words():
    audio, sr = tts.synthesize("Kilimanjaro位于哪个非洲国家？")
    assert sr == 22050
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert 0.5 < audio.size / sr < 20
    assert np.abs(audio).max() > 0.01


@needs_espeak
def test_espeak_is_deterministic_and_voice_matters():
    a, _ = tts.synthesize("Which planet is known as the Red Planet?", voice="en-us")
    b, _ = tts.synthesize("Which planet is known as the Red Planet?", voice="en-us")
    c, _ = tts.synthesize("Which planet is known as the Red Planet?", voice="cmn")
    assert np.array_equal(a, b)
    assert a.size != c.size or not np.array_equal(a, c)


@needs_espeak
def test_espeak_settings_change_speed():
    normal, _ = tts.synthesize("the theory of relativity", voice="en-us")
    fast, _ = tts.synthesize("the theory of relativity", voice="en-us", speed=300)
    assert fast.size < normal.size * 0.8


@needs_espeak
def test_text_starting_with_dash_is_not_an_option():
    audio, _ = tts.synthesize("-v is not a voice", voice="en-us")
    assert audio.size > 0


@needs_espeak
def test_espeak_failure_is_a_clear_error():
    with pytest.raises(tts.TTSError, match="nonexistentvoice"):
        tts.synthesize("hello", voice="nonexistentvoice")


def test_missing_espeak_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(tts.shutil, "which", lambda name: None)
    with pytest.raises(tts.TTSError, match=r"espeak-ng is not installed.*apt-get install espeak-ng"):
        tts.synthesize("hello")


def test_bad_arguments():
    with pytest.raises(tts.TTSError, match="empty text"):
        tts.synthesize("  ")
    with pytest.raises(tts.TTSError, match="unknown TTS backend"):
        tts.synthesize("hello", backend="festival")
    with pytest.raises(tts.TTSError, match="unknown espeak setting"):
        tts.synthesize("hello", volume=3)


# ---------------------------------------------------------------------------------------------------------
# speaker prompts


def make_speakers(folder, names=("amy", "bo", "chen")):
    import soundfile as sf

    folder.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names):
        sf.write(folder / f"{name}.wav", np.full(1600, 0.1 * (i + 1), dtype=np.float32), 16000)
        (folder / f"{name}.txt").write_text(f"这是{name}的声音。\n", encoding="utf-8")
    return folder


def test_speaker_prompts_and_assignment(tmp_path):
    prompts = tts.load_speaker_prompts(make_speakers(tmp_path))
    assert [p.name for p in prompts] == ["amy", "bo", "chen"]
    assert prompts[0].text == "这是amy的声音。"
    chosen = [tts.assign_speaker(f"q-{i:03d}", prompts).name for i in range(60)]
    assert chosen == [tts.assign_speaker(f"q-{i:03d}", prompts).name for i in range(60)]  # stable
    assert set(chosen) == {"amy", "bo", "chen"}  # spread over all speakers
    assert prompts[0].identity() != prompts[1].identity()


def test_speaker_without_transcript_is_named(tmp_path):
    folder = make_speakers(tmp_path)
    (folder / "bo.txt").unlink()
    (folder / "chen.txt").write_text("  ", encoding="utf-8")
    with pytest.raises(tts.TTSError, match=r"bo.wav: no transcript bo.txt.*chen.wav: empty transcript"):
        tts.load_speaker_prompts(folder)
    with pytest.raises(tts.TTSError, match="does not exist"):
        tts.load_speaker_prompts(tmp_path / "none")


# ---------------------------------------------------------------------------------------------------------
# CosyVoice2 through a fake `cosyvoice` package with the real API's names and signatures


class FakeCosyVoice:
    """Records what the real package would receive."""

    def __init__(self, *, new_api: bool = False):
        self.loaded: list[tuple] = []
        self.calls: list[dict] = []
        self.seeds: list[int] = []
        self.load_wav_calls: list[tuple] = []
        self.new_api = new_api

    def install(self, monkeypatch):
        fake = self

        class CosyVoice2:
            sample_rate = 24000

            def __init__(self, model_dir, load_jit=False, load_trt=False, fp16=False, **kwargs):
                fake.loaded.append((model_dir, load_jit, load_trt, fp16))

            def inference_zero_shot(
                self,
                tts_text,
                prompt_text,
                prompt_speech_16k,
                zero_shot_spk_id="",
                stream=False,
                speed=1.0,
                text_frontend=True,
            ):
                fake.calls.append(
                    {
                        "tts_text": tts_text,
                        "prompt_text": prompt_text,
                        "prompt": prompt_speech_16k,
                        "stream": stream,
                        "speed": speed,
                        "text_frontend": text_frontend,
                    }
                )
                yield {"tts_speech": np.ones((1, 100), dtype=np.float32) * 0.5}
                yield {"tts_speech": np.ones((1, 50), dtype=np.float32) * -0.5}

        class CosyVoice3Style(CosyVoice2):
            def inference_zero_shot(
                self,
                tts_text,
                prompt_text,
                prompt_wav,
                zero_shot_spk_id="",
                stream=False,
                speed=1.0,
                text_frontend=True,
            ):
                fake.calls.append({"tts_text": tts_text, "prompt_text": prompt_text, "prompt": prompt_wav})
                yield {"tts_speech": np.ones((1, 10), dtype=np.float32)}

        def load_wav(path, target_sr):
            fake.load_wav_calls.append((path, target_sr))
            return ("prompt-tensor", path)

        def set_all_random_seed(seed):
            fake.seeds.append(seed)

        modules = {
            "cosyvoice": types.ModuleType("cosyvoice"),
            "cosyvoice.cli": types.ModuleType("cosyvoice.cli"),
            "cosyvoice.cli.cosyvoice": types.ModuleType("cosyvoice.cli.cosyvoice"),
            "cosyvoice.utils": types.ModuleType("cosyvoice.utils"),
            "cosyvoice.utils.file_utils": types.ModuleType("cosyvoice.utils.file_utils"),
            "cosyvoice.utils.common": types.ModuleType("cosyvoice.utils.common"),
        }
        modules["cosyvoice.cli.cosyvoice"].CosyVoice2 = CosyVoice3Style if self.new_api else CosyVoice2
        modules["cosyvoice.utils.file_utils"].load_wav = load_wav
        modules["cosyvoice.utils.common"].set_all_random_seed = set_all_random_seed
        for name, module in modules.items():
            monkeypatch.setitem(sys.modules, name, module)
        monkeypatch.setattr(tts, "_COSYVOICE_MODELS", {})
        return self


def test_cosyvoice2_zero_shot_call(monkeypatch, tmp_path):
    fake = FakeCosyVoice().install(monkeypatch)
    model_dir = tmp_path / "CosyVoice2-0.5B"
    model_dir.mkdir()
    monkeypatch.setenv(tts.COSYVOICE_MODEL_ENV, str(model_dir))
    prompt = tts.load_speaker_prompts(make_speakers(tmp_path / "spk"))[1]

    audio, sr = tts.synthesize(
        "Titan是哪颗行星最大的卫星？", backend="cosyvoice2", speaker_prompt=prompt, seed=7
    )
    assert sr == 24000
    assert audio.dtype == np.float32 and audio.shape == (150,)  # both yielded chunks, in order
    assert audio[0] == 0.5 and audio[-1] == -0.5
    assert fake.loaded == [(str(model_dir), False, False, False)]
    assert fake.load_wav_calls == [(str(prompt.audio_path), 16000)]
    call = fake.calls[0]
    assert call["tts_text"] == "Titan是哪颗行星最大的卫星？"
    assert call["prompt_text"] == "这是bo的声音。"
    assert call["prompt"] == ("prompt-tensor", str(prompt.audio_path))
    assert call["stream"] is False
    assert fake.seeds == [7]

    tts.synthesize("Reykjavik是哪个国家的首都？", backend="cosyvoice2", speaker_prompt=prompt, seed=8)
    assert len(fake.loaded) == 1  # the model is loaded once
    assert fake.seeds == [7, 8]  # seeded per item


def test_cosyvoice_later_api_takes_prompt_path(monkeypatch, tmp_path):
    fake = FakeCosyVoice(new_api=True).install(monkeypatch)
    prompt = tts.load_speaker_prompts(make_speakers(tmp_path / "spk"))[0]
    audio, _ = tts.synthesize("hi", backend="cosyvoice2", speaker_prompt=prompt, model_dir=tmp_path)
    assert fake.calls[0]["prompt"] == str(prompt.audio_path) and not fake.load_wav_calls
    assert audio.shape == (10,)


def test_cosyvoice2_configuration_errors(monkeypatch, tmp_path):
    monkeypatch.delenv(tts.COSYVOICE_MODEL_ENV, raising=False)
    prompt = tts.load_speaker_prompts(make_speakers(tmp_path / "spk"))[0]
    with pytest.raises(tts.TTSError, match=tts.COSYVOICE_MODEL_ENV):
        tts.synthesize("hi", backend="cosyvoice2", speaker_prompt=prompt)
    with pytest.raises(tts.TTSError, match="does not exist"):
        tts.synthesize("hi", backend="cosyvoice2", speaker_prompt=prompt, model_dir=tmp_path / "nope")
    with pytest.raises(tts.TTSError, match="speaker prompt"):
        tts.synthesize("hi", backend="cosyvoice2", model_dir=tmp_path)
    monkeypatch.setitem(sys.modules, "cosyvoice.cli.cosyvoice", None)  # not installed
    monkeypatch.setattr(tts, "_COSYVOICE_MODELS", {})
    with pytest.raises(tts.TTSError, match="CosyVoice2 is not importable"):
        tts.synthesize("hi", backend="cosyvoice2", speaker_prompt=prompt, model_dir=tmp_path)


def test_cosyvoice2_inference_failure_is_a_tts_error(monkeypatch, tmp_path):
    FakeCosyVoice().install(monkeypatch)

    def broken(self, *args, **kwargs):
        raise RuntimeError("CUDA out of memory")
        yield  # pragma: no cover

    monkeypatch.setattr(sys.modules["cosyvoice.cli.cosyvoice"].CosyVoice2, "inference_zero_shot", broken)
    prompt = tts.load_speaker_prompts(make_speakers(tmp_path / "spk"))[0]
    with pytest.raises(tts.TTSError, match="CUDA out of memory"):
        tts.synthesize("hi", backend="cosyvoice2", speaker_prompt=prompt, model_dir=tmp_path)
