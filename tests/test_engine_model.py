"""EngineModel agrees with the reference; every seeded mutant has a small case that shows its bug.

Agreement is checked by hand-worked cases (SGLang's own chunking table among them)
across ndim, encoder forms, paths and cache sizes. Each mutant gets a witness: a
call on a tiny case where the mutant's observable answer (value, error class and
message prefix, or encoder log) differs from the reference's while the unmutated
model's does not. The engine options (R3w, R3d) have no reference method: there the
unmutated model's answers are worked by hand, and each option mutant is also killed
by the option check meant for it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from mmharness import item_data, reference, tensors
from mmharness.checks import all_checks
from mmharness.checks.outcome import DIVERGENCE
from mmharness.checks.stateful import BufferReusingEncoder
from mmharness.model import Case, CaseError, Item, Request
from mmharness.runner import PASSED, cuda_available, run_check
from mmharness.targets import engine_model
from mmharness.targets.base import (
    ALL_CAPABILITIES,
    DRAFT_LOOKAHEAD,
    SHORT_LISTS,
    WHOLE_ITEMS,
    Encoder,
    FeatureItem,
    Target,
    TargetError,
)
from mmharness.targets.engine_model import EmbeddingCache, EngineModel
from mmharness.targets.mutants import MUTANTS, mutant
from mmharness.targets.reference import ReferenceTarget

REFERENCE = ReferenceTarget()
ENGINE = EngineModel()
HUGE = 1 << 40

Witness = Callable[[Target], Any]
"""A call on a target whose result (or error) is compared across targets."""


# Building cases ---------------------------------------------------------------


def item(*spans: tuple[int, int], h: int = 1, **fields: Any) -> Item:
    return Item(spans=spans, hash=h, **fields)


def request(seq_len: int, prefix_len: int, extend_len: int, *items: Item) -> Request:
    return Request(seq_len, prefix_len, extend_len, items)


def batch(*requests: Request, **fields: Any) -> Case:
    return Case(requests=requests, **fields)


def precomputed(case: Case) -> Case:
    """The case with every item marked precomputed."""
    requests = tuple(
        replace(r, items=tuple(replace(it, precomputed=True) for it in r.items)) for r in case.requests
    )
    return replace(case, requests=requests)


# Observing and comparing ------------------------------------------------------


def observe(witness: Witness, target: Target) -> Any:
    """The witness's value, or its error as (class, message prefix): what a check compares."""
    try:
        return ("ok", witness(target))
    except Exception as error:
        return ("raised", type(error), str(error).split(":", 1)[0])


