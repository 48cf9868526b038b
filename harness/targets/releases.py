"""``sglang==X``: download a release's wheel once and keep only the Python files the harness loads.

``pip download --no-deps`` fetches the wheel (any platform's will do: only ``.py``
files are read; from 0.5.15 on the wheels are platform-specific, so a host that
matches none retries as a manylinux x86_64 CPython host). The rule files, the
payload normalisers and the version files are unpacked into
``<cache>/releases/sglang-X/`` and the wheel is deleted. Unpacking goes to a
temporary directory renamed into place, so concurrent workers (``pytest -n``)
never see half a release.

Every failure a user can hit becomes one ``TargetError`` line saying what is
wrong and what to do.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from harness.targets.base import TargetError
from harness.targets.loader import ENGINE, ENGINE_FILES, cache_dir

MEMBERS = (
    *(f"{ENGINE}/{rel}" for rel in ENGINE_FILES.values()),
    f"{ENGINE}/srt/managers/io_struct.py",
    f"{ENGINE}/srt/multimodal/processors/base_processor.py",
    f"{ENGINE}/_version.py",
    f"{ENGINE}/version.py",
)
"""What is kept of a wheel: the files the loader runs, the payload normalisers, the version."""

COMPLETE = "mmharness-release.txt"
"""Written last into an unpacked release: its presence means the release is complete."""

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


def release_dir(version: str) -> Path:
    return cache_dir() / "releases" / f"{ENGINE}-{version}"


def fetch(version: str) -> Path:
    """The unpacked release (the directory holding ``sglang/``), downloading it on first use."""
    if not _VERSION_SPEC.match(version):
        raise TargetError(f"sglang=={version}: not a release version; write e.g. sglang==0.5.23")
    target = release_dir(version)
    if (target / COMPLETE).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}.") as scratch:
        wheel = _download(version, Path(scratch) / "wheel")
        unpacked = Path(scratch) / "unpacked"
        _unpack(wheel, unpacked, version)
        try:
            os.rename(unpacked, target)
        except OSError:
            if not (target / COMPLETE).is_file():  # not a concurrent worker's finished copy
                shutil.rmtree(target, ignore_errors=True)
                os.rename(unpacked, target)
    return target


def _download(version: str, into: Path) -> Path:
    requirement = f"{ENGINE}=={version}"
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
    raise TargetError(_explain(version, outputs))


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


def _explain(version: str, outputs: list[str]) -> str:
    """One line from pip's output: no network, no such release, or pip's own last error."""
    last = outputs[-1]
    where = f"or copy an unpacked release to {release_dir(version)} or use a path spec"
    if "No module named pip" in last:
        return f"cannot download sglang=={version}: this Python has no pip; install pip, {where}"
    if any(_offline(output) for output in outputs):
        return (
            f"cannot download sglang=={version}: the package index is unreachable (no network?);"
            f" retry where it is reachable, {where}"
        )
    listed = [v.strip() for output in outputs for v in _found_versions(output)]
    if listed:
        known = sorted(set(listed), key=_version_key)
        return (
            f"sglang=={version} is not on the package index (latest is {known[-1]});"
            " pick a listed release (`pip index versions sglang`) or use a path spec"
        )
    if "from versions: none" in last:
        return (
            f"sglang=={version}: the package index lists no sglang wheels (network or index"
            f" configuration?); check pip's index settings, {where}"
        )
    errors = [line for line in last.splitlines() if line.startswith("ERROR")]
    reason = errors[0].removeprefix("ERROR: ") if errors else "pip download failed"
    return f"cannot download sglang=={version}: {reason}; {where}"


def _found_versions(output: str) -> list[str]:
    match = _FROM_VERSIONS.search(output)
    if not match or match.group(1).strip() == "none":
        return []
    return match.group(1).split(",")


def _version_key(version: str) -> tuple:
    parts = re.findall(r"\d+|[a-z]+", version)
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts)


def _unpack(wheel: Path, into: Path, version: str) -> None:
    """Copy the kept members out of the wheel into a fresh directory, then mark it complete."""
    try:
        archive = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile:
        raise TargetError(
            f"the downloaded wheel {wheel.name} is not a zip file; delete {release_dir(version)} and retry"
        ) from None
    with archive:
        names = set(archive.namelist())
        kept = [m for m in MEMBERS if m in names]
        kept += [n for n in names if n.endswith(".dist-info/METADATA")]
        for member in kept:
            destination = into / member
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_bytes(archive.read(member))
    (into / COMPLETE).write_text(f"{wheel.name}\n")
