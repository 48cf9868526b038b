"""``matrix`` replays each class's shrunk case on every target: a class's range is where its case fails,
not where each target's search happened to meet it; ``merge`` replays for shards."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from mmharness import atlas
from mmharness.checks import select
from mmharness.checks.outcome import COULD_NOT_TEST, DIVERGENCE, HAZARD, CouldNotTest, Failure
from mmharness.matrix import (
    NOT_REPLAYED,
    REPLAY,
    REPLAY_DONE,
    SEARCH,
    Cell,
    Matrix,
    render,
    replay_classes,
    run_matrix,
)
from mmharness.runner import PASSED, SKIPPED, Finding, Result

CHECK = "chunk.matches_reference"
FOUND, CLEAN, TWIN = "mutant:chunk_start_off_by_one", "reference", "twin_adapter:start"
TWIN_MODULE = """
from mmharness.targets.mutants import mutant


def start():
    return mutant("chunk_start_off_by_one")
"""


def _importable(tmp_path, monkeypatch, name: str, text: str) -> None:
    """Module ``name`` with ``text``, importable for this test: another test's module of that name,
    already imported, is forgotten."""
    (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)


@pytest.fixture
def missed(tmp_path, monkeypatch) -> Matrix:
    """A searched, unreplayed matrix over a mutant, the reference and the mutant's twin (the same bug under
    another spec) whose search is made to have missed the bug: its cell as a clean search's."""
    _importable(tmp_path, monkeypatch, "twin_adapter", TWIN_MODULE)
    matrix = run_matrix([FOUND, CLEAN, TWIN], select([CHECK]), "ci", max_examples=30, replay=False)
    assert matrix.replay == NOT_REPLAYED
    assert matrix.cell(CHECK, TWIN).status == DIVERGENCE, "the twin has the mutant's bug"
    matrix.cells[(CHECK, TWIN)] = Cell(PASSED, examples_run=30)
    return matrix


def test_replay_shows_a_class_on_a_target_whose_search_missed_it(missed):
    searched = {r.signature: r.targets for r in missed.ranges(CHECK)}
    assert searched and all(targets == (FOUND,) for targets in searched.values())

    replay_classes(missed)

    assert missed.replay == REPLAY_DONE
    twin = missed.cell(CHECK, TWIN)
    assert (twin.status, twin.search_status, twin.replayed) == (DIVERGENCE, PASSED, True)
    assert {seen.signature for seen in twin.findings} == set(searched)
    assert all((seen.by, seen.source, seen.case) == (REPLAY, FOUND, None) for seen in twin.findings)
    assert missed.cell(CHECK, CLEAN) == Cell(PASSED, examples_run=30), (
        "a clean replay keeps the search's cell"
    )
    for found in missed.ranges(CHECK):
        assert (found.first, found.last, found.replayed) == (FOUND, TWIN, (TWIN,))
        assert found.found_at[0] >= 1 and found.found_at[1] is None

    text = render(missed)
    assert text.splitlines()[2].split() == [CHECK, "DIVERGE", "pass", "DIVERGEr", FOUND]
    assert f"{FOUND} .. {TWIN} (2, 1 by replay)" in text
    assert f"replayed: each class's case on every target; {len(searched)} finding(s) by replay" in text
    document = atlas.render(missed, [])
    assert f"(2 of 3; 1 by replay: {TWIN})" in document and "(2, 1 by replay) |" in document
    assert "counting the classes a replay found" in document and "was replayed on every release" in document


def test_which_findings_came_by_replay_is_in_the_json_and_round_trips(missed):
    replay_classes(missed)
    data = json.loads(json.dumps(missed.as_json()))
    assert data["replay"] == REPLAY_DONE
    (check,) = data["checks"]
    assert all(one["replayed"] == [TWIN] and one["targets"] == [FOUND, TWIN] for one in check["findings"])
    twin, found = check["results"][TWIN], check["results"][FOUND]
    assert (twin["status"], twin["search_status"]) == (DIVERGENCE, PASSED)
    assert {(one["by"], one["source"]) for one in twin["findings"]} == {(REPLAY, FOUND)}
    assert all(one["by"] == SEARCH and one["case"].startswith("{") for one in found["findings"])
    again = Matrix.from_json(data)
    assert again.cells == missed.cells and again.replay == REPLAY_DONE
    older = json.loads(json.dumps(data))  # a report from before replay: none of its fields
    del older["replay"]
    for results in older["checks"][0]["results"].values():
        del results["search_status"]
        for one in results["findings"]:
            for key in ("by", "source", "case"):
                one.pop(key, None)
    assert Matrix.from_json(older).replay == NOT_REPLAYED
    assert "**Not replayed**" in atlas.render(Matrix.from_json(older), [])


