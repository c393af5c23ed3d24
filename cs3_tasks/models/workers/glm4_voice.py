"""GLM-4-Voice worker: THUDM/GLM-4-Voice's own pieces, wired as its web demo wires them.

- LLM: ``AutoModel.from_pretrained(pretrained, trust_remote_code=True)`` as ``model_server.ModelWorker``
  loads it (``dtype=int4``: the same BitsAndBytes config);
- query tokens: ``speech_tokenizer.modeling_whisper.WhisperVQEncoder`` + ``WhisperFeatureExtractor`` and
  ``speech_tokenizer.utils.extract_speech_token``;
- prompt: ``<|system|>\\n{system prompt}<|user|>\\n<|begin_of_audio|>...<|end_of_audio|><|assistant|>
  streaming_transcription\\n``, the system prompt read at run time from the repo's ``web_demo.py`` (its
  audio-input prompt); ``system_prompt=`` replaces it;
- the reply: tokens up to ``<|user|>``; ids >= ``<|audio_0|>`` are speech tokens, the rest text;
- vocoder: ``flow_inference.AudioDecoder(config.yaml, flow.pt, hift.pt).offline_inference`` (22.05 kHz).

Decoding: the repository publishes no evaluation script; its demo samples (temperature 0.2, top_p 0.8,
max 2000 new tokens), which is our default, seeded per item. ``do_sample=false`` decodes greedily.
One conversation per call, as the demo and ``model_server.py`` (whose streamer refuses a batch above 1).
"""

from __future__ import annotations

from pathlib import Path

if __package__:
    from . import workerlib
else:  # started as a script by the model's own Python
    import workerlib

NAME = "glm4_voice"
OUTPUT_SAMPLE_RATE = 22_050
INSTALL = """\
cs3-glm-4-voice needs THUDM/GLM-4-Voice's code in the worker's Python environment:
  git clone --recurse-submodules https://github.com/THUDM/GLM-4-Voice
  python -m venv glm4voice-env && glm4voice-env/bin/pip install -r GLM-4-Voice/requirements.txt
then pass python=glm4voice-env/bin/python,repo=GLM-4-Voice (and decoder=DIR of THUDM/glm-4-voice-decoder,
tokenizer=THUDM/glm-4-voice-tokenizer, pretrained=THUDM/glm-4-voice-9b or local copies)."""

DEFAULTS = {
    "pretrained": "THUDM/glm-4-voice-9b",
    "tokenizer": "THUDM/glm-4-voice-tokenizer",
    "decoder": None,  # default: <repo>/glm-4-voice-decoder (the demo's --flow-path)
    "repo": None,
    "device": "cuda",
    "dtype": "bfloat16",  # or int4 (model_server.py's BitsAndBytes setting)
    "system_prompt": None,
    "do_sample": True,
    "temperature": 0.2,
    "top_p": 0.8,
    "max_new_tokens": 2000,
    "seed": 0,
}


