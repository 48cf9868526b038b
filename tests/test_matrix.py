"""``harness.matrix``: check x target statuses, the first failing target, text and JSON forms."""

from __future__ import annotations

import json

from harness.checks import select
from harness.checks.outcome import DIVERGENCE
from harness.matrix import ERROR, render, run_matrix
from harness.runner import PASSED

CHECKS = select(["chunk.matches_reference", "count.matches_reference"])
TARGETS = ["reference", "mutant:chunk_start_off_by_one", "/nonexistent/sglang-fork"]


def _matrix():
    return run_matrix(TARGETS, CHECKS, "ci", max_examples=30)


def test_statuses_and_first_failing_target():
    matrix = _matrix()
    assert matrix.cell("chunk.matches_reference", "reference").status == PASSED
    assert matrix.cell("chunk.matches_reference", TARGETS[1]).status == DIVERGENCE
    assert matrix.first_failing("chunk.matches_reference") == TARGETS[1]
    assert matrix.first_failing("count.matches_reference") is None


def test_a_target_that_does_not_load_fills_its_column_with_errors():
    matrix = _matrix()
    assert {matrix.cell(c.id, TARGETS[2]).status for c in CHECKS} == {ERROR}
    assert "does not exist" in matrix.target_errors[TARGETS[2]]


def test_text_and_json_forms():
    matrix = _matrix()
    text = render(matrix)
    header, _, *rows = text.splitlines()
    assert header.split()[0] == "check" and header.endswith("first failing")
    assert rows[0].split()[:4] == ["chunk.matches_reference", "pass", "DIVERGE", "error"]
    assert rows[0].split()[-1] == TARGETS[1]
    data = json.loads(json.dumps(matrix.as_json()))
    assert data["format"] == "mmharness.matrix/2"
    assert [t["spec"] for t in data["targets"]] == TARGETS
    chunk = data["checks"][0]
    assert chunk["first_failing"] == TARGETS[1]
    assert chunk["results"]["reference"]["status"] == PASSED