def same(a: Any, b: Any) -> bool:
    """Structural equality; tensors must agree in shape, dtype and every value."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and torch.equal(a, b)
        )
    if isinstance(a, FeatureItem) and isinstance(b, FeatureItem):  # every value, in its form
        return a.item == b.item and item_data.view(a) == item_data.view(b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    return type(a) is type(b) and a == b


def assert_agrees(witness: Witness, target: Target = ENGINE) -> Any:
    expected = observe(witness, REFERENCE)
    actual = observe(witness, target)
    assert same(expected, actual), f"reference: {expected}\n{target.name}: {actual}"
    return actual


# Witnesses: one call of one rule on a case --------------------------------------


def chunk(case: Case, r: int = 0) -> Witness:
    embedding = tensors.request_embedding(case, case.requests[r].items)
    return lambda t: t.embedding_chunk(embedding, case, r)


def precomputed_rows(case: Case) -> Witness:
    return lambda t: t.precomputed_embedding(case)


def prefill(*cases: Case, path: str = "batched", form: str = "tensor", cache_size: int = 0) -> Witness:
    """Each case in turn on one cache; the results and what the first call encoded (sorted)."""

    def run(t: Target) -> tuple[list[Any], list[tuple[int, int]]]:
        cache = t.new_cache(cache_size)
        encoders = [Encoder(case, form) for case in cases]
        results = [
            t.chunked_prefill_embedding(case, encoder, cache=cache, path=path)
            for case, encoder in zip(cases, encoders, strict=True)
        ]
        return results, sorted(encoders[0].encoded)

    return run


def across_steps(*cases: Case, scribble: bool = False, cache_size: int = HUGE) -> Witness:
    """Each case in turn on one warm cache: every result, and whether a later step re-encoded.

    ``scribble``: each step's encoder overwrites its output buffers afterwards. A
    target without a cache (the reference) holds nothing, so it never re-encodes.
    """

    def run(t: Target) -> tuple[list[Any], bool]:
        cache = t.new_cache(cache_size)
        results, encoded = [], []
        for case in cases:
            encoder = BufferReusingEncoder(case, "tensor")
            rows = t.chunked_prefill_embedding(case, encoder, cache=cache)
            results.append(None if rows is None else rows.clone())
            encoded.append(set(encoder.encoded))
            if scribble:
                encoder.scribble()
        earlier = [set().union(*encoded[:k]) for k in range(len(encoded))]
        warm = cache is not None and cache_size == HUGE  # an evicting cache must re-encode
        again = warm and any(later & seen for later, seen in zip(encoded, earlier, strict=True))
        return results, again

    return run


def embed_mask(case: Case, form: str = "tensor", cache_size: int = 0) -> Witness:
    def run(t: Target) -> tuple[Any, Any, list[tuple[int, int]]]:
        encoder = Encoder(case, form)
        rows, mask = t.embedding_and_mask(case, encoder, cache=t.new_cache(cache_size))
        return rows, mask, sorted(encoder.encoded)

    return run


def count(case: Case) -> Witness:
    return lambda t: t.count_mm_tokens(case)


def adjust(rows: int, wanted: int) -> Witness:
    embedding = tensors.block(1, rows, batch())
    return lambda t: t.adjust_embedding_length(embedding, wanted)


def _feature_item(it: Item) -> FeatureItem:
    return FeatureItem(it, tensors.item_features(batch(), it))


def feature(*items: Item) -> Witness:
    return lambda t: t.image_feature(batch(), [_feature_item(it) for it in items])


def split(it: Item) -> Witness:
    return lambda t: t.split_item(batch(), _feature_item(it))


def split_forms(it: Item) -> Witness:
    """The split of an item carrying its R5 forms: features or precomputed rows, model data."""
    return lambda t: t.split_item(batch(), item_data.feature_item(batch(), it))


# SGLang's table: one request, three images, four prefill chunks ----------------

SGLANG_ITEMS = (item((2, 5), h=1), item((9, 14), h=2), item((20, 24), h=3))
SGLANG_WINDOWS = {
    # (prefix_len, extend_len): (start, end) = placeholders before the window, before its end
    (0, 8): (0, 4),
    (8, 8): (4, 10),
    (16, 8): (10, 14),
    (24, 6): (14, 15),
}


def sglang_case(window: tuple[int, int], ndim: int = 2) -> Case:
    return batch(request(30, *window, *SGLANG_ITEMS), ndim=ndim)


@pytest.mark.parametrize("ndim", [2, 3])
@pytest.mark.parametrize("window", list(SGLANG_WINDOWS))
def test_sglang_table_chunk(window: tuple[int, int], ndim: int) -> None:
    case = sglang_case(window, ndim)
    rows, start, end = assert_agrees(chunk(case))[1]
    assert (start, end) == SGLANG_WINDOWS[window]
    whole = tensors.request_embedding(case, SGLANG_ITEMS).reshape(-1, case.hidden)
    assert torch.equal(rows, whole[start:end])
    assert ENGINE.count_mm_tokens(case) == end - start
    assert_agrees(count(case))
    assert_agrees(precomputed_rows(precomputed(case)))
    assert_agrees(embed_mask(precomputed(case)))


@pytest.mark.parametrize("cache_size", [0, 1, HUGE])
@pytest.mark.parametrize("path", ["batched", "per_request"])
@pytest.mark.parametrize("form", ["tensor", "list"])
@pytest.mark.parametrize("ndim", [2, 3])
@pytest.mark.parametrize("window", list(SGLANG_WINDOWS))
def test_sglang_table_prefill(
    window: tuple[int, int], ndim: int, form: str, path: str, cache_size: int
) -> None:
    case = sglang_case(window, ndim)
    results, encoded = assert_agrees(prefill(case, path=path, form=form, cache_size=cache_size))[1]
    assert encoded == sorted(reference.items_in_windows(case))
    warm = prefill(case, case, path=path, form=form, cache_size=cache_size)(ENGINE)[0]
    assert same(warm, [results[0], results[0]])
    assert_agrees(embed_mask(case, form, cache_size))


@pytest.mark.parametrize("path", ["batched", "per_request"])
@pytest.mark.parametrize("cache_size", [0, 1, HUGE])
def test_sglang_schedule_on_one_cache_concatenates_to_the_whole(path: str, cache_size: int) -> None:
    cache = ENGINE.new_cache(cache_size)
    pieces = [
        ENGINE.chunked_prefill_embedding(case, Encoder(case), cache=cache, path=path)
        for case in map(sglang_case, SGLANG_WINDOWS)
    ]
    whole = tensors.request_embedding(batch(), SGLANG_ITEMS)
    assert torch.equal(torch.cat(pieces), whole)


# More agreement: batches, duplicates, collisions, partial coverage, errors -----

TWO_REQUESTS = batch(
    request(12, 3, 6, item((0, 1), h=1), item((4, 5), h=2), item((8, 10), h=3)),
    request(6, 0, 6),
    request(9, 2, 7, item((1, 3), h=2), item((6, 7), h=4)),
)
COLLISION = batch(
    request(10, 0, 10, item((0, 1), h=5), item((4, 7), h=5)),
    request(6, 1, 5, item((2, 4), h=5)),
)
VIDEO = batch(request(14, 3, 7, item((1, 2), (5, 6), (9, 11), h=9, modality="video")))
AGREEMENT_CASES = {"two_requests": TWO_REQUESTS, "collision": COLLISION, "video": VIDEO}


@pytest.mark.parametrize("cache_size", [0, 1, 64, HUGE])
@pytest.mark.parametrize("path", ["batched", "per_request"])
@pytest.mark.parametrize("form", ["tensor", "list"])
@pytest.mark.parametrize("name", list(AGREEMENT_CASES))
def test_prefill_agrees(name: str, form: str, path: str, cache_size: int) -> None:
    case = AGREEMENT_CASES[name]
    assert_agrees(prefill(case, path=path, form=form, cache_size=cache_size))
    assert_agrees(embed_mask(case, form, cache_size))


@pytest.mark.parametrize("name", list(AGREEMENT_CASES))
def test_chunk_precomputed_and_count_agree(name: str) -> None:
    case = AGREEMENT_CASES[name]
    for r, req in enumerate(case.requests):
        if req.items:
            assert_agrees(chunk(case, r))
    assert_agrees(count(case))
    assert_agrees(precomputed_rows(case))
    assert_agrees(precomputed_rows(precomputed(case)))
    assert_agrees(embed_mask(precomputed(case)))


PARTIAL_FALLBACK = batch(request(6, 0, 6, item((0, 1), precomputed=True), item((3, 4), h=2)))
PARTIAL_RAISES = batch(request(4, 0, 4, item((0, 1), precomputed=True)), request(4, 0, 4, item((0, 1), h=2)))
NOTHING_IN_WINDOW = batch(request(8, 4, 4, item((0, 1))))


def test_partial_coverage_and_empty_windows_agree() -> None:
    assert assert_agrees(precomputed_rows(PARTIAL_FALLBACK)) == ("ok", None)
    assert assert_agrees(precomputed_rows(PARTIAL_RAISES))[1] is NotImplementedError
    assert_agrees(embed_mask(PARTIAL_FALLBACK))
    assert_agrees(embed_mask(PARTIAL_RAISES))
    assert assert_agrees(prefill(NOTHING_IN_WINDOW)) == ("ok", ([None], []))
    assert assert_agrees(embed_mask(NOTHING_IN_WINDOW)) == ("ok", (None, None, []))
    assert_agrees(precomputed_rows(precomputed(NOTHING_IN_WINDOW)))
    assert_agrees(embed_mask(precomputed(NOTHING_IN_WINDOW)))


MALFORMED = {
    "unsorted": batch(request(8, 0, 8, item((5, 6), (1, 2)))),
    "overlapping": batch(request(8, 0, 8, item((1, 3)), item((3, 4), h=2))),
    "out_of_range": batch(request(8, 0, 8, item((6, 8)))),
    "reversed": batch(request(8, 0, 8, item((4, 3)))),
    "negative_length": batch(request(8, 0, -1, item((0, 1)))),
    "window_past_end": batch(request(8, 6, 4, item((0, 1)))),
    "row_mismatch": batch(request(8, 0, 8, item((0, 3), rows=5))),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_cases_are_refused_like_the_reference(name: str) -> None:
    case = MALFORMED[name]
    for witness in (chunk(case), precomputed_rows(precomputed(case)), prefill(case), count(case)):
        assert assert_agrees(witness)[1] is CaseError


def test_chunk_refuses_an_embedding_that_does_not_fit_the_spans() -> None:
    case = batch(request(8, 0, 8, item((0, 3))))
    too_long = tensors.block(1, 5, case)
    outcome = assert_agrees(lambda t: t.embedding_chunk(too_long, case, 0))
    assert outcome == ("raised", ValueError, "requests[0]")


@pytest.mark.parametrize(("rows", "wanted"), [(5, 3), (3, 3), (3, 0), (0, 0), (2, 3)])
def test_adjust_agrees(rows: int, wanted: int) -> None:
    assert_agrees(adjust(rows, wanted))


ONE_GRID = item((0, 3), grid=((1, 2, 2),))
TWO_GRIDS = item((0, 3), (6, 7), h=2, grid=((1, 2, 2), (1, 1, 2)))


def test_grid_rules_agree() -> None:
    assert_agrees(feature(ONE_GRID, item((5, 6), h=3, grid=((1, 1, 2),))))
    assert assert_agrees(feature(TWO_GRIDS)) == ("raised", ValueError, reference.ONE_GRID_MESSAGE)
    assert assert_agrees(feature(item((0, 3)))) == (
        "raised",
        ValueError,
        reference.ONE_GRID_MESSAGE,
    )
    parts = assert_agrees(split(TWO_GRIDS))[1]
    assert [p.item.spans for p in parts] == [((0, 3),), ((6, 7),)]
    assert_agrees(lambda t: t.image_feature(batch(), t.split_item(batch(), _feature_item(TWO_GRIDS))))
    assert assert_agrees(split(ONE_GRID))[1][0].item is ONE_GRID
    assert assert_agrees(split(item((0, 1), (3, 4), grid=((1, 1, 1),))))[1] is ValueError


# The embedding cache ------------------------------------------------------------


def test_cache_is_lru_in_bytes() -> None:
    row = torch.zeros(1, 4)  # 16 bytes
    cache = EmbeddingCache(40)
    assert cache.put(1, row) and cache.put(2, row)
    cache.get(1)
    assert cache.put(3, row)
    assert 2 not in cache and 1 in cache and 3 in cache and cache.size == 32
    assert not cache.put(4, torch.zeros(3, 4))
    assert len(cache) == 2
    assert not EmbeddingCache(0).put(1, row)


def test_cache_entry_of_another_row_count_is_a_miss() -> None:
    first = batch(request(10, 0, 10, item((0, 3), h=5)))
    second = batch(request(10, 0, 10, item((0, 5), h=5)))
    results, _ = prefill(first, second, cache_size=HUGE)(ENGINE)
    assert same(results[1], tensors.block(5, 6, second))


# The engine options: items whole (R3w), a drafter reading ahead (R3d) ---------------
#
# The reference has neither option, so the model's answers here are worked by hand:
# one step per window, stopping before an item it reaches from its first token and
# cannot finish; the drafter's window is the step's moved one token on.

CHECKS = all_checks()
OPTION_CHECKS = ("prefill.whole_items", "prefill.draft_lookahead")


def whole_items(case: Case) -> Witness:
    """The rows and the steps of a prefill with items whole."""
    return lambda t: t.whole_item_prefill(case, Encoder(case), cache=t.new_cache(HUGE))


def drafts(case: Case) -> Witness:
    """The rows, the steps and each drafter gather (its mask as a list) of a prefill with a drafter."""

    def run(t: Target) -> tuple[Any, list[Any], list[Any]]:
        rows, steps, gathers = t.draft_prefill(case, Encoder(case), cache=t.new_cache(HUGE))
        return rows, steps, [(k, start, n, r, mask.tolist()) for k, start, n, r, mask in gathers]

    return run


def rows_of(case: Case, *picks: tuple[int, int, list[int]]) -> torch.Tensor:
    """Rows ``indices`` of the item keyed ``(hash, count)``, for each pick in turn."""
    return torch.cat([tensors.block(h, n, case)[indices] for h, n, indices in picks])


STOPS_BEFORE = batch(request(10, 0, 6, item((2, 3), h=1), item((4, 7), h=2)))
"""The second item starts inside the window and ends past it: the step stops at 4."""
AT_FIRST_TOKEN = batch(request(10, 4, 4, item((4, 8))))
"""The item starts at the step's first token and does not fit: no step at all."""
INSIDE_AN_ITEM = batch(request(10, 3, 4, item((2, 8))))
"""A prefix-cache hit inside an item: the step may end inside it."""
LAST_PAST_THE_END = batch(request(10, 0, 6, item((2, 6))))
"""The item's last position is the window's end, one past the window: the step stops at 2."""
LAST_AT_THE_END = batch(request(10, 0, 6, item((2, 5))))
"""The item's last position is the window's last: it fits."""
GAP_PAST_THE_END = batch(request(12, 0, 6, item((1, 2), (7, 8))))
"""A multi-span item whose second span is past the window: its gap counts, the step stops at 1."""

