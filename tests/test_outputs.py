"""Files the harness writes (reports, baselines, saved cases) get the mode any other file would.

They are written atomically through a temporary file; that file's private mode
(0o600) must not become theirs, and an existing file keeps its own mode.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from mmharness import report
from mmharness.checks import all_checks
from mmharness.cli import main
from mmharness.runner import run_check
from mmharness.targets.specs import resolve


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    try:
        yield 0o640  # what 0o666 comes to under it
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_reports_get_the_usual_mode_and_an_existing_one_keeps_its_own(tmp_path, capsys, umask_027):
    outputs = {option: tmp_path / f"out{option}" for option in ("--json", "--junit", "--write-baseline")}
    argv = ["check", "--checks", "count", "--findings", str(tmp_path / "findings")]
    argv += [part for option, path in outputs.items() for part in (option, str(path))]
    assert main(argv) == 0, capsys.readouterr()
    assert {option: oct(mode(path)) for option, path in outputs.items()} == dict.fromkeys(
        outputs, oct(umask_027)
    )
    for path in outputs.values():
        path.chmod(0o604)
    assert main(argv) == 0, capsys.readouterr()
    assert {option: oct(mode(path)) for option, path in outputs.items()} == dict.fromkeys(outputs, oct(0o604))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [], "no temporary file left"


def test_a_saved_case_gets_the_usual_mode_and_keeps_an_existing_one(tmp_path, umask_027):
    result = run_check(all_checks()["chunk.matches_reference"], resolve("mutant:chunk_start_off_by_one"))
    finding = result.findings[0]
    saved = Path(report.save(result, finding, "mutant:chunk_start_off_by_one", tmp_path / "findings"))
    assert mode(saved) == umask_027
    saved.chmod(0o604)
    again = report.save(result, finding, "mutant:chunk_start_off_by_one", tmp_path / "findings")
    assert again == str(saved) and mode(saved) == 0o604
    assert [p.name for p in saved.parent.iterdir()] == [saved.name], "written atomically, nothing left over"
