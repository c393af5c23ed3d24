"""``cs3-bench recipe train``: LoRA fine-tuning of a speech LLM on recipe data (VocalNet JSON format).

peft LoRA on the LLM backbone (VocalNet's defaults r=64, alpha=16, dropout 0.05); speech encoder and
speech generator/vocoder frozen; the new special tokens (CoR separator, KH indicators) get trainable
embedding rows through peft's ``trainable_token_indices``. Training runs through transformers'
Trainer, so ``accelerate launch`` / ``torchrun`` / DeepSpeed (``training.deepspeed`` in the config)
work as usual.

Backbones:
  ``ours``     Whisper encoder -> downsampling projector -> causal LM (cs3_tasks.recipe.model)
  ``tiny``     a tiny randomly initialised ``ours`` with a tokenizer trained on the data (smoke tests)
  ``vocalnet`` VocalNet(-ML) through the official ``omni_speech`` classes (must be importable)

Saved adapter directory (what the ``cs3-vocalnet`` wrapper loads with ``adapter=DIR``):
  adapter_config.json, adapter_model.safetensors   peft ``save_pretrained`` of the LoRA'd LLM
  tokenizer files                                  tokenizer incl. the recipe special tokens
  speech_projector.safetensors                     (ours/tiny) the trained projector
  cs3_recipe.json                                  backbone, base paths, transforms, special tokens
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cs3_tasks.core.audio import SAMPLE_RATE, load_audio
from cs3_tasks.core.environment import env_int
from cs3_tasks.recipe.adapter import RECIPE_FILE, apply_adapter, decode_keeping_recipe_tokens
from cs3_tasks.recipe.transforms import SPECIAL_TOKENS, TransformConfig, postprocess, transform_target

log = logging.getLogger(__name__)

PROJECTOR_FILE = "speech_projector.safetensors"
BACKBONES = ("ours", "tiny", "vocalnet")
# LLM linear layers only: the regex keeps LoRA off VocalNet's speech encoder / generator modules.
LLM_LORA_TARGETS = r"model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)"


class RecipeConfigError(ValueError):
    """A training configuration that cannot be used; the message names the key."""


@dataclass
class LoraSettings:
    r: int = 64
    alpha: int = 16
    dropout: float = 0.05
    target_modules: list[str] | str = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )


@dataclass
class TrainConfig:
    data: str
    output_dir: str
    backbone: str = "ours"
    speech_folder: str | None = None  # root of relative speech paths; default: the data file's dir
    cor: bool = False
    kh: bool = False
    llm: str | None = None  # ours: causal LM path / Hub id (e.g. Qwen/Qwen2.5-7B-Instruct)
    speech_encoder: str | None = None  # ours: Whisper path / Hub id (e.g. openai/whisper-large-v3)
    vocalnet_model: str | None = None  # vocalnet: a VocalNet checkpoint dir
    downsample: int = 5
    max_target_tokens: int = 512
    torch_dtype: str = "bfloat16"
    seed: int = 0
    lora: LoraSettings = field(default_factory=LoraSettings)
    training: dict[str, Any] = field(default_factory=dict)  # transformers.TrainingArguments kwargs

    def transforms(self) -> TransformConfig:
        return TransformConfig(cor=self.cor, kh=self.kh)


def load_config(path: str | os.PathLike, **overrides: Any) -> TrainConfig:
    import yaml

    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    raw.update({k: v for k, v in overrides.items() if v is not None})
    lora = raw.pop("lora", {}) or {}
    known = set(TrainConfig.__dataclass_fields__)
    unknown = set(raw) - known
    if unknown:
        raise RecipeConfigError(f"{path}: unknown keys {sorted(unknown)}; known: {sorted(known)}")
    for key in ("data", "output_dir"):
        if not raw.get(key):
            raise RecipeConfigError(f"{path}: `{key}` is required")
    training = dict(raw.pop("training", None) or {})
    ds = training.get("deepspeed")
    if isinstance(ds, str) and not Path(ds).is_absolute() and (Path(path).parent / ds).exists():
        training["deepspeed"] = str((Path(path).parent / ds).resolve())  # relative to the config file
    cfg = TrainConfig(**raw, training=training, lora=LoraSettings(**lora))
    if cfg.backbone not in BACKBONES:
        raise RecipeConfigError(f"{path}: backbone must be one of {BACKBONES}, got {cfg.backbone!r}")
    return cfg


# ---------------------------------------------------------------------------------------------
# data


@dataclass(frozen=True)
class TrainExample:
    id: str
    speech: Path
    target: str  # transformed (CoR / KH) training target
    prompt_text: str  # text after <speech> in the human turn ("" for plain speech queries)


def load_examples(
    data_path: str | os.PathLike, speech_folder: str | os.PathLike | None, transforms: TransformConfig
) -> list[TrainExample]:
    """Training examples from a VocalNet-format JSON list; bad items raise naming the id."""
    data_path = Path(data_path)
    root = Path(speech_folder) if speech_folder else data_path.parent
    items = json.loads(data_path.read_text(encoding="utf-8"))
    out = []
    for item in items:
        iid = str(item.get("id"))
        convs = item.get("conversations") or []
        if len(convs) < 2 or convs[0].get("from") != "human" or convs[1].get("from") != "gpt":
            raise RecipeConfigError(f"{data_path}: item {iid}: expected a human turn then a gpt turn")
        human = convs[0]["value"]
        if "<speech>" not in human:
            raise RecipeConfigError(f"{data_path}: item {iid}: human turn has no <speech> placeholder")
        speech = root / item["speech"]
        if not speech.exists():
            raise RecipeConfigError(f"{data_path}: item {iid}: speech file not found: {speech}")
        target = transform_target(item.get("query_text"), convs[1]["value"], transforms)
        out.append(TrainExample(iid, speech, target, human.replace("<speech>", "").strip()))
    return out


def train_tokenizer(texts: list[str], vocab_size: int = 400):
    """A small BPE tokenizer trained on ``texts`` (no download), wrapped as PreTrainedTokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    # "never": no word-start marker is invented where special tokens split the text, so decode(encode(x)) == x
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="never")
    tok.decoder = decoders.Metaspace(prepend_scheme="never")
    base_special = ["<pad>", "<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=base_special))
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        unk_token="<unk>",
        eos_token="<|im_end|>",
        bos_token="<|endoftext|>",
    )


