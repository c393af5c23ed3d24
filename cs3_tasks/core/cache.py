"""On-disk caches and crash-safe writes.

ASR transcripts, judge verdicts and recipe rewrites are cached in sqlite3 (one key-value table per file,
JSON values); synthesized audio is cached as one FLAC file per content key (``AudioCache``). Writes are
committed per item, so killing a run loses nothing, and every file this package writes goes through
``atomic_write`` (temp file in the same folder, then rename), so no reader ever sees half a file.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import sqlite3
import tempfile
import threading
from pathlib import Path
from typing import Any

import tenacity

from cs3_tasks.core.text import valid_unicode

CACHE_ENV = "CS3_BENCH_CACHE"


def cache_dir() -> Path:
    """The cache root: $CS3_BENCH_CACHE, else ~/.cache/cs3-bench."""
    root = os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "cs3-bench"
    path = Path(root)
    if path.exists() and not path.is_dir():  # mkdir would only say "File exists"
        raise NotADirectoryError(errno.ENOTDIR, f"the cache folder (${CACHE_ENV}) is not a folder", str(path))
    path.mkdir(parents=True, exist_ok=True)
    return path


def stable_key(*parts: Any) -> str:
    """A sha256 hex digest of JSON-encoded parts (sorted keys), for cache keys. Text that is not valid
    Unicode (lone surrogates) is hashed as it is: distinct inputs keep distinct keys."""
    blob = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


def json_text(value: Any, **options: Any) -> str:
    """``value`` as JSON text (non-ASCII kept, ``options`` as for `json.dumps`) that can always be written
    as UTF-8: a lone surrogate in any string becomes U+FFFD (`text.valid_unicode`, the one rule for such
    text). Every JSON file, JSON line and cache value this package writes goes through it."""
    return valid_unicode(json.dumps(value, ensure_ascii=False, **options))


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# read once at import: os.umask can only be read by setting it, which is not thread-safe per call
_UMASK = _current_umask()


def atomic_write(path: str | os.PathLike, data: bytes | str) -> None:
    """Write ``data`` (str is UTF-8 encoded, a lone surrogate as U+FFFD) to ``path`` atomically: a uniquely
    named temp file in the same folder, fsync, then ``os.replace`` over ``path``. A killed writer leaves the
    old file (or none), never half a file, and concurrent writers never share a temp file. Missing parent
    folders are created."""
    path = Path(path)
    blob = valid_unicode(data).encode("utf-8") if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(blob)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; give the usual permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class AudioCache:
    """``<root>/<key[:2]>/<key>.flac``. A file only gets its final name once fully written (temp + rename),
    and a cached file that does not decode is treated as missing, so a killed build never leaves a bad
    entry."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.flac"

    def get(self, key: str) -> bytes | None:
        path = self.path(key)
        if not path.is_file():
            return None
        blob = path.read_bytes()
        return blob if _decodes(blob) else None

    def put(self, key: str, flac: bytes) -> None:
        atomic_write(self.path(key), flac)


def _decodes(blob: bytes) -> bool:
    import soundfile as sf

    try:
        audio, _ = sf.read(io.BytesIO(blob), dtype="float32")
    except (RuntimeError, ValueError, EOFError):
        return False
    return audio.size > 0


OPEN_TIMEOUT_S = 60


def _is_lock_contention(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)


# Switching a new file to WAL needs sqlite's exclusive lock, and when processes open the same new file
# at once sqlite answers one of them "database is locked" at once, without its busy wait (it would
# deadlock): that answer is retried here, bounded by the same timeout as any other wait for the file.
@tenacity.retry(
    retry=tenacity.retry_if_exception(_is_lock_contention),
    stop=tenacity.stop_after_delay(OPEN_TIMEOUT_S),
    wait=tenacity.wait_random(0.01, 0.2),
    reraise=True,
)
def _set_up_on_open(conn: sqlite3.Connection) -> None:
    with conn:
        if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":  # WAL persists in the file
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE IF NOT EXISTS cache (key TEXT PRIMARY KEY, value TEXT NOT NULL)")


class SqliteCache:
    """A thread-safe persistent dict of str -> JSON value, stored in one sqlite file."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._lock = threading.Lock()
        try:  # an unusable cache path is an OSError naming it (sqlite's own error names no path)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=OPEN_TIMEOUT_S)
            _set_up_on_open(self._conn)
        except (OSError, sqlite3.Error) as exc:
            cause = getattr(exc, "strerror", None) or str(exc)
            if any(folder.exists() and not folder.is_dir() for folder in self.path.parents):
                cause = "a folder on its path is a file"
            code = getattr(exc, "errno", None) or errno.EIO
            raise OSError(code, f"cannot open this cache: {cause}", str(path)) from exc

    def get(self, key: str, default: Any = None) -> Any:
        with self._lock:
            row = self._conn.execute("SELECT value FROM cache WHERE key = ?", (key,)).fetchone()
        return default if row is None else json.loads(row[0])

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return self._conn.execute("SELECT 1 FROM cache WHERE key = ?", (key,)).fetchone() is not None

    def put(self, key: str, value: Any) -> None:
        blob = json_text(value)
        with self._lock, self._conn:
            self._conn.execute("INSERT OR REPLACE INTO cache (key, value) VALUES (?, ?)", (key, blob))

    def __len__(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT COUNT(*) FROM cache").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._conn.close()


HASHES_FILE = "model_hashes.sqlite"  # sha256 of model files, by path, size and modification time


def files_sha256(files: list[Path]) -> str:
    """sha256 of the concatenated content of ``files``, computed once per content on this machine: cached
    (`HASHES_FILE`) by each file's resolved path, size and modification time, so a file changed in place
    is hashed again."""
    stamp = [[str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns] for f in files]
    cache = SqliteCache(cache_dir() / HASHES_FILE)
    try:
        key = stable_key("weights-sha256", stamp)
        digest = cache.get(key)
        if digest is None:
            hasher = hashlib.sha256()
            for file in files:
                with open(file, "rb") as handle:
                    while chunk := handle.read(16 << 20):
                        hasher.update(chunk)
            digest = hasher.hexdigest()
            cache.put(key, digest)
        return digest
    finally:
        cache.close()
