"""The reference protocol: CS3-Bench scored exactly as the authors' own scripts score it.

The authors' scoring scripts (VocalBench-zh, ``utils/cs_knowledge.py``, ``utils/cs_knowledge_en.py``,
``utils/cs_open_ended.py``) are their text: the prompts are never copied into this package. They are read at
run time from the user's copy (``--reference-scripts DIR`` / ``$CS3_REFERENCE_SCRIPTS``: a VocalBench-zh
checkout or any folder holding its ``utils/``), else downloaded once from the authors' repository at the
pinned commit, checked against the sha256 values below and cached. The prompt templates are the f-strings of
their judge functions, taken apart with ``ast`` and filled the way Python fills them.

What the reference protocol does, as their code does it:

* keyword stage, raw substring tests: ``Answer_zh in response``, ``Answer_en.lower() in response.lower()``,
  or any ``·`` part of Answer_zh after ``.strip()`` (one character included); knowledge_en: only the
  case-folded Answer;
* judge: one user message (no system message) to qwen-max-2025-01-25 at temperature 0; a knowledge reply
  counts when it *starts with* 正确/错误 (knowledge_en: True/False), an open-ended reply by its first
  ``[0-5]`` in brackets anywhere (0 allowed); otherwise it is asked again, 10 asks in all, then the item
  counts wrong (score 1 for open-ended);
* every item with a response stays in the denominator; Relevance Rate = share of relevance > 3.

One departure, where their code has no answer: when the judge cannot be reached after the client's retries
(their client returns None and their script crashes), the item gets a judge error and the headline is
marked incomplete with bounds; transport failures are missing verdicts, not wrong ones.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cs3_tasks.core.cache import SqliteCache, cache_dir, stable_key
from cs3_tasks.core.chat_api import EndpointError

if TYPE_CHECKING:  # pragma: no cover
    import requests

    from cs3_tasks.judge import JudgeConfig

REFERENCE_REPOSITORY = "SJTU-OmniAgent/VocalBench-zh"
REFERENCE_COMMIT = "3524c78c78c5da3b2636f3ffe9740f6a04a1222a"
# sha256 of the three scripts at REFERENCE_COMMIT (utils/<name>); a download must match them.
SCRIPT_SHA256 = {
    "cs_knowledge.py": "8dd52b7fae793422222c5b8d1e9d2406d236fcc4a8dc27936d86f66a404c766e",
    "cs_knowledge_en.py": "6383c4c311070ba15620c61f08a06651f391410f7578619603bf05af9d417b68",
    "cs_open_ended.py": "f829208f3706bbcd5d9a569027a41ce7ed71275da056b19f9cadb6f1f5463912",
}
SCRIPTS_ENV = "CS3_REFERENCE_SCRIPTS"
DOWNLOAD_URL = "https://raw.githubusercontent.com/{repository}/{commit}/utils/{name}"
CACHE_SUBDIR = f"reference/vocalbench-zh-{REFERENCE_COMMIT[:12]}/utils"

REFERENCE_JUDGE_MODEL = "qwen-max-2025-01-25"
REFERENCE_TEMPERATURE = 0
REFERENCE_ASR_BACKEND = "transformers"
REFERENCE_ASR_MODEL = "openai/whisper-large-v3"
MAX_ASKS = 10  # asks per item before their fallback applies
OPEN_ENDED_FALLBACK = 1  # their score when no [0-5] was found in 10 replies
UNDERSTOOD_ABOVE = 3  # Relevance Rate: relevance > 3
SCORE_RANGE = (0, 5)  # [0] is accepted by their pattern

SETS = ("knowledge", "knowledge_en", "open_ended")
ASPECTS = ("relevance", "semantic")
# The authors' file stem of each set (json/<stem>.json, wav/<stem>/, json_asr/<stem>.json, utils/<stem>.py).
AUTHORS_SET_FILES = {
    "knowledge": "cs_knowledge",
    "knowledge_en": "cs_knowledge_en",
    "open_ended": "cs_open_ended",
}
# (script, function, expected parameters, the verdict prefixes its code tests with startswith)
_JUDGE_FUNCTIONS = {
    "knowledge": (
        "cs_knowledge.py",
        "qwenmax_eval",
        ("question", "ans_zh", "ans_en", "response"),
        ("正确", "错误"),
    ),
    "knowledge_en": (
        "cs_knowledge_en.py",
        "qwenmax_eval",
        ("question", "ans_en", "response"),
        ("True", "False"),
    ),
    "relevance": ("cs_open_ended.py", "qwenmax_eval_relevance", ("question", "ans", "response"), ()),
    "semantic": ("cs_open_ended.py", "qwenmax_eval_semantic", ("question", "ans", "response"), ()),
}
VERDICT_PREFIXES = {"zh": ("正确", "错误"), "en": ("True", "False")}
_SCORE_PATTERN = re.compile(r"\[([0-5])\]")
_CACHE_SCHEMA = "cs3-reference-judge/v1"
STATUSES = (
    "keyword",
    "judge_correct",
    "judge_wrong",
    "judge_unparsed",
    "judge_error",
    "unresolved",
    "missing",
)


class ReferenceScriptsError(RuntimeError):
    """The authors' scripts cannot be found, fetched or read as expected (a setup problem, raised early)."""


