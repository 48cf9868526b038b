"""The pytest plugin: it runs the checks when asked, from any directory, and otherwise stays out of the way.

Every test starts pytest in a fresh directory outside the repository, as a user
of the installed package would.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import reference_summary
from mmharness.checks import all_checks


def pytest_in(directory: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=directory,
        capture_output=True,
        text=True,
        check=False,
    )


# Checks that pass, one a hazard of the rules (passing unless strict), and skips of both kinds: a check
# needing CUDA, a check of an option the reference does not model. Every check, run against the
# reference, is the README's main job; here every check is collected, and these run.
SOME_CHECKS = "R4,precomputed.partial_fallback,prefill.short_lists,device.cpu_equals_cuda"


def test_the_checks_run_from_any_directory(tmp_path):
    collected = pytest_in(tmp_path, "--mm-target", "reference", "-q", "--collect-only")
    assert collected.returncode == 0, collected.stdout + collected.stderr
    listed = {line.strip() for line in collected.stdout.splitlines()}
    assert {f"::mmharness::{check_id}[cpu]" for check_id in all_checks()} <= listed, collected.stdout
    run = pytest_in(tmp_path, "--mm-target", "reference", "--mm-checks", SOME_CHECKS, "-q", "-rs")
    assert run.returncode == 0, run.stdout + run.stderr
    assert reference_summary(SOME_CHECKS) in run.stdout


def test_a_failing_check_reports_its_saved_case_and_replay_line_under_xdist(tmp_path):
    target = "mutant:chunk_start_off_by_one"
    run = pytest_in(tmp_path, "-n", "2", "--mm-target", target, "--mm-checks", "chunk.matches_reference")
    assert run.returncode == 1, run.stdout + run.stderr
    saved = sorted((tmp_path / "findings").glob("chunk.matches_reference-*.json"))
    assert saved
    assert f"reproduce with: mmharness replay findings/{saved[0].name} --target {target}" in run.stdout
    assert "signature: requests[...] chunk[...]" in run.stdout


def test_a_bad_target_is_one_usage_error_under_xdist(tmp_path):
    run = pytest_in(tmp_path, "-n", "2", "--mm-target", "nonsense")
    assert run.returncode == pytest.ExitCode.USAGE_ERROR
    assert "--mm-target nonsense: unknown target 'nonsense'" in run.stderr
    assert "node down" not in run.stdout + run.stderr


OWN_SUITE = """
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

settings.register_profile(
    "mine", max_examples=7, derandomize=False, database=DirectoryBasedExampleDatabase(".mine-db")
)
settings.load_profile("mine")


@given(st.integers())
def test_my_property(n):
    current = settings()
    assert current.max_examples == 7 and not current.derandomize
    assert isinstance(current.database, DirectoryBasedExampleDatabase)


@pytest.mark.cuda
def test_a_marker_of_my_own():
    pass
"""


def test_an_unrelated_suite_keeps_its_hypothesis_profile_and_its_markers(tmp_path):
    (tmp_path / "test_mine.py").write_text(textwrap.dedent(OWN_SUITE))
    run = pytest_in(tmp_path, "-q")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout, "no check was added, the user's cuda marker is not ours to act on"
    both = pytest_in(tmp_path, "-q", "--mm-target", "reference", "--mm-checks", "count", "test_mine.py")
    assert both.returncode == 0, both.stdout + both.stderr
    assert "3 passed" in both.stdout, "with a path given, the user's tests run beside the checks"


@pytest.mark.parametrize(
    ("options", "refused"),
    [
        (
            ("--mm-target", "mutant:chunk_start_off_by_one", "--mm-findings", "a-file/findings"),
            "--mm-findings a-file/findings: cannot write there",
        ),
        (("-n", "2", "--mm-database", "bogus://x"), "--mm-database bogus://x: expected none, a directory"),
        (("--mm-database", "a-file/db"), "--mm-database a-file/db: cannot write there"),
        (("--mm-checks", ""), "--mm-checks names no check"),
        (("--mm-target", ""), "--mm-target: empty; give a target spec"),
    ],
    ids=["findings", "database-form", "database-directory", "no-checks", "empty-target"],
)
def test_an_option_that_cannot_be_used_is_one_usage_error_naming_it(tmp_path, options, refused):
    (tmp_path / "a-file").write_text("")
    checks = () if "--mm-checks" in options else ("--mm-checks", "chunk.matches_reference")
    run = pytest_in(tmp_path, *options, *checks)
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, run.stdout + run.stderr
    assert f"ERROR: {refused}" in run.stderr
    assert "failed" not in run.stdout and "passed" not in run.stdout, "refused before any check ran"


def test_against_a_known_good_target_a_regression_fails_and_replays_on_both(tmp_path):
    """``--mm-against``: each check compares the two targets case by case, as ``check --against`` does;
    a check the other target cannot run is skipped, naming it."""
    target = "mutant:chunk_start_off_by_one"
    checks = ("--mm-checks", "chunk.matches_reference", "--mm-checks", "prefill.whole_items")
    run = pytest_in(tmp_path, "--mm-target", target, "--mm-against", "reference", *checks, "-rs")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "signature: regression: requests[...] chunk[...]" in run.stdout
    saved = sorted((tmp_path / "findings").glob("chunk.matches_reference-*.json"))
    assert saved
    line = f"reproduce with: mmharness replay findings/{saved[0].name} --target {target} --against reference"
    assert line in run.stdout
    assert "--against reference: reference lacks whole_items" in run.stdout
    assert "1 failed, 1 skipped" in run.stdout


def test_the_mm_against_ini_compares_once_the_plugin_is_asked(tmp_path):
    """The ini names the known-good target a project's ``--mm-target`` runs compare with; alone it asks
    for nothing (the project's own tests run, no check)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nmm_against = reference\n")
    (tmp_path / "test_mine.py").write_text("def test_mine():\n    pass\n")
    alone = pytest_in(tmp_path, "-q")
    assert alone.returncode == 0 and "1 passed" in alone.stdout, alone.stdout + alone.stderr
    checks = ("--mm-checks", "chunk.matches_reference")
    run = pytest_in(tmp_path, "--mm-target", "mutant:chunk_start_off_by_one", *checks)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "signature: regression: requests[...] chunk[...]" in run.stdout, "compared with the ini's target"
    bad = pytest_in(tmp_path, "--mm-target", "reference", "--mm-against", "mutant:nope", *checks)
    assert bad.returncode == pytest.ExitCode.USAGE_ERROR
    assert "--mm-against mutant:nope: unknown mutant 'nope'" in bad.stderr