WHOLE_ITEMS_ANSWERS = {
    "stops_before": (STOPS_BEFORE, rows_of(STOPS_BEFORE, (1, 2, [0, 1])), [(0, 0, 4)]),
    "at_first_token": (AT_FIRST_TOKEN, None, []),
    "inside_an_item": (INSIDE_AN_ITEM, rows_of(INSIDE_AN_ITEM, (1, 7, [1, 2, 3, 4])), [(0, 3, 4)]),
    "last_past_the_end": (LAST_PAST_THE_END, None, [(0, 0, 2)]),
    "last_at_the_end": (LAST_AT_THE_END, rows_of(LAST_AT_THE_END, (1, 4, [0, 1, 2, 3])), [(0, 0, 6)]),
    "gap_past_the_end": (GAP_PAST_THE_END, None, [(0, 0, 1)]),
}


@pytest.mark.parametrize("name", list(WHOLE_ITEMS_ANSWERS))
def test_whole_items_by_hand(name: str) -> None:
    case, rows, steps = WHOLE_ITEMS_ANSWERS[name]
    assert same(observe(whole_items(case), ENGINE), ("ok", (rows, steps)))
    assert reference.cut_items(case, steps) == []
    scheduled = reference.scheduled_windows(case, steps)
    assert same(observe(prefill(scheduled), REFERENCE)[1][0], [rows])  # R3's rows of what was scheduled


