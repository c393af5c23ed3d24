def add_audio_input_contiguous(input_ids, audio_paths, tokenizer, audio_tokenizer):
    return input_ids, [str(p) for p in audio_paths], [[len(input_ids)]]
