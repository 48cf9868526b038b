"""``mmharness.matrix``: check x target statuses, the first failing target, text and JSON forms."""

from __future__ import annotations

import json
import re

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
    spans = matrix.ranges("chunk.matches_reference")
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


SHARDED = ["reference", *THREE[1:], "/nonexistent/sglang-fork", "mutant:count_inclusive_end"]
"""Five targets (one that does not load) over three shards: two, two and one."""
SHARDED_ARGS = [
    *(word for spec in SHARDED for word in ("--target", spec)),
    *("--checks", "count", "--checks", "chunk.matches_reference", "--max-examples", "30"),
]


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    from mmharness.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_merged_shards_are_the_unsharded_report_table_and_exit_code(capsys, tmp_path, monkeypatch):
    """Shards written under the unsharded run's --json name (then moved aside) give back its command
    line too; ``--shard`` is spelt each way argparse takes it."""
    monkeypatch.chdir(tmp_path)
    code, out, _ = _cli(capsys, "matrix", *SHARDED_ARGS, "--json", "matrix.json")
    whole = json.loads((tmp_path / "matrix.json").read_text())
    for index, spelt in ((1, ["--shard", "1/3"]), (2, ["--shard=2/3"]), (3, ["--sha", "3/3"])):
        _cli(capsys, "matrix", *SHARDED_ARGS, *spelt, "--json", "matrix.json")
        shard = (tmp_path / "matrix.json").rename(tmp_path / f"shard-{index}.json")
        report = json.loads(shard.read_text())
        assert [t["spec"] for t in report["targets"]] == SHARDED[index - 1 :: 3]
        assert (report["shard"]["index"], report["shard"]["count"]) == (index, 3)
    merged_code, merged_out, _ = _cli(
        capsys, "merge", "shard-3.json", "shard-1.json", "shard-2.json", "--json", "merged.json"
    )
    assert json.loads((tmp_path / "merged.json").read_text()) == whole
    assert merged_code == code == 2 and merged_out == out  # 2: a target did not load
    assert "mutant:chunk_start_off_by_one" in out.splitlines()[0], "the table has every target"


def test_shares_are_round_robin_disjoint_and_cover_every_target():
    from mmharness.shards import share

    assert share(list("abcdefg"), 2, 3) == ["b", "e"]
    for size in range(8):
        targets = [f"sglang==0.5.{k}" for k in range(size)]
        for count in range(1, 6):
            shares = [share(targets, index, count) for index in range(1, count + 1)]
            dealt = [t for one in shares for t in one]
            assert sorted(dealt) == sorted(targets) and len(dealt) == size
            assert max(map(len, shares)) - min(map(len, shares)) <= 1
            assert all(one == sorted(one, key=targets.index) for one in shares), "each share keeps the order"


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("0/3", "I must be from 1 to N (3), got 0/3"),
        ("4/3", "I must be from 1 to N (3), got 4/3"),
        ("1/0", "N must be 1 or more, got 1/0"),
        ("a/b", "expected I/N, the I-th of N shares (e.g. 2/3), got 'a/b'"),
        ("3", "expected I/N, the I-th of N shares (e.g. 2/3), got '3'"),
    ],
)
def test_a_bad_shard_is_a_usage_error_before_any_target_loads(capsys, monkeypatch, value, words):
    def loaded(spec):
        raise AssertionError(f"{spec} was loaded before --shard was checked")

    monkeypatch.setattr("mmharness.targets.specs.resolve", loaded)
    with pytest.raises(SystemExit) as stopped:
        _cli(capsys, "matrix", "--target", "sglang==0.5.23", "--shard", value)
    assert stopped.value.code == 2
    assert f"argument --shard: {words}" in capsys.readouterr().err


def test_a_shard_beyond_the_targets_is_refused(capsys, tmp_path):
    """A share with no targets would run nothing, yet merge as a share that ran: refused, before anything."""
    args = ["matrix", "--target", "reference", "--checks", "count", "--max-examples", "5"]
    code, out, err = _cli(capsys, *args, "--shard", "2/2", "--json", str(tmp_path / "shard-2.json"))
    assert code == 2 and out == "" and not (tmp_path / "shard-2.json").exists()
    assert "--shard 2/2: this share has no targets (1 target(s) over 2 shards)" in err


MERGE_ARGS = ["--target", "reference", "--target", "mutant:count_inclusive_end", "--checks", "count"]
MERGE_ARGS += ["--max-examples", "5"]


