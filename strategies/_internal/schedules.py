"""Prefill schedules: a sequence cut into chunks, as chunked prefill runs it.

The metamorphic check "chunks of any schedule concatenate to the whole" only
bites when a boundary lands on or next to a span edge, so half the boundaries
are drawn from the caller's ``cuts`` (each +-1). Each boundary is drawn as a
distance from the end, so a schedule shrinks toward one chunk.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import DrawFn, SearchStrategy
from mmharness.strategies._internal.choices import pick
from mmharness.strategies._internal.validation import check_int


@st.composite
def _schedules(draw: DrawFn, seq_len: int, cuts: tuple[int, ...]) -> tuple[int, ...]:
    chunks = []
    pos = 0
    while pos < seq_len:
        # Favoured: a cut +-1 ahead, and a one-token chunk.
        favoured = [seq_len - c for c in cuts if c > pos]
        favoured.append(seq_len - pos - 1)
        back = pick(draw, 0, seq_len - pos - 1, favoured)
        chunks.append(seq_len - back - pos)
        pos = seq_len - back
    return tuple(chunks)


def schedules(*, seq_len: int, cuts: Sequence[int] = ()) -> SearchStrategy[tuple[int, ...]]:
    """Positive chunk lengths summing to ``seq_len``; ``()`` when ``seq_len == 0``.

    Chunk boundaries (prefix lengths) land often on ``cuts`` and their
    neighbours; pass span starts and ``end + 1`` positions. Cuts outside
    ``(0, seq_len)`` cannot be boundaries and are ignored.
    """
    check_int("seq_len", seq_len, min_value=0)
    if isinstance(cuts, (str, bytes)) or not isinstance(cuts, (Sequence, set, frozenset)):
        raise InvalidArgument(f"cuts={cuts!r} must be a sequence of positions")
    for i, cut in enumerate(cuts):
        check_int(f"cuts[{i}]", cut)
    near = {c + d for c in cuts for d in (-1, 0, 1)}
    return _schedules(seq_len, tuple(sorted(c for c in near if 0 < c < seq_len)))
