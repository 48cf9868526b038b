"""More cases per example: the other windows of a drawn layout worth checking.

Drawing a layout (requests, items, spans, hashes) costs Hypothesis far more
than one call into the engine, and most bugs of the window rules hide at a
window edge meeting a span edge. So a check that sweeps takes each drawn case
and also checks it under other prefill windows: every window whose start and
end lie on or next to a span edge (or the sequence's ends), all of them for a
small layout, an even sample of them for a large one. The layout is drawn,
shrunk and saved once; a failing window is saved as the case (the layout with
that window), so a finding replays as one case.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from itertools import islice

from mmharness.model import Case, Request

MAX_WINDOWS = 16
"""Windows checked per drawn case beside its own: enough to cover every edge of a
two-item request, few enough that a check's time stays dominated by the search."""


def edges(request: Request) -> list[int]:
    """Where a window may start or end to meet a span edge: each edge, one before and after."""
    points = {0, request.seq_len}
    for item in request.items:
        for start, end in item.spans:
            points.update((start - 1, start, start + 1, end, end + 1, end + 2))
    return sorted(p for p in points if 0 <= p <= request.seq_len)


def request_windows(request: Request, limit: int) -> list[tuple[int, int]]:
    """``(prefix_len, extend_len)`` of up to ``limit`` windows of one request, edges first.

    Windows with both ends exactly on an edge of a span (or of the sequence)
    come first; the rest are sampled at an even stride, so the choice depends
    on the layout alone (a shrink replays the same windows).
    """
    exact = sorted(
        {0, request.seq_len}
        | {p for item in request.items for start, end in item.spans for p in (start, end + 1)}
    )
    own = (request.prefix_len, request.extend_len)
    # Exact-edge windows alone can fill the limit: the near-edge ones are listed only when they cannot.
    chosen = list(islice(_pairs(exact, own), limit))
    room = limit - len(chosen)
    if room > 0:
        on_edges = set(exact)
        rest = [w for w in _pairs(edges(request), own) if not (w[0] in on_edges and sum(w) in on_edges)]
        if rest:
            chosen += rest[:: max(1, len(rest) // room)][:room]
    return chosen


def _pairs(points: list[int], own: tuple[int, int]) -> Iterator[tuple[int, int]]:
    """Every window ``(start, length)`` from one point to a later (or the same) one, but ``own``."""
    for i, a in enumerate(points):
        for b in points[i:]:
            if (a, b - a) != own:
                yield a, b - a


def windows_of(case: Case, *, limit: int = MAX_WINDOWS) -> Iterator[Case]:
    """The case under up to ``limit`` other windows, each request moved to its own next window.

    Requests without items keep their window: their rows never change.
    """
    per_request = [request_windows(r, limit) if r.items else [] for r in case.requests]
    count = max((len(w) for w in per_request), default=0)
    for k in range(count):
        requests = tuple(
            replace(r, prefix_len=w[k % len(w)][0], extend_len=w[k % len(w)][1]) if w else r
            for r, w in zip(case.requests, per_request, strict=True)
        )
        yield replace(case, requests=requests)
