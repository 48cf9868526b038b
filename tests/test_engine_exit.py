"""Engine code that would end the harness's process: a file calling ``os._exit(0)`` (or ``sys.exit``)
while it loads made ``check`` exit 0 with no report, also under ``--against``. Now such a file did not
load, named with the line that exited, and a call that exits is the engine's error on that input."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.network  # a cached SGLang release to seed the calls into

RULES = "sglang/srt/managers/mm_schedule.py"
CHUNK = "def get_embedding_chunk("


def _release(sglang_release) -> Path:
    return Path(sglang_release("0.5.23").describe()["source"])


def _seeded(tmp_path: Path, root: Path, edit) -> Path:
    import shutil

    tree = tmp_path / "tree"
    shutil.copytree(root, tree)
    path = tree / RULES
    path.write_text(edit(path.read_text()))
    return tree


def _run(*argv: str) -> tuple[int, str]:
    """In a process of its own: without the guard the exit would end this test's process too."""
    import subprocess
    import sys

    command = [sys.executable, "-c", "import sys; from mmharness.cli import main; sys.exit(main())", *argv]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("ending", ["import os\nos._exit(0)\n", "import sys\nsys.exit(0)\n"])
@pytest.mark.parametrize("against", [False, True])
def test_a_file_that_exits_while_loading_never_passes(tmp_path, sglang_release, ending, against):
    root = _release(sglang_release)
    tree = _seeded(tmp_path, root, lambda source: source + "\n" + ending)
    argv = ["check", "--target", str(tree), "--checks", "chunk", "--max-examples", "2"]
    argv += ["--findings", str(tmp_path / "findings")]
    if against:
        argv += ["--against", str(root)]
    code, out = _run(*argv)
    assert code == 2, out
    called = "os._exit(0)" if "os" in ending else "sys.exit(0)"
    assert f"engine code called {called}" in out and "mm_schedule" in out


@pytest.mark.parametrize(("ending", "called"), [("os._exit(0)", "os._exit(0) at"), ("sys.exit(0)", "")])
def test_a_call_that_exits_is_the_engines_error(tmp_path, sglang_release, ending, called):
    def exits_when_called(source: str) -> str:
        start = source.index(CHUNK)
        body = source.index(":\n", source.index(")", start)) + 2
        return source[:body] + f"    import os, sys\n    {ending}\n" + source[body:]

    tree = _seeded(tmp_path, _release(sglang_release), exits_when_called)
    argv = ["check", "--target", str(tree), "--checks", "chunk.matches_reference", "--max-examples", "3"]
    code, out = _run(*argv, "--findings", str(tmp_path / "findings"))
    assert code == 1, out
    assert "DIVERGENCE     chunk.matches_reference" in out
    assert ("engine code called " + called if called else "raised SystemExit") in out