def _without_recipe_tokens(text: str) -> str:
    for token in SPECIAL_TOKENS:
        text = text.replace(token, " ")
    return text


def add_recipe_tokens(tokenizer, llm) -> list[int]:
    """Add the CoR/KH special tokens to the tokenizer and resize the LLM embeddings; their ids."""
    tokenizer.add_special_tokens({"additional_special_tokens": list(SPECIAL_TOKENS)})
    if llm.get_input_embeddings().num_embeddings < len(tokenizer):
        llm.resize_token_embeddings(len(tokenizer))
    return tokenizer.convert_tokens_to_ids(list(SPECIAL_TOKENS))


class SpeechCollator:
    """Batches TrainExamples for SpeechLM: Whisper features + prompt/target ids."""

    def __init__(self, tokenizer, feature_extractor, parts, max_target_tokens: int = 512):
        self.tok = tokenizer
        self.fe = feature_extractor
        self.parts = parts
        self.max_target_tokens = max_target_tokens

    def _ids(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def prompt_ids(self, prompt_text: str = "") -> tuple[list[int], list[int]]:
        suffix = (prompt_text + "\n" if prompt_text else "") + self.parts.prompt_suffix
        return self._ids(self.parts.prompt_prefix), self._ids(suffix)

    def features(self, paths: list[Path]):

        audios = [load_audio(p) for p in paths]
        return self.fe(audios, sampling_rate=SAMPLE_RATE, return_tensors="pt").input_features

    def __call__(self, examples: list[TrainExample]) -> dict:
        import torch

        prompts = [self.prompt_ids(e.prompt_text) for e in examples]
        prefix = prompts[0][0]  # the template head is the same for every row
        targets = [self._ids(e.target)[: self.max_target_tokens] + [self.tok.eos_token_id] for e in examples]
        suffix_ids, suffix_mask = self._pad([s for _, s in prompts])
        target_ids, target_mask = self._pad(targets)
        return {
            "input_features": self.features([e.speech for e in examples]),
            "prefix_ids": torch.tensor([prefix] * len(examples), dtype=torch.long),
            "suffix_ids": suffix_ids,
            "suffix_mask": suffix_mask,
            "target_ids": target_ids,
            "target_mask": target_mask,
        }

    def _pad(self, rows: list[list[int]]):
        import torch

        ids = torch.full((len(rows), max(map(len, rows))), self.tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r)
            mask[i, : len(r)] = 1
        return ids, mask


# ---------------------------------------------------------------------------------------------
# model assembly


def lora_config(settings: LoraSettings, new_token_ids: list[int], embedding_names: tuple[str, ...]):
    from peft import LoraConfig

    return LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=settings.target_modules,
        task_type="CAUSAL_LM",
        trainable_token_indices={name: list(new_token_ids) for name in embedding_names},
    )