REACHED = batch(request(10, 0, 4, item((1, 1), h=1), item((3, 5), h=2)))
"""Step [0, 4), drafter window [1, 5): the second item, reached at 3, goes on at 4."""
UNREACHED = batch(request(10, 0, 4, item((4, 5), h=3)))
"""The item starts at the step's end: the drafter may leave it to token embeddings."""
AT_THE_SEQUENCE_END = batch(request(4, 1, 3, item((2, 3))))
"""The drafter's window runs one past the sequence: nothing is marked there."""
ONLY_THE_DRAFTER_SEES = batch(request(10, 2, 3, item((0, 0), (5, 6), h=4)))
"""Step [2, 5) holds none of the item's positions, the drafter's [3, 6) holds 5, and the step reached
the item (it started before): encoded for the drafter though no window needs it."""

DRAFT_ANSWERS = {
    "reached": (
        REACHED,
        rows_of(REACHED, (1, 1, [0]), (2, 3, [0])),
        [(0, 0, 4)],
        [(0, 1, 4, rows_of(REACHED, (1, 1, [0]), (2, 3, [0, 1])), [True, False, True, True])],
    ),
    "unreached": (UNREACHED, None, [(0, 0, 4)], [(0, 1, 4, None, [False] * 4)]),
    "at_the_sequence_end": (
        AT_THE_SEQUENCE_END,
        rows_of(AT_THE_SEQUENCE_END, (1, 2, [0, 1])),
        [(0, 1, 3)],
        [(0, 2, 3, rows_of(AT_THE_SEQUENCE_END, (1, 2, [0, 1])), [True, True, False])],
    ),
    "only_the_drafter_sees": (
        ONLY_THE_DRAFTER_SEES,
        None,
        [(0, 2, 3)],
        [(0, 3, 3, rows_of(ONLY_THE_DRAFTER_SEES, (4, 3, [1])), [False, False, True])],
    ),
}


