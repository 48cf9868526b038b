"""Requests: items laid out in a sequence, and the prefill window over it.

Layouts are built bottom-up (gaps and lengths, then a trailing gap), so
``seq_len`` is a consequence rather than a bound that later draws must respect:
every choice is valid as drawn, and shrinking any gap or length shrinks the
sequence. The window ``[prefix_len, prefix_len + extend_len)`` is where
chunking bugs show, so half its draws land on span edges (each +-1), on 0 and
on the whole sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import DrawFn, SearchStrategy
from mmharness.model import Item, Request, Span
from mmharness.strategies._internal.choices import Tape, draw_tape, integer, pick, width
from mmharness.strategies._internal.coverage import COVERAGES, draw_coverage, min_items_for
from mmharness.strategies._internal.items import HASH_BASE_LIMIT, HashPool, ItemDraft, draw_items
from mmharness.strategies._internal.spans import GAP_FAVOURED
from mmharness.strategies._internal.validation import check_bool, check_choice, check_int, check_order

MAX_TAPE = 512
"""Bytes per request at most, so huge shapes stay within Hypothesis's per-example size limit
(a layout that outgrows its tape reads zeros: the simplest rest, still valid)."""


@dataclass(frozen=True)
class RequestShape:
    """Size limits for one request, checked once when a strategy is built."""

    max_items: int = 3
    max_spans_per_item: int = 3
    max_seq_len: int = 40
    interleaved: bool = False
    """Whether a video may come with its audio track in its frames' gaps (``items.PAIR_SHAPES``)."""
    evs: bool = False
    """Whether a request's video may be EVS-pruned (``Item.frame_rows``)."""

    @property
    def item_cap(self) -> int:
        """Items that fit in one request: every item needs a token."""
        return min(self.max_items, self.max_seq_len)

    @property
    def tape_size(self) -> int:
        """Bytes enough for every choice of one request (see ``draw_request``); the rest reads as zeros."""
        cap, spans, places = self.item_cap, self.max_spans_per_item, self.max_seq_len + 1
        point = width(2 * places)
        item = 1 + width(2 * spans + 1) + width(16 * max(cap, 1)) + spans * width(4 * places * places)
        size = width(cap + 1) + width(HASH_BASE_LIMIT + 1) + cap * item + 3 * point
        return min(size, MAX_TAPE)


def check_shape(
    *, max_items: int, max_spans_per_item: int, max_seq_len: int, interleaved: bool = False, evs: bool = False
) -> RequestShape:
    check_int("max_items", max_items, min_value=0)
    check_int("max_spans_per_item", max_spans_per_item, min_value=1)
    check_int("max_seq_len", max_seq_len, min_value=0)
    check_bool("interleaved", interleaved)
    check_bool("evs", evs)
    return RequestShape(max_items, max_spans_per_item, max_seq_len, interleaved, evs)


@dataclass(frozen=True)
class RequestDraft:
    seq_len: int
    prefix_len: int
    extend_len: int
    items: tuple[ItemDraft, ...]

    def build(self, flags: list[bool]) -> Request:
        items = tuple(
            Item(
                spans=d.spans,
                hash=d.hash,
                precomputed=f,
                modality=d.modality,
                frame_rows=() if f else d.frame_rows,  # EVS prunes the encoder's output
            )
            for d, f in zip(self.items, flags, strict=True)
        )
        return Request(self.seq_len, self.prefix_len, self.extend_len, items)


def window_points(seq_len: int, spans: list[Span] | tuple[Span, ...]) -> list[int]:
    """Positions in ``[0, seq_len]`` where a window edge meets a span edge, each +-1."""
    points = {0, seq_len}
    for start, end in spans:
        points.update((start - 1, start, start + 1, end - 1, end, end + 1, end + 2))
    return sorted(p for p in points if 0 <= p <= seq_len)


def draw_window(draw: DrawFn | Tape, seq_len: int, points: list[int]) -> tuple[int, int]:
    """``(prefix_len, extend_len)``, shrinking toward the whole sequence in one chunk.

    The window end is drawn as a distance from ``seq_len`` so that its simplest
    value is the whole rest of the sequence, while ``extend_len == 0`` stays a
    favoured point.
    """
    prefix = pick(draw, 0, seq_len, points)
    rest = seq_len - prefix
    back = pick(draw, 0, rest, [seq_len - p for p in points if p >= prefix])
    return prefix, rest - back


def draw_request(
    draw: DrawFn | Tape, shape: RequestShape, pool: HashPool, *, min_items: int = 0
) -> RequestDraft:
    # A request that may hold an EVS video holds an item: pruned videos come early.
    count = integer(draw, max(min_items, 1 if shape.evs and shape.item_cap else 0), shape.item_cap)
    stop = shape.max_seq_len
    items, pos = draw_items(
        draw,
        count=count,
        max_spans=shape.max_spans_per_item,
        stop=stop,
        pool=pool,
        interleaved=shape.interleaved,
        evs=shape.evs,
    )
    seq_len = pos + pick(draw, 0, stop - pos, GAP_FAVOURED)
    spans = [span for item in items for span in item.spans]
    prefix, extend = draw_window(draw, seq_len, window_points(seq_len, spans))
    return RequestDraft(seq_len, prefix, extend, tuple(items))


def draw_request_draft(draw: DrawFn, shape: RequestShape, pool: HashPool, min_items: int) -> RequestDraft:
    """One request as one choice (a tape), so that the shrinker can delete it whole."""
    return draw_request(draw_tape(draw, shape.tape_size), shape, pool, min_items=min_items)


@st.composite
def _requests(
    draw: DrawFn,
    shape: RequestShape,
    min_items: int,
    coverage: str,
    duplicates: bool,
    collisions: bool,
) -> Request:
    pool = HashPool(duplicates=duplicates, collisions=collisions)
    draft = draw_request_draft(draw, shape, pool, min_items)
    (flags,) = draw_coverage(draw, [len(draft.items)], coverage)
    return draft.build(flags)


def requests(
    *,
    min_items: int = 0,
    max_items: int = 3,
    max_spans_per_item: int = 3,
    max_seq_len: int = 40,
    coverage: str = "any",
    duplicates: bool = True,
    collisions: bool = False,
    interleaved: bool = False,
) -> SearchStrategy[Request]:
    """One well-formed ``Request`` with its prefill window.

    Items have 1..``max_spans_per_item`` spans (several spans: a video), hashes
    follow the same ``duplicates``/``collisions`` rules as ``cases`` within the
    request, and ``coverage`` picks the ``precomputed`` flags. ``interleaved``
    as in ``cases``.
    """
    shape = check_shape(
        max_items=max_items,
        max_spans_per_item=max_spans_per_item,
        max_seq_len=max_seq_len,
        interleaved=interleaved,
    )
    check_int("min_items", min_items, min_value=0)
    check_order("min_items", min_items, "max_items", max_items)
    check_choice("coverage", coverage, COVERAGES)
    check_bool("duplicates", duplicates)
    check_bool("collisions", collisions)
    need = max(min_items, min_items_for(coverage))
    if need > shape.item_cap:
        raise InvalidArgument(
            f"{need} items needed (min_items={min_items}, coverage={coverage!r}) but at most "
            f"{shape.item_cap} fit (max_items={max_items}, max_seq_len={max_seq_len})"
        )
    return _requests(shape, need, coverage, duplicates, collisions)
