"""The README's user-written property runs as written, through the plugin's ``mm_target`` fixture."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_readme_property_passes_on_the_reference_and_fails_on_a_mutant(tmp_path):
    (block,) = re.findall(r"```python\n(# test_my_rows\.py.*?)```", README.read_text(), re.S)
    (tmp_path / "test_my_rows.py").write_text(block)

    def run(target: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_my_rows.py"]
        command += ["-k", "serves", "--hypothesis-seed=0"]
        return subprocess.run(
            [*command, "--mm-target", target, "--mm-findings", str(tmp_path / "findings")],
            cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip

    passed = run("reference")  # -k: the property alone, not the checks the plugin adds beside it
    assert passed.returncode == 0 and "1 passed" in passed.stdout, passed.stdout + passed.stderr
    failed = run("mutant:chunk_start_off_by_one")
    assert failed.returncode == 1, failed.stdout + failed.stderr
