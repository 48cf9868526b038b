"""``ENGINE==X``: download a release's wheel once and keep only the Python files the harness loads.

``pip download --no-deps`` fetches the wheel (any platform's will do: only ``.py``
files are read; some engines ship platform-specific wheels, so a host
that matches none retries as a manylinux x86_64 CPython host). The members the
engine package names (its rule files, payload parsers, version files) are
unpacked into ``<cache>/releases/ENGINE-X/`` and the wheel is deleted. Unpacking goes to a
temporary directory renamed into place, so concurrent workers (``pytest -n``)
never see half a release.

Every cached byte that runs is the wheel's: each load checks the release against its manifest
(``COMPLETE``: a digest per file) and the manifest against its own digest (``SEAL``), so a manifest cut
short, a file garbled or one it does not list is found (``damaged``); the release is then fetched
again, or, where the index cannot be reached, refused in one line naming the file. Never loaded: half a
rules file still parses and would read as a release lacking its functions (a false skip).

Every failure a user can hit becomes one ``TargetError`` line saying what is
wrong and what to do.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from mmharness.storage import cache_dir
from mmharness.targets.base import TargetError
from mmharness.targets.loader import Layout, Source, locate
from packaging.version import InvalidVersion, Version

COMPLETE = "mmharness-release-2.txt"
"""Written last into an unpacked release: its presence means the release is complete.
(The ``-2`` marks the member set that includes each release's item type: older
unpacked releases lack it and are fetched again.) Its first line names the
wheel; each further line is ``SHA256 MEMBER`` of a kept file, so a cached file
damaged or edited since is found (``damaged``) rather than loaded. A line
``members=HASH`` records the member list asked for (``members_hash``): a release
unpacked for another list (an older harness's, lacking a file the engine now reads)
is fetched again once, and kept as it is where the index cannot be reached."""
MEMBERS_LINE = "members="
SEAL = f"{COMPLETE}.sha256"
"""Beside the manifest, written after it: the manifest's sha256, so that a manifest cut short (at a line
boundary, where every line left still reads, or mid-line) or edited is refused as such, not read as a
release lacking the files it no longer lists. A manifest from before seals is held to the form
``_unpack`` writes (every line whole, the wheel's ``METADATA`` last), then sealed. Every ``.py`` file in a
release must be one the manifest lists: code no digest covers never runs as the release."""
_ENTRY = re.compile(r"([0-9a-f]{64}) (\S.*)")

FALLBACK_HOSTS = (
    ("manylinux_2_34_x86_64", "3.12"),
    ("manylinux_2_34_x86_64", "3.11"),
)
"""Hosts to pose as when no wheel matches this one (wheels are per platform from 0.5.15)."""

PIP_TIMEOUT_S = 20
_VERSION_SPEC = re.compile(r"^[0-9][0-9A-Za-z.+!_-]*$")
_FROM_VERSIONS = re.compile(r"\(from versions: ([^)]*)\)")
_OFFLINE = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "ConnectTimeoutError",
    "ProxyError",
    "SSLError",
)


def release_dir(package: str, version: str) -> Path:
    return cache_dir() / "releases" / f"{package}-{version}"


def cached(package: str) -> list[str]:
    """``PACKAGE==X`` of every complete release of ``package`` in the cache, oldest first."""
    root = cache_dir() / "releases"
    prefix = f"{package}-"
    versions = [
        path.name.removeprefix(prefix)
        for path in (root.glob(f"{prefix}*") if root.is_dir() else ())
        if (path / COMPLETE).is_file()
    ]
    return [f"{package}=={version}" for version in sorted(versions, key=_release_order)]


def fetch(package: str, version: str, members: tuple[str, ...], *, example: str) -> Path:
    """The unpacked release (the directory holding ``PACKAGE/``), downloading it on first use.

    ``members`` are the wheel paths to keep; ``example`` is a version to suggest.
    """
    if not _VERSION_SPEC.match(version):
        raise TargetError(f"{package}=={version}: not a release version; write e.g. {package}=={example}")
    target = release_dir(package, version)
    if not (target / COMPLETE).is_file():
        return _fetch(package, version, members, target)
    damage = damaged(target)
    if damage is None and unpacked_for(target) == members_hash(members):
        return target
    try:  # damaged, or unpacked for another member list: fetched again (once: then it is sealed)
        return _fetch(package, version, members, target, replace=True)
    except TargetError as error:
        if damage is not None:
            raise TargetError(
                f"the cached copy of {package}=={version} is damaged ({damage}), and fetching it again"
                f" failed ({error}); remove {target} and retry where the index is reachable"
            ) from None
        return target  # another member list, no index at hand: the copy there loads, lacking what it lacks


def _fetch(
    package: str, version: str, members: tuple[str, ...], target: Path, *, replace: bool = False
) -> Path:
    """Download and unpack into ``target``; ``replace``: over a complete copy unpacked for other members."""
    try:
        return _fetched(package, version, members, target, replace=replace)
    except OSError as error:  # a full disk, a read-only cache: nothing half-unpacked is left in place
        raise TargetError(
            f"cannot unpack {package}=={version} into {target.parent} ({error.strerror or error})"
        ) from None


def _fetched(
    package: str, version: str, members: tuple[str, ...], target: Path, *, replace: bool = False
) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(target)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}.") as scratch:
        wheel = _download(package, version, Path(scratch) / "wheel")
        unpacked = Path(scratch) / "unpacked"
        _unpack(wheel, unpacked, package, version, members)
        if replace:  # the old copy moves into the scratch directory, removed with it
            with contextlib.suppress(OSError):  # a concurrent worker moved it first
                os.rename(target, Path(scratch) / "replaced")
        try:
            os.rename(unpacked, target)
        except OSError:
            if unpacked_for(target) != members_hash(members):  # not a concurrent worker's finished copy
                shutil.rmtree(target, ignore_errors=True)
                os.rename(unpacked, target)
    return target


def members_hash(members: tuple[str, ...]) -> str:
    """What a marker records of the member list a release was unpacked for (order does not matter)."""
    return hashlib.sha256("\n".join(sorted(set(members))).encode()).hexdigest()[:16]


def unpacked_for(target: Path) -> str | None:
    """The member list's hash in a release's marker; ``None`` for a marker that predates it, or none."""
    try:
        lines = (target / COMPLETE).read_text(errors="replace").splitlines()
    except OSError:
        return None
    return next((line.removeprefix(MEMBERS_LINE) for line in lines if line.startswith(MEMBERS_LINE)), None)


def source(layout: Layout, version: str, members: tuple[str, ...], *, example: str, absent: str) -> Source:
    """The layout's files in release ``version`` (fetched once); ``absent`` says why a release has none."""
    root = fetch(layout.package, version, members, example=example)
    try:
        return locate(root, layout, release=version)
    except TargetError:
        raise TargetError(f"{layout.package}=={version} {absent}") from None


ABANDONED_S = 3600


def _remove_abandoned(target: Path) -> None:
    """Scratch directories of downloads killed midway (a fetch that ran to its end leaves none)."""
    for scratch in target.parent.glob(f".{target.name}.*"):
        try:
            if time.time() - scratch.stat().st_mtime > ABANDONED_S:
                shutil.rmtree(scratch, ignore_errors=True)
        except OSError:
            continue


def _download(package: str, version: str, into: Path) -> Path:
    requirement = f"{package}=={version}"
    attempts = [[]] + [
        [
            "--platform",
            platform,
            "--python-version",
            python,
            "--implementation",
            "cp",
            "--abi",
            "cp" + python.replace(".", ""),
        ]
        for platform, python in FALLBACK_HOSTS
    ]
    outputs = []
    for extra in attempts:
        output = _pip_download(requirement, into, extra)
        wheels = sorted(into.glob("*.whl"))
        if wheels:
            return wheels[0]
        outputs.append(output)
        if _offline(output) or "Could not find a version" not in output:
            break
    raise TargetError(_explain(package, version, outputs))


def _pip_download(requirement: str, into: Path, extra: list[str]) -> str:
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--no-input",
        "--timeout", str(PIP_TIMEOUT_S), "--retries", "1",
        *extra, requirement, "-d", str(into),
    ]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as error:
        raise TargetError(
            f"cannot run pip to download {requirement} ({error}); install pip or use a path spec"
        ) from None
    return done.stdout + done.stderr