@pytest.mark.parametrize("name", list(DRAFT_ANSWERS))
def test_drafts_by_hand(name: str) -> None:
    case, rows, steps, gathers = DRAFT_ANSWERS[name]
    assert same(observe(drafts(case), ENGINE), ("ok", (rows, steps, gathers)))
    assert same(observe(prefill(case), REFERENCE)[1][0], [rows])  # R3's rows of the windows


@pytest.mark.parametrize("check_id", OPTION_CHECKS)
def test_the_option_checks_run_and_pass_on_the_engine_model(check_id: str) -> None:
    result = run_check(CHECKS[check_id], ENGINE, profile="ci")
    assert result.status == PASSED, result.reason or result.status


OPTION_MUTANTS = {
    # name: (rule, the check that kills it, the kind it fails with)
    "whole_items_cuts_at_first_token": ("R3w", "prefill.whole_items", DIVERGENCE),
    "whole_items_end_inclusive": ("R3w", "prefill.whole_items", DIVERGENCE),
    "whole_items_finish_past_window": ("R3w", "prefill.whole_items", DIVERGENCE),
    "whole_items_rows_of_window": ("R3w", "prefill.whole_items", DIVERGENCE),
    "whole_items_stops_at_first_token": ("R3w", "prefill.whole_items", DIVERGENCE),  # R3l's livelock
    "draft_clipped_at_step_end": ("R3d", "prefill.draft_lookahead", DIVERGENCE),
    "draft_reads_unreached_item": ("R3d", "prefill.draft_lookahead", DIVERGENCE),
    "draft_gather_unshifted": ("R3d", "prefill.draft_lookahead", DIVERGENCE),
}
"""The option mutants, with the rule each is registered under (a hazard mutant iff its kind is a hazard)."""