def _embedding_names(llm) -> tuple[str, ...]:
    """Module names of the input embedding and (when untied) the output head, for trainable tokens."""
    names = []
    for name, module in llm.named_modules():
        untied_head = module is llm.get_output_embeddings() and not getattr(
            llm.config, "tie_word_embeddings", False
        )
        if module is llm.get_input_embeddings() or untied_head:
            names.append(name.split(".")[-1])
    return tuple(names)


def build_speech_lm(cfg: TrainConfig, examples: list[TrainExample]):
    """(SpeechLM with LoRA applied to its LLM, tokenizer) for backbone ours/tiny."""
    from peft import get_peft_model

    from cs3_tasks.recipe.model import build_pretrained_speech_lm, build_tiny_speech_lm  # deferred: torch

    if cfg.backbone == "tiny":
        # trained on the texts without the recipe tokens: those must be added (and resized) as for a real LLM
        texts = [_without_recipe_tokens(e.target) for e in examples] + [e.prompt_text for e in examples]
        tokenizer = train_tokenizer(texts)
        model = build_tiny_speech_lm(
            len(tokenizer),
            tokenizer.pad_token_id,
            tokenizer.eos_token_id,
            seed=cfg.seed,
            downsample=cfg.downsample,
        )
    else:
        if not cfg.llm or not cfg.speech_encoder:
            raise RecipeConfigError("backbone `ours` needs `llm` and `speech_encoder` in the config")
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(cfg.llm)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        model = build_pretrained_speech_lm(
            cfg.llm, cfg.speech_encoder, tokenizer, downsample=cfg.downsample, torch_dtype=cfg.torch_dtype
        )
    model.base_vocab_size = model.llm.get_input_embeddings().num_embeddings
    new_ids = add_recipe_tokens(tokenizer, model.llm)
    model.freeze_encoder()
    model.llm = get_peft_model(model.llm, lora_config(cfg.lora, new_ids, _embedding_names(model.llm)))
    return model, tokenizer


