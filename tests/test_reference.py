"""Hand-worked examples for every rule of the reference model (docs/rules.md)."""

from __future__ import annotations

import pytest
from mmharness import reference
from mmharness.model import Case, Item, Request, Row

# SGLang's own unit-test table: three items in a sequence of 30.
TABLE_SPANS = ((2, 5), (9, 14), (20, 24))
TABLE = [
    # (prefix, extend) -> rows of the concatenated embedding, start, end
    ((0, 8), list(range(0, 4)), 0, 4),
    ((8, 8), list(range(4, 10)), 4, 10),
    ((16, 8), list(range(10, 14)), 10, 14),
    ((24, 6), [14], 14, 15),
]


@pytest.mark.parametrize(("window", "rows", "start", "end"), TABLE)
def test_r1_sglang_table(window, rows, start, end):
    assert reference.embedding_chunk(TABLE_SPANS, *window) == (rows, start, end)


def test_r1_table_windows_partition_the_rows():
    together = [row for window, rows, _, _ in TABLE for row in rows]
    assert together == list(range(15))


@pytest.mark.parametrize(
    ("prefix", "extend", "expected"),
    [
        (5, 0, ([], 3, 3)),  # an empty window is empty, with start == end
        (0, 0, ([], 0, 0)),
        (5, 5, ([3, 4], 3, 5)),  # last row of the first span, first of the second
        (6, 3, ([], 4, 4)),  # a window inside the gap
        (0, 30, (list(range(15)), 0, 15)),
    ],
)
def test_r1_edges(prefix, extend, expected):
    assert reference.embedding_chunk(TABLE_SPANS, prefix, extend) == expected


def test_r1_multi_span_item_rows_follow_positions():
    video = Item(spans=((1, 2), (5, 6)), hash=9, modality="video")
    request = Request(seq_len=8, prefix_len=2, extend_len=4, items=(video,))
    assert reference.window_rows(request) == [Row(9, 4, 1), Row(9, 4, 2)]


def _req(*items: Item, prefix: int = 0, extend: int = 10) -> Request:
    return Request(seq_len=10, prefix_len=prefix, extend_len=extend, items=items)


def img(start: int, end: int, hash_: int, precomputed: bool) -> Item:
    return Item(spans=((start, end),), hash=hash_, precomputed=precomputed)


def test_r2_all_precomputed_concatenates_windows_in_request_order():
    case = Case(
        requests=(
            _req(img(0, 1, 1, True), prefix=1, extend=9),
            _req(),  # skipped: no items
            _req(img(4, 5, 2, True)),
        )
    )
    assert reference.precomputed_embedding(case) == [Row(1, 2, 1), Row(2, 2, 0), Row(2, 2, 1)]


def test_r2_none_precomputed_is_none():
    case = Case(requests=(_req(img(0, 1, 1, False)),))
    assert reference.precomputed_embedding(case) is None


def test_r2_founding_scenario_partial_single_item_requests_raise():
    case = Case(requests=(_req(img(0, 1, 1, True)), _req(img(0, 1, 2, False))))
    with pytest.raises(NotImplementedError, match=r"^MM inputs where only some items are precomputed\.$"):
        reference.precomputed_embedding(case)


def test_r2_founding_scenario_partial_inside_multi_item_request_falls_back():
    case = Case(requests=(_req(img(0, 1, 1, True), img(3, 4, 2, False)),))
    assert reference.precomputed_embedding(case) is None
    assert reference.is_partially_precomputed(case)


def test_r2_multi_item_fallback_wins_over_the_error_wherever_it_is():
    case = Case(
        requests=(
            _req(img(0, 1, 1, True)),
            _req(img(0, 1, 2, False)),
            _req(img(0, 1, 3, True), img(3, 4, 4, False)),
        )
    )
    assert reference.precomputed_embedding(case) is None


def test_r3_rows_of_every_window_and_none_without_positions():
    case = Case(requests=(_req(img(2, 4, 1, False), prefix=3, extend=5), _req(img(0, 0, 2, False))))
    assert reference.chunked_prefill_embedding(case) == [Row(1, 3, 1), Row(1, 3, 2), Row(2, 1, 0)]
    assert reference.items_in_windows(case) == {(1, 3), (2, 1)}
    gap = Case(requests=(_req(img(2, 4, 1, False), prefix=5, extend=5),))
    assert reference.chunked_prefill_embedding(gap) is None
    assert reference.items_in_windows(gap) == set()


def test_r3_collision_rows_are_each_items_own():
    case = Case(requests=(_req(img(0, 1, 7, False), img(3, 5, 7, False)),))
    rows = reference.chunked_prefill_embedding(case)
    assert rows == [Row(7, 2, 0), Row(7, 2, 1), Row(7, 3, 0), Row(7, 3, 1), Row(7, 3, 2)]


def test_r3e_mask_marks_exactly_the_window_placeholders():
    case = Case(
        requests=(
            _req(img(2, 3, 1, False), prefix=1, extend=3),
            _req(img(0, 0, 2, False), extend=2),
        )
    )
    rows, mask = reference.embedding_and_mask(case)
    assert mask == [False, True, True, True, False]
    assert rows == [Row(1, 2, 0), Row(1, 2, 1), Row(2, 1, 0)]


def test_r3e_partial_coverage_raises_like_r2():
    case = Case(requests=(_req(img(0, 1, 1, True)), _req(img(0, 1, 2, False))))
    with pytest.raises(NotImplementedError):
        reference.embedding_and_mask(case)


