"""The CI files a fork copies, and the ClusterFuzzLite build: every mmharness command in them parses.

(They run on services not reachable here; what can be checked is that they ask mmharness for
things it has.)
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from mmharness.cli import _parser
from mmharness.fuzz.registry import fuzz_parsers

ROOT = Path(__file__).parent.parent
FILES = [ROOT / "docs" / "ci" / "mmharness.yml", ROOT / ".clusterfuzzlite" / "build.sh"]


def _commands(path: Path) -> list[list[str]]:
    text = re.sub(r"\\\n\s*", " ", path.read_text())  # join continued lines
    commands = []
    for line in text.splitlines():
        line = line.strip().removeprefix("- ").removeprefix("run: ")
        if line.startswith("mmharness "):
            words = shlex.split(line.replace('"$parser"', "sglang-mm-data"))
            commands.append(words[1 : words.index("--")] if "--" in words else words[1:])
    return commands


@pytest.mark.parametrize("path", FILES[:1], ids=lambda p: p.name)
def test_every_mmharness_command_parses(path):
    commands = _commands(path)
    assert commands
    for words in commands:
        _parser().parse_args(words)


def test_every_engine_fuzzer_has_a_clusterfuzzlite_entry_point():
    scripts = {p.stem for p in (ROOT / ".clusterfuzzlite").glob("fuzz_*.py")}
    assert scripts == {f"fuzz_{name.replace('-', '_')}" for name in fuzz_parsers()}
