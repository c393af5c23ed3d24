"""What our tasks log through lm-eval (``--log_samples``) names files by content, never by a local path.

A logged sample of a cs3 task holds file paths in several places: the query audio in ``doc`` and in
``arguments`` (a file in the cs3-bench cache or the dataset's own), the spoken response in ``resps`` (the
speech protocol's JSON string) and in ``filtered_resps`` (the record's JSON). Each absolute path of an
existing file becomes ``sha256:<hex of its bytes>``: the same file on any machine has the same name, and no
HOME, clone or cache folder is written. Only the written samples change; lm-eval's run and its in-memory
samples keep the paths (``cs3-bench demo`` reads its records from them).
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from typing import Any

CONTENT_PREFIX = "sha256:"


@cache
def _file_digest(path: str, size: int, mtime: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_label(path: str) -> str | None:
    """``sha256:<hex>`` for an absolute path of an existing file; None for anything else."""
    if not os.path.isabs(path) or not os.path.isfile(path):
        return None
    status = os.stat(path)
    return CONTENT_PREFIX + _file_digest(path, status.st_size, status.st_mtime_ns)


def portable(value: Any) -> Any:
    """``value`` with every absolute file path in it (also inside a string that is a JSON object or array, as
    the speech protocol and the records are) named by its content."""
    if isinstance(value, dict):
        return {key: portable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(item) for item in value]
    if not isinstance(value, str):
        return value
    if value[:1] in ("{", "["):
        try:
            parsed = json.loads(value)
        except ValueError:
            return value
        return json.dumps(portable(parsed), ensure_ascii=False)
    return file_label(value) or value