OPTION_WITNESSES: dict[str, tuple[Witness, Any]] = {
    # name: (a witness, the unmutated model's answer to it)
    "whole_items_cuts_at_first_token": (whole_items(AT_FIRST_TOKEN), WHOLE_ITEMS_ANSWERS["at_first_token"]),
    "whole_items_end_inclusive": (whole_items(LAST_PAST_THE_END), WHOLE_ITEMS_ANSWERS["last_past_the_end"]),
    "whole_items_finish_past_window": (whole_items(STOPS_BEFORE), WHOLE_ITEMS_ANSWERS["stops_before"]),
    "whole_items_rows_of_window": (whole_items(STOPS_BEFORE), WHOLE_ITEMS_ANSWERS["stops_before"]),
    "whole_items_stops_at_first_token": (whole_items(STOPS_BEFORE), WHOLE_ITEMS_ANSWERS["stops_before"]),
    "draft_clipped_at_step_end": (drafts(REACHED), DRAFT_ANSWERS["reached"]),
    "draft_reads_unreached_item": (drafts(UNREACHED), DRAFT_ANSWERS["unreached"]),
    "draft_gather_unshifted": (drafts(REACHED), DRAFT_ANSWERS["reached"]),
}


@pytest.mark.parametrize("name", sorted(OPTION_WITNESSES))
def test_option_witness_shows_the_bug(name: str) -> None:
    witness, (_, *answer) = OPTION_WITNESSES[name]
    assert same(observe(witness, ENGINE), ("ok", tuple(answer)))
    actual = observe(witness, mutant(name))
    assert not same(actual, ("ok", tuple(answer))), f"mutant {name} answered like the model: {actual}"


@pytest.mark.parametrize("name", sorted(OPTION_MUTANTS))
def test_the_option_checks_kill_each_option_mutant(name: str) -> None:
    rule, check_id, kind = OPTION_MUTANTS[name]
    assert CHECKS[check_id].rule == rule
    result = run_check(CHECKS[check_id], mutant(name), profile="ci", stop_at=(kind,))
    assert result.status == kind, [f.signature for f in result.findings]


def test_option_mutants_registered_as_listed() -> None:
    for name, (rule, _, kind) in OPTION_MUTANTS.items():
        assert (MUTANTS[name].rule, MUTANTS[name].hazard) == (rule, kind != DIVERGENCE), name


# Mutants: every one has a witness, and the witness shows its bug ----------------

PARTIAL = PARTIAL_RAISES
TWO_ITEMS_TWO_HASHES = batch(request(4, 0, 4, item((0, 1), h=1)), request(4, 0, 4, item((0, 1), h=2)))
SAME_ITEM_TWICE = batch(request(4, 0, 4, item((0, 1))), request(4, 0, 4, item((0, 1))))
VIDEO_ITEM = item((1, 2), (5, 6))
FEATURE_SPLIT = item((2, 3), (5, 6), grid=((1, 2, 2), (1, 1, 2)))

MIXED_DEVICES = batch(
    request(4, 0, 4, item((0, 1), precomputed=True), item((2, 3), h=2, precomputed=True, device="cuda"))
)
"""A CPU item before a CUDA one: the concatenation must land on CUDA (R6); needs a GPU to show."""


