"""Malformed cases for robustness checks: a well-formed case with one rule broken.

Starting from a valid case and breaking one thing keeps the rest realistic, so
a target that silently accepts the bad field is caught producing a wrong
tensor rather than tripping over something unrelated. Each kind breaks one
rule of ``mmharness.model.problems`` and only that rule; the first ``CaseError``
names the broken field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import DrawFn, SearchStrategy
from mmharness.model import DTYPES, NDIMS, Case, Item, Request
from mmharness.strategies._internal.cases import Format, build_requests, check_format
from mmharness.strategies._internal.choices import integer
from mmharness.strategies._internal.items import HashPool
from mmharness.strategies._internal.requests import RequestShape, check_shape, draw_request_draft
from mmharness.strategies._internal.validation import check_int, check_subset

MALFORMED_KINDS = (
    "unsorted",
    "overlapping",
    "out_of_range",
    "reversed",
    "negative_length",
    "window_past_end",
    "row_mismatch",
)
"""What ``malformed_cases`` can break; the ``CaseError`` path of each:

- ``unsorted``: two consecutive items swapped; ``requests[r].items[i].spans[0]``.
- ``overlapping``: a span starts inside the previous one; ``requests[r].items[i].spans[s]``.
- ``out_of_range``: a span ends at or past ``seq_len`` or starts below 0; ``...spans[s]``.
- ``reversed``: a span with ``end < start``; ``...spans[s]``.
- ``negative_length``: ``requests[r].prefix_len`` or ``requests[r].extend_len`` below 0.
- ``window_past_end``: ``prefix_len + extend_len > seq_len``; ``requests[r].extend_len``.
- ``row_mismatch``: an item's ``rows`` differs from its token count; ``...items[i].rows``.
"""

_ITEMS_NEEDED = {
    "unsorted": 2,
    "overlapping": 2,
    "out_of_range": 1,
    "reversed": 1,
    "negative_length": 0,
    "window_past_end": 0,
    "row_mismatch": 1,
}


def _small(draw: DrawFn) -> int:
    """How far past a limit to go: just past it most often (shrinks to 0)."""
    return integer(draw, 0, 3)


def _with_span(request: Request, i: int, s: int, span: tuple[int, int]) -> Request:
    item = request.items[i]
    spans = (*item.spans[:s], span, *item.spans[s + 1 :])
    return _with_item(request, i, replace(item, spans=spans))


def _with_item(request: Request, i: int, item: Item) -> Request:
    return replace(request, items=(*request.items[:i], item, *request.items[i + 1 :]))


def _break(draw: DrawFn, kind: str, request: Request) -> Request:
    items = request.items
    if kind == "unsorted":
        i = integer(draw, 0, len(items) - 2)
        swapped = (*items[:i], items[i + 1], items[i], *items[i + 2 :])
        return replace(request, items=swapped)
    if kind == "overlapping":
        flat = [(i, s) for i, item in enumerate(items) for s in range(len(item.spans))]
        k = integer(draw, 0, len(flat) - 2)
        (ia, sa), (ib, sb) = flat[k], flat[k + 1]
        a_start, a_end = items[ia].spans[sa]
        start = a_end - integer(draw, 0, a_end - a_start)
        return _with_span(request, ib, sb, (start, items[ib].spans[sb][1]))
    if kind == "out_of_range":
        if integer(draw, 0, 1):
            i = len(items) - 1
            s = len(items[i].spans) - 1
            span = (items[i].spans[s][0], request.seq_len + _small(draw))
        else:
            i, s = 0, 0
            span = (-1 - _small(draw), items[0].spans[0][1])
        return _with_span(request, i, s, span)
    if kind == "reversed":
        i = integer(draw, 0, len(items) - 1)
        s = integer(draw, 0, len(items[i].spans) - 1)
        start, end = items[i].spans[s]
        return _with_span(request, i, s, (end, start) if end > start else (start, start - 1))
    if kind == "negative_length":
        field = ("prefix_len", "extend_len")[integer(draw, 0, 1)]
        return replace(request, **{field: -1 - _small(draw)})
    if kind == "window_past_end":
        over = 1 + _small(draw)
        if integer(draw, 0, 1):
            return replace(request, prefix_len=request.seq_len + over, extend_len=0)
        return replace(request, extend_len=request.seq_len - request.prefix_len + over)
    assert kind == "row_mismatch", kind
    i = integer(draw, 0, len(items) - 1)
    count = items[i].token_count
    rows = count + 1 + _small(draw) if integer(draw, 0, 1) else max(0, count - 1 - _small(draw))
    return _with_item(request, i, replace(items[i], rows=rows))


@st.composite
def _malformed_cases(
    draw: DrawFn, kinds: tuple[str, ...], shape: RequestShape, max_requests: int, fmt: Format
) -> Case:
    kind = kinds[integer(draw, 0, len(kinds) - 1)]
    n = integer(draw, 1, max_requests)
    target = integer(draw, 0, n - 1)
    # Distinct hashes: a broken item must not share content with a sound one.
    pool = HashPool(duplicates=False, collisions=False)
    drafts = [
        draw_request_draft(draw, shape, pool, _ITEMS_NEEDED[kind] if r == target else 0) for r in range(n)
    ]
    requests = build_requests(draw, drafts, "any")
    requests[target] = _break(draw, kind, requests[target])
    return fmt.draw_case(draw, requests)


def malformed_cases(
    *,
    kinds: Sequence[str] = MALFORMED_KINDS,
    max_requests: int = 3,
    max_items: int = 3,
    max_spans_per_item: int = 3,
    max_seq_len: int = 40,
    hiddens: Sequence[int] = (4, 8),
    dtypes: Sequence[str] = DTYPES,
    ndims: Sequence[int] = NDIMS,
    device: str = "cpu",
) -> SearchStrategy[Case]:
    """Cases that break exactly one rule, of one of ``kinds`` (see ``MALFORMED_KINDS``)."""
    chosen = check_subset("kinds", kinds, MALFORMED_KINDS)
    shape = check_shape(max_items=max_items, max_spans_per_item=max_spans_per_item, max_seq_len=max_seq_len)
    check_int("max_requests", max_requests, min_value=1)
    fmt = check_format(hiddens=hiddens, dtypes=dtypes, ndims=ndims, device=device)
    for kind in chosen:
        if _ITEMS_NEEDED[kind] > shape.item_cap:
            raise InvalidArgument(
                f"kind {kind!r} needs a request with {_ITEMS_NEEDED[kind]} items, but at most "
                f"{shape.item_cap} fit (max_items={max_items}, max_seq_len={max_seq_len})"
            )
    return _malformed_cases(chosen, shape, max_requests, fmt)