def _offline(output: str) -> bool:
    return any(marker in output for marker in _OFFLINE)


def _explain(package: str, version: str, outputs: list[str]) -> str:
    """One line from pip's output: no network, no such release, or pip's own last error."""
    last = outputs[-1]
    where = f"or copy an unpacked release to {release_dir(package, version)} or use a path spec"
    requirement = f"{package}=={version}"
    if "No module named pip" in last:
        return f"cannot download {requirement}: this Python has no pip; install pip, {where}"
    if any(_offline(output) for output in outputs):
        return (
            f"cannot download {requirement}: the package index is unreachable (no network?);"
            f" retry where it is reachable, {where}"
        )
    listed = [v.strip() for output in outputs for v in _found_versions(output)]
    if listed:
        known = sorted(set(listed), key=_release_order)
        return (
            f"{requirement} is not on the package index (latest is {known[-1]});"
            f" pick a listed release (`pip index versions {package}`) or use a path spec"
        )
    if "from versions: none" in last:
        return (
            f"{requirement}: the package index lists no {package} wheels (network or index"
            f" configuration?); check pip's index settings, {where}"
        )
    errors = [line for line in last.splitlines() if line.startswith("ERROR")]
    reason = errors[0].removeprefix("ERROR: ") if errors else "pip download failed"
    return f"cannot download {requirement}: {reason}; {where}"