# ---------------------------------------------------------------------------------------------------
# locating the authors' scripts


@dataclass(frozen=True)
class ReferenceScripts:
    """The folder holding the three scripts, where it came from, and whether it is the pinned commit."""

    directory: Path
    origin: str  # "argument", "environment", "cache" or "download"
    sha256: dict[str, str]

    @property
    def pinned(self) -> bool:
        """True when all three files are those of REFERENCE_COMMIT."""
        return self.sha256 == SCRIPT_SHA256

    def settings(self) -> dict:
        """What settings.json records about the scripts (no paths outside the user's choice)."""
        return {
            "directory": str(self.directory),
            "origin": self.origin,
            "pinned_commit": REFERENCE_COMMIT,
            "pinned": self.pinned,
            "sha256": dict(self.sha256),
        }


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _scripts_in(folder: Path) -> Path | None:
    """``folder/utils`` or ``folder`` itself when it holds the three scripts."""
    for candidate in (folder / "utils", folder):
        if all((candidate / name).is_file() for name in SCRIPT_SHA256):
            return candidate
    return None


def _unavailable_message(cause: str) -> str:
    return (
        f"{cause}. The reference protocol reads the judge prompts from the CS3-Bench authors' scoring "
        f"scripts (VocalBench-zh utils/{', utils/'.join(SCRIPT_SHA256)}). Either point to a copy: "
        f"--reference-scripts DIR or ${SCRIPTS_ENV}=DIR (a VocalBench-zh checkout, e.g. git clone "
        f"https://github.com/{REFERENCE_REPOSITORY}, or any folder holding its utils/), or allow the "
        "one-time "
        f"download from github.com/{REFERENCE_REPOSITORY} at commit {REFERENCE_COMMIT[:7]} (cached in "
        f"{cache_dir() / CACHE_SUBDIR}). Or score with --protocol cs3 (our own prompts), or --no-judge "
        "(keyword stage only, no scripts needed)."
    )


def find_reference_scripts(
    path: str | os.PathLike | None = None,
    *,
    download: bool = True,
    url: str = DOWNLOAD_URL,
    timeout: float = 30.0,
) -> ReferenceScripts:
    """The authors' scripts: ``path``, else $CS3_REFERENCE_SCRIPTS, else the cached or downloaded pinned copy.

    ``path`` (or the variable) names a VocalBench-zh checkout, any folder holding its ``utils/``, or the
    ``utils`` folder itself; a named folder without the scripts is an error (no silent fallback). A copy at
    another commit is used as given (``ReferenceScripts.pinned`` says so). Raises ReferenceScriptsError with
    both ways to provide the scripts when none is available.
    """
    for origin, given in (("argument", path), ("environment", os.environ.get(SCRIPTS_ENV) or None)):
        if given is None:
            continue
        folder = Path(given).expanduser()
        found = _scripts_in(folder)
        if found is None:
            where = "--reference-scripts" if origin == "argument" else f"${SCRIPTS_ENV}"
            raise ReferenceScriptsError(
                _unavailable_message(
                    f"{where}={folder} holds neither utils/ with the scripts nor the scripts themselves"
                )
            )
        return ReferenceScripts(found.resolve(), origin, {n: _sha256(found / n) for n in SCRIPT_SHA256})
    cached = cache_dir() / CACHE_SUBDIR
    if _scripts_in(cached) == cached:
        sums = {n: _sha256(cached / n) for n in SCRIPT_SHA256}
        if sums == SCRIPT_SHA256:
            return ReferenceScripts(cached, "cache", sums)
    if not download:
        raise ReferenceScriptsError(
            _unavailable_message("no copy of the authors' scripts is configured or cached")
        )
    download_reference_scripts(cached, url=url, timeout=timeout)
    return ReferenceScripts(cached, "download", dict(SCRIPT_SHA256))


def download_reference_scripts(
    destination: str | os.PathLike,
    *,
    url: str = DOWNLOAD_URL,
    timeout: float = 30.0,
    session: requests.Session | None = None,
) -> Path:
    """Fetch the three scripts at REFERENCE_COMMIT into ``destination``, each checked against SCRIPT_SHA256.

    ``url`` is a template with {repository}, {commit} and {name}. Files are written atomically; nothing is
    kept from a failed or mismatching download. Raises ReferenceScriptsError naming the file and the cause.
    """
    import requests

    destination = Path(destination)
    destination.mkdir(parents=True, exist_ok=True)
    getter = session or requests
    for name, expected in SCRIPT_SHA256.items():
        address = url.format(repository=REFERENCE_REPOSITORY, commit=REFERENCE_COMMIT, name=name)
        try:
            response = getter.get(address, timeout=timeout)
        except requests.RequestException as exc:
            raise ReferenceScriptsError(
                _unavailable_message(f"cannot download {address} ({type(exc).__name__})")
            ) from exc
        if response.status_code != 200:
            raise ReferenceScriptsError(
                _unavailable_message(f"downloading {address} gave HTTP {response.status_code}")
            )
        digest = hashlib.sha256(response.content).hexdigest()
        if digest != expected:
            raise ReferenceScriptsError(
                f"downloaded {address} has sha256 {digest}, expected {expected} (commit {REFERENCE_COMMIT}); "
                f"nothing was kept. Point --reference-scripts / ${SCRIPTS_ENV} to a checkout instead."
            )
        handle, temporary = tempfile.mkstemp(prefix=f".{name}.", dir=destination)
        with os.fdopen(handle, "wb") as out:
            out.write(response.content)
        os.replace(temporary, destination / name)
    return destination


