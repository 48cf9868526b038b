"""Where the harness keeps what it downloads and compiles, apart from any one use of it, and how a kept
file is written and read back whole.

Release files (``targets.releases``), compiled engine code (``targets.loader``), Hypothesis's
example databases (``database``) and its own storage (the CLI) all live below ``cache_dir()``;
one home keeps the CLI from importing the loader to learn a directory name.

A cached file that is run must be the bytes that were written: a disk that fills mid-write, a
copy cut short (a CI cache restored in part) or a flipped bit must read as no entry, never as
code. ``write_atomic`` puts a whole file in place or none; ``write_verified`` adds the sha256 of
what it holds, which ``read_verified`` checks before handing any byte back.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

DIGEST_BYTES = 32
"""A verified entry begins with the sha256 of the rest."""


def cache_dir() -> Path:
    """``$MMHARNESS_CACHE``, else ``mmharness`` under XDG's cache (``~/.cache``)."""
    explicit = os.environ.get("MMHARNESS_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "mmharness"


def write_atomic(path: Path, data: bytes) -> None:
    """``data`` into ``path`` whole or not at all: written beside it, then renamed over it (a reader,
    or a concurrent worker writing the same, never sees half); the partial file is removed on failure
    (a full disk), and the ``OSError`` raised."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        partial.write_bytes(data)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def write_verified(path: Path, data: bytes) -> None:
    """``data`` into ``path`` (``write_atomic``) after its sha256, for ``read_verified``."""
    write_atomic(path, hashlib.sha256(data).digest() + data)


def read_verified(path: Path) -> bytes | None:
    """What ``write_verified`` wrote to ``path``; ``None`` where there is none, or what is there is not
    what was written (cut, garbled, another format)."""
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    digest, data = blob[:DIGEST_BYTES], blob[DIGEST_BYTES:]
    return data if len(blob) >= DIGEST_BYTES and hashlib.sha256(data).digest() == digest else None
