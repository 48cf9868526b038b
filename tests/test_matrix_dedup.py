"""``matrix`` searches one target per engine code (``baseline.behaviour_key``) and gives the others its
cells: the report reads as a search of every target, each copied cell and finding marked ``same_as``."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from mmharness import atlas
from mmharness import matrix as matrix_module
from mmharness.baseline import behaviour_key
from mmharness.checks import select
from mmharness.checks.outcome import DIVERGENCE
from mmharness.matrix import REPLAY, REPLAY_DONE, SAME, Cell, Matrix, render, replay_classes, run_matrix
from mmharness.runner import PASSED
from mmharness.targets.specs import resolve

CHECK = "chunk.matches_reference"
FOUND, CLEAN = "mutant:chunk_start_off_by_one", "reference"
TWIN, TWIN2, CLEAN_TWIN = "twin_adapter:start", "twin_adapter:again", "twin_adapter:clean"
TWIN_MODULE = """
from mmharness.targets.mutants import mutant
from mmharness.targets.specs import resolve


def start():
    return mutant("chunk_start_off_by_one")


def again():
    return mutant("chunk_start_off_by_one")


def clean():
    return resolve("reference")
"""
RULES = "sglang/srt/managers/mm_utils.py"
ONE_LINE = ("            start_index += end - start + 1", "            start_index += end - start")
"""0.4.7's get_embedding_chunk, one line changed: a chunk after a whole item starts a row early."""


def _unmarked(value: Any) -> Any:
    """A report without what says a cell was copied: what a search of every target would write."""
    if isinstance(value, dict):
        return {k: _unmarked(v) for k, v in value.items() if k not in ("same_as", "dedup")}
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    return value


def _counted(monkeypatch, name: str) -> list[str]:
    """The specs ``matrix.NAME`` (a column's search, a target's replay) is called for, in order."""
    calls: list[str] = []
    real = getattr(matrix_module, name)

    def counted(spec: str, *rest: Any) -> Any:
        calls.append(spec)
        return real(spec, *rest)

    monkeypatch.setattr(matrix_module, name, counted)
    return calls


# Without releases: two specs of one mutant given one key ----------------------------------------------------


@pytest.fixture
def twins(tmp_path, monkeypatch) -> None:
    """The mutant and its twin (the same bug under another spec) keyed as one code, the reference and its
    twin as another; the reference itself unkeyed unless its twin is in the matrix."""
    (tmp_path / "twin_adapter.py").write_text(TWIN_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "twin_adapter", raising=False)  # another test's module of that name
    keys = {FOUND: "mutant", TWIN: "mutant", CLEAN_TWIN: "reference"}
    monkeypatch.setattr(matrix_module, "_behaviour", lambda spec: (keys.get(spec), None))


def test_a_target_of_an_earlier_ones_code_gets_its_cells_marked_and_round_trips(twins, monkeypatch):
    searched = _counted(monkeypatch, "_column")
    told: list[dict[str, str]] = []

    matrix = run_matrix([FOUND, CLEAN, TWIN], select([CHECK]), "ci", max_examples=30, keyed=told.append)

    assert searched == [FOUND, CLEAN] and told == [{TWIN: FOUND}]
    assert (matrix.dedup, matrix.same_as, matrix.searched) == (True, {TWIN: FOUND}, [FOUND, CLEAN])
    found, twin = matrix.cell(CHECK, FOUND), matrix.cell(CHECK, TWIN)
    assert twin.status == DIVERGENCE and twin.same_as == FOUND and not found.same_as
    assert [s.same_as for s in twin.findings] == [FOUND] * len(found.findings) and found.findings
    assert [(r.targets, r.found_at[0] == r.found_at[1]) for r in matrix.ranges(CHECK)] == [
        ((FOUND, TWIN), True)
    ] * len(found.findings)
    document = matrix.as_json()
    assert document["dedup"] and document["targets"][2]["same_as"] == FOUND
    assert document["checks"][0]["results"][TWIN]["same_as"] == FOUND
    assert Matrix.from_json(document).as_json() == document
    table = render(matrix)
    assert f"DIVERGE{SAME}" in table and f"same code as {FOUND}: {TWIN}" in table
    assert "searched 2 of 3 target(s), one per engine code" in table
    assert "Searched 2 of 3 releases, one per distinct engine code" in atlas.render(matrix, [])


