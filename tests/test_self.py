"""The self-test: the checks can fail. Every seeded mutant is killed; every check kills something.

A check that no bug can trip is a defect, so each check names a witness target
on which it must fail, and each mutant must be caught by a non-hazard check
within the CI profile.
"""

from __future__ import annotations

import pytest
from mmharness.checks import all_checks
from mmharness.checks.outcome import COULD_NOT_TEST, DIVERGENCE, HAZARD
from mmharness.runner import PASSED, SKIPPED, cuda_available, run_check
from mmharness.selftest import kill, reference_status
from mmharness.targets.engine_model import EngineModel
from mmharness.targets.mutants import MUTANTS
from mmharness.targets.specs import resolve

CHECKS = all_checks()

# check id -> a target it must fail on (a mutant, or the reference for a hazard of the rules).
WITNESSES = {
    "adjust.matches_reference": "mutant:adjust_keeps_first",
    "adjust.zero_keeps_all": "mutant:adjust_zero_keeps_all",
    "chunk.matches_reference": "mutant:chunk_start_off_by_one",
    "chunk.rejects_malformed": "mutant:skip_span_validation",
    "chunk.row_mismatch_accepted": "mutant:skip_row_validation",
    "chunk.schedule_concat": "mutant:chunk_end_inclusive",
    "count.matches_reference": "mutant:count_inclusive_end",
    "device.cpu_equals_cuda": None,  # needs CUDA; see tests/test_cuda.py
    "device.mixed_precomputed": None,  # needs CUDA; its witnesses are in tests/test_cuda.py
    "embed_mask.matches_reference": "mutant:mask_marks_text",
    "grid.one_grid_rule": "mutant:grid_check_at_least_one",
    "grid.split_matches_reference": "mutant:split_drops_last_patch_rows",
    "grid.split_then_encode": "mutant:split_keeps_aggregated_grid",
    "precomputed.matches_reference": "mutant:precomputed_ignores_window",
    "precomputed.partial_fallback": "reference",
    "precomputed.permutation": "mutant:precomputed_request_order",
    "prefill.cache_independent": "mutant:prefill_cache_warmth",
    "prefill.encoder_calls": "mutant:prefill_encodes_outside_window",
    "prefill.matches_reference": "mutant:prefill_request_order",
    "prefill.path_independent": "mutant:prefill_per_request_off_by_one",
    "prefill.permutation": "mutant:prefill_request_order",
    "prefill.schedule_concat": "mutant:prefill_cache_warmth",
    "prefill.short_lists": "mutant:short_extend_list_indexed",
    "prefill.stateful": "mutant:resume_from_last_chunk",
    "prefill.whole_items": "mutant:whole_items_cuts_at_first_token",
    "prefill.draft_lookahead": "mutant:draft_reads_unreached_item",
    "prefix.resume_on_boundary": None,  # no model target has it: tests/test_lmdeploy.py seeds releases
    "prefix.blocks_keyed_by_content": None,  # and holds these three to a hand-written target breaking them
    "chunks.progress": None,
}


def _diverges(check, target):
    """``run_check``'s result where it diverges: the search up to the first divergence it meets drawing
    cases (the CI profile's cases are fixed, so the whole search meets it there too), unshrunk; where
    that meets none, the whole search (its divergence may first appear while a hazard's case is shrunk)."""
    quick = run_check(check, target, profile="ci", stop_at=(DIVERGENCE,))
    return quick if quick.status == DIVERGENCE else run_check(check, target, profile="ci")


def test_every_check_has_a_witness():
    assert sorted(WITNESSES) == sorted(CHECKS)


@pytest.mark.parametrize("check_id", sorted(c for c, w in WITNESSES.items() if w))
def test_check_fails_on_its_witness(check_id):
    check = CHECKS[check_id]
    witness = WITNESSES[check_id]
    hazard_mutant = witness.startswith("mutant:") and MUTANTS[witness.removeprefix("mutant:")].hazard
    expected = HAZARD if check.family in ("hazard", "robustness") or hazard_mutant else DIVERGENCE
    if expected == DIVERGENCE:
        result = _diverges(check, resolve(witness))
    else:  # the whole search: a hazard only where it meets no divergence anywhere
        result = run_check(check, resolve(witness), profile="ci")
    assert result.status == expected, result.reason or result.status


@pytest.mark.parametrize("check_id", sorted(CHECKS))
def test_unmutated_engine_model_agrees_with_the_reference(check_id):
    """The engine model is correct, so it passes where the reference passes (hazards are the rules')."""
    check = CHECKS[check_id]
    # the whole budget, hazards unshrunk: the search ends early only at what fails the test
    on_model = run_check(check, EngineModel(), profile="ci", stop_at=(DIVERGENCE, COULD_NOT_TEST))
    assert on_model.status in (PASSED, SKIPPED, HAZARD), on_model.reason
    if on_model.status == HAZARD:
        assert reference_status(check_id) == HAZARD


