"""The package's prompt texts (``*.txt`` package data: judge and recipe prompts) and their one reader."""

from __future__ import annotations

from importlib import resources


def load_prompt(name: str) -> str:
    """The text of ``cs3_tasks/prompts/<name>.txt``; FileNotFoundError naming the available ones."""
    path = resources.files("cs3_tasks.prompts").joinpath(f"{name}.txt")
    if not path.is_file():
        available = sorted(
            p.name[:-4] for p in resources.files("cs3_tasks.prompts").iterdir() if p.name.endswith(".txt")
        )
        raise FileNotFoundError(f"no judge prompt {name!r}; available: {available}")
    return path.read_text(encoding="utf-8")
