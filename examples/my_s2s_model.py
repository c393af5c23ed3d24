"""A minimal speech-to-speech wrapper for CS3-Bench: copy this file, load your model in ``__init__`` and
replace the body of ``answer``. Run it with lm-eval's own options (the script registers the wrapper first):

    python examples/my_s2s_model.py --model my-s2s-model --model_args output_dir=runs/my-model \
        --tasks cs3 --metadata '{"dataset": "demo", "judge": "none"}' --output_path results

The base class (cs3_tasks.models.base.SpeechLM) does the rest: batching with a one-by-one fall-back, the
answers saved as <output_dir>/<set>.jsonl + wavs (``cs3-bench score --outputs`` re-scores them),
``resume=true``, a failed item recorded as that item's failure, data parallelism under ``accelerate launch``.
"""

from __future__ import annotations

from collections.abc import Sequence

from lm_eval.api.registry import register_model

from cs3_tasks.models.base import Outcome, SpeechLM, SpeechReply, SpeechRequest, generation


@register_model("my-s2s-model")
class MyS2SModel(SpeechLM):
    model_name = "my-s2s-model"

    def __init__(self, pretrained: str = "my-org/my-s2s-model", **kwargs) -> None:
        self.pretrained = pretrained
        super().__init__(**kwargs)  # output_dir, batch_size, resume, device: docs/models.md
        # load your model here, on self.device_name

    def label(self) -> str:  # names the default output folder ./cs3_outputs/<label>
        return self.pretrained.rstrip("/").split("/")[-1]

    def generate_batch(self, requests: Sequence[SpeechRequest]) -> list[Outcome]:
        return [self.answer(req) for req in requests]  # an exception fails the batch, retried one by one

    def answer(self, req: SpeechRequest) -> SpeechReply:
        question = self.query_audio(req, 16_000)  # the spoken question: float32, mono, 16 kHz
        settings = generation(req.gen_kwargs)  # lm-eval's max_gen_toks, until, do_sample, temperature
        # Replace this placeholder (it writes "I do not know." and speaks the question back) with your model:
        # it hears `question` (the task's instruction is req.instruction) and answers in text and in speech,
        # in settings.max_tokens tokens.
        text = settings.cut("I do not know.")
        return SpeechReply(text=text, audio=question, sample_rate=16_000)


if __name__ == "__main__":
    from lm_eval.__main__ import cli_evaluate

    cli_evaluate()