# ---------------------------------------------------------------------------------------------------
# prompt templates, read from the scripts


@dataclass(frozen=True)
class PromptTemplate:
    """An f-string of the authors' code: literal pieces and the names of the values put between them."""

    name: str  # "knowledge", "knowledge_en", "relevance" or "semantic"
    pieces: tuple[tuple[str, str], ...]  # ("text", literal) | ("field", parameter name)

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(value for kind, value in self.pieces if kind == "field")

    def fill(self, **values: Any) -> str:
        """The prompt as the f-string evaluates it: each field is ``format(value, "")`` (str for str)."""
        missing = sorted(set(self.fields) - set(values))
        if missing:
            raise KeyError(f"reference prompt {self.name!r} needs {missing}")
        return "".join(value if kind == "text" else format(values[value], "") for kind, value in self.pieces)


@dataclass(frozen=True)
class ReferenceTemplates:
    knowledge: PromptTemplate
    knowledge_en: PromptTemplate
    relevance: PromptTemplate
    semantic: PromptTemplate
    scripts: ReferenceScripts | None = None

    def for_set(self, set_name: str, aspect: str | None = None) -> PromptTemplate:
        if set_name == "open_ended":
            if aspect not in ASPECTS:
                raise ValueError(f"open_ended needs aspect relevance or semantic, got {aspect!r}")
            return getattr(self, aspect)
        _check_set(set_name)
        return getattr(self, set_name)


def _function(tree: ast.Module, name: str, script: str) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise ReferenceScriptsError(f"{script}: no function {name}() (not the VocalBench-zh scoring script?)")


def _template_of(function: ast.FunctionDef, name: str, script: str) -> PromptTemplate:
    params = [arg.arg for arg in function.args.args]
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "prompt"
            and isinstance(node.value, ast.JoinedStr)
        ):
            pieces: list[tuple[str, str]] = []
            for part in node.value.values:
                if isinstance(part, ast.Constant) and isinstance(part.value, str):
                    pieces.append(("text", part.value))
                elif (
                    isinstance(part, ast.FormattedValue)
                    and isinstance(part.value, ast.Name)
                    and part.conversion == -1
                    and part.format_spec is None
                    and part.value.id in params
                ):
                    pieces.append(("field", part.value.id))
                else:
                    raise ReferenceScriptsError(
                        f"{script}: {function.name}() builds its prompt with {ast.unparse(part)!r}, "
                        "which the reference protocol does not know how to fill"
                    )
            return PromptTemplate(name, tuple(pieces))
    raise ReferenceScriptsError(f"{script}: {function.name}() has no prompt = f'''...''' assignment")


def _startswith_prefixes(function: ast.FunctionDef) -> tuple[str, ...]:
    found = []
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "startswith"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            found.append(node.args[0].value)
    return tuple(found)


def load_templates(scripts: ReferenceScripts | str | os.PathLike | None = None) -> ReferenceTemplates:
    """The four judge prompt templates from the authors' scripts (``find_reference_scripts`` rules).

    The judge functions are checked to be the ones this protocol reproduces (their parameters and the
    verdict prefixes they test); a script that differs raises ReferenceScriptsError naming what differs.
    """
    if not isinstance(scripts, ReferenceScripts):
        scripts = find_reference_scripts(scripts)
    trees: dict[str, ast.Module] = {}
    templates = {}
    for name, (script, function_name, params, prefixes) in _JUDGE_FUNCTIONS.items():
        if script not in trees:
            path = scripts.directory / script
            try:
                trees[script] = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            except (OSError, UnicodeDecodeError, SyntaxError) as exc:
                raise ReferenceScriptsError(f"cannot read {path}: {type(exc).__name__}: {exc}") from exc
        function = _function(trees[script], function_name, script)
        found_params = tuple(arg.arg for arg in function.args.args)
        if found_params[: len(params)] != params:
            raise ReferenceScriptsError(
                f"{script}: {function_name}{found_params} does not take {params} first: a different version"
            )
        if prefixes and _startswith_prefixes(function) != prefixes:
            raise ReferenceScriptsError(
                f"{script}: {function_name}() tests verdict prefixes {_startswith_prefixes(function)}, "
                f"the reference protocol reproduces {prefixes}"
            )
        templates[name] = _template_of(function, name, script)
    return ReferenceTemplates(**templates, scripts=scripts)