class Backend:
    def __init__(self, options: dict) -> None:
        self.options = {**DEFAULTS, **options}
        repo = self.options["repo"]
        if not repo or not Path(repo).is_dir():
            raise workerlib.ModelCodeMissing(f"repo={repo!r} is not a GLM-4-Voice checkout.\n{INSTALL}")
        repo = Path(repo).resolve()
        # the demo's own sys.path additions (relative to the checkout), plus the checkout itself
        workerlib.add_paths([repo, repo / "cosyvoice", repo / "third_party" / "Matcha-TTS"])

        def official():
            import torch
            from flow_inference import AudioDecoder
            from speech_tokenizer.modeling_whisper import WhisperVQEncoder
            from speech_tokenizer.utils import extract_speech_token
            from transformers import AutoModel, AutoTokenizer, WhisperFeatureExtractor

            return (
                torch,
                AudioDecoder,
                WhisperVQEncoder,
                extract_speech_token,
                AutoModel,
                AutoTokenizer,
                WhisperFeatureExtractor,
            )

        (
            torch,
            AudioDecoder,
            WhisperVQEncoder,
            self.extract_speech_token,
            AutoModel,
            AutoTokenizer,
            WhisperFeatureExtractor,
        ) = workerlib.import_official("GLM-4-Voice", INSTALL, official)
        self.torch = torch
        opts = self.options
        self.device = str(opts["device"])
        self.system_prompt = opts["system_prompt"] or workerlib.string_assigned(
            workerlib.require_file(repo / "web_demo.py", "GLM-4-Voice web demo", INSTALL),
            "system_prompt",
            containing="speech instruction",
        )
        decoder = Path(opts["decoder"] or repo / "glm-4-voice-decoder")
        load = {"trust_remote_code": True, "device_map": {"": self.device}}
        if opts["dtype"] == "int4":
            from transformers import BitsAndBytesConfig

            load["quantization_config"] = BitsAndBytesConfig(
                load_in_4bit=True,
                bnb_4bit_use_double_quant=True,
                bnb_4bit_quant_type="nf4",
                bnb_4bit_compute_dtype=torch.bfloat16,
            )
        else:
            load["torch_dtype"] = getattr(torch, str(opts["dtype"]))
        self.model = AutoModel.from_pretrained(opts["pretrained"], **load).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(opts["pretrained"], trust_remote_code=True)
        self.audio_decoder = AudioDecoder(
            config_path=str(decoder / "config.yaml"),
            flow_ckpt_path=str(decoder / "flow.pt"),
            hift_ckpt_path=str(decoder / "hift.pt"),
            device=self.device,
        )
        self.whisper_model = WhisperVQEncoder.from_pretrained(opts["tokenizer"]).eval().to(self.device)
        self.feature_extractor = WhisperFeatureExtractor.from_pretrained(opts["tokenizer"])
        self.audio_offset = self.tokenizer.convert_tokens_to_ids("<|audio_0|>")
        self.end_token_id = self.tokenizer.convert_tokens_to_ids("<|user|>")
        self.info = {
            "sample_rate": OUTPUT_SAMPLE_RATE,
            "max_batch": 1,
            "system_prompt": self.system_prompt,
            "decoding": {k: opts[k] for k in ("do_sample", "temperature", "top_p", "max_new_tokens")},
        }

    def prompt(self, speech_tokens: list[int]) -> str:
        audio = "<|begin_of_audio|>" + "".join(f"<|audio_{x}|>" for x in speech_tokens) + "<|end_of_audio|>"
        return f"<|system|>\n{self.system_prompt}<|user|>\n{audio}<|assistant|>streaming_transcription\n"

    def generate_one(self, item: dict) -> dict:
        torch, opts = self.torch, self.options
        speech_tokens = self.extract_speech_token(
            self.whisper_model, self.feature_extractor, [item["audio"]]
        )[0]
        if len(speech_tokens) == 0:
            raise ValueError("no speech tokens extracted from the query audio")
        inputs = self.tokenizer([self.prompt(speech_tokens)], return_tensors="pt").to(self.device)
        workerlib.seed_everything(workerlib.item_seed(opts["seed"], item["key"]))
        kwargs = {"max_new_tokens": int(opts["max_new_tokens"]), "do_sample": bool(opts["do_sample"])}
        if opts["do_sample"]:
            kwargs.update(temperature=float(opts["temperature"]), top_p=float(opts["top_p"]))
        with torch.inference_mode():
            sequences = self.model.generate(**inputs, **kwargs)
        text_tokens, audio_tokens = [], []
        for token_id in sequences[0, inputs["input_ids"].shape[1] :].tolist():
            if token_id == self.end_token_id:
                break
            if token_id >= self.audio_offset:
                audio_tokens.append(token_id - self.audio_offset)
            else:
                text_tokens.append(token_id)
        text = self.tokenizer.decode(text_tokens, skip_special_tokens=True).strip()
        audio = None
        if audio_tokens:
            with torch.inference_mode():
                speech = self.audio_decoder.offline_inference(torch.tensor(audio_tokens).unsqueeze(0))
            audio = workerlib.save_samples(item["out"], speech)
        return {"text": text, "audio": audio, "sample_rate": OUTPUT_SAMPLE_RATE}


if __name__ == "__main__":
    workerlib.serve(NAME, Backend)
