"""More cases per example: the windows a drawn layout is also checked under, and what a failing one saves."""

from __future__ import annotations

from dataclasses import replace

import pytest
from mmharness.checks import all_checks
from mmharness.checks.outcome import Failure
from mmharness.model import Case, Item, Request, is_well_formed
from mmharness.runner import DIVERGENCE, PASSED, replay, run_check, run_swept
from mmharness.targets.specs import resolve
from mmharness.windows import MAX_WINDOWS, edges, request_windows, windows_of

CHECKS = all_checks()
IMAGE = Item(((2, 4),), 1)
TWO_ITEMS = Request(12, 0, 12, (IMAGE, Item(((7, 9),), 2)))


def test_every_window_on_a_span_edge_is_swept_for_a_small_layout():
    request = Request(6, 0, 6, (IMAGE,))
    exact = {0, 2, 5, 6}  # the sequence's ends, the span's first position and one past its last
    chosen = set(request_windows(request, limit=100))
    on_edges = {(a, b - a) for a in exact for b in exact if a <= b} - {(0, 6)}
    assert on_edges <= chosen
    assert (0, 6) not in chosen, "the drawn window itself is the example, not a sweep"
    assert all(p in edges(request) for a, n in chosen for p in (a, a + n))


def test_a_large_layout_is_sampled_to_the_limit_with_every_exact_edge_window_first():
    many = Request(60, 0, 60, tuple(Item(((s, s + 2),), s) for s in range(1, 55, 6)))
    chosen = request_windows(many, limit=MAX_WINDOWS)
    assert len(chosen) == MAX_WINDOWS
    assert chosen == request_windows(many, limit=MAX_WINDOWS), "a shrink must replay the same windows"


def test_each_swept_case_is_well_formed_and_moves_only_requests_with_items():
    case = Case((TWO_ITEMS, Request(5, 1, 2)))
    swept = list(windows_of(case))
    assert 0 < len(swept) <= MAX_WINDOWS
    assert all(is_well_formed(one) for one in swept)
    assert all(one.requests[1] == case.requests[1] for one in swept)
    assert len({(one.requests[0].prefix_len, one.requests[0].extend_len) for one in swept}) == len(swept)


def test_a_failing_window_of_a_passing_draw_is_what_is_saved_and_replayed():
    check = CHECKS["chunk.matches_reference"]
    target = resolve("mutant:chunk_start_off_by_one")
    drawn = (Case((replace(TWO_ITEMS, prefix_len=0, extend_len=1),)), {})
    assert replay(check, target, drawn).status == PASSED, "its own window does not show the bug"
    with pytest.raises(Failure) as caught:
        run_swept(check, target, drawn)
    assert caught.value.example != drawn and caught.value.cases > 1
    assert replay(check, target, caught.value.example).status == DIVERGENCE


def test_a_run_reports_cases_beside_examples_and_its_finding_replays():
    check, target = CHECKS["chunk.matches_reference"], resolve("mutant:chunk_start_off_by_one")
    result = run_check(check, target, profile="ci")
    assert result.status == DIVERGENCE
    assert result.cases_run > result.examples_run
    assert replay(check, target, result.findings[0].example).status == DIVERGENCE


def test_a_check_that_does_not_sweep_runs_one_case_per_example():
    result = run_check(CHECKS["chunk.schedule_concat"], resolve("reference"), profile="ci", max_examples=20)
    assert result.cases_run == result.examples_run == 20
