"""The fork report ``check`` ends with (``mmharness.untested``): grouped skips, could-not-tests by the gap
they name, every engine function not driven (the target's ``engine_functions``), and notes the target
gathered while checks ran that the header had not shown."""

from __future__ import annotations

from mmharness import records
from mmharness.checks import all_checks
from mmharness.targets.reference import ReferenceTarget
from mmharness.untested import report

CHECKS = [check.id for check in all_checks().values()]


class _Target(ReferenceTarget):
    def __init__(self, functions: dict[str, str | None] | None = None) -> None:
        self._functions = functions or {}

    def engine_functions(self) -> dict[str, str | None]:
        return self._functions


def _skipped(check: str, why: str) -> records.Record:
    return records.Skipped(check, "cpu", "R1", why)


def _passed(check: str, *notes: str) -> records.Record:
    return records.Ended(check, "cpu", rule="R1", status="passed", notes=notes)


def _gap(check: str, what: str) -> list[records.Record]:
    return [
        records.CouldNotTest(check, "cpu", what, f"could not test: {what}"),
        records.Ended(check, "cpu", rule="R1", status=records.COULD_NOT_TEST, reason=what),
    ]


def test_skips_and_gaps_are_grouped_by_reason_and_notes_not_yet_shown_are_added():
    ledger = [
        _skipped(CHECKS[0], "no CUDA device"),
        _skipped(CHECKS[1], "no CUDA device"),
        *_gap(CHECKS[2], "reached a stub: envs.SGLANG_X"),
        *_gap(CHECKS[3], "reached a stub: envs.SGLANG_X"),
        _passed(CHECKS[4], "shown before", "collectives reached: all_reduce (1x)"),
        _passed(CHECKS[5], "collectives reached: all_reduce (1x)"),
    ]
    assert report(ledger, _Target(), shown=["shown before"]) == [
        f"skipped ({CHECKS[0]}, {CHECKS[1]}): no CUDA device",
        f"could not test ({CHECKS[2]}, {CHECKS[3]}): reached a stub: envs.SGLANG_X",
        "reached during the run: collectives reached: all_reduce (1x)",
    ]


def test_a_run_that_exercised_everything_reports_nothing():
    assert report([_passed(CHECKS[0], "a note")], _Target({"f": None}), shown=["a note"]) == []


def test_many_checks_for_one_reason_are_counted():
    (line,) = report([_skipped(check, "lacks whole_items") for check in CHECKS[:6]], _Target())
    assert line.startswith(f"skipped ({CHECKS[0]}, {CHECKS[1]}, {CHECKS[2]} and 3 more)")


def test_every_function_not_driven_is_listed_even_where_the_header_showed_it():
    """A fork's new form of a function the harness knows by name: the header's note alone was all a user
    saw (the JSON's ``untested`` did not name it); now the fork report lists it, with why, once."""
    why = "unknown form embed_mm_inputs(a, b): the harness cannot supply b"
    target = _Target({"embed_mm_inputs": why, "get_embedding_chunk": None})
    note = f"engine function not driven: embed_mm_inputs: {why}"
    ledger = [_passed(CHECKS[0], note, "shown before"), _passed(CHECKS[1], note)]
    assert report(ledger, target, shown=[note, "shown before"]) == [f"not driven: embed_mm_inputs: {why}"]