def prompt_values(set_name: str, doc: Mapping, response: str) -> dict[str, Any]:
    """The arguments their code passes to the judge function, by its parameter names."""
    if set_name == "knowledge":
        return {
            "question": doc["Question"],
            "ans_zh": doc["Answer_zh"],
            "ans_en": doc["Answer_en"],
            "response": response,
        }
    if set_name == "knowledge_en":
        return {"question": doc["Question"], "ans_en": doc["Answer"], "response": response}
    _check_set(set_name)
    return {"question": doc["Question"], "ans": doc["Answer"], "response": response}


def build_prompt(
    templates: ReferenceTemplates, set_name: str, doc: Mapping, response: str, aspect: str | None = None
) -> str:
    """The prompt their code sends for one item (and aspect, for open_ended)."""
    return templates.for_set(set_name, aspect).fill(**prompt_values(set_name, doc, response))


def judge_messages(prompt: str) -> list[dict]:
    """What their client sends for a prompt: one user message, no system message."""
    return [{"role": "user", "content": prompt}]


def reference_judge_config(config: JudgeConfig) -> JudgeConfig:
    """``config`` with their sampling: temperature 0 and no max_tokens (their request has neither more)."""
    from dataclasses import replace

    return replace(config, temperature=REFERENCE_TEMPERATURE, max_tokens=None)


def is_reference_judge(config: JudgeConfig | None) -> bool:
    """True when the judge is theirs (qwen-max-2025-01-25), i.e. the numbers are comparable to the paper's."""
    return config is not None and config.model == REFERENCE_JUDGE_MODEL


def is_reference_asr(backend: str | None, model: str | None) -> bool:
    """True when the speech channel's ASR is theirs: Whisper-large-v3 through transformers."""
    if backend != REFERENCE_ASR_BACKEND or not model:
        return False
    return model == REFERENCE_ASR_MODEL or Path(model).name == REFERENCE_ASR_MODEL.split("/")[1]


