"""On-disk caches (sqlite3): one key-value table per file, JSON values.

ASR transcripts, judge verdicts and recipe rewrites are all cached through this module so that a
re-run never repeats model work. Writes are committed per item, so killing a run loses nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

CACHE_ENV = "CS3_BENCH_CACHE"


def cache_dir() -> Path:
    """The cache root: $CS3_BENCH_CACHE, else ~/.cache/cs3-bench."""
    root = os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "cs3-bench"
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def stable_key(*parts: Any) -> str:
    """A sha256 hex digest of JSON-encoded parts (sorted keys), for cache keys."""
    blob = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class SqliteCache:
    """A thread-safe persistent dict of str -> JSON value, stored in one sqlite file."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=60)
        with self._lock, self._conn:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("CREATE TABLE IF NOT EXISTS cache (key TEXT PRIMARY KEY, value TEXT NOT NULL)")

    def get(self, key: str, default: Any = None) -> Any:
        with self._lock:
            row = self._conn.execute("SELECT value FROM cache WHERE key = ?", (key,)).fetchone()
        return default if row is None else json.loads(row[0])

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return self._conn.execute("SELECT 1 FROM cache WHERE key = ?", (key,)).fetchone() is not None

    def put(self, key: str, value: Any) -> None:
        blob = json.dumps(value, ensure_ascii=False)
        with self._lock, self._conn:
            self._conn.execute("INSERT OR REPLACE INTO cache (key, value) VALUES (?, ?)", (key, blob))

    def __len__(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT COUNT(*) FROM cache").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