def _found_versions(output: str) -> list[str]:
    """The versions pip download saw, from its failure message. ``pip index versions --json`` would
    say it structured, but only from pip 25.1 (this is whatever pip the user's Python has), in a
    second query to the index, and it fails rather than answer an empty list; the failure message
    is read anyway, to tell no network and no pip apart."""
    match = _FROM_VERSIONS.search(output)
    if not match or match.group(1).strip() == "none":
        return []
    return match.group(1).split(",")


_NO_VERSION = Version("0")


def _release_order(version: str) -> tuple[bool, Version, str]:
    """Sort key of release versions, oldest first, as the package index orders them (PEP 440:
    0.5.9 < 0.5.10rc1 < 0.5.10 < 0.5.10.post1); a name that is no version (a release directory
    copied in by hand) sorts first, by name, rather than failing the listing."""
    try:
        return (True, Version(version), version)
    except InvalidVersion:
        return (False, _NO_VERSION, version)


def _unpack(wheel: Path, into: Path, package: str, version: str, members: tuple[str, ...]) -> None:
    """Copy the kept members out of the wheel into a fresh directory, then mark it complete."""
    try:
        archive = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile:
        raise TargetError(
            f"the downloaded wheel {wheel.name} is not a zip file;"
            f" delete {release_dir(package, version)} and retry"
        ) from None
    with archive:
        names = set(archive.namelist())
        kept = [m for m in members if m in names]
        kept += [n for n in names if n.endswith(".dist-info/METADATA")]
        digests = []
        for member in kept:
            destination = into / member
            destination.parent.mkdir(parents=True, exist_ok=True)
            data = archive.read(member)
            destination.write_bytes(data)
            digests.append(f"{hashlib.sha256(data).hexdigest()} {member}\n")
    manifest = f"{wheel.name}\n{MEMBERS_LINE}{members_hash(members)}\n" + "".join(digests)
    (into / COMPLETE).write_text(manifest)
    _seal(into, manifest.encode())


def _seal(target: Path, manifest: bytes) -> None:
    (target / SEAL).write_text(hashlib.sha256(manifest).hexdigest() + "\n")


def damaged(target: Path) -> str | None:
    """What is wrong with a cached release (its manifest cut, a file changed, one it does not list), in
    words naming the file; ``None``: every file is the wheel's. An intact manifest from before seals is
    sealed here (``SEAL``)."""
    manifest = target / COMPLETE
    try:
        text = manifest.read_bytes()
        seal = (target / SEAL).read_text().strip() if (target / SEAL).is_file() else None
    except OSError as error:
        return f"its manifest {manifest} cannot be read ({error.strerror})"
    if seal is not None and seal != hashlib.sha256(text).hexdigest():
        return f"its manifest {manifest} is cut or changed: it no longer matches its digest in {SEAL}"
    entries = _entries(manifest, text.decode(errors="replace"))
    if isinstance(entries, str):
        return entries
    if seal is None and not next(reversed(entries), "").endswith(".dist-info/METADATA"):
        return f"its manifest {manifest} is cut: it does not end with the wheel's METADATA"
    for member, digest in entries.items():
        try:
            intact = hashlib.sha256((target / member).read_bytes()).hexdigest() == digest
        except OSError:
            intact = False
        if not intact:
            return f"{member} differs from the wheel's"
    unlisted = sorted(p.relative_to(target).as_posix() for p in target.rglob("*.py") if p.is_file())
    unlisted = [member for member in unlisted if member not in entries]
    if unlisted:
        return f"{unlisted[0]} is not in its manifest {manifest}"
    if seal is None:
        with contextlib.suppress(OSError):  # a read-only cache: checked again next time
            _seal(target, text)
    return None


def _entries(manifest: Path, text: str) -> dict[str, str] | str:
    """A manifest's ``SHA256 MEMBER`` lines as member -> digest, in order; a line that is not one (cut
    mid-line, garbled): what is wrong, naming the manifest and the line."""
    entries = {}
    for number, line in enumerate(text.splitlines()[1:], 2):
        if line.startswith(MEMBERS_LINE):
            continue
        entry = _ENTRY.fullmatch(line)
        if entry is None:
            return f"its manifest {manifest} is cut or garbled at line {number}"
        entries[entry[2]] = entry[1]
    return entries