def reference_asr_available() -> bool:
    """True when openai/whisper-large-v3 is in the local Hugging Face cache (loadable without a download), so
    the reference protocol can default to it; otherwise the configured ASR is used and the summary says so."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    found = try_to_load_from_cache(REFERENCE_ASR_MODEL, "config.json")
    return isinstance(found, str) and Path(found).is_file()


def protocol_settings(
    scripts: ReferenceScripts | None,
    judge: JudgeConfig | None,
    asr_backend: str | None,
    asr_model: str | None,
) -> dict:
    """What settings.json / summary.json record about a reference-protocol run, with the comparability flags
    (judge qwen-max-2025-01-25, ASR Whisper-large-v3 through transformers, pinned scripts)."""
    judge_ok = is_reference_judge(judge)
    asr_ok = is_reference_asr(asr_backend, asr_model)
    # without a judge every keyword miss counts as wrong: a lower bound of the authors' judged number, not it
    judged_as_authors = judge_ok and (scripts is None or scripts.pinned)
    return {
        "protocol": "reference",
        "reference_scripts": scripts.settings() if scripts is not None else None,
        "judge_is_reference": judge_ok,
        "asr_is_reference": asr_ok,
        "comparable_to_paper": {"text": judged_as_authors, "speech": asr_ok and judged_as_authors},
    }


# ---------------------------------------------------------------------------------------------------
# pure rules: keyword stage and reply parsing


def part_hit(answer_zh: str, response: str) -> bool:
    """Any ``·`` part of Answer_zh, stripped, occurs in the response (an empty part always does)."""
    return any(part.strip() in response for part in answer_zh.split("·"))


def knowledge_keyword_hit(response: str, answer_zh: str, answer_en: str) -> bool:
    """The knowledge keyword rule, verbatim: raw substring tests, no normalisation."""
    return (
        answer_zh in response
        or answer_en.lower() in response.lower()
        or ("·" in answer_zh and part_hit(answer_zh, response))
    )


def knowledge_en_keyword_hit(response: str, answer: str) -> bool:
    """The knowledge_en keyword rule, verbatim: the lower-cased Answer in the lower-cased response."""
    return answer.lower() in response.lower()


def keyword_hit(set_name: str, doc: Mapping, response: str) -> bool:
    """The keyword rule of a knowledge set for one item."""
    if set_name == "knowledge":
        return knowledge_keyword_hit(response, doc["Answer_zh"], doc["Answer_en"])
    if set_name == "knowledge_en":
        return knowledge_en_keyword_hit(response, doc["Answer"])
    raise ValueError(f"no keyword stage for set {set_name!r}")


def parse_knowledge_reply(reply: str, language: str = "zh") -> bool | None:
    """True/False when the reply starts with the verdict (正确/错误, or True/False for "en");
    None = ask again."""
    yes, no = VERDICT_PREFIXES[language]
    if reply.startswith(yes):
        return True
    if reply.startswith(no):
        return False
    return None


def parse_open_ended_reply(reply: str) -> int | None:
    """The first ``[0-5]`` anywhere in the reply; None = ask again."""
    found = _SCORE_PATTERN.findall(reply)
    return int(found[0]) if found else None


# ---------------------------------------------------------------------------------------------------
# asking the judge with their re-ask rule


@dataclass(frozen=True)
class ReferenceVerdict:
    value: bool | int | None  # the parsed verdict, the fallback after MAX_ASKS, or None on judge error
    raw: str | None  # the last reply
    asks: int  # replies received or attempted
    fallback: bool = False  # no reply parsed: their fallback value was applied
    error: str | None = None  # "judge_error: <cause>" when the judge could not be reached


def _ask_key(config: JudgeConfig, messages: list[dict], ask: int) -> str:
    return stable_key(
        _CACHE_SCHEMA,
        config.base_url.rstrip("/"),
        config.model,
        messages,
        config.temperature,
        config.max_tokens,
        ask,
    )


def ask_reference(
    prompts: Sequence[str],
    parse: Callable[[str], Any],
    fallback: Any,
    config: JudgeConfig,
    *,
    max_asks: int = MAX_ASKS,
    progress: bool = False,
    desc: str = "judge",
) -> list[ReferenceVerdict]:
    """Ask each prompt until ``parse(reply)`` is not None, at most ``max_asks`` times, then ``fallback``.

    Each ask goes through the judge client (``judge.complete``: its transport retries). Every reply is
    cached per (prompt, ask number), so a re-run replays the same sequence of replies without requests. A
    prompt whose
    request still fails gets ``error`` (not cached; a re-run asks again). Identical prompts are asked once.
    """
    from cs3_tasks import judge

    if not prompts:
        return []
    unique = list(dict.fromkeys(prompts))
    cache = SqliteCache(config.resolved_cache_path()) if config.use_cache else None
    key_lock = threading.Lock()
    api_key: list[str | None] = []
    local = threading.local()
    sessions: list[Any] = []

    def credentials() -> str | None:
        with key_lock:
            if not api_key:
                api_key.append(config.validate())
            return api_key[0]

    def session():
        if getattr(local, "session", None) is None:
            import requests

            local.session = requests.Session()
            with key_lock:
                sessions.append(local.session)
        return local.session

    def work(prompt: str) -> ReferenceVerdict:
        messages = judge_messages(prompt)
        reply: str | None = None
        for ask in range(max_asks):
            key = _ask_key(config, messages, ask)
            hit = cache.get(key) if cache is not None else None
            if hit is not None:
                reply = hit["raw"]
            else:
                try:
                    reply = judge.complete(messages, config, api_key=credentials(), session=session())
                except EndpointError as exc:
                    return ReferenceVerdict(None, reply, ask + 1, error=f"{judge.JUDGE_ERROR}: {exc.cause}")
                if cache is not None:
                    cache.put(key, {"raw": reply, "model": config.model})
            value = parse(reply)
            if value is not None:
                return ReferenceVerdict(value, reply, ask + 1)
        return ReferenceVerdict(fallback, reply, max_asks, fallback=True)

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(unique), desc=desc, unit="item")
    try:
        with ThreadPoolExecutor(max_workers=max(1, min(config.max_concurrency, len(unique)))) as pool:
            done = {}
            for prompt, verdict in zip(unique, pool.map(work, unique)):
                done[prompt] = verdict
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
        for s in sessions:
            s.close()
        if cache is not None:
            cache.close()
    return [done[p] for p in prompts]


def judge_knowledge(
    set_name: str,
    items: Sequence[tuple[Mapping, str]],
    templates: ReferenceTemplates,
    config: JudgeConfig,
    *,
    progress: bool = False,
) -> list[ReferenceVerdict]:
    """Their knowledge judge for (doc, response) pairs: value True/False (False after 10 unparsed replies)."""
    language = "en" if set_name == "knowledge_en" else "zh"
    prompts = [build_prompt(templates, set_name, doc, response) for doc, response in items]
    return ask_reference(
        prompts,
        lambda reply: parse_knowledge_reply(reply, language),
        False,
        reference_judge_config(config),
        progress=progress,
        desc=f"reference judge {set_name}",
    )


def judge_open_ended(
    items: Sequence[tuple[Mapping, str]],
    aspect: str,
    templates: ReferenceTemplates,
    config: JudgeConfig,
    *,
    progress: bool = False,
) -> list[ReferenceVerdict]:
    """Their open-ended judge for one aspect: value 0-5 (1 after 10 replies without a score)."""
    prompts = [build_prompt(templates, "open_ended", doc, response, aspect) for doc, response in items]
    return ask_reference(
        prompts,
        parse_open_ended_reply,
        OPEN_ENDED_FALLBACK,
        reference_judge_config(config),
        progress=progress,
        desc=f"reference judge {aspect}",
    )


# ---------------------------------------------------------------------------------------------------
# scoring one set


def _check_set(set_name: str) -> None:
    if set_name not in SETS:
        raise ValueError(f"unknown set {set_name!r}; expected one of {', '.join(SETS)}")


_DOC_FIELDS = {
    "knowledge": ("Question", "Answer_zh", "Answer_en"),
    "knowledge_en": ("Question", "Answer"),
    "open_ended": ("Question", "Answer"),
}


def _doc_problem(set_name: str, doc: Mapping) -> str | None:
    bad = [f for f in _DOC_FIELDS[set_name] if not isinstance(doc.get(f), str)]
    return f"reference data field(s) {', '.join(bad)} not text" if bad else None


def _blank(set_name: str, qid: str, doc: Mapping | None, response: Any, problem: str | None) -> dict:
    record: dict[str, Any] = {
        "qid": qid,
        "set": set_name,
        "protocol": "reference",
        "category": (doc or {}).get("Category"),
        "response": response,
        "problem": problem,
    }
    if set_name == "open_ended":
        for aspect in ASPECTS:
            record.update(
                {
                    aspect: None,
                    f"{aspect}_raw": None,
                    f"{aspect}_asks": 0,
                    f"{aspect}_fallback": False,
                    f"{aspect}_error": None,
                }
            )
        record["understood"] = None
    else:
        record.update(
            {
                "keyword_hit": None,
                "status": "missing",
                "correct": None,
                "judge_raw": None,
                "judge_asks": 0,
                "judge_error": None,
            }
        )
    return record


def score_reference_set(
    set_name: str,
    docs: Sequence[Mapping],
    responses: Mapping[str, str | None],
    *,
    judge: JudgeConfig | None,
    templates: ReferenceTemplates | None = None,
    scripts: ReferenceScripts | str | os.PathLike | None = None,
    progress: bool = False,
) -> list[dict]:
    """Per-item reference records for one set and one channel.

    ``responses`` maps Qid -> the scored text (the text response, or the transcript of the speech); None
    means no response on this channel. Records come in ``docs`` order, then unknown Qids (each with a
    problem). A doc without a response is "missing" (outside the denominator, as in their script, which only
    scores the items its input holds). ``judge=None`` (``--no-judge``): keyword stage only; an item it does
    not accept is "unresolved" and counts wrong; open-ended items stay unscored. The templates (hence the
    scripts) are loaded only when some item goes to the judge.
    """
    _check_set(set_name)
    by_qid = {str(doc["Qid"]): doc for doc in docs}
    records: list[dict] = []
    to_judge: list[tuple[int, Mapping, str]] = []
    for qid, doc in by_qid.items():
        response = responses.get(qid)
        problem = _doc_problem(set_name, doc)
        if response is not None and not isinstance(response, str):
            problem, response = f"response is a {type(response).__name__}, not text", None
        record = _blank(set_name, qid, doc, response, problem)
        records.append(record)
        if response is None or problem:
            continue
        if set_name != "open_ended":
            record["keyword_hit"] = keyword_hit(set_name, doc, response)
            if record["keyword_hit"]:
                record["status"], record["correct"] = "keyword", True
                continue
            if judge is None:
                record["status"], record["correct"] = "unresolved", False
                continue
        elif judge is None:
            continue
        to_judge.append((len(records) - 1, doc, response))
    for qid in responses:
        if qid not in by_qid:
            records.append(
                _blank(set_name, qid, None, responses[qid], f"unknown Qid {qid!r} for set {set_name}")
            )
    if not to_judge:
        return records
    assert judge is not None
    if templates is None:
        templates = load_templates(scripts)
    items = [(doc, response) for _, doc, response in to_judge]
    if set_name == "open_ended":
        for aspect in ASPECTS:
            verdicts = judge_open_ended(items, aspect, templates, judge, progress=progress)
            for (index, _, _), verdict in zip(to_judge, verdicts):
                record = records[index]
                record[aspect], record[f"{aspect}_raw"] = verdict.value, verdict.raw
                record[f"{aspect}_asks"], record[f"{aspect}_fallback"] = verdict.asks, verdict.fallback
                record[f"{aspect}_error"] = verdict.error
        for index, _, _ in to_judge:
            relevance = records[index]["relevance"]
            records[index]["understood"] = None if relevance is None else relevance > UNDERSTOOD_ABOVE
        return records
    verdicts = judge_knowledge(set_name, items, templates, judge, progress=progress)
    for (index, _, _), verdict in zip(to_judge, verdicts):
        record = records[index]
        record["judge_raw"], record["judge_asks"], record["judge_error"] = (
            verdict.raw,
            verdict.asks,
            verdict.error,
        )
        if verdict.error:
            record["status"], record["correct"] = "judge_error", None
        elif verdict.fallback:
            record["status"], record["correct"] = "judge_unparsed", False
        else:
            record["status"] = "judge_correct" if verdict.value else "judge_wrong"
            record["correct"] = bool(verdict.value)
    return records


# ---------------------------------------------------------------------------------------------------
# headline numbers


def bounded_mean(values: Sequence[float | None], low: float, high: float) -> dict:
    """Mean over the known values; with missing ones, the bounds (all missing at ``low`` / at ``high``)."""
    known = [float(v) for v in values if v is not None]
    missing = len(values) - len(known)
    n = len(values)
    if n == 0:
        return {"value": None, "n": 0, "judge_errors": 0, "complete": True, "low": None, "high": None}
    total = sum(known)
    return {
        "value": total / len(known) if known else None,
        "n": n,
        "judge_errors": missing,
        "complete": missing == 0,
        "low": (total + missing * low) / n,
        "high": (total + missing * high) / n,
    }


def summarize_reference(set_name: str, records: Sequence[Mapping]) -> dict:
    """The authors' headline numbers from reference records.

    Knowledge sets: accuracy = correct / items with a response (their ``correct_num / len(instances)``), by
    category too. open_ended: Avg Relevance, Relevance Rate (share > 3), Avg Semantic. Each entry:
    {"value", "n", "judge_errors", "complete", "low", "high"}; when every verdict is known, value = low = high
    = their number; otherwise value is over the known verdicts and [low, high] bounds the complete number.
    """
    _check_set(set_name)
    scored = [r for r in records if r.get("response") is not None and not r.get("problem")]
    summary: dict[str, Any] = {
        "set": set_name,
        "protocol": "reference",
        "items": len(records),
        "missing": sum(1 for r in records if r.get("response") is None and not r.get("problem")),
        "problems": sum(1 for r in records if r.get("problem")),
    }
    if set_name == "open_ended":
        judged = [r for r in scored if any(r.get(a) is not None or r.get(f"{a}_error") for a in ASPECTS)]
        summary["avg_relevance"] = bounded_mean([r["relevance"] for r in judged], *SCORE_RANGE)
        summary["relevance_rate"] = bounded_mean(
            [None if r["relevance"] is None else float(r["relevance"] > UNDERSTOOD_ABOVE) for r in judged],
            0,
            1,
        )
        summary["avg_semantic"] = bounded_mean([r["semantic"] for r in judged], *SCORE_RANGE)
        summary["unjudged"] = len(scored) - len(judged)
        return summary
    summary["accuracy"] = bounded_mean(
        [None if r["correct"] is None else float(r["correct"]) for r in scored], 0, 1
    )
    summary["by_category"] = {
        category: bounded_mean(
            [
                None if r["correct"] is None else float(r["correct"])
                for r in scored
                if r.get("category") == category
            ],
            0,
            1,
        )
        for category in sorted({r.get("category") for r in scored if r.get("category")})
    }
    summary["statuses"] = {s: sum(1 for r in records if r.get("status") == s) for s in STATUSES}
    return summary


# ---------------------------------------------------------------------------------------------------
# reading the authors' output layout


def read_json_records(path: str | os.PathLike) -> list[tuple[str, Any]]:
    """The rows of a JSON file written as one JSON array (their writer) or as JSON lines: (where, row) pairs.

    ``where`` names the row for messages ("element 3" / "line 7"). Bytes that are not UTF-8 raise ValueError
    naming the file, the line and the encoding expected; a bad JSON line is returned as (where, exc).
    """
    path = Path(path)
    data = path.read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ValueError(
            f"{path}: line {line} is not UTF-8 (byte {exc.start}); outputs must be UTF-8 JSON"
        ) from exc
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    if isinstance(whole, list):
        return [(f"element {i}", row) for i, row in enumerate(whole)]
    rows: list[tuple[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append((f"line {number}", json.loads(line)))
        except ValueError as exc:
            rows.append((f"line {number}", exc))
    return rows


_UNSAFE_QID = re.compile(r"[/\\\x00]|^\.\.?$")


def _authors_json(outputs_dir: Path, folder: str, set_name: str) -> Path | None:
    names = dict.fromkeys([AUTHORS_SET_FILES[set_name], set_name])
    found = [
        outputs_dir / folder / f"{name}.json"
        for name in names
        if (outputs_dir / folder / f"{name}.json").is_file()
    ]
    if len(found) > 1:
        raise ValueError(
            f"{outputs_dir}: both {found[0].name} and {found[1].name} in {folder}/ for set "
            f"{set_name}; keep one"
        )
    return found[0] if found else None


def authors_outputs_file(outputs_dir: str | os.PathLike, set_name: str) -> Path | None:
    """``json/cs_<set>.json`` (or ``json/<set>.json``) of an outputs folder, None when absent."""
    _check_set(set_name)
    return _authors_json(Path(outputs_dir), "json", set_name)


def find_authors_sets(outputs_dir: str | os.PathLike) -> list[str]:
    """The sets an outputs folder holds in the authors' layout, in SETS order (for ``--set all``)."""
    return [name for name in SETS if authors_outputs_file(outputs_dir, name) is not None]