def test_replay_runs_once_per_code_and_gives_the_others_what_it_showed(twins, monkeypatch):
    """The mutant's classes are replayed on the first clean target alone; its twin, of the same code,
    gets that replay's answers (none reproduce: the reference is right) without running them."""
    replayed = _counted(monkeypatch, "_replay_column")
    matrix = run_matrix([CLEAN_TWIN, FOUND, CLEAN], select([CHECK]), "ci", max_examples=30)
    assert matrix.same_as == {}, "the reference has no key: its twin is the first of its own"
    replayed.clear()
    keys = {FOUND: "mutant", CLEAN_TWIN: "reference", CLEAN: "reference"}
    monkeypatch.setattr(matrix_module, "_behaviour", lambda spec: (keys.get(spec), None))

    matrix = run_matrix([CLEAN_TWIN, FOUND, CLEAN], select([CHECK]), "ci", max_examples=30)

    assert matrix.same_as == {CLEAN: CLEAN_TWIN}
    assert matrix.replay == REPLAY_DONE and replayed == [CLEAN_TWIN]
    assert matrix.cell(CHECK, CLEAN).status == PASSED == matrix.cell(CHECK, CLEAN_TWIN).status


def test_what_a_replay_shows_on_a_searched_target_its_copies_show_too(twins, monkeypatch):
    """Two targets of one code whose (shared) search missed the mutant's classes: the replay runs on
    the first only, and the second gets each class it showed, by replay from the mutant, marked."""
    targets, checks = [FOUND, TWIN, TWIN2], select([CHECK])
    matrix = run_matrix(targets, checks, "ci", max_examples=30, dedup=False, replay=False)
    for target in (TWIN, TWIN2):  # as a search that missed them
        matrix.cells[(CHECK, target)] = Cell(PASSED, examples_run=30, same_as=TWIN if target == TWIN2 else "")
    matrix.same_as = {TWIN2: TWIN}
    replayed = _counted(monkeypatch, "_replay_column")

    replay_classes(matrix)

    assert replayed == [TWIN]
    first, second = matrix.cell(CHECK, TWIN), matrix.cell(CHECK, TWIN2)
    assert second.status == first.status == DIVERGENCE and first.findings
    shown = [(s.by, s.source, s.same_as) for s in second.findings]
    assert shown == [(REPLAY, FOUND, TWIN)] * len(first.findings)
    assert [s.signature for s in second.findings] == [s.signature for s in first.findings]


def test_a_search_that_draws_anew_each_run_searches_every_target(twins, monkeypatch):
    keyed = _counted(monkeypatch, "_behaviour")
    matrix = run_matrix([FOUND, TWIN], select([CHECK]), "dev", max_examples=5, replay=False)
    assert (keyed, matrix.dedup, matrix.same_as) == ([], False, {})
    seeded = run_matrix([FOUND, TWIN], select([CHECK]), "dev", max_examples=5, seed=3, replay=False)
    assert seeded.same_as == {TWIN: FOUND}


def test_targets_loading_no_engine_files_have_no_key():
    assert behaviour_key(resolve(CLEAN)) is None and behaviour_key(resolve(FOUND)) is None


# On a release: path copies, and a copy with one line changed -----------------------------------------------


@pytest.fixture
def copies(sglang_release, seeded_copy, tmp_path) -> tuple[str, str, str]:
    """Two path copies of SGLang 0.4.7, and a third with one line of its rules file changed."""
    root = Path(sglang_release("0.4.7").describe()["source"])
    same = []
    for name in ("a", "b"):
        shutil.copytree(root, tmp_path / name)
        same.append(str(tmp_path / name))
    changed = seeded_copy(root, [(RULES, *ONE_LINE)])
    return same[0], same[1], str(changed)


@pytest.mark.network
def test_path_copies_are_searched_once_and_read_as_a_search_of_each(copies, monkeypatch):
    a, b, changed = copies
    assert behaviour_key(resolve(a)) == behaviour_key(resolve(b)) != behaviour_key(resolve(changed))
    searched = _counted(monkeypatch, "_column")
    replayed = _counted(monkeypatch, "_replay_column")
    checks = select([CHECK, "precomputed.matches_reference"])

    deduped = run_matrix([a, b, changed], checks, "ci", max_examples=40)

    assert deduped.same_as == {b: a} and searched == [a, changed], "the changed copy is searched itself"
    assert b not in replayed and deduped.replay == REPLAY_DONE
    assert deduped.cell(CHECK, changed).status == DIVERGENCE != deduped.cell(CHECK, a).status
    assert all(deduped.cell(c.id, b).same_as == a for c in checks)
    searched.clear()
    full = run_matrix([a, b, changed], checks, "ci", max_examples=40, dedup=False)
    assert searched == [a, b, changed] and not full.same_as
    assert _unmarked(deduped.as_json()) == _unmarked(full.as_json())
    assert [deduped.ranges(c.id) for c in checks] == [full.ranges(c.id) for c in checks]
