"""vLLM under drawn scheduler options: budgets, a cache sized near the items, both gathers, both options.

The offline tests check the drawn options; the ``network`` ones seed single-line
bugs into copies of vLLM 0.33.0's files (as ``tests/test_vllm.py`` does) that
only the drawn options reach: the check with its options off passes on them.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from mmharness import strategies as mst
from mmharness.checks import all_checks
from mmharness.checks.outcome import DIVERGENCE, Hazard
from mmharness.model import Case, Item, Request
from mmharness.runner import PASSED, run_check
from mmharness.strategies._internal.schedules import RUN_OPTIONS, run_options
from test_vllm import seeded  # the seeded-bug target of 0.33.0, shared with its tests

CHECKS = all_checks()
RELEASE = "0.33.0"


@given(st.data())
def test_run_options_are_ints_each_drawn_and_fixed_where_given(data):
    case = data.draw(mst.cases(min_items_total=1))
    options = data.draw(run_options(case, whole=1))
    assert sorted(options) == sorted(RUN_OPTIONS)
    assert all(isinstance(v, int) and v >= 0 for v in options.values())
    assert options["whole"] == 1


# A release under the options (network) ---------------------------------------------------


@pytest.fixture(scope="module")
def release_dir(harness_cache):
    from mmharness.engines.vllm import adapter

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MMHARNESS_CACHE", str(harness_cache))
        yield Path(adapter.fetch(RELEASE))


def options_off(check):
    """The check as it was before options were drawn: its option alone, defaults for the rest."""
    from mmharness.checks.prefill import collision_cases

    return replace(check, examples=lambda device: collision_cases(device).map(lambda ex: (ex[0], {})))


# (what, file, original text, seeded bug, check that must fail, how); the check with options off passes.
SEEDED = [
    (
        "cache manager: an entry freed is credited one embedding short",
        "v1/core/encoder_cache_manager.py",
        "            self.freeable[mm_hash] = num_encoder_embeds\n"
        "            self.num_freeable_slots += num_encoder_embeds",
        "            self.freeable[mm_hash] = num_encoder_embeds\n"
        "            self.num_freeable_slots += num_encoder_embeds - 1",
        "prefill.draft_lookahead",
        DIVERGENCE,
    ),
    (
        "cache manager: an item that just fits what can be freed is refused",
        "v1/core/encoder_cache_manager.py",
        "        if num_embeds > self.num_freeable_slots:\n            return False",
        "        if num_embeds >= self.num_freeable_slots:\n            return False",
        "prefill.draft_lookahead",
        DIVERGENCE,
    ),
]


@pytest.mark.network
@pytest.mark.parametrize(
    ("file", "original", "bug", "check_id", "status"), [pytest.param(*row[1:], id=row[0]) for row in SEEDED]
)
def test_drawn_options_catch_what_the_option_alone_misses(
    release_dir, seeded_copy, file, original, bug, check_id, status
):
    mutant = seeded(release_dir, seeded_copy, [(file, original, bug)])
    assert run_check(options_off(CHECKS[check_id]), mutant).status == PASSED
    # A divergence is what it is however early the search stops; a hazard only if none follows.
    result = run_check(CHECKS[check_id], mutant, stop_at=(DIVERGENCE,) if status == DIVERGENCE else ())
    assert result.status == status, [f.signature for f in result.findings]


def three_items_one_back() -> Case:
    """Items A, B, C, then B again, two placeholders each: a cache of 4 embeddings holds B and C."""
    spans = [((0, 1),), ((2, 3),), ((4, 5),), ((6, 7),)]
    items = tuple(Item(spans=s, hash=h) for s, h in zip(spans, (1, 2, 3, 2), strict=True))
    return Case(requests=(Request(seq_len=8, prefix_len=0, extend_len=8, items=items),))


EVICTION = {
    "cache_size": 4,
    "encoder_budget": 0,
    "token_budget": 2,
    "other_path": 0,
    "whole": 1,
    "drafter": 0,
}


@given(st.data())
def test_eviction_runs_line_up_one_eviction_then_a_request_for_an_earlier_item(data):
    case, options = data.draw(mst.eviction_runs(drafter=1))
    *distinct, again = [request.items[0] for request in case.requests]
    assert len({i.hash for i in distinct}) == len(distinct) in (3, 4) and again.hash < len(distinct) - 1
    assert len({i.token_count for i in (*distinct, again)}) == 1 and options["drafter"] == 1
    size = again.token_count
    assert options["cache_size"] == (len(distinct) - 1) * size and options["token_budget"] == size + 1
    assert sorted(options) == sorted(RUN_OPTIONS)
    for bad in ({"whole": -1}, {"device": "tpu"}):
        with pytest.raises(InvalidArgument):
            mst.eviction_runs(**bad)


LIFO = (
    "v1/core/encoder_cache_manager.py",
    "mm_hash, num_free_embeds = self.freeable.popitem(last=False)",
    "mm_hash, num_free_embeds = self.freeable.popitem(last=True)",
)
REENCODED = "re-encoded an item a cache evicting its oldest free entries would hold"


@pytest.mark.network
@pytest.mark.parametrize("check_id", ["prefill.whole_items", "prefill.draft_lookahead"])
def test_the_ci_profile_draws_an_eviction_order_that_shows(release_dir, seeded_copy, check_id):
    """A cache evicting its newest free entry is found by each option check's own draws, not only by the
    hand-made case below (random batches almost never line up so: ``eviction_runs``)."""
    result = run_check(CHECKS[check_id], seeded(release_dir, seeded_copy, [LIFO]), shrink=False)
    assert REENCODED in [f.signature for f in result.findings]


@pytest.mark.network
def test_eviction_of_the_newest_free_entry_shows_in_encoder_calls(release_dir, seeded_copy):
    """Evicting B (freed last) instead of A (freed first) for C re-encodes B: a hazard, 0.33.0 none."""
    from mmharness.engines.vllm import adapter

    check = CHECKS["prefill.whole_items"]
    release = adapter.from_path(str(release_dir), name="release", release=RELEASE)
    check.property(release, three_items_one_back(), EVICTION)  # evicts A, the oldest free entry: passes
    mutant = seeded(release_dir, seeded_copy, [LIFO])
    with pytest.raises(Hazard) as raised:
        check.property(mutant, three_items_one_back(), EVICTION)
    assert raised.value.signature == REENCODED


def done_inside_an_item_beside_a_larger_need() -> Case:
    """Request 0's window ends inside its item X; request 1 needs Z, which fits a cache of 4 only alone."""
    inside = Request(seq_len=8, prefix_len=0, extend_len=3, items=(Item(spans=((1, 4),), hash=5),))
    needs = Request(seq_len=8, prefix_len=0, extend_len=8, items=(Item(spans=((2, 5),), hash=6),))
    return Case(requests=(inside, needs))


