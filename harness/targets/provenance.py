"""Where a target loaded by path comes from: a tree, and the cached release whose files it shares.

A tree's version file names the release it was cut from (a fork keeps its
donor's), so its ``release`` reads as that release. ``tree`` says it is a tree
and compares the digests of its loaded files with the same files of each
cached release of its engine: a few files hashed per release, no check run
(``targets --nearest`` measures behaviour instead). ``mmharness targets``
shows it; it stays out of ``describe()``, which keys baselines, since the
cache's contents would change it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from mmharness.targets import releases


def tree(target: Any) -> str | None:
    """What ``targets`` says of a target loaded by path from anywhere but its release's cached copy (a
    tree): that it is one, and the cached release sharing most of its files; ``None`` for anything else."""
    engine = getattr(target, "engine", None)
    digests: dict[str, str] = getattr(target, "digests", {})
    if engine is None or engine.installed or not digests:
        return None
    source = engine.source
    package = next(iter(digests)).partition("/")[0]
    if source.release and _same_dir(source.origin, releases.release_dir(package, source.release)):
        return None
    said = f"its version file says {source.release}" if source.release else "it names no release"
    return f"by path, not a release ({said}); {_nearest(package, digests)}"


def _same_dir(origin: str, release: Path) -> bool:
    try:
        return Path(origin).resolve() == release.resolve()
    except OSError:
        return False


def _nearest(package: str, digests: dict[str, str]) -> str:
    """The cached release with the most of the tree's files byte for byte (the newest of a tie)."""
    best: tuple[int, str] | None = None
    for spec in releases.cached(package):
        root = releases.release_dir(package, spec.partition("==")[2])
        alike = sum(_digest(root / rel) == digest for rel, digest in digests.items())
        if alike and (best is None or alike >= best[0]):
            best = (alike, spec)
    if best is None:
        return "no cached release shares a file with it"
    alike, spec = best
    if alike == len(digests):
        return f"its files are {spec}'s, byte for byte"
    return f"nearest cached release by files: {spec} ({alike} of its {len(digests)} files alike)"


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None