def _wav_for(outputs_dir: Path, set_name: str, qid: str) -> tuple[str | None, str | None]:
    wav_root = outputs_dir / "wav"
    if not wav_root.is_dir():
        return None, None  # a text-only model: no speech channel
    if _UNSAFE_QID.search(qid):
        return None, f"Qid {qid!r} cannot name a wav file"
    for folder in dict.fromkeys([AUTHORS_SET_FILES[set_name], set_name]):
        candidate = wav_root / folder / f"{qid}.wav"
        if candidate.is_file():
            return str(candidate), None
    flat = wav_root / f"{qid}.wav"
    if flat.is_file():
        return str(flat), None
    return None, f"missing wav: wav/{AUTHORS_SET_FILES[set_name]}/{qid}.wav (or wav/{qid}.wav)"


def _join(*problems: str | None) -> str | None:
    kept = [p for p in problems if p]
    return "; ".join(kept) if kept else None


def _rows_by_qid(path: Path, field: str, outputs_dir: Path) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for where, row in read_json_records(path):
        label = f"{path.relative_to(outputs_dir)} {where}"
        if isinstance(row, Exception):
            out[f"<{label}>"] = {"qid": f"<{label}>", "value": None, "problem": f"bad JSON in {label}: {row}"}
            continue
        if not isinstance(row, dict):
            out[f"<{label}>"] = {
                "qid": f"<{label}>",
                "value": None,
                "problem": f"{label} is a JSON {type(row).__name__}, not an object",
            }
            continue
        qid = row.get("Qid")
        if not isinstance(qid, str) or not qid.strip():
            out[f"<{label}>"] = {"qid": f"<{label}>", "value": None, "problem": f"no Qid in {label}"}
            continue
        qid = qid.strip()
        value, problem = row.get(field), None
        if value is None:
            problem = f"no {field} in {label}"
        elif not isinstance(value, str):
            problem, value = f"{field} in {label} is a {type(value).__name__}, not text", None
        elif not value.strip():
            problem = f"empty {field} in {label}"  # kept: an empty answer is still scored
        if qid in out:
            out[qid]["problem"] = _join(out[qid]["problem"], f"duplicate Qid: {label} ignored")
            continue
        out[qid] = {"qid": qid, "value": value, "problem": problem}
    return out