def save_adapter(model, tokenizer, out_dir: str | os.PathLike, cfg: TrainConfig) -> Path:
    """peft adapter + tokenizer + projector + recipe metadata in ``out_dir``."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    llm = model.llm if hasattr(model, "llm") else model
    llm.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    if hasattr(model, "projector"):
        save_file(
            {k: v.detach().cpu().contiguous() for k, v in model.projector.state_dict().items()},
            str(out / PROJECTOR_FILE),
        )
    meta = {
        "backbone": cfg.backbone,
        "llm": cfg.llm,
        "speech_encoder": cfg.speech_encoder,
        "vocalnet_model": cfg.vocalnet_model,
        "downsample": cfg.downsample,
        "transforms": {"cor": cfg.cor, "kh": cfg.kh},
        "special_tokens": list(SPECIAL_TOKENS),
        "lora": asdict(cfg.lora),
        "seed": cfg.seed,
    }
    if cfg.backbone == "tiny":  # the tiny base is rebuilt from its seed + vocab size on reload
        meta["tiny_base_vocab"] = model.base_vocab_size
    (out / RECIPE_FILE).write_text(json.dumps(meta, indent=2, ensure_ascii=False), encoding="utf-8")
    return out


def load_trained(adapter_dir: str | os.PathLike):
    """(SpeechLM with the adapter loaded, tokenizer, TrainConfig-like meta) from a saved directory."""
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from cs3_tasks.recipe.model import build_pretrained_speech_lm, build_tiny_speech_lm  # deferred: torch

    adapter_dir = Path(adapter_dir)
    meta = json.loads((adapter_dir / RECIPE_FILE).read_text(encoding="utf-8"))
    tokenizer = AutoTokenizer.from_pretrained(str(adapter_dir))
    if meta["backbone"] == "tiny":
        model = build_tiny_speech_lm(
            meta["tiny_base_vocab"],
            tokenizer.pad_token_id,
            tokenizer.eos_token_id,
            seed=meta["seed"],
            downsample=meta["downsample"],
        )
    elif meta["backbone"] == "ours":
        model = build_pretrained_speech_lm(
            meta["llm"], meta["speech_encoder"], tokenizer, downsample=meta["downsample"]
        )
    else:
        raise RecipeConfigError(f"{adapter_dir}: VocalNet adapters are loaded by the cs3-vocalnet wrapper")
    model.llm = apply_adapter(model.llm, adapter_dir, merge=False)
    model.projector.load_state_dict(load_file(str(adapter_dir / PROJECTOR_FILE)))
    model.eval()
    return model, tokenizer, meta


def generate(
    model,
    tokenizer,
    speech_paths: list[str | os.PathLike],
    transforms: TransformConfig,
    *,
    prompt_text: str = "",
    max_new_tokens: int = 64,
):
    """Responses (cs3_tasks.recipe.transforms.Response) for speech queries: CoR removed, KH stripped."""
    from cs3_tasks.recipe.model import SpeechLMParts, whisper_feature_extractor  # deferred: torch

    encoder_config = model.encoder.config
    collator = SpeechCollator(tokenizer, whisper_feature_extractor(encoder_config), SpeechLMParts())
    import torch

    prefix, suffix = collator.prompt_ids(prompt_text)
    feats = collator.features([Path(p) for p in speech_paths])
    n = len(speech_paths)
    ids = model.generate_ids(feats, torch.tensor([prefix] * n), torch.tensor([suffix] * n), max_new_tokens)
    # keep the recipe special tokens in the decoded text: postprocess needs them
    texts = [decode_keeping_recipe_tokens(tokenizer, seq) for seq in ids]
    return [postprocess(t, transforms) for t in texts]


# ---------------------------------------------------------------------------------------------
# VocalNet backbone


def build_vocalnet(cfg: TrainConfig):
    """(VocalNet model with LoRA on its LLM layers, tokenizer); a clear error when omni_speech is absent."""
    try:
        from omni_speech.model.builder import load_pretrained_model
    except ImportError as exc:
        raise RecipeConfigError(
            "backbone `vocalnet` needs the official VocalNet code importable as `omni_speech` "
            "(git clone https://github.com/SJTU-OmniAgent/VocalNet && pip install -e VocalNet); "
            f"import failed: {exc}"
        ) from exc
    from peft import get_peft_model

    if not cfg.vocalnet_model:
        raise RecipeConfigError("backbone `vocalnet` needs `vocalnet_model` (a VocalNet checkpoint dir)")
    import torch

    # each process loads onto its own GPU (accelerate/torchrun set LOCAL_RANK)
    device = f"cuda:{env_int('LOCAL_RANK', 0)}" if torch.cuda.is_available() else "cpu"
    tokenizer, model, _ = load_pretrained_model(cfg.vocalnet_model, None, s2s=True, device=device)
    new_ids = add_recipe_tokens(tokenizer, model)
    model.requires_grad_(False)  # speech encoder, projector, speech generator stay frozen
    settings = LoraSettings(cfg.lora.r, cfg.lora.alpha, cfg.lora.dropout, LLM_LORA_TARGETS)
    return get_peft_model(model, lora_config(settings, new_ids, ("embed_tokens", "lm_head"))), tokenizer


class VocalNetCollator:
    """Batches for VocalNet: chat-templated ids with SPEECH_TOKEN_INDEX, 128-bin Whisper mels."""

    def __init__(self, tokenizer, max_target_tokens: int = 512):
        from omni_speech.constants import IGNORE_INDEX, SPEECH_TOKEN_INDEX

        self.tok, self.max_target_tokens = tokenizer, max_target_tokens
        self.speech_index, self.ignore = SPEECH_TOKEN_INDEX, IGNORE_INDEX

    def __call__(self, examples: list[TrainExample]) -> dict:
        import torch
        import whisper

        rows, labels, mels = [], [], []
        for e in examples:
            prompt = self.tok.apply_chat_template(
                [{"role": "user", "content": "<speech>" + ("\n" + e.prompt_text if e.prompt_text else "")}],
                tokenize=False,
                add_generation_prompt=True,
            )
            before, after = prompt.split("<speech>", 1)
            p_ids = (
                self.tok(before, add_special_tokens=False)["input_ids"]
                + [self.speech_index]
                + self.tok(after, add_special_tokens=False)["input_ids"]
            )
            t_ids = self.tok(e.target + self.tok.eos_token, add_special_tokens=False)["input_ids"]
            t_ids = t_ids[: self.max_target_tokens]
            rows.append(p_ids + t_ids)
            labels.append([self.ignore] * len(p_ids) + t_ids)
            audio = whisper.pad_or_trim(load_audio(e.speech))
            mels.append(whisper.log_mel_spectrogram(audio, n_mels=128).permute(1, 0))
        width = max(map(len, rows))
        pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.tok.eos_token_id
        input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
        label_t = torch.full((len(rows), width), self.ignore, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, (r, lab) in enumerate(zip(rows, labels)):
            input_ids[i, : len(r)] = torch.tensor(r)
            label_t[i, : len(r)] = torch.tensor(lab)
            mask[i, : len(r)] = 1
        speech = torch.stack(mels)
        return {
            "input_ids": input_ids,
            "attention_mask": mask,
            "labels": label_t,
            "speech": speech,
            "speech_lengths": torch.full((len(rows),), speech.shape[1], dtype=torch.long),
        }


def vocalnet_text_loss(model, inputs: dict):
    """LM loss only (stage-1 style): VocalNet's forward in training mode also needs speech units."""
    base = model.get_base_model()
    ids, pos, mask, _, embeds, labels = base.prepare_inputs_labels_for_speech_and_text(
        inputs["input_ids"],
        None,
        inputs["attention_mask"],
        None,
        inputs["labels"],
        inputs["speech"],
        inputs["speech_lengths"],
    )
    # the plain causal-LM forward of the Qwen2/Llama parent class, through the LoRA-wrapped layers
    lm_cls = next(c for c in type(base).__mro__ if c.__name__ in ("Qwen2ForCausalLM", "LlamaForCausalLM"))
    return lm_cls.forward(
        base, input_ids=ids, position_ids=pos, attention_mask=mask, inputs_embeds=embeds, labels=labels
    ).loss


