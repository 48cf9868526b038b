"""Span layouts: where an item's placeholder tokens sit in a request's sequence.

Off-by-one bugs in chunking live at span edges: spans that touch (gap 0),
one-token spans, a span at position 0 or at ``seq_len - 1``. A uniform layout
hits those rarely, so every gap and length here is drawn with a strong bias to
them. Each span's gap and length are one biased choice (uniform half, favoured
half), which shrinks toward the smallest layout: adjacent one-token spans from 0.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import DrawFn, SearchStrategy
from mmharness.model import Span
from mmharness.strategies._internal.choices import Biased, Tape, integer, pick, pick_pair
from mmharness.strategies._internal.validation import check_int, check_order

GAP_FAVOURED = (0, 0, 1)
"""Adjacent spans twice as often as a one-token gap; both are where bugs are."""


def place_copy(
    draw: DrawFn | Tape, source: Sequence[Span], *, start: int, stop: int, reserve: int = 0
) -> tuple[list[Span], int] | None:
    """``source``'s spans, gaps and all, moved to a drawn start in ``[start, stop - reserve)``.

    How a duplicate is placed: equal content has one placeholder structure (a
    processor derives the gaps between a video's frames from the video), so
    only where the copy starts is drawn. ``None`` when it does not fit.
    """
    first, last = source[0][0], source[-1][1]
    room = stop - reserve - (last - first + 1) - start
    if room < 0:
        return None
    shift = start + pick(draw, 0, room, GAP_FAVOURED, spread=max(1, room // (reserve + 1))) - first
    return [(s + shift, e + shift) for s, e in source], last + shift + 1


def place_spans(
    draw: DrawFn | Tape,
    *,
    start: int,
    stop: int,
    count: int,
    reserve: int = 0,
) -> tuple[list[Span], int]:
    """Lay ``count`` disjoint increasing spans in ``[start, stop - reserve)``.

    ``reserve`` keeps one token per span that a later item still has to place,
    so a layout never paints itself into a corner and nothing is filtered.
    Returns the spans and the position after the last one.
    """
    spans: list[Span] = []
    pos = start
    for j in range(count):
        after = count - 1 - j
        sharers = after + reserve + 1
        room = stop - reserve - after - pos
        share = max(1, room // sharers)
        gap, length = pick_pair(
            draw,
            Biased.of(0, room - 1, GAP_FAVOURED, spread=share),
            Biased.of(1, room, (1, 1, 2, room), spread=share),
        )
        # ``room`` stands for "the rest": the span then ends where the room does.
        length = room - gap if length == room else min(length, room - gap)
        first = pos + gap
        spans.append((first, first + length - 1))
        pos = first + length
    return spans, pos


@st.composite
def _spans(draw: DrawFn, seq_len: int, min_spans: int, max_spans: int) -> tuple[Span, ...]:
    count = integer(draw, min_spans, min(max_spans, seq_len))
    spans, _ = place_spans(draw, start=0, stop=seq_len, count=count)
    return tuple(spans)


def spans(*, seq_len: int, min_spans: int = 1, max_spans: int = 4) -> SearchStrategy[tuple[Span, ...]]:
    """Disjoint, increasing, inclusive ``(start, end)`` spans inside ``[0, seq_len)``.

    Adjacent spans, one-token spans, a span at 0 and a span ending at
    ``seq_len - 1`` all come up often.
    """
    check_int("seq_len", seq_len, min_value=0)
    check_int("min_spans", min_spans, min_value=0)
    check_int("max_spans", max_spans, min_value=1)
    check_order("min_spans", min_spans, "max_spans", max_spans)
    if min_spans > seq_len:
        raise InvalidArgument(f"min_spans={min_spans} spans cannot fit in seq_len={seq_len} (one token each)")
    return _spans(seq_len, min_spans, max_spans)