@pytest.fixture(scope="module")
def shard_reports(tmp_path_factory) -> dict[str, str]:
    """Shard reports by how they were run: the shares of one matrix, and shares of others."""
    from mmharness.cli import main

    where = tmp_path_factory.mktemp("shards")
    runs = {
        "1/2": ["--shard", "1/2"],
        "2/2": ["--shard", "2/2"],
        "1/3": ["--shard", "1/3"],
        "2/2 seed": ["--shard", "2/2", "--seed", "3"],
        "2/2 dev": ["--shard", "2/2", "--profile", "dev"],
        "2/2 checks": ["--shard", "2/2", "--checks", "chunk.matches_reference"],
        "2/2 targets": ["--shard", "2/2", "--target", "mutant:chunk_end_inclusive"],
        "whole": [],
    }
    paths = {}
    for name, extra in runs.items():
        paths[name] = str(where / f"{name.replace('/', '-').replace(' ', '-')}.json")
        main(["matrix", *MERGE_ARGS, *extra, "--json", paths[name]])
    return paths


@pytest.mark.parametrize(
    ("given", "words"),
    [
        (["1/2", "1/3"], r"different matrices: shard count \(N of --shard I/N\) is 3 in \S+1-3.json"),
        (["1/2", "2/2 seed"], r"different matrices: --seed is 3 in \S+2-2-seed.json, None in \S+1-2.json"),
        (["1/2", "2/2 dev"], r"different matrices: --profile is 'dev' in \S+, 'ci' in"),
        (["1/2", "2/2 checks"], r"checks \(--checks\) #2 is 'chunk.matches_reference' in \S+, absent in"),
        (["1/2", "2/2 targets"], r"targets \(--target\) #3 is 'mutant:chunk_end_inclusive' in \S+, absent"),
        (["1/2", "1/2", "2/2"], r"shard 1/2 is given twice: \S+1-2.json and \S+1-2.json"),
        (["2/2"], r"shard\(s\) 1 of 2 missing: give every shard's report"),
        (["1/2", "whole"], r"whole.json: not a shard's report \(`mmharness matrix --shard I/N --json`"),
    ],
)
def test_merge_refuses_what_is_not_every_shard_of_one_matrix(capsys, tmp_path, shard_reports, given, words):
    merged = tmp_path / "merged.json"
    code, out, err = _cli(capsys, "merge", *(shard_reports[name] for name in given), "--json", str(merged))
    assert code == 2 and re.search(words, err) and err.count("\n") == 1, err
    assert out == "" and not merged.exists()


def test_the_sharded_atlas_workflow_asks_mmharness_for_what_it_has():
    """``docs/ci/atlas-sharded.yml`` runs on GitHub only; here, each of its commands parses."""
    import shlex
    from pathlib import Path

    from mmharness.cli import _parser

    workflow = (Path(__file__).parent.parent / "docs" / "ci" / "atlas-sharded.yml").read_text()
    text = re.sub(r"\$\{\{[^}]*\}\}", "2", re.sub(r"\\\n\s*", " ", workflow))  # every expression: 2
    lines = (line.strip().removeprefix("run: ") for line in text.splitlines())
    runs = [line.replace("$TARGETS", "--target reference") for line in lines if line.startswith("mmharness ")]
    commands = [shlex.split(line)[1:] for line in runs]
    assert [words[0] for words in commands] == ["matrix", "merge", "atlas"]
    for words in commands:
        _parser().parse_args(words)
    assert "--shard" in commands[0]


def test_a_check_that_stops_running_is_said_before_any_verdict():
    """A check that ran on one release and is skipped on the next (vLLM 0.34's drafter check, tied to a
    removed runner) is listed in the table's text, the JSON and the atlas, never left as a quiet skip."""
    from mmharness.runner import SKIPPED

    targets, checks = ["old", "broken", "new", "newer"], ["a", "b"]
    cells = {
        ("a", "old"): Cell(PASSED),
        ("a", "broken"): Cell(ERROR, "does not load"),
        ("a", "new"): Cell(SKIPPED, "new lacks draft_lookahead"),
        ("a", "newer"): Cell(SKIPPED, "newer lacks draft_lookahead"),
        **{("b", t): Cell(SKIPPED, "no CUDA device") for t in targets},
    }
    matrix = Matrix(targets, checks, cells, target_errors={"broken": "does not load"})
    (stopped,) = matrix.stopped_running()
    assert (stopped.check, stopped.last, stopped.target) == ("a", "old", "new"), "once, past the error"
    line = "stopped running: a ran on old, skipped on new: new lacks draft_lookahead"
    assert line in render(matrix).splitlines()
    assert matrix.as_json()["stopped_running"] == [
        {"check": "a", "last": "old", "target": "new", "reason": "new lacks draft_lookahead"}
    ]
    document = atlas.render(matrix, [])
    assert document.index("## Checks that stopped running") < document.index("## Verdicts per release")
    assert "- `a`: ran on old, skipped from new on: new lacks draft_lookahead" in document
    matrix.cells[("a", "new")] = Cell(PASSED)
    assert [one.target for one in matrix.stopped_running()] == ["newer"]
