"""Language-pair configuration: everything language-specific in one record, read from a YAML file.

A *language pair* names the two languages a task deals with and how to see them in text and speech:

* the **matrix language** (``matrix``: the query's main language, e.g. Mandarin) and the **embedded
  language** (``embedded``: the language mixed in or answered in, e.g. English, always written in
  Latin script);
* script detection (``script``: a named script or a regex character class) and tokenisation (``tokens``:
  ``char`` = every script character is a token, as in Chinese/Japanese; ``word`` = whitespace words,
  as in Korean or Hindi);
* normalisers (``normalizers`` for the matrix language, e.g. OpenCC ``t2s``; ``embedded_normalizer``:
  Whisper's English normaliser or its basic one);
* the weight of one embedded word against one matrix token when deciding which language dominates;
* the ASR language hint for responses (``asr_language``; null = Whisper auto-detection) and for queries;
* the expected response language (``response_language``, per set with ``sets``), used by LSA and by the
  off-target rate;
* judge prompt templates (``prompts``: a package prompt name, or a file next to the YAML);
* the espeak-ng voice that reads synthesised queries (``tts_voice``).

Instances ship as package data in ``cs3_tasks/core/language_pairs/*.yaml`` (``zh-en``: CS3-Bench
code-switching;
``zh2en``: BELLE-eval-S2S, spoken Chinese in, English out). Another pair is one more YAML file: put it in a
folder listed in ``$CS3_LANGUAGE_PAIRS`` (os.pathsep-separated) or refer to it by path. No code changes.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from cs3_tasks.core.environment import refused
from cs3_tasks.core.scripts import SCRIPTS
from cs3_tasks.prompts import load_prompt

PAIRS_ENV = "CS3_LANGUAGE_PAIRS"  # extra folders of pair YAML files, os.pathsep-separated
DEFAULT_PAIR = "zh-en"
PAIR_DIR = Path(__file__).resolve().parent / "language_pairs"

TOKENIZATIONS = ("char", "word")
MATRIX_NORMALIZERS = ("t2s",)  # applied after NFKC; "t2s" = OpenCC traditional -> simplified
EMBEDDED_NORMALIZERS = ("whisper_english", "whisper_basic")
_CODE = re.compile(r"[a-z]{2,3}(?:-[A-Za-z0-9]+)*")


class LanguagePairError(ValueError):
    """A pair configuration that cannot be found or is invalid; the message names the file and field."""


@dataclass(frozen=True)
class SetLanguage:
    """Per-set overrides of a pair (e.g. CS3's knowledge_en expects English answers)."""

    response_language: str | None = None
    asr_language: str | None = None
    query_language: str | None = None


@dataclass(frozen=True)
class LanguagePair:
    name: str
    matrix: str  # language code, e.g. "zh"
    matrix_name: str  # e.g. "Mandarin Chinese"
    embedded: str  # e.g. "en"
    embedded_name: str  # e.g. "English"
    script_class: str  # regex character-class body of the matrix script
    tokens: str = "char"  # "char" | "word"
    normalizers: tuple[str, ...] = ()  # matrix-language normalisers after NFKC
    embedded_normalizer: str = "whisper_english"
    embedded_word_weight: Fraction = Fraction(1)  # one embedded word weighs this many matrix tokens
    response_language: str = ""  # expected language of responses (LSA / off-target)
    asr_language: str | None = None  # Whisper hint for response speech; None = auto-detect
    query_language: str | None = None  # language of the spoken query (TTS voice, QC ASR)
    tts_voice: str | None = None  # espeak-ng voice for synthesised queries
    prompts: Mapping[str, str] = field(default_factory=dict)  # judge task -> prompt name or file
    sets: Mapping[str, SetLanguage] = field(default_factory=dict)
    description: str = ""
    source: Path | None = None  # the YAML file it was read from

    @property
    def languages(self) -> tuple[str, str]:
        return (self.matrix, self.embedded)

    def language_name(self, code: str) -> str:
        return {self.matrix: self.matrix_name, self.embedded: self.embedded_name}.get(code, code)

    def response_language_of(self, set_name: str | None = None) -> str:
        """Expected response language of a set (the set's override, else the pair's)."""
        override = self.sets.get(set_name) if set_name else None
        return (
            override.response_language if override and override.response_language else self.response_language
        )

    def asr_language_of(self, set_name: str | None = None) -> str | None:
        override = self.sets.get(set_name) if set_name else None
        return override.asr_language if override and override.asr_language else self.asr_language

    def query_language_of(self, set_name: str | None = None) -> str | None:
        override = self.sets.get(set_name) if set_name else None
        return override.query_language if override and override.query_language else self.query_language

    def prompt_template(self, task: str) -> str:
        """The judge prompt template text for ``task`` (e.g. "conversation").

        A value ending in ``.txt`` is a file (relative to the pair's YAML); any other value is the name of a
        package prompt (``cs3_tasks/prompts/<name>.txt``).
        """
        if task not in self.prompts:
            raise LanguagePairError(
                f"language pair {self.name!r} has no judge prompt for {task!r} "
                f"(prompts: {sorted(self.prompts)}) in {self.source}"
            )
        ref = self.prompts[task]
        if ref.endswith(".txt"):
            path = Path(ref).expanduser()
            if not path.is_absolute() and self.source is not None:
                path = self.source.parent / path
            if not path.is_file():
                raise LanguagePairError(f"language pair {self.name!r}: prompt file {path} not found")
            return path.read_text(encoding="utf-8")

        return load_prompt(ref)

    def to_dict(self) -> dict[str, Any]:
        """The settings that matter for results (recorded next to scores)."""
        return {
            "name": self.name,
            "matrix": self.matrix,
            "embedded": self.embedded,
            "tokens": self.tokens,
            "normalizers": list(self.normalizers),
            "embedded_normalizer": self.embedded_normalizer,
            "embedded_word_weight": str(self.embedded_word_weight),
            "response_language": self.response_language,
            "asr_language": self.asr_language,
            "query_language": self.query_language,
            "source": str(self.source) if self.source else None,
        }


# ---------------------------------------------------------------------------------------------------------
# loading


def search_dirs() -> list[Path]:
    """Folders searched for ``<name>.yaml``: $CS3_LANGUAGE_PAIRS entries first, then the package's."""
    extra = [Path(p).expanduser() for p in os.environ.get(PAIRS_ENV, "").split(os.pathsep) if p.strip()]
    for folder in extra:
        if not folder.is_dir():
            raise refused(
                PAIRS_ENV,
                str(folder),
                f"each entry must be a folder of pair YAML files ({os.pathsep}-separated)",
            )
    return [*extra, PAIR_DIR]


def available_pairs() -> dict[str, Path]:
    """Every pair that can be loaded by name: {name: yaml path} (earlier folders win)."""
    found: dict[str, Path] = {}
    for folder in search_dirs():
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.yaml")):
            try:
                name = _read_yaml(path).get("name") or path.stem
            except LanguagePairError:
                continue
            found.setdefault(str(name), path)
            found.setdefault(path.stem, path)
    return found


def load_pair(ref: str | os.PathLike | LanguagePair | None = None) -> LanguagePair:
    """A pair by name (``zh-en``, ``zh2en``...), by YAML path, or as is; None gives the default zh-en."""
    if isinstance(ref, LanguagePair):
        return ref
    if ref is None or str(ref).strip() == "":
        ref = DEFAULT_PAIR
    ref = str(ref).strip()
    path = Path(ref).expanduser()
    if path.suffix in (".yaml", ".yml") or path.is_file():
        if not path.is_file():
            raise LanguagePairError(f"language pair file {path} not found")
        return _load_file(str(path.resolve()), path.stat().st_mtime_ns)
    for folder in search_dirs():  # <name>.yaml first: no need to read every file
        candidate = folder / f"{ref}.yaml"
        if candidate.is_file():
            return _load_file(str(candidate.resolve()), candidate.stat().st_mtime_ns)
    pairs = available_pairs()
    if ref not in pairs:
        raise LanguagePairError(
            f"unknown language pair {ref!r}; available: {sorted(set(pairs))} (folders searched: "
            f"{', '.join(map(str, search_dirs()))}; add one with ${PAIRS_ENV} or give a YAML path)"
        )
    return _load_file(str(pairs[ref].resolve()), pairs[ref].stat().st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _load_file(path: str, mtime_ns: int) -> LanguagePair:  # mtime in the key: an edited file is re-read
    return pair_from_dict(_read_yaml(Path(path)), source=Path(path))


def _read_yaml(path: Path) -> dict:
    import yaml

    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise LanguagePairError(f"cannot read language pair file {path}: {err}") from err
    if not isinstance(raw, dict):
        raise LanguagePairError(f"language pair file {path}: expected a mapping")
    return raw


def _fraction(value: Any, where: str) -> Fraction:
    try:
        weight = Fraction(str(value))
    except (ValueError, ZeroDivisionError) as err:
        raise LanguagePairError(f"{where}: embedded_word_weight {value!r} is not a number or a/b") from err
    if weight <= 0:
        raise LanguagePairError(f"{where}: embedded_word_weight must be > 0, got {value!r}")
    return weight


def pair_from_dict(raw: Mapping[str, Any], source: Path | None = None) -> LanguagePair:
    """Validate a pair mapping (the YAML content); LanguagePairError lists every problem."""
    where = str(source) if source else "language pair"
    problems: list[str] = []
    known = {
        "name",
        "description",
        "matrix",
        "embedded",
        "script",
        "script_class",
        "tokens",
        "normalizers",
        "embedded_normalizer",
        "embedded_word_weight",
        "response_language",
        "asr_language",
        "query_language",
        "tts_voice",
        "prompts",
        "sets",
    }
    unknown = sorted(set(raw) - known)
    if unknown:
        problems.append(f"unknown field(s) {unknown}")

    def language(key: str) -> tuple[str, str]:
        value = raw.get(key)
        if not isinstance(value, Mapping) or not isinstance(value.get("code"), str):
            problems.append(f"{key}: expected {{code: xx, name: Language}}")
            return "", ""
        code = value["code"].strip()
        if not _CODE.fullmatch(code):
            problems.append(f"{key}.code {code!r} is not a language code like 'zh' or 'ko'")
        return code, str(value.get("name") or code)

    name = str(raw.get("name") or (source.stem if source else "")).strip()
    if not name:
        problems.append("name: missing")
    matrix, matrix_name = language("matrix")
    embedded, embedded_name = language("embedded")
    if matrix and matrix == embedded:
        problems.append(f"matrix and embedded language are both {matrix!r}")
    script_class = raw.get("script_class")
    script = raw.get("script")
    if script_class is None:
        if script not in SCRIPTS:
            problems.append(f"script: {script!r} is not one of {sorted(SCRIPTS)} (or give script_class)")
            script_class = ""
        else:
            script_class = SCRIPTS[script]
    else:
        try:
            re.compile(f"[{script_class}]")
        except re.error as err:
            problems.append(f"script_class is not a valid regex character class: {err}")
    if script_class and re.search(f"[{script_class}]", "abcxyzABCXYZ0123456789"):
        problems.append("script must not include Latin letters or digits (they belong to the embedded side)")
    tokens = raw.get("tokens", "char")
    if tokens not in TOKENIZATIONS:
        problems.append(f"tokens: {tokens!r} is not one of {list(TOKENIZATIONS)}")
    normalizers = tuple(raw.get("normalizers") or ())
    for step in normalizers:
        if step not in MATRIX_NORMALIZERS:
            problems.append(f"normalizers: {step!r} is not one of {list(MATRIX_NORMALIZERS)}")
    embedded_normalizer = raw.get("embedded_normalizer", "whisper_english")
    if embedded_normalizer not in EMBEDDED_NORMALIZERS:
        problems.append(
            f"embedded_normalizer: {embedded_normalizer!r} is not one of {list(EMBEDDED_NORMALIZERS)}"
        )
    weight = Fraction(1)
    try:
        weight = _fraction(raw.get("embedded_word_weight", 1), where)
    except LanguagePairError as err:
        problems.append(str(err).split(": ", 1)[-1])
    languages = {matrix, embedded}
    response_language = raw.get("response_language") or matrix
    if response_language not in languages:
        problems.append(f"response_language {response_language!r} must be {matrix!r} or {embedded!r}")
    prompts = raw.get("prompts") or {}
    if not isinstance(prompts, Mapping) or not all(isinstance(v, str) for v in prompts.values()):
        problems.append("prompts: expected a mapping of judge task -> prompt name or .txt file")
        prompts = {}
    sets: dict[str, SetLanguage] = {}
    for set_name, spec in (raw.get("sets") or {}).items():
        if not isinstance(spec, Mapping) or set(spec) - {
            "response_language",
            "asr_language",
            "query_language",
        }:
            problems.append(f"sets.{set_name}: expected {{response_language, asr_language, query_language}}")
            continue
        if spec.get("response_language") and spec["response_language"] not in languages:
            problems.append(
                f"sets.{set_name}.response_language {spec['response_language']!r} must be "
                f"{matrix!r} or {embedded!r}"
            )
        sets[str(set_name)] = SetLanguage(
            spec.get("response_language"), spec.get("asr_language"), spec.get("query_language")
        )
    if problems:
        raise LanguagePairError(f"{len(problems)} problem(s) in {where}:\n  " + "\n  ".join(problems))
    return LanguagePair(
        name=name,
        matrix=matrix,
        matrix_name=matrix_name,
        embedded=embedded,
        embedded_name=embedded_name,
        script_class=script_class,
        tokens=tokens,
        normalizers=normalizers,
        embedded_normalizer=embedded_normalizer,
        embedded_word_weight=weight,
        response_language=response_language,
        asr_language=raw.get("asr_language"),
        query_language=raw.get("query_language") or matrix,
        tts_voice=raw.get("tts_voice"),
        prompts=dict(prompts),
        sets=sets,
        description=str(raw.get("description") or ""),
        source=source,
    )


def default_pair() -> LanguagePair:
    """The zh-en pair of CS3-Bench (text.py's functions behave as this pair when given none)."""
    return load_pair(DEFAULT_PAIR)
