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
from mmharness.model import DEVICES, Case, Item, Request
from mmharness.strategies._internal.choices import integer, pick
from mmharness.strategies._internal.validation import check_choice, check_int


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


RUN_OPTIONS = ("token_budget", "encoder_budget", "cache_size", "other_path", "whole", "drafter")
"""The scheduler options an engine run may be given (all ints, so a saved example replays)."""


@st.composite
def _run_options(draw: DrawFn, case: Case, whole: int | None, drafter: int | None) -> dict[str, int]:
    costs = sorted((item.token_count for _, _, item in case.items()), reverse=True)
    extents = sorted({len(item.extent) for _, _, item in case.items()})
    largest = costs[0] if costs else 1
    total = max(sum(costs), 1)
    pairs = [costs[0] + costs[1] - 1, costs[0] + costs[1]] if len(costs) > 1 else []
    # Sizes near the items': a cache that holds the largest item but not two, so items evict one another.
    near = [largest, largest + 1, *pairs, total // 2, total - 1]
    windows = max(sum(r.extend_len for r in case.requests), 1)
    options = {
        # 0: the option's default (no token budget, the encoder budget the cache's size, an unlimited cache)
        "cache_size": 0 if integer(draw, 0, 2) == 0 else pick(draw, 1, total, near),
        "encoder_budget": 0 if integer(draw, 0, 1) == 0 else pick(draw, 1, total, [1, largest, largest + 1]),
        "token_budget": 0
        if integer(draw, 0, 2) == 0
        else pick(draw, 1, windows, [1, *(e + d for e in extents for d in (-1, 0, 1)), windows // 2]),
        "other_path": integer(draw, 0, 1),
    }
    if len(case.requests) > 1 and integer(draw, 0, 1) == 1:
        # Half the batches of several requests compete on the smallest cache an engine runs (its largest item,
        # the encoder budget the same) under the drawn token budget: a request stopped inside an item (at
        # its window's end or the budget's) keeps its entry while another needs the room.
        options.update(cache_size=largest, encoder_budget=0)
    options.update(_switches(draw, whole, drafter))
    return options


@st.composite
def _eviction_runs(
    draw: DrawFn, device: str, whole: int | None, drafter: int | None
) -> tuple[Case, dict[str, int]]:
    size, distinct = integer(draw, 1, 3), integer(draw, 3, 4)
    again = distinct - 2 - integer(draw, 0, distinct - 2)  # shrinks toward the entry freed last
    length = size + 1  # the item, then a text token: the request passes the item's end in its step
    item = [Item(((0, size - 1),), hash=h) for h in (*range(distinct), again)]
    case = Case(tuple(Request(length, 0, length, (i,)) for i in item), device=device)
    options = {
        "cache_size": (distinct - 1) * size,
        "encoder_budget": 0,
        "token_budget": length,
        "other_path": integer(draw, 0, 1),
        **_switches(draw, whole, drafter),
    }
    return case, options


def _switches(draw: DrawFn, whole: int | None, drafter: int | None) -> dict[str, int]:
    """The two engine options (items whole, a drafter), each drawn unless given."""
    return {
        "whole": integer(draw, 0, 1) if whole is None else whole,
        "drafter": integer(draw, 0, 1) if drafter is None else drafter,
    }


def _check_switches(whole: int | None, drafter: int | None) -> None:
    for name, value in (("whole", whole), ("drafter", drafter)):
        if value is not None:
            check_int(name, value, min_value=0)


def eviction_runs(
    *, device: str = "cpu", whole: int | None = None, drafter: int | None = None
) -> SearchStrategy[tuple[Case, dict[str, int]]]:
    """Batches whose encoder calls show the cache's eviction order, with their run options.

    One request per distinct item (3 or 4 of one size), one step each (the token
    budget is a request's length), on a cache with room for all but one: the last
    distinct item evicts one free entry, and a last request wants an earlier item
    again. Which entry went decides whether it is encoded again: a cache evicting its
    oldest free entry first (vLLM's documented policy) keeps the one freed last, which
    the draw shrinks toward. Random batches almost never line up so.
    """
    check_choice("device", device, DEVICES)
    _check_switches(whole, drafter)
    return _eviction_runs(device, whole, drafter)


def run_options(
    case: Case, *, whole: int | None = None, drafter: int | None = None
) -> SearchStrategy[dict[str, int]]:
    """Scheduler options for running ``case`` on an engine, each drawn on its own (``RUN_OPTIONS``).

    ``cache_size`` (encoder cache, in embeddings) and ``encoder_budget`` (the
    encoder's work per step) are drawn near the items' sizes, so the budget is
    often smaller than the cache and the cache often holds one large item but
    not two; ``token_budget`` (one step's tokens, shared by the requests) near
    the items' extents, so a request stops inside an item while others run.
    Half the batches of several requests then compete on the smallest cache
    an engine runs (its largest item, the encoder budget the same): a request
    stopped inside an item keeps its entry while another needs the room.
    ``other_path`` picks the target's second path (vLLM: model runner V2's gather); ``whole`` (items
    scheduled whole) and ``drafter`` (a drafter reading one token ahead) are drawn unless given.
    0 is each option's default, so examples shrink toward a plain run.
    """
    _check_switches(whole, drafter)
    return _run_options(case, whole, drafter)