HELD = {"cache_size": 4, "encoder_budget": 0, "token_budget": 0, "other_path": 0, "whole": 0, "drafter": 1}
EVICTED_HELD = "evicted a cache entry a live request still held"
FREES_EVERY_INPUT = (  # Whisper's rule (an encoder-decoder frees its inputs after one token) applied to all
    "v1/core/sched/scheduler.py",
    "            if self.is_encoder_decoder and request.num_computed_tokens > 0:",
    "            if not self.is_encoder_decoder and request.num_computed_tokens > 0:",
)


@pytest.mark.network
def test_an_entry_a_live_request_still_holds_is_never_evicted(release_dir, seeded_copy):
    """X stays referenced until request 0 leaves the batch, so Z waits; freeing it after one step lets Z
    evict it while request 0 still holds it: a hazard (the rows stay right), 0.33.0 none."""
    from mmharness.engines.vllm import adapter

    check = CHECKS["prefill.draft_lookahead"]
    release = adapter.from_path(str(release_dir), name="release", release=RELEASE)
    check.property(release, done_inside_an_item_beside_a_larger_need(), HELD)  # Z waits: passes
    mutant = seeded(release_dir, seeded_copy, [FREES_EVERY_INPUT])
    with pytest.raises(Hazard) as raised:
        check.property(mutant, done_inside_an_item_beside_a_larger_need(), HELD)
    assert raised.value.signature == EVICTED_HELD


@pytest.mark.network
def test_the_drawn_options_reach_a_held_entry_evicted(release_dir, seeded_copy):
    """Under the CI profile, requests competing on a small cache show the eviction of a held entry."""
    mutant = seeded(release_dir, seeded_copy, [FREES_EVERY_INPUT])
    # unshrunk: each signature met drawing cases is kept (the whole search meets it there too)
    result = run_check(CHECKS["prefill.draft_lookahead"], mutant, stop_at=(DIVERGENCE,))
    assert EVICTED_HELD in [f.signature for f in result.findings]
