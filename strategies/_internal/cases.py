"""Batches: requests plus the embedding format (hidden, dtype, ndim, device).

Requests are drawn one after another from a shared ``HashPool`` so that
duplicates and collisions cross request boundaries, and coverage is decided
last, over the whole batch, because "partial" is a property of the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import product

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import DrawFn, SearchStrategy
from mmharness.model import DEVICES, DTYPES, NDIMS, Case, Item, Request
from mmharness.strategies._internal.choices import integer, pick
from mmharness.strategies._internal.coverage import COVERAGES, draw_coverage, min_items_for
from mmharness.strategies._internal.items import HashPool
from mmharness.strategies._internal.requests import (
    RequestDraft,
    RequestShape,
    check_shape,
    draw_request_draft,
)
from mmharness.strategies._internal.validation import (
    check_bool,
    check_choice,
    check_int,
    check_order,
    check_positive_ints,
    check_subset,
)


@dataclass(frozen=True)
class Format:
    """Every allowed ``(hidden, dtype, ndim)``; one choice picks a combination."""

    combos: tuple[tuple[int, str, int], ...]
    device: str
    item_devices: tuple[str, ...] = ()
    """Devices each item draws its own from; empty: every item on ``device``."""

    def draw_case(self, draw: DrawFn, requests: Sequence[Request]) -> Case:
        index = integer(draw, 0, len(self.combos) - 1)
        hidden, dtype, ndim = self.combos[index]
        if self.item_devices:
            requests = [replace(r, items=tuple(self._placed(draw, i) for i in r.items)) for r in requests]
        return Case(tuple(requests), hidden=hidden, dtype=dtype, ndim=ndim, device=self.device)

    def _placed(self, draw: DrawFn, item: Item) -> Item:
        return replace(item, device=self.item_devices[integer(draw, 0, len(self.item_devices) - 1)])


def check_format(
    *,
    hiddens: Sequence[int],
    dtypes: Sequence[str],
    ndims: Sequence[int],
    device: str,
    item_devices: Sequence[str] = (),
) -> Format:
    hs = check_positive_ints("hiddens", hiddens)
    ds = check_subset("dtypes", dtypes, DTYPES)
    ns = check_subset("ndims", ndims, NDIMS)
    check_choice("device", device, DEVICES)
    placed = check_subset("item_devices", item_devices, DEVICES) if item_devices else ()
    return Format(tuple(product(hs, ds, ns)), device, tuple(placed))


def build_requests(draw: DrawFn, drafts: Sequence[RequestDraft], coverage: str) -> list[Request]:
    flags = draw_coverage(draw, [len(d.items) for d in drafts], coverage)
    return [d.build(f) for d, f in zip(drafts, flags, strict=True)]


def draw_drafts(
    draw: DrawFn,
    shape: RequestShape,
    pool: HashPool,
    *,
    min_requests: int,
    max_requests: int,
    min_items_total: int,
) -> list[RequestDraft]:
    """Requests whose items add up to at least ``min_items_total``, without filtering.

    Each request is asked for just enough items that the ones still to come can
    make up the rest.
    """
    cap = shape.item_cap
    low = max(min_requests, -(-min_items_total // cap) if min_items_total else 0)
    if shape.evs:
        # EVS moves one request's placeholders in the batch's input_ids, which then must be that
        # request's: pruned videos come in one-request batches, drawn half the time.
        n = pick(draw, low, max_requests, (1,) if low <= 1 <= max_requests else ())
        shape = replace(shape, evs=n == 1)
    else:
        n = integer(draw, low, max_requests)
    drafts: list[RequestDraft] = []
    have = 0
    for r in range(n):
        owed = max(0, min_items_total - have - (n - 1 - r) * cap)
        draft = draw_request_draft(draw, shape, pool, owed)
        have += len(draft.items)
        drafts.append(draft)
    return drafts


def draw_listed(draw: DrawFn, case: Case) -> Case:
    """Per-request lists shorter than the batch (EAGLE's convention): ``prefix_length`` and
    ``extend_length`` each cover a drawn head of the requests.

    Each length is one request short half the time (the edge a missing guard
    trips on), else any length up to the whole batch; shrinking gives whole lists.
    """
    n = len(case.requests)
    prefix = n - pick(draw, 0, n, (1, 1, n))
    extend = n - pick(draw, 0, n, (1, 1, n))
    return replace(case, prefix_listed=prefix, extend_listed=extend)


@st.composite
def _cases(
    draw: DrawFn,
    shape: RequestShape,
    fmt: Format,
    min_requests: int,
    max_requests: int,
    min_items_total: int,
    coverage: str,
    duplicates: bool,
    collisions: bool,
    short_lists: bool = False,
) -> Case:
    pool = HashPool(duplicates=duplicates, collisions=collisions)
    drafts = draw_drafts(
        draw,
        shape,
        pool,
        min_requests=min_requests,
        max_requests=max_requests,
        min_items_total=min_items_total,
    )
    case = fmt.draw_case(draw, build_requests(draw, drafts, coverage))
    return draw_listed(draw, case) if short_lists else case


def cases(
    *,
    min_requests: int = 0,
    max_requests: int = 4,
    max_items: int = 3,
    max_spans_per_item: int = 3,
    max_seq_len: int = 40,
    hiddens: Sequence[int] = (4, 8),
    dtypes: Sequence[str] = DTYPES,
    ndims: Sequence[int] = NDIMS,
    coverage: str = "any",
    duplicates: bool = True,
    collisions: bool = False,
    min_items_total: int = 0,
    device: str = "cpu",
    item_devices: Sequence[str] = (),
    short_lists: bool = False,
    interleaved: bool = False,
    evs: bool = False,
) -> SearchStrategy[Case]:
    """Well-formed batches: the input of every differential and metamorphic check.

    ``coverage`` ("any", "all", "none", "partial") decides ``precomputed``;
    ``duplicates`` reuses a hash for an item of the same token count (within and
    across requests), ``collisions`` reuses one for a different token count;
    ``min_items_total`` guarantees items for checks that need one;
    ``item_devices`` (e.g. ``("cpu", "cuda")``) gives each item a device of its
    own, drawn from those: a batch mixing devices (R6). ``short_lists`` draws
    ``prefix_listed`` and ``extend_listed``: the engine's per-request lists
    shorter than the batch, as EAGLE hands them (R3). ``interleaved`` lets two
    items be drawn as one: a video with its audio track in the gaps between its
    frames (Qwen2.5-Omni's ``use_audio_in_video``), one item's spans inside the
    other's extent (docs/rules.md, Terms); engines whose callers embed each
    modality apart serve it, so a check turns it on for the targets that do.
    ``evs`` makes a request's video EVS-pruned (efficient video sampling,
    ``Item.frame_rows``): the encoder reports how many rows each frame kept and
    the engine moves the placeholders to match (R3e); such batches have one
    request (half of all batches then do).
    """
    shape = check_shape(
        max_items=max_items,
        max_spans_per_item=max_spans_per_item,
        max_seq_len=max_seq_len,
        interleaved=interleaved,
        evs=evs,
    )
    fmt = check_format(hiddens=hiddens, dtypes=dtypes, ndims=ndims, device=device, item_devices=item_devices)
    check_int("min_requests", min_requests, min_value=0)
    check_int("max_requests", max_requests, min_value=0)
    check_order("min_requests", min_requests, "max_requests", max_requests)
    check_choice("coverage", coverage, COVERAGES)
    check_bool("duplicates", duplicates)
    check_bool("collisions", collisions)
    check_bool("short_lists", short_lists)
    check_int("min_items_total", min_items_total, min_value=0)
    need = max(min_items_total, min_items_for(coverage))
    if need > max_requests * shape.item_cap:
        raise InvalidArgument(
            f"{need} items needed (min_items_total={min_items_total}, coverage={coverage!r}) "
            f"but at most {max_requests * shape.item_cap} fit (max_requests={max_requests}, "
            f"max_items={max_items}, max_seq_len={max_seq_len})"
        )
    return _cases(shape, fmt, min_requests, max_requests, need, coverage, duplicates, collisions, short_lists)