# ---------------------------------------------------------------------------------------------
# training


def _trainer_class():
    from transformers import Trainer

    class RecipeTrainer(Trainer):
        """Saves only the adapter layout (not full 7B state dicts) at checkpoints."""

        recipe_cfg: TrainConfig
        recipe_tokenizer: Any

        def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
            if self.recipe_cfg.backbone == "vocalnet":
                loss = vocalnet_text_loss(model, inputs)
                return (loss, None) if return_outputs else loss
            out = model(**inputs)
            return (out["loss"], out) if return_outputs else out["loss"]

        def _save(self, output_dir=None, state_dict=None):
            save_adapter(
                self.model, self.recipe_tokenizer, output_dir or self.args.output_dir, self.recipe_cfg
            )

    return RecipeTrainer


def train(cfg: TrainConfig) -> dict:
    """Train; save the adapter to ``cfg.output_dir``; returns {"output_dir", "losses", "examples"}."""
    from transformers import TrainingArguments, set_seed

    from cs3_tasks.recipe.model import SpeechLMParts, whisper_feature_extractor  # deferred: torch

    set_seed(cfg.seed)
    examples = load_examples(cfg.data, cfg.speech_folder, cfg.transforms())
    if not examples:
        raise RecipeConfigError(f"{cfg.data}: no training items")
    if cfg.backbone == "vocalnet":
        model, tokenizer = build_vocalnet(cfg)
        collator = VocalNetCollator(tokenizer, cfg.max_target_tokens)
    else:
        model, tokenizer = build_speech_lm(cfg, examples)
        collator = SpeechCollator(
            tokenizer, whisper_feature_extractor(model.encoder.config), SpeechLMParts(), cfg.max_target_tokens
        )
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    log.info("trainable parameters: %d of %d", trainable, sum(p.numel() for p in model.parameters()))
    targs = {
        "output_dir": cfg.output_dir,
        "remove_unused_columns": False,
        "report_to": [],
        "seed": cfg.seed,
        "save_strategy": "no",
        "logging_steps": 1,
    }
    targs.update(cfg.training)
    args = TrainingArguments(**targs)
    trainer_cls = _trainer_class()
    trainer_cls.recipe_cfg, trainer_cls.recipe_tokenizer = cfg, tokenizer
    trainer = trainer_cls(
        model=model, args=args, train_dataset=_ListDataset(examples), data_collator=collator
    )
    trainer.train()
    if trainer.is_world_process_zero():
        save_adapter(trainer.model, tokenizer, cfg.output_dir, cfg)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    trained = sorted({".".join(n.split(".")[:2]) for n, p in model.named_parameters() if p.requires_grad})
    return {
        "output_dir": cfg.output_dir,
        "losses": losses,
        "examples": len(examples),
        "trainable_parameters": trainable,
        "trainable_modules": trained,
    }


class _ListDataset:
    def __init__(self, items: list):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int):
        return self.items[i]