def read_authors_outputs(outputs_dir: str | os.PathLike, set_name: str) -> dict[str, dict]:
    """One set's outputs in the authors' layout: Qid -> {"qid", "text", "audio", "problem"}.

    Reads ``json/cs_<set>.json`` (or ``json/<set>.json``), a JSON array or JSON lines of {Qid, Response}, and
    the wav of each Qid at ``wav/cs_<set>/<Qid>.wav``, ``wav/<set>/<Qid>.wav`` or ``wav/<Qid>.wav`` (no
    ``wav/`` folder at all = a text-only model: audio None, no problem). Each value can be passed as
    ``ModelOutput(**value)``. Item problems (bad row, no Qid, non-text or empty Response, missing wav,
    duplicate Qid) are in "problem"; a missing file raises FileNotFoundError, non-UTF-8 bytes ValueError.
    """
    outputs_dir = Path(outputs_dir)
    path = authors_outputs_file(outputs_dir, set_name)
    if path is None:
        raise FileNotFoundError(
            f"no outputs for set {set_name!r} in {outputs_dir}: expected "
            f"json/{AUTHORS_SET_FILES[set_name]}.json (the authors' layout)"
        )
    outputs = {}
    for qid, row in _rows_by_qid(path, "Response", outputs_dir).items():
        audio, audio_problem = (None, None) if qid.startswith("<") else _wav_for(outputs_dir, set_name, qid)
        outputs[qid] = {
            "qid": qid,
            "text": row["value"],
            "audio": audio,
            "problem": _join(row["problem"], audio_problem),
        }
    return outputs


def read_given_transcripts(outputs_dir: str | os.PathLike, set_name: str) -> dict[str, dict]:
    """The transcripts of ``json_asr/cs_<set>.json`` (their whisper_asr.py output, ``Response_hyp``), for
    ``--use-given-transcripts``: Qid -> {"qid", "transcript", "problem"}. FileNotFoundError when absent."""
    _check_set(set_name)
    outputs_dir = Path(outputs_dir)
    path = _authors_json(outputs_dir, "json_asr", set_name)
    if path is None:
        raise FileNotFoundError(
            f"no transcripts for set {set_name!r} in {outputs_dir}: expected "
            f"json_asr/{AUTHORS_SET_FILES[set_name]}.json with Response_hyp"
        )
    return {
        qid: {"qid": qid, "transcript": row["value"], "problem": row["problem"]}
        for qid, row in _rows_by_qid(path, "Response_hyp", outputs_dir).items()
    }


def responses_of(outputs: Iterable[Mapping], field: str = "text") -> dict[str, str | None]:
    """Qid -> the ``field`` of each output record (text, transcript), for ``score_reference_set``."""
    return {str(o["qid"]): o.get(field) for o in outputs if not str(o["qid"]).startswith("<")}
