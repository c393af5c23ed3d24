"""Fake of GLM-4-Voice speech_tokenizer/utils.py: extract_speech_token(model, feature_extractor, utts)."""

from fake_calls import duration_tokens, misbehave, record


def extract_speech_token(model, feature_extractor, utts):
    record("extract_speech_token", utts=[str(u) for u in utts])
    for utt in utts:
        misbehave(utt)
    return [duration_tokens(utt, per_second=12.5) for utt in utts]  # list[list[int]], one list per utt
