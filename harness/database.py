"""Where a run keeps the failing examples it found, so the next run replays them first.

``--database SPEC``: ``none``; a directory (``DirectoryBasedExampleDatabase``);
``github:OWNER/REPO`` (``GitHubArtifactDatabase``: the database a CI job saved as
an artifact, read-only here); ``redis://HOST[:PORT]`` (``RedisExampleDatabase``,
with ``hypothesis[redis]``), shared by every machine that points at it. The
default is none for the ``ci`` profile (its runs must not depend on history)
and a directory under the harness cache for ``dev`` and ``deep``.

Every check's examples live under their own key: the check, the target and
the device, so two checks or two targets never replay each other's cases.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Iterable
from pathlib import Path

from hypothesis.database import ExampleDatabase
from mmharness.hypothesis_compat import is_secondary
from mmharness.storage import cache_dir

NONE = "none"


class DatabaseError(ValueError):
    """A database spec that cannot be used; the message says which forms are."""


def default_spec(profile: str) -> str:
    return NONE if profile == "ci" else str(cache_dir() / "examples")


def open_database(spec: str, *, option: str = "--database") -> ExampleDatabase | None:
    """The database a ``--database`` spec names (``None`` for ``none``).

    ``option`` is how the user wrote it (``--mm-database`` in the pytest plugin),
    for the messages. A directory is created and written to once here, so one
    that cannot be is refused before any check runs rather than ignored by
    Hypothesis for the whole run.
    """
    from hypothesis import database

    if spec == NONE:
        return None
    if spec.startswith("github:"):
        owner, _, repo = spec.removeprefix("github:").partition("/")
        if not owner or not repo:
            raise DatabaseError(f"{option} {spec}: write github:OWNER/REPO")
        return database.ReadOnlyDatabase(database.GitHubArtifactDatabase(owner, repo))
    if spec.startswith("redis://"):
        try:
            import redis
            from hypothesis.extra.redis import RedisExampleDatabase
        except ImportError:
            raise DatabaseError(f"{option} {spec}: needs redis; pip install 'hypothesis[redis]'") from None
        return RedisExampleDatabase(redis.Redis.from_url(spec))
    if "://" in spec:
        raise DatabaseError(f"{option} {spec}: expected none, a directory, github:OWNER/REPO or redis://HOST")
    problem = _unwritable(Path(spec))
    if problem:
        default = " (the default; MMHARNESS_CACHE moves it)" if spec == default_spec("dev") else ""
        raise DatabaseError(f"{option} {spec}{default}: {problem}; give a writable directory, or none")
    return database.DirectoryBasedExampleDatabase(spec)


def _unwritable(directory: Path) -> str | None:
    """Why examples cannot be kept in ``directory`` (``None`` if they can), found by trying."""
    try:
        if directory.exists() and not directory.is_dir():
            return "not a directory"
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".mmharness-probe-"):
            pass
    except OSError as error:
        return f"cannot write there ({error.strerror or error})"
    return None


class KeyedDatabase(ExampleDatabase):
    """A database seen through a key prefix of its own."""

    def __init__(self, database: ExampleDatabase, *parts: str) -> None:
        super().__init__()
        self.database = database
        self.prefix = hashlib.sha256("\0".join(parts).encode()).digest()[:8]

    def save(self, key: bytes, value: bytes) -> None:
        self.database.save(self.prefix + key, value)

    def fetch(self, key: bytes) -> Iterable[bytes]:
        return self.database.fetch(self.prefix + key)

    def delete(self, key: bytes, value: bytes) -> None:
        self.database.delete(self.prefix + key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.database.move(self.prefix + src, self.prefix + dest, value)


class Choices(ExampleDatabase):
    """One search's own database, for shrinking later what it found (``runner.shrink_found``).

    It hands Hypothesis the choice sequences it was given (the reuse phase replays them, the shrink
    phase shrinks those that fail) and keeps, in order, those Hypothesis saves: a round that does not
    shrink saves the failure it ends at, so the last one saved is that failure's. They are handed over
    as the secondary corpus: Hypothesis takes a failure from the primary one as shrunk already.
    """

    def __init__(self, given: Iterable[bytes] = ()) -> None:
        super().__init__()
        self.given = list(given)
        self.saved: list[bytes] = []

    def save(self, key: bytes, value: bytes) -> None:
        self.saved.append(value)

    def fetch(self, key: bytes) -> Iterable[bytes]:
        return list(self.given) if is_secondary(key) else []

    def delete(self, key: bytes, value: bytes) -> None:
        pass  # nothing shared: a sequence Hypothesis drops is simply not handed back

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        pass
