"""The oracle: one small function per rule of docs/rules.md, answering in symbolic ``Row``s.

Every rule is written the slow, obvious way: materialise each request's
placeholder positions, then walk them. Nothing here mirrors an engine's index
arithmetic; agreeing with an engine is the point, sharing its bugs is not.
Errors are raised as the rules say an engine raises them (class and message).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import accumulate, pairwise
from typing import Any

from mmharness.model import (
    GRID_KEYS,
    MODEL_DATA_KEYS,
    VIDEO_GRID_KEY,
    Case,
    GridRow,
    Item,
    Request,
    Row,
    Span,
    pruned,
)

PARTIAL_PRECOMPUTED_MESSAGE = "MM inputs where only some items are precomputed."
ONE_GRID_MESSAGE = (
    "Kimi-K3 expects one vision grid per MultimodalDataItem; "
    "split aggregated encoder inputs before get_image_feature()"
)
INSUFFICIENT_PREFIX = "Insufficient multimodal embedding length"


def span_positions(spans: tuple[Span, ...]) -> list[int]:
    """Every placeholder position of the spans, in span order."""
    return [p for start, end in spans for p in range(start, end + 1)]


def request_slots(request: Request) -> list[tuple[int, Row]]:
    """``(position, row)`` for every placeholder of the request, in item then span order."""
    return [(position, item.row(k)) for item in request.items for k, position in enumerate(item.positions())]


# R1 ---------------------------------------------------------------------------


def embedding_chunk(spans: tuple[Span, ...], prefix_len: int, extend_len: int) -> tuple[list[int], int, int]:
    """R1: indices of the embedding rows inside the window, and ``(start, end)``.

    ``start`` and ``end`` count the placeholder positions before the window's
    first and one-past-last position.
    """
    positions = span_positions(spans)
    window_end = prefix_len + extend_len
    inside = [k for k, p in enumerate(positions) if prefix_len <= p < window_end]
    start = sum(1 for p in positions if p < prefix_len)
    end = sum(1 for p in positions if p < window_end)
    return inside, start, end


def request_chunk(request: Request) -> tuple[list[int], int, int]:
    """R1 over every item of a request, as its caller makes it: one call per modality, each call's
    rows put back at their positions. Indices into the items' rows concatenated in item order, in
    position order, and R1's ``(start, end)``; ``embedding_chunk`` of the spans unless items interleave.
    """
    positions = [p for item in request.items for p in item.positions()]
    window = request.window
    inside = [k for p, k in sorted((p, k) for k, p in enumerate(positions)) if p in window]
    start = sum(1 for p in positions if p < window.start)
    end = sum(1 for p in positions if p < window.stop)
    return inside, start, end


def window_rows(request: Request) -> list[Row]:
    """The rows of every item position inside the request's window, in position order (after EVS)."""
    request = pruned(request)
    window = request.window
    inside = [
        (position, item.row(k))
        for item in request.items
        for k, position in enumerate(item.positions())
        if position in window
    ]
    return [row for position, row in sorted(inside)]


# R2 ---------------------------------------------------------------------------


def precomputed_embedding(case: Case) -> list[Row] | None:
    """R2: the batch's precomputed rows, ``None`` for the encoder path, or the partial-coverage error."""
    coverage = [[item.precomputed for item in r.items] for r in case.requests if r.items]
    if not any(any(flags) for flags in coverage):
        return None
    if all(all(flags) for flags in coverage):
        return [row for r in case.requests for row in window_rows(r)]
    if any(len(flags) > 1 and not all(flags) for flags in coverage):
        return None
    raise NotImplementedError(PARTIAL_PRECOMPUTED_MESSAGE)


def precomputed_device(case: Case) -> str:
    """R6: where R2's concatenation lands: the device of the first item (in batch order) on CUDA,
    else the first item's device."""
    devices = [case.device_of(item) for _, _, item in case.items()]
    return next((d for d in devices if d == "cuda"), devices[0] if devices else case.device)


def is_partially_precomputed(case: Case) -> bool:
    flags = [item.precomputed for _, _, item in case.items()]
    return any(flags) and not all(flags)


# R3 ---------------------------------------------------------------------------


def chunked_prefill_embedding(case: Case) -> list[Row] | None:
    """R3: the encoder path's rows for every window, in request order; ``None`` if there are none."""
    rows = [row for r in case.requests for row in window_rows(r)]
    return rows or None