def _answer(status: str, signature: str):
    """A stand-in for ``runner.replay`` whose every replay ends ``status`` (with ``signature``)."""
    kinds = {COULD_NOT_TEST: CouldNotTest, DIVERGENCE: Failure}

    def replay(check, target, example, *, deadline=None):
        if status == SKIPPED:
            return Result(check, SKIPPED, reason="lacks it")
        failure = kinds[status]("m", expected="e", actual="a", signature=signature)
        finding = Finding(failure.kind, signature, failure, example, 1)
        return Result(check, status, reason="m", findings=[finding], examples_run=1)

    return replay


@pytest.mark.parametrize(
    ("status", "signature"),
    [(SKIPPED, ""), (COULD_NOT_TEST, "could not test"), (DIVERGENCE, "another way of failing")],
)
def test_a_replay_that_skips_cannot_test_or_fails_otherwise_leaves_the_search_cell(
    missed, monkeypatch, status, signature
):
    monkeypatch.setattr("mmharness.runner.replay", _answer(status, signature))
    before = dict(missed.cells)
    replay_classes(missed)
    assert missed.cells == before and missed.replay == REPLAY_DONE


def test_only_what_can_show_a_class_is_replayed(missed, monkeypatch):
    """Not on a target whose search found the class, nor where the check was skipped; never a
    could-not-test class (the harness's gap, not the engine's)."""
    from dataclasses import replace

    ran = []

    def replay(check, target, example, *, deadline=None):
        ran.append(target)
        return Result(check, PASSED)

    monkeypatch.setattr("mmharness.runner.replay", replay)
    missed.cells[(CHECK, CLEAN)] = Cell(SKIPPED, "lacks it")
    replay_classes(missed)
    assert len(ran) == len(missed.ranges(CHECK)) and len({id(t) for t in ran}) == 1, "on the twin alone"
    ran.clear()
    found = missed.cell(CHECK, FOUND)
    missed.cells[(CHECK, FOUND)] = replace(
        found, findings=tuple(replace(s, kind=COULD_NOT_TEST) for s in found.findings)
    )
    replay_classes(missed)
    assert ran == []


def test_a_hazard_found_by_replay_makes_no_divergence_worse():
    from mmharness.matrix import Seen, _add, _Class

    matrix = Matrix(["a", "b"], [CHECK])
    matrix.cells = {(CHECK, "a"): Cell(HAZARD), (CHECK, "b"): Cell(DIVERGENCE)}
    _add(matrix, "b", _Class(CHECK, HAZARD, "sig", "{}", "a", None), "message")
    cell = matrix.cell(CHECK, "b")
    assert (cell.status, cell.search_status, cell.replayed) == (DIVERGENCE, DIVERGENCE, True)
    assert cell.findings == (Seen(HAZARD, "sig", "message", None, by=REPLAY, source="a"),)


def test_a_case_or_check_a_report_garbles_is_not_replayed_nor_fatal(missed):
    """``merge`` reads the cases from files: one that does not parse, or names no check, shows nothing."""
    from mmharness.matrix import _replay_column

    (case,) = {seen.case for seen in missed.cell(CHECK, FOUND).findings[:1]}
    work = [(CHECK, DIVERGENCE, "x", '{"format": 1}'), ("no.such_check", DIVERGENCE, "x", case)]
    assert _replay_column(FOUND, work, None) == (FOUND, [None, None])


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    from mmharness.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


ARGS = ["--target", "reference", "--target", "mutant:count_inclusive_end", "--checks", "count"]
ARGS += ["--max-examples", "5"]