def test_r4_count_and_adjust():
    case = Case(requests=(_req(img(2, 5, 1, False), prefix=3, extend=2), _req(img(8, 9, 2, False))))
    assert reference.count_mm_tokens(case) == 4
    assert reference.adjust_embedding_length(5, 3) == range(2, 5)  # keep the last rows
    assert reference.adjust_embedding_length(5, 5) == range(0, 5)
    assert reference.adjust_embedding_length(5, 0) == range(5, 5)
    with pytest.raises(RuntimeError, match=r"^Insufficient multimodal embedding length"):
        reference.adjust_embedding_length(2, 3)


AGGREGATED = Item(spans=((1, 4), (6, 7), (9, 14)), hash=5, grid=((1, 2, 2), (1, 1, 2), (2, 1, 3)))


def test_r5_founding_scenario_aggregated_grid_is_refused():
    with pytest.raises(ValueError) as raised:
        reference.check_one_grid(AGGREGATED)
    assert str(raised.value) == (
        "Kimi-K3 expects one vision grid per MultimodalDataItem; "
        "split aggregated encoder inputs before get_image_feature()"
    )


def test_r5_split_is_lossless_and_each_part_passes():
    parts = reference.split_item(AGGREGATED)
    assert [p.span for p in parts] == list(AGGREGATED.spans)
    assert [p.features for p in parts] == [range(0, 4), range(4, 6), range(6, 12)]
    assert AGGREGATED.patch_count == 12
    for part in parts:
        reference.check_one_grid(Item(spans=(part.span,), hash=5, grid=(part.grid_row,)))


@pytest.mark.parametrize(
    ("devices", "lands_on"),
    [
        (("cpu", "cpu"), "cpu"),
        (("cpu", "cuda"), "cuda"),  # the first CUDA item's device, not the first item's
        (("cuda", "cpu"), "cuda"),
        ((None, None), "cpu"),  # items on the case's device
    ],
)
def test_r6_a_mixed_precomputed_batch_lands_on_the_first_cuda_items_device(devices, lands_on):
    items = (Item(((0, 1),), 1, True, device=devices[0]), Item(((2, 3),), 2, True, device=devices[1]))
    case = Case((Request(4, 0, 4, items[:1]), Request(4, 0, 4, items[1:])))
    assert reference.precomputed_device(case) == lands_on


def test_whole_item_steps_name_the_items_they_cut():
    video = Item(spans=((2, 3), (5, 6)), hash=1)
    case = Case(requests=(Request(seq_len=8, prefix_len=0, extend_len=8, items=(video,)),), hidden=4)
    assert reference.cut_items(case, [(0, 0, 2), (0, 2, 5), (0, 7, 1)]) == []  # ends before, then whole
    assert reference.cut_items(case, [(0, 0, 4)]) == [(0, 0)]  # ends in the gap
    assert reference.cut_items(case, [(0, 3, 2)]) == []  # a step starting inside it (a prefix hit) may stop


def test_whole_item_steps_must_run_on_within_the_window():
    case = Case(requests=(Request(seq_len=8, prefix_len=2, extend_len=4, items=()),), hidden=4)
    assert reference.scheduled_windows(case, [(0, 2, 3)]).requests[0].extend_len == 3
    assert "does not run on" in reference.scheduled_windows(case, [(0, 3, 1)])
    assert "past the window" in reference.scheduled_windows(case, [(0, 2, 5)])
    assert "names no request" in reference.scheduled_windows(case, [(1, 0, 1)])


def test_r3l_the_steps_leave_waiting_the_requests_short_of_their_windows():
    case = Case((_req(prefix=2, extend=4), _req(prefix=0, extend=3)), hidden=4)
    assert reference.waiting(case, [(0, 2, 1), (0, 3, 3), (1, 0, 2)]) == {1: 2}
    assert reference.waiting(case, []) == {0: 2, 1: 0}


IMAGE = Item(((3, 5),), hash=9)  # [3, 6): three embeddings


@pytest.mark.parametrize(
    ("at", "asked", "lookahead", "blocked"),
    [
        (0, 4, 0, False),  # text before the image: the step may stop before it
        (2, 3, 1, True),  # the look-ahead reaches it, and it does not fit
        (2, 4, 1, False),  # it fits, the look-ahead included
        (3, 2, 0, True),  # at its first position, too few tokens for it
        (4, 1, 0, True),  # inside it (a prefix hit) with its rest past the tokens asked
    ],
)
def test_r3l_the_token_budget_blocks_only_an_item_the_next_token_reaches_and_cannot_finish(
    at, asked, lookahead, blocked
):
    request = _req(IMAGE, extend=8)
    found = reference.blocker(request, at, asked, whole=True, lookahead=lookahead)
    assert bool(found) == blocked, found
    assert reference.blocker(request, at, asked, whole=False, lookahead=lookahead) is None  # chunked


def test_r3l_the_cache_blocks_only_the_item_holding_the_position_when_it_has_no_room():
    request = _req(IMAGE, extend=8)

    def free(n: int | None):
        return lambda item: n

    assert "the encoder cache" in reference.blocker(request, 3, 8, whole=False, room=free(2))
    assert "the encoder cache" in reference.blocker(request, 5, 8, whole=False, room=free(0))  # inside it
    assert reference.blocker(request, 3, 8, whole=False, room=free(3)) is None
    assert reference.blocker(request, 3, 8, whole=False, room=free(None)) is None  # cached: needs no room
    assert reference.blocker(request, 2, 8, whole=False, room=free(0)) is None  # a text token first
    assert reference.blocker(request, 3, 8, whole=False) is None  # no cache that holds a step back
    spaced = _req(Item(((3, 3), (5, 5)), hash=9))  # two embeddings over three placeholders
    assert reference.blocker(spaced, 3, 8, whole=False, room=free(2)) is None
    assert reference.blocker(spaced, 3, 8, whole=False, room=free(2), unit="placeholders")