WITNESSES: dict[str, Witness] = {
    # R1
    "chunk_start_off_by_one": chunk(batch(request(10, 2, 4, item((2, 5))))),
    "chunk_end_inclusive": chunk(batch(request(10, 0, 4, item((2, 5))))),
    "chunk_no_flatten": chunk(batch(request(6, 0, 6, item((0, 3))), ndim=3)),
    "chunk_first_span_only": chunk(batch(request(8, 0, 8, VIDEO_ITEM))),
    "chunk_nonempty_at_zero_extend": chunk(batch(request(10, 0, 0, item((2, 5))))),
    "skip_span_validation": chunk(MALFORMED["unsorted"]),
    "skip_row_validation": chunk(MALFORMED["row_mismatch"]),
    # R2
    "precomputed_request_order": precomputed_rows(precomputed(TWO_ITEMS_TWO_HASHES)),
    "precomputed_empty_request_not_skipped": precomputed_rows(
        precomputed(batch(request(4, 0, 4, item((0, 1))), request(4, 0, 4)))
    ),
    "precomputed_fallback_inverted": precomputed_rows(PARTIAL),
    "precomputed_wrong_error_class": precomputed_rows(PARTIAL),
    "precomputed_wrong_message": precomputed_rows(PARTIAL),
    "precomputed_ignores_window": precomputed_rows(precomputed(batch(request(8, 2, 2, item((0, 5)))))),
    "precomputed_no_device_move": precomputed_rows(MIXED_DEVICES),
    "precomputed_first_chunk_device": precomputed_rows(MIXED_DEVICES),
    "precomputed_no_flatten": precomputed_rows(precomputed(batch(request(4, 0, 4, item((0, 1))), ndim=3))),
    # R3
    "prefill_cache_warmth": prefill(
        batch(request(10, 0, 4, item((0, 9)))),
        batch(request(10, 4, 6, item((0, 9)))),
        cache_size=HUGE,
    ),
    "prefill_cache_ignores_row_count": prefill(
        batch(request(10, 0, 10, item((0, 3), h=5))),
        batch(request(10, 0, 10, item((0, 5), h=5))),
        cache_size=HUGE,
    ),
    "prefill_dedup_ignores_count": prefill(batch(request(10, 0, 10, item((0, 1), h=5), item((4, 7), h=5)))),
    "prefill_encodes_outside_window": prefill(batch(request(8, 4, 4, item((0, 1)), item((5, 6), h=2)))),
    "prefill_duplicate_encode": prefill(SAME_ITEM_TWICE),
    "prefill_request_order": prefill(TWO_ITEMS_TWO_HASHES),
    "prefill_list_output_unflattened": prefill(batch(request(4, 0, 4, item((0, 1))), ndim=3), form="list"),
    "prefill_per_request_skips_cached": prefill(SAME_ITEM_TWICE, path="per_request"),
    "prefill_per_request_off_by_one": prefill(batch(request(6, 1, 4, item((1, 3)))), path="per_request"),
    "prefill_per_request_encodes_straddling": prefill(
        batch(request(8, 2, 0, item((0, 5))), request(4, 0, 4, item((0, 1), h=2))), path="per_request"
    ),
    "prefill_reads_back_from_cache": prefill(batch(request(4, 0, 4, item((0, 1)))), cache_size=1),
    "prefill_overlap_by_extent": prefill(batch(request(12, 5, 2, item((2, 3), (8, 9))))),
    "short_extend_list_indexed": prefill(replace(batch(request(4, 0, 0, item((0, 1)))), extend_listed=0)),
    "cache_keeps_encoder_view": across_steps(
        batch(request(6, 0, 6, item((0, 5)))), batch(request(6, 0, 6, item((0, 5)))), scribble=True
    ),
    "warm_hit_always_misses": across_steps(
        batch(request(6, 0, 6, item((0, 5)))), batch(request(6, 0, 6, item((0, 5))))
    ),
    "evicted_entry_served_empty": across_steps(
        batch(request(6, 0, 2, item((0, 5)))),
        batch(request(6, 0, 6, item((0, 5), h=2))),
        batch(request(6, 2, 4, item((0, 5)))),
        cache_size=6 * 8 * 4 * 3 // 2,  # room for one item of six float32 rows of 8
    ),
    "resume_from_last_chunk": across_steps(
        batch(request(6, 0, 2, item((0, 5)))), batch(request(6, 4, 2, item((0, 5))))
    ),
    # R3e
    "mask_first_placeholder_only": embed_mask(batch(request(5, 0, 5, item((0, 1)), item((3, 4), h=2)))),
    "mask_marks_text": embed_mask(batch(request(4, 0, 4, item((0, 1))))),
    "embed_mask_skips_precomputed": embed_mask(PARTIAL),
    "mask_row_shaped": embed_mask(batch(request(3, 0, 3, item((0, 0), modality="audio"), item((2, 2), h=2)))),
    "modality_of_first_item": embed_mask(
        batch(request(2, 0, 2, item((0, 0), modality="audio"), item((1, 1), h=2)))
    ),
    # R4
    "count_inclusive_end": count(batch(request(10, 0, 4, item((2, 5))))),
    "adjust_keeps_first": adjust(5, 3),
    "adjust_wrong_error_class": adjust(2, 3),
    "adjust_wrong_message": adjust(2, 3),
    "adjust_no_raise_on_short": adjust(2, 3),
    "adjust_zero_keeps_all": adjust(3, 0),
    # R5
    "grid_check_at_least_one": feature(TWO_GRIDS),
    "grid_check_wrong_message": feature(TWO_GRIDS),
    "grid_check_ignores_grid_thws": feature(
        item((0, 3), (6, 7), grid=((1, 2, 2), (1, 1, 2)), grid_key="grid_thws")
    ),
    "grid_check_first_item_only": feature(ONE_GRID, TWO_GRIDS),
    "split_drops_last_patch_rows": split(FEATURE_SPLIT),
    "split_keeps_aggregated_grid": split(FEATURE_SPLIT),
    "split_spans_relative": split(FEATURE_SPLIT),
    "split_video_as_images": split_forms(
        item((0, 0), (1, 1), (3, 3), modality="video", grid=((2, 1, 1), (1, 1, 2)), grid_key="video_grid_thw")
    ),
    "split_numpy_features_whole": split_forms(replace(FEATURE_SPLIT, feature_form="numpy")),
    "split_sequence_features_by_part": split_forms(replace(FEATURE_SPLIT, feature_form="list")),
    "split_list_data_copied": split_forms(replace(FEATURE_SPLIT, model_data=(("num_patches", "list"),))),
    "split_patch_data_copied": split_forms(
        replace(FEATURE_SPLIT, model_data=(("patch_pixel_values", "tensor"),))
    ),
    "split_scalar_data_dropped": split_forms(replace(FEATURE_SPLIT, model_data=(("merge_size", "tensor"),))),
    "split_ignores_num_patches": split_forms(
        item(
            (0, 0),
            (2, 2),
            grid=((1, 2, 2), (1, 1, 2)),
            grid_form="absent",
            feature_rows=2,
            model_data=(("num_patches", "tensor"), ("patch_pixel_values", "numpy")),
        )
    ),
    "split_precomputed_kept_whole": split_forms(
        item((0, 3), (5, 6), grid=((1, 2, 2), (1, 1, 2)), precomputed=True)
    ),
    "split_mismatched_grid_per_span": split_forms(item((0, 0), (2, 2), grid=((1, 1, 2),))),
    "split_flat_grid_crashes": split_forms(item((0, 0), (2, 2), grid=((1, 1, 2),), grid_form="flat")),
    "split_ignores_feature_total": split_forms(replace(FEATURE_SPLIT, feature_rows=7)),
}


