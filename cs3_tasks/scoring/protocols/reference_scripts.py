"""The CS3-Bench authors' scoring scripts: found, pinned, downloaded, and their judge prompts read from them.

The authors' scoring scripts (VocalBench-zh, ``utils/cs_knowledge.py``, ``utils/cs_knowledge_en.py``,
``utils/cs_open_ended.py``) are their text: the prompts are never copied into this package. They are read at
run time from the user's copy (``--reference-scripts DIR`` / ``$CS3_REFERENCE_SCRIPTS``: a VocalBench-zh
checkout or any folder holding its ``utils/``), else downloaded once from the authors' repository at the
pinned commit, checked against the sha256 values below and cached. The prompt templates are the f-strings of
their judge functions, taken apart with ``ast`` and filled the way Python fills them.
"""

from __future__ import annotations

import ast
import hashlib
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cs3_tasks.core.cache import cache_dir
from cs3_tasks.core.data import check_set
from cs3_tasks.scoring.records import ASPECTS

if TYPE_CHECKING:  # pragma: no cover
    import requests

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
        check_set(set_name)
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
    check_set(set_name)
    return {"question": doc["Question"], "ans": doc["Answer"], "response": response}


def build_prompt(
    templates: ReferenceTemplates, set_name: str, doc: Mapping, response: str, aspect: str | None = None
) -> str:
    """The prompt their code sends for one item (and aspect, for open_ended)."""
    return templates.for_set(set_name, aspect).fill(**prompt_values(set_name, doc, response))


def judge_messages(prompt: str) -> list[dict]:
    """What their client sends for a prompt: one user message, no system message."""
    return [{"role": "user", "content": prompt}]