def cut_items(case: Case, steps: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """R3w: ``(request, item)`` of every item a step started at or after its first token and did not finish.

    An item's extent runs from its first position to its last, the gaps of a
    multi-span item included: scheduled whole, all of it is in one step.
    """
    cut = []
    for k, start, tokens in steps:
        for i, item in enumerate(case.requests[k].items):
            extent = item.extent
            if extent and start <= extent.start < start + tokens < extent.stop:
                cut.append((k, i))
    return cut


def scheduled_windows(case: Case, steps: list[tuple[int, int, int]]) -> Case | str:
    """R3w: the case with each window cut to what the steps scheduled, or what is wrong with the steps.

    With items scheduled whole a step may stop short of the window's end (before
    an item it cannot finish); the steps of a request must run on from its prefix.
    """
    done = [r.prefix_len for r in case.requests]
    for k, start, tokens in steps:
        if not 0 <= k < len(done):
            return f"step {(k, start, tokens)} names no request of the batch"
        if start != done[k] or tokens <= 0:
            return f"step {(k, start, tokens)} does not run on from position {done[k]}"
        done[k] += tokens
    requests = []
    for r, end in zip(case.requests, done, strict=True):
        if end > r.prefix_len + r.extend_len:
            return f"the steps scheduled up to {end}, past the window's end {r.prefix_len + r.extend_len}"
        requests.append(replace(r, extend_len=end - r.prefix_len))
    return replace(case, requests=tuple(requests))


# R3l --------------------------------------------------------------------------

LIVELOCK = "a step scheduled nothing while a request waited and nothing blocked it (R3l)"
"""The signature (after ``no progress: ``) of a livelock, whoever finds it: a check judging a target's
steps, or a step driver in a call where nothing can hold a request back."""


def waiting(case: Case, steps: list[tuple[int, int, int]]) -> dict[int, int]:
    """R3l: request -> the position its steps left it at, for each request they left short of its window."""
    reached = [r.prefix_len for r in case.requests]
    for k, start, tokens in steps:
        reached[k] = max(reached[k], start + tokens)
    return {k: at for k, (r, at) in enumerate(zip(case.requests, reached, strict=True)) if at < r.window.stop}


def cost(item: Item, unit: str) -> int:
    """What an item takes of an encoder cache or compute budget counting ``unit``: its ``embeddings`` (a
    multi-span item's gaps left out), or its ``placeholders`` (first to last position)."""
    return item.token_count if unit == "embeddings" else len(item.extent)


def blocker(
    request: Request,
    at: int,
    asked: int,
    *,
    whole: bool,
    lookahead: int = 0,
    room: Callable[[Item], int | None] | None = None,
    unit: str = "embeddings",
) -> str | None:
    """R3l: what keeps a request waiting at position ``at`` from every token of a step; ``None``: nothing.

    The token budget blocks it, items whole, when an item its next token
    reaches (a drafter's look-ahead included) does not fit in the ``asked``
    tokens: the step may stop before the item, and there is nothing before
    it. The encoder cache blocks it when the item holding ``at`` needs more
    than ``room(item)``: what the cache (and the step's encoder budget) has
    for it by the rules, ``None`` where it is cached already; ``room`` itself
    ``None``: the target has no cache that holds a step back.
    """
    if whole:
        for i, item in enumerate(request.items):
            extent = item.extent
            if extent and extent.start <= at + lookahead and at < extent.stop and extent.stop > at + asked:
                return f"the token budget: item {i} at {_half_open(extent)} does not fit in {asked} tokens"
    for i, item in enumerate(request.items if room is not None else ()):
        if item.extent.start <= at < item.extent.stop:
            free, need = room(item), cost(item, unit)
            if free is not None and need > free:
                return f"the encoder cache: item {i} needs {need} {unit}, with {free} free"
    return None


def _half_open(extent: range) -> str:
    return f"[{extent.start}, {extent.stop})"


def items_in_windows(case: Case, *, extent: bool = False) -> set[tuple[int, int]]:
    """``(hash, token_count)`` of every item with a position inside its request's window.

    These, and only these, may reach the encoder; each at most once per batch.
    With ``extent``, an item counts when any position from its first to its last
    lies inside (the gaps of a multi-span item included).
    """
    return {
        (item.hash, item.token_count)
        for r in case.requests
        for item in r.items
        if any(p in r.window for p in (item.extent if extent else item.positions()))
    }


INSIDE, EMPTY_WINDOW, BEFORE, AFTER, IN_GAP = "inside", "empty window", "before", "after", "in a gap"
"""Where an item lies relative to its request's window (``place``)."""


def place(request: Request, item: Item) -> str:
    """Where ``item`` lies relative to ``request``'s window: ``INSIDE`` (a position inside: R3 lets it
    be encoded), else ``EMPTY_WINDOW`` (the request prefills nothing this step), ``BEFORE`` (it ends
    before the window: the prefix cache holds it), ``AFTER`` (it starts at or past the window's end) or
    ``IN_GAP`` (the window lies between two of its spans). Not needed, it is encoded for a reason of its
    place: a hazard names the place, so one reason known does not hide another."""
    window = request.window
    if any(p in window for p in item.positions()):
        return INSIDE
    if not window:
        return EMPTY_WINDOW
    if item.extent.stop <= window.start:
        return BEFORE
    return AFTER if item.extent.start >= window.stop else IN_GAP


def has_collision(case: Case, *, extent: bool = False) -> bool:
    """Whether two items inside windows share a hash but not a token count (R3's adversarial case)."""
    return _collide(items_in_windows(case, extent=extent))


def has_any_collision(case: Case) -> bool:
    """Whether any two items of the batch share a hash but not a token count or a placeholder layout.

    Equal content has one layout (a processor derives an item's placeholder
    tokens from it), so equal hashes whose spans differ in shape are a collision
    too, for an engine that caches an item at its placeholder length.
    """
    keys = {(item.hash, (item.token_count, _layout(item))) for _, _, item in case.items()}
    return _collide(keys)


def _layout(item: Item) -> tuple[int, ...]:
    return tuple(p - item.extent.start for p in item.positions())


def _collide(keys: set[tuple[int, Any]]) -> bool:
    return len({h for h, _ in keys}) < len(keys)


# R3p and chunk progress ---------------------------------------------------------


def inside_items(request: Request) -> set[int]:
    """The positions a forward may neither start nor end at: each item's extent after its first position
    (a forward starting there, or a chunk ending there, would cut the item)."""
    return {p for item in request.items for p in item.extent if p != item.extent.start}


def prefix_resume_steps(request: Request, hit: int, block_size: int) -> list[int]:
    """R3p: every step a prefix-cache hit of ``hit`` tokens may resume the request's forward at, in order:
    at or before the hit, on a block boundary, inside no item."""
    inside = inside_items(request)
    return [p for p in range(hit + 1) if p % block_size == 0 and p not in inside]


def block_rows(request: Request, block: int, block_size: int) -> tuple[Row | None, ...]:
    """R3p: what KV block ``block`` holds, position by position: an item's row, or ``None`` for text. Two
    blocks may share a prefix cache's entry only where these are equal."""
    rows: dict[int, Row] = {p: row for p, row in request_slots(request)}
    return tuple(rows.get(p) for p in range(block * block_size, (block + 1) * block_size))


def chunk_progress(request: Request, start: int, chunks: list[tuple[int, int]]) -> str | None:
    """Chunk progress: how the planned ``(start, end)`` chunks of the prompt from ``start`` break the rule
    (the first way found), or ``None``: each is non-empty, ends inside no item, and they tile the prompt."""
    inside, cursor = inside_items(request), start
    for k, (begin, end) in enumerate(chunks):
        if begin != cursor:
            return f"chunk {k} starts at {begin}, not where the previous one ended ({cursor})"
        if end <= begin:
            return f"chunk {k} is empty ({begin}, {end}): the prompt makes no progress"
        if end in inside:
            return f"chunk {k} ({begin}, {end}) ends inside an item"
        cursor = end
    if cursor != request.seq_len:
        return f"the chunks end at {cursor}, not at the prompt's end ({request.seq_len})"
    return None


# R3e --------------------------------------------------------------------------


def embedding_mask(case: Case) -> list[bool]:
    """R3e: for each token of the batch's ``input_ids`` (the windows), whether it is a placeholder."""
    mask = []
    for r in map(pruned, case.requests):
        placeholders = {p for item in r.items for p in item.positions()}
        mask.extend(p in placeholders for p in r.window)
    return mask


def embedding_and_mask(case: Case) -> tuple[list[Row], list[bool]]:
    """R3e: the rows in mask order and the mask, or R2's error for partial coverage."""
    precomputed_embedding(case)
    return [row for r in case.requests for row in window_rows(r)], embedding_mask(case)


# R4 ---------------------------------------------------------------------------


def count_mm_tokens(case: Case) -> int:
    """R4: the number of placeholder positions inside the windows."""
    return sum(p in r.window for r in case.requests for p, _ in request_slots(r))


def adjust_embedding_length(row_count: int, wanted: int) -> range:
    """R4: which rows survive when an embedding of ``row_count`` rows must serve ``wanted`` placeholders."""
    if row_count < wanted:
        raise RuntimeError(f"{INSUFFICIENT_PREFIX}: {wanted} placeholders vs {row_count} rows")
    return range(row_count - wanted, row_count)


# R5 ---------------------------------------------------------------------------


def check_one_grid(item: Item) -> None:
    """R5: a Kimi-K3 style encoder accepts only items with exactly one grid row."""
    if len(item.grid) != 1:
        raise ValueError(ONE_GRID_MESSAGE)


@dataclass(frozen=True)
class SplitPart:
    """One item of a split: its spans, grid row, and which rows of each of the item's values it owns.

    ``features`` and ``embedding`` index the item's feature rows and precomputed
    embedding rows (``None`` where it carries none); ``index`` is its entry of
    row-aligned model data, ``patches`` its rows of patch-aligned model data.
    """

    spans: tuple[Span, ...]
    grid_row: GridRow | None
    features: range | None
    embedding: range | None = None
    index: int = 0
    patches: range | None = None

    @property
    def span(self) -> Span:
        return self.spans[0]


SPLIT, EITHER, WHOLE, OUTSIDE = "split", "either", "whole", "outside"
"""What the rule asks of a splitter, item by item (``split_rule``)."""


@dataclass(frozen=True)
class Split:
    """R5's answer for one item.

    ``kind``: ``split`` (exactly ``parts``), ``either`` (``parts``, or the item
    left whole), ``whole`` (one span: the item is its own part), ``outside``
    (grid, spans and rows do not line up: the item left whole, or refused with
    a clear error). ``layout`` names the item's layout for messages.
    """

    kind: str
    parts: tuple[SplitPart, ...] = ()
    layout: str = ""


def is_gridless(item: Item) -> bool:
    """Whether the engine item carries no grid (none given, or an audio clip)."""
    return item.grid_form == "absent" or item.modality == "audio"


def is_video_grid(item: Item) -> bool:
    return item.grid_key == VIDEO_GRID_KEY and item.modality == "video"


def _span_groups(item: Item) -> tuple[list[tuple[Span, ...]], str] | None:
    """The spans of each part and the layout's name; ``None`` where the spans match no grid layout.

    An image grid has a row per image and an image a span; a video grid a row
    per video, ``t`` its frames, and a video either a span per frame or one span.
    """
    spans, rows = item.spans, len(item.grid)
    if is_video_grid(item):
        frames = [t for t, _, _ in item.grid]
        if len(spans) == sum(frames):
            bounds = [0, *accumulate(frames)]
            return [spans[lo:hi] for lo, hi in pairwise(bounds)], "video, a span per frame"
        if len(spans) == rows:
            return [(span,) for span in spans], "video, a span per video"
        return None
    if item.grid_key in GRID_KEYS and item.modality == "image" and len(spans) == rows:
        return [(span,) for span in spans], "image, a span per grid row"
    return None


def _tokens(spans: tuple[Span, ...]) -> int:
    return sum(end - start + 1 for start, end in spans)


def _ranges(counts: list[int]) -> list[range]:
    bounds = [0, *accumulate(counts)]
    return [range(lo, hi) for lo, hi in pairwise(bounds)]


def split_rule(item: Item) -> Split:
    """R5: what a splitter must make of ``item`` (see ``Split`` and docs/rules.md, R5).

    With a grid, part ``k`` owns grid row ``k``, its spans, the next ``t*h*w``
    feature rows, its spans' precomputed rows, entry ``k`` of row-aligned model
    data and its ``t*h*w`` rows of patch-aligned model data; scalars go to every
    part. The split must be made only where those line up: feature rows (or
    each part's precomputed rows) equal to ``t*h*w``. Without a grid, an item
    whose features (or precomputed rows) have one entry per span may be split
    entry by entry, its patch-aligned data cut by ``num_patches``.
    """
    if len(item.spans) < 2:
        return Split(WHOLE, layout="one span")
    if item.grid_form == "flat":
        return Split(OUTSIDE, layout="a flat (rank-1) grid")
    keys = dict(item.model_data)
    if is_gridless(item):
        return _split_by_entry(item, keys)
    found = _span_groups(item)
    if found is None:
        return Split(OUTSIDE, layout=f"{len(item.grid)} grid rows for {len(item.spans)} spans")
    groups, layout = found
    patches = [t * h * w for t, h, w in item.grid]
    if item.precomputed:
        if [_tokens(g) for g in groups] != patches:
            return Split(OUTSIDE, layout="precomputed rows that do not follow the grid's t*h*w")
        features, embedding = [None] * len(groups), _ranges(patches)
    else:
        if item.feature_count != sum(patches):
            total = sum(patches)
            return Split(OUTSIDE, layout=f"{item.feature_count} feature rows for a t*h*w total of {total}")
        features, embedding = _ranges(patches), [None] * len(groups)
    parts = tuple(
        SplitPart(group, row, feature, rows, k, patch)
        for k, (group, row, feature, rows, patch) in enumerate(
            zip(groups, item.grid, features, embedding, _ranges(patches), strict=True)
        )
    )
    # A video of one span per video (and more frames) may stay whole: its parts are its videos either way.
    return Split(EITHER if layout == "video, a span per video" else SPLIT, parts, layout)


def _split_by_entry(item: Item, keys: dict[str, str]) -> Split:
    """No grid: one part per span, each owning one entry of the features (or precomputed rows)."""
    count = len(item.spans)
    entries = item.token_count if item.precomputed else item.feature_count
    if entries != count:
        return Split(OUTSIDE, layout=f"no grid, {entries} entries for {count} spans")
    aligned = {MODEL_DATA_KEYS[key] for key in keys} - {"scalar"}
    if aligned and len(item.grid) != count:
        return Split(OUTSIDE, layout="no grid, model data with no entry per span")
    if "patch" in aligned and "num_patches" not in keys:
        return Split(OUTSIDE, layout="no grid, patch-aligned data without num_patches to cut it")
    patches = _ranges([t * h * w for t, h, w in item.grid]) if len(item.grid) == count else [None] * count
    parts = tuple(
        SplitPart(
            (span,),
            None,
            None if item.precomputed else range(k, k + 1),
            range(k, k + 1) if item.precomputed else None,
            k,
            patches[k],
        )
        for k, span in enumerate(item.spans)
    )
    return Split(EITHER, parts, "no grid, an entry per span")


def split_from_processors(item: Item) -> bool:
    """Whether a processor hands a splitter this layout; a failure on any other is a hazard.

    Processors emit rank-2 grids, give an image one placeholder run and a video
    one per frame or one in all, give ``t*h*w`` feature rows per grid row (or,
    without a grid, one entry per image), and derive an item's placeholder
    count from its grid (``t*h*w`` over a merge factor), so precomputed rows
    follow the grid's proportions.
    """
    if item.grid_form == "flat":
        return False
    if is_gridless(item):
        return item.precomputed or item.feature_count == len(item.spans)
    found = _span_groups(item)
    if found is None:
        return False
    if not item.precomputed:
        return item.feature_count == item.patch_count
    tokens = [_tokens(group) for group in found[0]]
    patches = [t * h * w for t, h, w in item.grid]
    ratio = patches[0] // tokens[0] if tokens[0] else 0
    return all(n > 0 and p == n * ratio for n, p in zip(tokens, patches, strict=True))


def split_item(item: Item) -> list[SplitPart]:
    """R5's parts; a ``ValueError`` where the rule makes none (an item of one span is its own part)."""
    rule = split_rule(item)
    if rule.kind == WHOLE:
        row = item.grid[0] if len(item.grid) == 1 else None
        rows = range(item.token_count) if item.precomputed else None
        features = None if item.precomputed else range(item.feature_count)
        return [SplitPart(item.spans, row, features, rows, 0, range(item.patch_count))]
    if rule.kind == OUTSIDE:
        raise ValueError(f"cannot split {len(item.spans)} spans: {rule.layout}")
    return list(rule.parts)
