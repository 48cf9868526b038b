"""``mmharness.matrix``: check x target statuses, the first failing target, text and JSON forms."""

from __future__ import annotations

import json

import pytest
from mmharness import atlas
from mmharness.checks import select
from mmharness.checks.outcome import DIVERGENCE
from mmharness.matrix import ERROR, Cell, Matrix, Seen, render, run_matrix
from mmharness.runner import PASSED

CHECKS = select(["chunk.matches_reference", "count.matches_reference"])
TARGETS = ["reference", "mutant:chunk_start_off_by_one", "/nonexistent/sglang-fork"]
THREE = ["reference", "mutant:chunk_start_off_by_one", "mutant:chunk_end_inclusive"]


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


def test_each_way_of_failing_has_its_span():
    matrix = run_matrix(THREE, CHECKS, "ci")
    spans = matrix.spans("chunk.matches_reference")
    assert spans and {s.kind for s in spans} == {DIVERGENCE}
    for span in spans:
        assert "reference" not in span.targets
        assert len(span.found_at) == len(span.targets) and all(n >= 1 for n in span.found_at)
    assert "chunk.matches_reference [divergence]" in render(matrix)


def test_json_round_trips_and_workers_give_the_same_cells():
    serial = _matrix()
    again = Matrix.from_json(json.loads(json.dumps(serial.as_json())))
    assert again.cells == serial.cells and again.releases == serial.releases
    assert again.target_errors == serial.target_errors
    parallel = run_matrix(TARGETS, CHECKS, "ci", max_examples=30, workers=2)
    assert parallel.cells == serial.cells


NOTES = {
    "classes": [
        {
            "name": "The start is one too late",
            "function": "get_embedding_chunk",
            "what": "counts the placeholder at the window's first position as prefilled.",
            "why": "every chunk loses its first row.",
            "match": [["chunk.*", "chunk"]],
            "releases": ["mutant:chunk_start_off_by_one", "mutant:chunk_start_off_by_one"],
        }
    ]
}


def test_the_atlas_explains_what_its_notes_cover_and_lists_the_rest(tmp_path):
    matrix = run_matrix(THREE, CHECKS, "ci")
    notes_file = tmp_path / "notes.json"
    notes_file.write_text(json.dumps(NOTES))
    text = atlas.render(matrix, atlas.load_notes(str(notes_file)))
    assert "### The start is one too late" in text
    assert "**Function**: `get_embedding_chunk`." in text
    assert "**What it does**: counts the placeholder" in text
    assert "**Releases**: mutant:chunk_start_off_by_one (1 of 3)." in text
    _, _, rest = text.partition("### Not yet explained")
    assert rest and "mutant:chunk_end_inclusive" in rest, "outside its release range a note explains nothing"
    assert "| reference | 0 | 2 | 0 | 0 | 0 | 0 |" in text


def test_bad_notes_are_one_line_errors(tmp_path):
    bad = tmp_path / "notes.json"
    bad.write_text(json.dumps({"classes": [{"name": "x"}]}))
    with pytest.raises(atlas.NotesError, match=r"classes\[0\]: missing or malformed 'match'"):
        atlas.load_notes(str(bad))


def test_an_interrupted_matrix_marks_its_partial_cells_and_round_trips():
    from mmharness.matrix import NOT_RUN

    seen = Seen(DIVERGENCE, "chunk: fewer rows", "requests[0] chunk[0]: fewer rows", 3, "fd/x.json")
    matrix = Matrix(["a", "b"], ["chunk.matches_reference", "count.matches_reference"], interrupted=True)
    matrix.cells = {
        ("chunk.matches_reference", "a"): Cell(PASSED, examples_run=100),
        ("count.matches_reference", "a"): Cell(PASSED, examples_run=100),
        ("chunk.matches_reference", "b"): Cell(DIVERGENCE, "fewer rows", 7, (seen,), interrupted=True),
        ("count.matches_reference", "b"): Cell(NOT_RUN, "interrupted before it began"),
    }
    text = render(matrix)
    assert text.splitlines()[2].split() == ["chunk.matches_reference", "pass", "DIVERGE*", "b"]
    assert text.splitlines()[3].split() == ["count.matches_reference", "pass", "-", "-"]
    assert "interrupted: 1 target(s) finished, 1 in progress" in text
    data = json.loads(json.dumps(matrix.as_json()))
    assert data["interrupted"] is True
    partial = data["checks"][0]["results"]["b"]
    assert partial["interrupted"] is True and partial["findings"][0]["saved"] == "fd/x.json"
    again = Matrix.from_json(data)
    assert again.cells == matrix.cells and again.interrupted
    assert "**Interrupted**: the matrix was stopped part-way" in atlas.render(again, [])


@pytest.mark.parametrize(
    ("document", "words"),
    [
        ([1, 2], "it holds a JSON array, not an object"),
        ("matrix", "it holds a JSON string"),
        ({"format": "mmharness.report/2"}, "its format is 'mmharness.report/2', not 'mmharness.matrix/2'"),
        ({"format": "mmharness.matrix/2", "targets": []}, "it lacks 'checks'"),
        ({"format": "mmharness.matrix/2", "targets": [1], "checks": []}, "malformed"),
    ],
)
def test_a_document_that_is_not_a_matrix_says_why(document, words):
    from mmharness.matrix import NotAMatrix

    with pytest.raises(NotAMatrix, match=words):
        Matrix.from_json(document)