def test_shards_do_not_replay_merge_does_and_no_replay_is_kept(capsys, tmp_path):
    """A shard lacks the other shards' classes: its report is not replayed; ``merge`` replays, giving
    the unsharded report. ``--no-replay`` on the shards carries to the merge; ``merge --no-replay``
    only joins."""
    reports = {}
    for name, extra in {
        "whole": [],
        "1": ["--shard", "1/2"],
        "2": ["--shard", "2/2"],
        "bare": ["--no-replay"],
        "1 bare": ["--shard", "1/2", "--no-replay"],
        "2 bare": ["--shard", "2/2", "--no-replay"],
    }.items():
        reports[name] = str(tmp_path / f"{name.replace(' ', '-')}.json")
        _cli(capsys, "matrix", *ARGS, *extra, "--json", reports[name])
    read = {name: json.loads(Path(path).read_text()) for name, path in reports.items()}
    assert (read["whole"]["replay"], read["bare"]["replay"]) == (REPLAY_DONE, NOT_REPLAYED)
    assert {read[k]["replay"] for k in ("1", "2", "1 bare", "2 bare")} == {NOT_REPLAYED}
    settings = {name: read[name]["shard"]["settings"] for name in ("1", "1 bare")}
    assert (settings["1"]["no_replay"], settings["1 bare"]["no_replay"]) == (False, True)

    def merged(*names: str, extra: tuple[str, ...] = ()) -> dict:
        out = tmp_path / "merged.json"
        code, _, err = _cli(capsys, "merge", *(reports[n] for n in names), *extra, "--json", str(out))
        assert code == 1, err  # the mutant diverges
        return json.loads(out.read_text())

    def same(one: dict, other: dict) -> bool:  # but for the --json file in the command line
        return {**one, "command": ""} == {**other, "command": ""}

    assert same(merged("2", "1"), read["whole"])
    assert same(merged("2 bare", "1 bare"), read["bare"])
    shards = [
        f for n in ("1", "2") for c in read[n]["checks"] for r in c["results"].values() for f in r["findings"]
    ]
    assert shards and all(f["shrunk"] is False and f["choices"] for f in shards), (
        "merge shrinks: each carries its choices"
    )
    joined = merged("1", "2", extra=("--no-replay",))
    found = [f for c in joined["checks"] for r in c["results"].values() for f in r["findings"]]
    assert joined["replay"] == NOT_REPLAYED and [f["case"] for f in found] == [f["case"] for f in shards]
    assert all(f["shrunk"] is False and "choices" not in f for f in found), "joined only: the cases as found"
    code, _, err = _cli(capsys, "merge", reports["1"], reports["2 bare"])
    assert code == 2 and "different matrices: --no-replay is True in" in err


@pytest.mark.network
def test_on_releases_replay_finds_a_hazard_a_release_search_missed(harness_cache, monkeypatch):
    """0.5.15's shrunk case of the flat-grid IndexError its splitter raises shows it on 0.5.8 by replay,
    on the releases' own code. Which release's CI search meets it depends on the draws (0.5.8's did not
    until the split checks drew more forms), so 0.5.8's search is made to have missed it."""
    from dataclasses import replace

    monkeypatch.setenv("MMHARNESS_CACHE", str(harness_cache))
    check, old, new = "grid.split_matches_reference", "sglang==0.5.8", "sglang==0.5.15"
    signature = (
        "not from a processor (a flat (rank-N) grid): split: raised IndexError in get_new_expanded_mm_items"
    )
    matrix = run_matrix([old, new], select([check]), "ci", workers=2, replay=False)
    assert matrix.target_errors == {}
    cell = matrix.cell(check, old)
    matrix.cells[(check, old)] = replace(
        cell, findings=tuple(s for s in cell.findings if s.signature != signature)
    )
    (searched,) = [r for r in matrix.ranges(check) if r.signature == signature]
    assert searched.targets == (new,), "the premise: only 0.5.15's search meets it"

    replay_classes(matrix, workers=2)

    (found,) = [r for r in matrix.ranges(check) if r.signature == signature]
    assert (found.kind, found.targets, found.replayed) == (HAZARD, (old, new), (old,))
    (seen,) = [s for s in matrix.cell(check, old).findings if s.signature == signature]
    assert (seen.by, seen.source) == (REPLAY, new)
    assert f"{old} .. {new} (2, 1 by replay): {signature}" in render(matrix)


# --against: every column's checks and every replay compare with a known-good target ---------------------