def test_every_mutant_has_a_witness() -> None:
    assert sorted(WITNESSES | OPTION_WITNESSES) == sorted(MUTANTS)


@pytest.mark.parametrize("name", sorted(WITNESSES))
def test_witness_shows_the_bug(name: str) -> None:
    if MUTANTS[name].needs_cuda and not cuda_available():
        pytest.skip("needs a CUDA device")
    witness = WITNESSES[name]
    assert_agrees(witness)
    expected, actual = observe(witness, REFERENCE), observe(witness, mutant(name))
    assert not same(expected, actual), f"mutant {name} answered like the reference: {actual}"


def test_registry() -> None:
    assert len(MUTANTS) >= 30
    assert {m.rule for m in MUTANTS.values()} == {"R1", "R2", "R3", "R3e", "R3w", "R3d", "R4", "R5", "R6"}
    assert all(name == m.name and m.description for name, m in MUTANTS.items())
    target = mutant("chunk_start_off_by_one")
    assert isinstance(target, Target) and target.name == "mutant:chunk_start_off_by_one"
    assert target.capabilities == ALL_CAPABILITIES | {SHORT_LISTS, WHOLE_ITEMS, DRAFT_LOOKAHEAD}
    assert target.describe()["bug"] == "chunk_start_off_by_one"
    with pytest.raises(TargetError, match="unknown mutant"):
        mutant("no_such_bug")


def test_every_bug_switch_in_the_model_is_a_registered_mutant() -> None:
    source = Path(engine_model.__file__).read_text()
    assert set(re.findall(r'bug [!=]= "(\w+)"', source)) == set(MUTANTS)


def test_importing_the_targets_does_not_import_torch() -> None:
    code = "import sys, mmharness.targets.mutants; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
