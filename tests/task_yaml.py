"""The cs3 task YAMLs read as data, without importing their ``!function`` targets (a tag gives its text)."""

from __future__ import annotations

from pathlib import Path

import yaml


class _TaskYamlLoader(yaml.SafeLoader):
    pass


_TaskYamlLoader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))


def read_task_yaml(path: Path) -> dict:
    return yaml.load(Path(path).read_text(encoding="utf-8"), Loader=_TaskYamlLoader)