def test_against_each_cell_holds_changes_and_replay_compares_too(tmp_path, monkeypatch):
    """Against the reference, the mutant's findings are regressions; its twin, its search made to miss
    them, shows them by replay, run against the reference too: a replay on the twin alone would fail
    with the bare signatures, no change."""
    _importable(tmp_path, monkeypatch, "twin_adapter", TWIN_MODULE)
    checks = select([CHECK])
    matrix = run_matrix([FOUND, CLEAN, TWIN], checks, "ci", max_examples=30, replay=False, against=CLEAN)
    assert matrix.against == CLEAN
    searched = {r.signature for r in matrix.ranges(CHECK)}
    assert searched and all(s.startswith("regression: ") for s in searched)
    assert matrix.cell(CHECK, CLEAN).status == PASSED, "the reference against itself: no change"
    matrix.cells[(CHECK, TWIN)] = Cell(PASSED, examples_run=30)
    bare = Matrix.from_json(json.loads(json.dumps({**matrix.as_json(), "against": None})))
    assert bare.against is None

    replay_classes(matrix)
    replay_classes(bare)

    twin = matrix.cell(CHECK, TWIN)
    assert (twin.status, twin.replayed) == (DIVERGENCE, True)
    assert {seen.signature for seen in twin.findings} == searched
    assert bare.cell(CHECK, TWIN) == Cell(PASSED, examples_run=30), "without --against: no change to show"
    data = json.loads(json.dumps(matrix.as_json()))
    assert data["against"] == CLEAN and Matrix.from_json(data).against == CLEAN
    assert render(matrix).splitlines()[0].startswith(f"against: {CLEAN} (each finding a change from it")


def test_matrix_against_on_the_cli_merges_shards_against_it(capsys, tmp_path):
    """``matrix --against``: the JSON names it, replay lines carry it; shards carry it to ``merge``,
    which replays against it and refuses shards against different targets."""
    args = [*ARGS, "--target", "mutant:chunk_start_off_by_one", "--checks", "R1"]
    reports = {}
    for name, extra in {
        "whole": ["--against", "reference"],
        "1": ["--against", "reference", "--shard", "1/2"],
        "2": ["--against", "reference", "--shard", "2/2"],
        "2 alone": ["--shard", "2/2"],
    }.items():
        reports[name] = str(tmp_path / f"{name.replace(' ', '-')}.json")
        found = ("--findings", str(tmp_path / "found"))  # the same files saved by each run
        code, out, err = _cli(capsys, "matrix", *args, *extra, *found, "--json", reports[name])
        assert code == 1, out + err
        if name == "whole":
            assert out.startswith("against: reference (each finding a change from it")
            assert re.search(
                r"reproduce with: mmharness replay \S+ --target \S+ --against reference$", out, re.M
            )
    read = {name: json.loads(Path(path).read_text()) for name, path in reports.items()}
    whole = read["whole"]
    assert whole["against"] == "reference" and whole["replay"] == REPLAY_DONE
    findings = [f for c in whole["checks"] for f in c["findings"]]
    assert findings and all(
        f["signature"].startswith(("regression: ", "fix: ", "neutral change (")) for f in findings
    )
    assert read["1"]["shard"]["settings"]["against"] == "reference"
    out = tmp_path / "merged.json"
    found = ("--findings", str(tmp_path / "found"))  # where the shrunk cases are saved, as the whole run did
    code, _, err = _cli(capsys, "merge", reports["2"], reports["1"], *found, "--json", str(out))
    assert code == 1, err
    merged = json.loads(out.read_text())
    assert {**merged, "command": ""} == {**whole, "command": ""}
    code, _, err = _cli(capsys, "merge", reports["1"], reports["2 alone"])
    assert code == 2 and "different matrices: --against is None in" in err


def test_a_bad_against_spec_refuses_the_matrix_before_any_column(capsys):
    code, out, err = _cli(capsys, "matrix", *ARGS, "--against", "mutant:nope")
    assert code == 2 and not out
    assert "--against mutant:nope: unknown mutant 'nope'" in err


ENCODED = "prefill.encoder_calls"
OUTSIDE, OUTSIDE_TWIN = "mutant:prefill_encodes_outside_window", "outside_adapter:twin"
OUTSIDE_MODULE = """
from mmharness.targets.mutants import mutant


def twin():
    return mutant("prefill_encodes_outside_window")
"""


