"""The built wheel holds the whole package: every module and data file of ``harness/`` and ``strategies/``.

The package list was once kept by hand and left an engine package out, so the
installed ``mmharness`` could not even print ``--help``. The wheel is built
without build isolation (no network): the ``test`` extra brings setuptools.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INSTALLED_AS = {"harness": "mmharness", "strategies": "mmharness/strategies"}


def tree_files() -> set[str]:
    """Every file the package needs, as the wheel names it."""
    wanted = set()
    for directory, prefix in INSTALLED_AS.items():
        for path in (ROOT / directory).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                wanted.add(f"{prefix}/{path.relative_to(ROOT / directory).as_posix()}")
    return wanted


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """Built from a copy of the sources: setuptools writes ./build and *.egg-info beside its input."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for directory in INSTALLED_AS:
        shutil.copytree(ROOT / directory, source / directory, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), "."]
    done = subprocess.run(command, cwd=source, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = out.glob("mmharness-*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_holds_every_file_of_the_tree(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    missing = sorted(tree_files() - names)
    assert not missing, f"left out of the wheel: {missing}"


def test_every_package_directory_is_a_package_in_the_wheel(wheel: zipfile.ZipFile) -> None:
    directories = {name.rsplit("/", 1)[0] for name in wheel.namelist() if name.endswith("/__init__.py")}
    expected = {
        f"{prefix}/{path.parent.relative_to(ROOT / directory).as_posix()}".rstrip("/.")
        for directory, prefix in INSTALLED_AS.items()
        for path in (ROOT / directory).rglob("__init__.py")
    }
    assert expected <= directories, sorted(expected - directories)
    assert "mmharness/engines/vllm" in directories  # the package once left out


def test_the_wheel_declares_the_command_and_the_pytest_plugin(wheel: zipfile.ZipFile) -> None:
    (entry_points,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    text = wheel.read(entry_points).decode()
    assert "mmharness = mmharness.cli:main" in text
    assert "mmharness = mmharness.pytest_plugin" in text