# Mutants only prefill.stateful sees: test_multi_step_mutants_only_the_stateful_check_sees shows each
# killed, by that check alone (every check of its rule run), so they are not killed again here.
ONLY_STATEFUL = ("cache_keeps_encoder_view", "warm_hit_always_misses")
# Killed by prefill.short_lists alone, every other check of R3 passing (the same runs as kill's):
# tests/test_input_classes.py::test_each_class_has_a_seeded_bug_only_it_exposes.
ONLY_SHORT_LISTS = ("short_extend_list_indexed",)


@pytest.mark.parametrize("name", sorted(set(MUTANTS) - set(ONLY_STATEFUL) - set(ONLY_SHORT_LISTS)))
def test_mutant_is_killed(name, record_property):
    if MUTANTS[name].needs_cuda and not cuda_available():
        pytest.skip("needs a CUDA device (tests/test_cuda.py kills it there)")
    result = kill(name, first=True)
    assert result.killed_by, f"mutant {name} survived every check"
    record_property("examples_to_kill", result.examples)
    record_property("killed_by", ",".join(result.killed_by))


class _Flaky(EngineModel):
    """Right on every call but the first: what a target with leaking global state looks like."""

    calls = 0

    def count_mm_tokens(self, case):
        _Flaky.calls += 1
        return super().count_mm_tokens(case) + (1 if _Flaky.calls == 1 else 0)


def test_a_flaky_target_is_a_failure_not_a_crash():
    result = run_check(CHECKS["count.matches_reference"], _Flaky(), profile="ci")
    assert result.status == DIVERGENCE
    assert result.reason.startswith("the check could not finish: Flaky")


@pytest.mark.parametrize("name", ONLY_STATEFUL)
def test_multi_step_mutants_only_the_stateful_check_sees(name):
    """``kill(name).killed_by`` is the stateful check alone: every check of the mutant's rule is run
    (``kill`` looks no further once one of them kills), each only until its first killing failure,
    unshrunk (``kill(first=True)``'s runs, without stopping at the first check that kills): whether each
    kills, not how. The checks that do not kill meet no failure, so they run exactly as ``kill``'s."""
    target, rule = resolve(f"mutant:{name}"), MUTANTS[name].rule
    killing = (DIVERGENCE, HAZARD) if MUTANTS[name].hazard else (DIVERGENCE,)
    killed_by = []
    for check in (c for c in CHECKS.values() if c.rule == rule):
        shared = reference_status(check.id)
        result = run_check(check, target, profile="ci", stop_at=[k for k in killing if k != shared])
        if result.status in killing and result.status != shared:
            killed_by.append(check.id)
    assert killed_by == ["prefill.stateful"]


# resume_from_last_chunk is prefill.stateful's witness: test_check_fails_on_its_witness runs the same
# search and asks the same (a divergence), so it is not run twice.
@pytest.mark.parametrize("name", ["evicted_entry_served_empty"])
def test_the_stateful_check_kills_the_other_multi_step_bugs(name):
    result = _diverges(CHECKS["prefill.stateful"], resolve(f"mutant:{name}"))
    assert result.status == DIVERGENCE, result.reason


def test_the_stateful_check_sees_a_collision_served_across_steps():
    """A cache keyed by hash alone serves an earlier step's rows to a later item of another size."""
    result = run_check(
        CHECKS["prefill.stateful"], resolve("mutant:prefill_cache_ignores_row_count"), profile="ci"
    )
    assert result.status == HAZARD, result.reason


def test_a_warm_re_encode_of_items_cached_alone_is_its_own_way_of_failing():
    """Apart from the class an engine shows beside multi-span items (docs/atlas.md), so a baseline
    holding that one does not hide this one."""
    # which ways it fails, not how far each shrinks: the findings as found (met at example 26)
    target = resolve("mutant:warm_hit_always_misses")
    result = run_check(CHECKS["prefill.stateful"], target, profile="ci", shrink=False)
    assert "a warm cache with room re-encoded an item it holds" in {f.signature for f in result.findings}


class _EncodesWholeRequests(EngineModel):
    """Right rows, but every step also encodes each request's items together, cache or not."""

    def chunked_prefill_embedding(self, case, encoder, *, cache=None, path="batched"):
        for request in case.requests:
            if len(request.items) > 1:
                encoder(list(request.items))
        return super().chunked_prefill_embedding(case, encoder, cache=cache, path=path)


def test_a_whole_request_encoded_again_is_its_own_way_of_failing():
    """A whole-request cache entry that is never hit (a wrong expected count, a wrong key) shows
    as the same items encoded together again: not the class of items cached alone."""
    # as found (met at example 26): shrinking the search's other findings was most of its time
    result = run_check(CHECKS["prefill.stateful"], _EncodesWholeRequests(), profile="ci", shrink=False)
    together = (
        "a warm cache with room re-encoded an item it holds, all the items it had encoded together before"
    )
    assert together in {f.signature for f in result.findings}, [f.signature for f in result.findings]