def test_each_class_is_shrunk_once_on_its_first_target_and_the_others_take_its_case(tmp_path, monkeypatch):
    """With replay, the searches shrink nothing: each class's case is shrunk once, on the first target
    whose search found it, and another target that found it too takes that case where it fails the same
    way, so its case is the one its own search (shrinking) would have given; no case is left as found."""
    from mmharness import matrix as matrix_module
    from mmharness import payload

    _importable(tmp_path, monkeypatch, "outside_adapter", OUTSIDE_MODULE)
    shrunk_on: list[str] = []
    real = matrix_module._shrink_case
    monkeypatch.setattr(
        matrix_module, "_shrink_case", lambda spec, *rest: shrunk_on.append(spec) or real(spec, *rest)
    )
    searched = run_matrix(
        [OUTSIDE, OUTSIDE_TWIN], select([ENCODED]), "ci", replay=False, shrink=False, dedup=False
    )
    as_found = {s.signature: s.case for s in searched.cell(ENCODED, OUTSIDE_TWIN).findings}
    assert as_found and all(not s.shrunk and s.choices for s in searched.cell(ENCODED, OUTSIDE_TWIN).findings)

    matrix = run_matrix(
        [OUTSIDE, OUTSIDE_TWIN], select([ENCODED]), "ci", findings=str(tmp_path / "f"), dedup=False
    )

    assert shrunk_on == [OUTSIDE] * len(as_found), "one shrink per class, on the first target that found it"
    assert matrix.replay == REPLAY_DONE
    mine, twin = (matrix.cell(ENCODED, t).findings for t in (OUTSIDE, OUTSIDE_TWIN))
    assert {s.signature for s in twin} == set(as_found) and all(s.shrunk and s.by == SEARCH for s in twin)
    assert [s.case for s in twin] == [s.case for s in mine], "the twin takes the first target's shrunk case"
    sizes = [(len(seen.case), len(as_found[seen.signature])) for seen in twin]
    assert all(a <= b for a, b in sizes) and any(a < b for a, b in sizes), "shrunk: smaller than as found"
    saved = sorted(p.name for p in (tmp_path / "f").rglob("*.json"))
    assert len(saved) == len({s.saved for s in (*mine, *twin)}) == len(mine), "the cases as found are gone"
    alone = run_matrix([OUTSIDE], select([ENCODED]), "ci", replay=False)  # a search that shrinks
    shrinking = {
        s.signature: payload.loads_document(s.case).case for s in alone.cell(ENCODED, OUTSIDE).findings
    }
    assert {s.signature for s in mine} <= set(shrinking), "the same classes a shrinking search finds"


def test_a_search_that_does_not_shrink_keeps_choices_that_shrink_alike_in_any_run():
    """``run_check(shrink=False)`` keeps each finding as found with the choice sequence that drew it;
    ``shrink_found`` shrinks it under a fixed seed: smaller, the same signature, the same case each time."""
    from mmharness import payload
    from mmharness.checks import all_checks
    from mmharness.runner import AS_FOUND, run_check, shrink_found
    from mmharness.targets.specs import resolve

    check, target = all_checks()[ENCODED], resolve(OUTSIDE)
    result = run_check(check, target, shrink=False)
    assert result.findings and all(
        not f.shrunk and f.choices and f.unshrunk == AS_FOUND for f in result.findings
    )
    known = [f.signature for f in result.findings]

    def text(finding: Finding) -> str:
        return payload.dumps(finding.example[0], params=finding.example[1])

    shrunk = [shrink_found(check, target, f.signature, f.choices, known=known)[0] for f in result.findings]
    assert [f.signature for f in shrunk] == known and all(f.shrunk for f in shrunk)
    sizes = [(len(text(one)), len(text(found))) for one, found in zip(shrunk, result.findings, strict=True)]
    assert all(a <= b for a, b in sizes) and any(a < b for a, b in sizes), "shrunk: smaller than as found"
    last = result.findings[-1]
    again = shrink_found(check, target, last.signature, last.choices, known=known)[0]
    assert text(again) == text(shrunk[-1]), "the same shrunk case every time"


def test_a_case_left_as_found_is_never_called_shrunk(tmp_path, monkeypatch):
    """Where a class's case could not be shrunk (here: ``shrink_classes`` never ran), the replay neither
    marks it shrunk on the target it came from nor hands it to the others that found the class."""
    _importable(tmp_path, monkeypatch, "outside_adapter", OUTSIDE_MODULE)
    targets = [OUTSIDE, OUTSIDE_TWIN]
    matrix = run_matrix(targets, select([ENCODED]), "ci", replay=False, shrink=False, dedup=False)
    before = {t: [(s.signature, s.case) for s in matrix.cell(ENCODED, t).findings] for t in targets}

    replay_classes(matrix)

    assert matrix.replay == REPLAY_DONE and all(before.values())
    for target in targets:
        searched = [s for s in matrix.cell(ENCODED, target).findings if s.by == SEARCH]
        assert [(s.signature, s.case) for s in searched] == before[target], "each keeps its own case"
        assert not any(s.shrunk for s in searched)
