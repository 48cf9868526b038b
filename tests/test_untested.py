"""The fork report ``check`` ends with (``mmharness.untested``): grouped skips, could-not-tests by the gap
they name, every engine function not driven, and notes the target gathered while checks ran that the header
had not shown."""

from __future__ import annotations

from mmharness.checks import all_checks
from mmharness.checks.outcome import CouldNotTest
from mmharness.runner import COULD_NOT_TEST, PASSED, SKIPPED, Finding, Result
from mmharness.targets.base import NOT_DRIVEN
from mmharness.untested import report

CHECKS = list(all_checks().values())


def _gap(check, what: str) -> Result:
    finding = Finding(COULD_NOT_TEST, what, CouldNotTest(what), None, 1)
    return Result(check, COULD_NOT_TEST, reason=what, findings=[finding])


def test_skips_and_gaps_are_grouped_by_reason_and_notes_not_yet_shown_are_added():
    results = [
        Result(CHECKS[0], SKIPPED, reason="no CUDA device"),
        Result(CHECKS[1], SKIPPED, reason="no CUDA device"),
        _gap(CHECKS[2], "reached a stub: envs.SGLANG_X"),
        _gap(CHECKS[3], "reached a stub: envs.SGLANG_X"),
        Result(CHECKS[4], PASSED, target_notes=("shown before", "collectives reached: all_reduce (1x)")),
        Result(CHECKS[5], PASSED, target_notes=("collectives reached: all_reduce (1x)",)),
    ]
    lines = report(results, shown=["shown before"])
    assert lines == [
        f"skipped ({CHECKS[0].id}, {CHECKS[1].id}): no CUDA device",
        f"could not test ({CHECKS[2].id}, {CHECKS[3].id}): reached a stub: envs.SGLANG_X",
        "reached during the run: collectives reached: all_reduce (1x)",
    ]


def test_a_run_that_exercised_everything_reports_nothing():
    assert report([Result(CHECKS[0], PASSED, target_notes=("a note",))], shown=["a note"]) == []


def test_many_checks_for_one_reason_are_counted():
    results = [Result(check, SKIPPED, reason="lacks whole_items") for check in CHECKS[:6]]
    (line,) = report(results)
    assert line.startswith(f"skipped ({CHECKS[0].id}, {CHECKS[1].id}, {CHECKS[2].id} and 3 more)")


def test_every_function_not_driven_is_listed_even_where_the_header_showed_it():
    """A fork's new form of a function the harness knows by name: the header's note alone was all a user
    saw (the JSON's ``untested`` did not name it); now the fork report lists it, with why, once."""
    undriven = f"{NOT_DRIVEN}embed_mm_inputs: unknown form embed_mm_inputs(a, b): the harness cannot supply b"
    results = [
        Result(CHECKS[0], PASSED, target_notes=(undriven, "shown before")),
        Result(CHECKS[1], PASSED, target_notes=(undriven,)),
    ]
    assert report(results, shown=[undriven, "shown before"]) == [
        "not driven: embed_mm_inputs: unknown form embed_mm_inputs(a, b): the harness cannot supply b"
    ]
