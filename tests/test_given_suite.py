"""The checks as plain ``@given`` tests (``mmharness.given_suite``), and a bounded HypoFuzz run over them.

HypoFuzz is an optional extra under its own (non-commercial) license; its test
is skipped where it is not installed, as in CI.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys

import pytest
from conftest import reference_summary


def run_suite(tmp_path, target: str, *args: str, strict: bool = False) -> subprocess.CompletedProcess:
    """The suite under a caller's Hypothesis profile of 10 examples (registered by a plugin of the
    caller's, as the suite promises: its settings are the caller's), without the shrink and explain
    phases: these tests read whether a check's test fails, not its shrunk case (shrinking a divergence
    cost most of a failing run)."""
    env = {**os.environ, "MMHARNESS_TARGET": target, "MMHARNESS_STRICT": "1" if strict else "0"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    (tmp_path / "quick_profile.py").write_text(
        "from hypothesis import Phase, settings\n"
        "settings.register_profile(\n"
        "    'quick', max_examples=10, phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target]\n"
        ")\n"
    )
    suite = ["--pyargs", "mmharness.given_suite", "-p", "quick_profile", "--hypothesis-profile", "quick"]
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *suite, *args]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, check=False)


def test_every_check_is_a_given_test_that_passes_on_the_reference(tmp_path):
    run = run_suite(tmp_path, "reference", "-q")
    assert run.returncode == 0, run.stdout + run.stderr
    assert reference_summary() in run.stdout


def test_a_divergence_fails_its_test_and_a_hazard_only_under_strict(tmp_path):
    failing = run_suite(tmp_path, "mutant:chunk_start_off_by_one", "-q", "-k", "chunk_matches_reference")
    assert failing.returncode == 1 and "FAILED" in failing.stdout
    hazard = run_suite(tmp_path, "reference", "-q", "-k", "partial_fallback")
    assert hazard.returncode == 0
    strict = run_suite(tmp_path, "reference", "-q", "-k", "partial_fallback", strict=True)
    assert strict.returncode == 1


def test_each_check_keys_the_example_database_on_its_own():
    from hypothesis.internal.reflection import function_digest
    from mmharness import given_suite

    tests = [getattr(given_suite, name) for name in dir(given_suite) if name.startswith("test_")]
    digests = {function_digest(t.hypothesis.inner_test) for t in tests}
    assert len(digests) == len(tests)


def test_hypofuzz_fuzzes_the_checks_for_a_bounded_time(tmp_path):
    pytest.importorskip("hypofuzz")
    env = {**os.environ, "MMHARNESS_TARGET": "mutant:count_inclusive_end"}
    command = [
        shutil.which("hypothesis") or "hypothesis",
        *("fuzz", "-n", "1", "--no-dashboard", "--", "--pyargs", "mmharness.given_suite", "-k", "count"),
    ]
    fuzzer = subprocess.Popen(command, cwd=tmp_path, env=env, start_new_session=True)
    try:
        with contextlib.suppress(subprocess.TimeoutExpired):  # it fuzzes until stopped
            fuzzer.wait(timeout=40)
    finally:
        os.killpg(fuzzer.pid, signal.SIGKILL)  # its worker processes too
    saved = list((tmp_path / ".hypothesis" / "examples").rglob("*"))
    assert saved, "HypoFuzz ran the checks and kept what it found in the shared example database"
