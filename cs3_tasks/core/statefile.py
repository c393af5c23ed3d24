"""Files the package reads back as its own state (result dirs' records, settings and summaries, an export's
manifest, a converted model's manifest): read only when they are regular files of bounded size.

Anything else where such a file should be (a FIFO, a device, a folder, a socket, or a link to one) is refused
naming it, before it is read: opening a FIFO waits forever for a writer, and a link to /dev/zero never ends.
The file is opened without blocking and checked on the open descriptor, so what is checked is what is read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cs3_tasks.core.refusal import Refusal

JSON_LIMIT = 64 << 20  # a settings, summary or manifest file: far above any we write
RECORDS_LIMIT = 4 << 30  # a records file (about 50 kB a record at most: 80,000 records)
KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


class StateFileError(Refusal):
    """A file read as the package's own state is not a regular file of bounded size."""


def _refusal(path: Path, mode: int) -> StateFileError:
    kind = next((name for test, name in KINDS if test(mode)), "not a regular file")
    link = f" (a link to {os.path.realpath(path)})" if path.is_symlink() else ""
    return StateFileError(
        f"{path} is {kind}{link}, not a regular file: cs3-bench reads it as its own state. Remove it (or "
        "use another folder) and re-run"
    )


def check_state_file(path: Path, limit: int = JSON_LIMIT, *, links: bool = True) -> bool:
    """True when ``path`` is a regular file of at most ``limit`` bytes, False when nothing is there (a
    dangling link included); StateFileError for anything else, naming it. ``links=False``: a link is refused
    too (a file that is written in place, such as a lock, must not reach through a link to another file)."""
    path = Path(path)
    if not links and path.is_symlink():
        raise StateFileError(
            f"{path} is a link (to {os.path.realpath(path)}), not a regular file: cs3-bench writes it in "
            "place. Remove it (or use another folder) and re-run"
        )
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return False
    _check(path, found, limit)
    return True


def _check(path: Path, found: os.stat_result, limit: int) -> None:
    if not stat.S_ISREG(found.st_mode):
        raise _refusal(path, found.st_mode)
    if found.st_size > limit:
        raise StateFileError(
            f"{path} holds {found.st_size} bytes, more than the {limit} a file of this kind can hold: not "
            "read. Remove it (or use another folder) and re-run"
        )


def read_state_bytes(path: Path, limit: int = JSON_LIMIT) -> bytes:
    """The content of a state file; FileNotFoundError when there is none, StateFileError when it is not a
    regular file of at most ``limit`` bytes (checked on the descriptor opened without blocking)."""
    path = Path(path)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        _check(path, os.fstat(fd), limit)
        chunks, size = [], 0
        while chunk := os.read(fd, min(16 << 20, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:  # it grew while being read
                raise StateFileError(f"{path} grew past {limit} bytes while being read: not read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_state_text(path: Path, limit: int = JSON_LIMIT, errors: str = "strict") -> str:
    """`read_state_bytes` decoded as UTF-8 (``errors`` as for ``bytes.decode``)."""
    return read_state_bytes(path, limit).decode("utf-8", errors=errors)
