"""The case model: plain frozen dataclasses that every other module speaks.

A case describes a prefill batch symbolically. Tensor contents are never stored:
an item's rows are a pure function of ``(hash, rows)`` (see ``mmharness.tensors``),
so cases stay small, compare by value and shrink well.
"""

from __future__ import annotations

import sys
from bisect import bisect_right, insort
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cached_property
from itertools import pairwise
from typing import NamedTuple

DTYPES = ("float32", "float16", "bfloat16")
NDIMS = (2, 3)
DEVICES = ("cpu", "cuda")
MODALITIES = ("image", "video", "audio")
GRID_KEYS = ("image_grid_thw", "grid_thws")
"""Where an engine item carries its image grid; splitters honour different keys."""
VIDEO_GRID_KEY = "video_grid_thw"
"""Where a video item carries its grid: a row per video, ``t`` its frames (R5)."""
ITEM_GRID_KEYS = (*GRID_KEYS, VIDEO_GRID_KEY)
GRID_FORMS = ("rows", "flat", "absent")
"""How an engine item carries its grid (R5): ``[N, 3]``; one row flattened to ``[3]``; not at all."""
FEATURE_FORMS = ("tensor", "numpy", "list", "tuple")
"""What container an engine item's features and model data come in (R5): processors hand all four."""
MODEL_DATA_KEYS = {
    "num_patches": "row",
    "image_sizes": "row",
    "patch_pixel_values": "patch",
    "patch_newline_mask": "patch",
    "merge_size": "scalar",
}
"""Model data an item may carry beside its grid, by what a value lines up with (R5): one entry per
grid row (``row``), one per patch (``patch``), or one value for the whole item (``scalar``)."""

Span = tuple[int, int]
"""Inclusive ``(start, end)`` token positions of one run of an item's placeholders."""

GridRow = tuple[int, int, int]
"""One ``(t, h, w)`` vision grid row; it owns ``t * h * w`` patch rows of features."""


class Row(NamedTuple):
    """Symbolic row ``index`` of the ``count``-row tensor keyed by ``hash``.

    The reference model answers in rows, not tensors; ``mmharness.tensors`` turns
    them into values, and reports use them to say which item a row came from.
    """

    hash: int
    count: int
    index: int


class CaseError(ValueError):
    """A case breaks a well-formedness rule; ``path`` names the offending field."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.reason = message


@dataclass(frozen=True)
class Item:
    """One image, video or audio clip of a request.

    ``rows`` is the row count of the item's embedding when it differs from its
    token count (a malformed case on purpose); ``None`` means they agree.
    """

    spans: tuple[Span, ...]
    hash: int
    precomputed: bool = False
    modality: str = "image"
    grid: tuple[GridRow, ...] = ()
    grid_key: str = "image_grid_thw"
    rows: int | None = None
    device: str | None = None
    """Where this item's tensors live; ``None``: the case's device. A batch may mix devices (R6)."""
    grid_form: str = "rows"
    """How the engine item carries ``grid`` (``GRID_FORMS``); ``absent``: not at all, its rows then
    only size the per-image patches (``num_patches``) (R5)."""
    feature_form: str = "tensor"
    """The container of the item's vision features, grid and model data (``FEATURE_FORMS``) (R5)."""
    feature_rows: int | None = None
    """Feature rows (first dimension) when not the grid's ``t*h*w`` total: one per image, or a
    mismatch on purpose; ``None``: they agree (R5)."""
    model_data: tuple[tuple[str, str], ...] = ()
    """``(key, form)`` of each ``MODEL_DATA_KEYS`` entry the engine item carries beside its grid (R5)."""
    frame_rows: tuple[int, ...] = ()
    """An EVS-pruned video (efficient video sampling): the rows each frame kept, one per span, in
    frame order; their total is the item's token count. The spans are the processor's estimate; the
    engine moves the placeholders so that frame ``k`` holds ``frame_rows[k]`` (docs/rules.md, R3e).
    Empty: not pruned."""

    @cached_property  # asked for every row of every window: worth remembering
    def token_count(self) -> int:
        return sum(end - start + 1 for start, end in self.spans)

    @property
    def row_count(self) -> int:
        return self.token_count if self.rows is None else self.rows

    @property
    def patch_count(self) -> int:
        return sum(t * h * w for t, h, w in self.grid)

    @property
    def feature_count(self) -> int:
        """Rows of the item's vision features: the grid's ``t*h*w`` total unless ``feature_rows`` says."""
        return self.patch_count if self.feature_rows is None else self.feature_rows

    def row(self, index: int) -> Row:
        return Row(self.hash, self.row_count, index)

    def positions(self) -> Iterator[int]:
        for start, end in self.spans:
            yield from range(start, end + 1)

    @property
    def extent(self) -> range:
        """First to last position, gaps included: what an engine's placeholder range covers."""
        return range(self.spans[0][0], self.spans[-1][1] + 1) if self.spans else range(0)


@dataclass(frozen=True)
class Request:
    """One request of the batch; the prefill step covers ``[prefix_len, prefix_len + extend_len)``."""

    seq_len: int
    prefix_len: int
    extend_len: int
    items: tuple[Item, ...] = ()

    @cached_property
    def window(self) -> range:
        return range(self.prefix_len, self.prefix_len + self.extend_len)


@dataclass(frozen=True)
class Case:
    """A batch of requests plus how its embeddings are shaped and where they live."""

    requests: tuple[Request, ...]
    hidden: int = 8
    dtype: str = "float32"
    ndim: int = 2
    device: str = "cpu"
    prefix_listed: int | None = None
    """How many requests the engine's ``prefix_length`` list covers; ``None``: every request.
    A shorter list (EAGLE's calling convention) leaves the requests past its end out of the step (R3)."""
    extend_listed: int | None = None
    """The same for ``extend_length``."""

    @property
    def listed(self) -> int:
        """How many requests both per-request lists cover; the rest are prefilled nowhere this step."""
        n = len(self.requests)
        prefix = n if self.prefix_listed is None else self.prefix_listed
        extend = n if self.extend_listed is None else self.extend_listed
        return max(0, min(n, prefix, extend))

    @property
    def row_bytes(self) -> int:
        """Bytes of one embedding row: what byte-sized caches are measured in."""
        return (4 if self.dtype == "float32" else 2) * self.hidden

    def device_of(self, item: Item) -> str:
        return item.device or self.device

    @property
    def devices(self) -> set[str]:
        """Every device the case's tensors live on."""
        return {self.device} | {self.device_of(item) for _, _, item in self.items()}

    def items(self) -> Iterator[tuple[int, int, Item]]:
        """Every item with its request and item index, in batch order."""
        for r, request in enumerate(self.requests):
            for i, item in enumerate(request.items):
                yield r, i, item


def interleaves(request: Request) -> bool:
    """Whether the request's spans, in item then span order, are not in position order: an item's
    spans lie inside another item's extent (an audio track in its video's gaps, docs/rules.md, Terms).
    The engines' rule functions see one modality's items at a time, where they never are."""
    spans = [span for item in request.items for span in item.spans]
    return any(start <= end for (_, end), (start, _) in pairwise(spans))


def listed_windows(case: Case) -> Case:
    """The case as R3 reads its per-request lists: every request past either list's end with an
    empty window, and the lists whole again (the same step, in the ordinary convention)."""
    if case.prefix_listed is None and case.extend_listed is None:
        return case
    listed = case.listed
    requests = tuple(r if k < listed else replace(r, extend_len=0) for k, r in enumerate(case.requests))
    return replace(case, requests=requests, prefix_listed=None, extend_listed=None)


def pruned(request: Request) -> Request:
    """The request as the engine serves it once EVS has pruned its videos (``Item.frame_rows``).

    Walk the pruned video's extent token by token: its frames in order, the
    text between two frames kept as it was; frame ``k`` now holds its
    ``frame_rows[k]`` rows (none: the frame is gone). The extent starts where
    it did and keeps its length (pruning keeps the total), so nothing outside
    it moves. Every other request is itself.
    """
    if not any(item.frame_rows for item in request.items):
        return request
    items = []
    for item in request.items:
        if not item.frame_rows:
            items.append(item)
            continue
        tokens: list[int | None] = []  # the frame at each position of the extent, None at text
        for k, kept in enumerate(item.frame_rows):
            if k:
                tokens.extend([None] * (item.spans[k][0] - item.spans[k - 1][1] - 1))
            tokens.extend([k] * kept)
        runs: list[list[int]] = []  # [start, end, frame]: one span per frame that kept rows
        for n, frame in enumerate(tokens):
            position = item.extent.start + n
            if frame is None:
                continue
            if runs and runs[-1][2] == frame:
                runs[-1][1] = position
            else:
                runs.append([position, position, frame])
        merged = [(start, end) for start, end, _ in runs]
        items.append(replace(item, spans=tuple(merged), frame_rows=()))
    return replace(request, items=tuple(items))


def validate(case: Case) -> None:
    """Raise ``CaseError`` naming the first field that breaks a rule of docs/rules.md (Terms)."""
    first = _first_problem(case)
    if first is not None:
        raise CaseError(*first)


def is_well_formed(case: Case) -> bool:
    return _first_problem(case) is None


_FIRST_PROBLEM = "_first_problem"
_UNKNOWN = object()


def _first_problem(case: Case) -> tuple[str, str] | None:
    """The first rule a case breaks, as ``(path, reason)``, found once per case object: a case never
    changes, and each check asks several times per case (the reference, the target, the check itself),
    which cost a third of a single-call check's run when each asked anew."""
    known = case.__dict__.get(_FIRST_PROBLEM, _UNKNOWN)
    if known is _UNKNOWN:
        first = next(problems(case), None)
        known = None if first is None else (first.path, first.reason)
        object.__setattr__(case, _FIRST_PROBLEM, known)  # frozen: a cache beside the fields, not one
    return known  # type: ignore[return-value]


def problems(case: Case) -> Iterator[CaseError]:
    """Every rule the case breaks, each as a ``CaseError`` with its path, in field order."""
    if case.hidden < 1:
        yield CaseError("hidden", f"must be >= 1, got {case.hidden}")
    if case.dtype not in DTYPES:
        yield CaseError("dtype", f"must be one of {', '.join(DTYPES)}, got {case.dtype!r}")
    if case.ndim not in NDIMS:
        yield CaseError("ndim", f"must be 2 or 3, got {case.ndim}")
    if case.device not in DEVICES:
        yield CaseError("device", f"must be one of {', '.join(DEVICES)}, got {case.device!r}")
    for name in ("prefix_listed", "extend_listed"):
        listed = getattr(case, name)
        if listed is not None and not 0 <= listed <= len(case.requests):
            yield CaseError(
                name, f"must be in [0, {len(case.requests)}] (the batch's requests), got {listed}"
            )
    for r, request in enumerate(case.requests):
        yield from _request_problems(f"requests[{r}]", request)


def _request_problems(path: str, request: Request) -> Iterator[CaseError]:
    if request.seq_len < 0:
        yield CaseError(f"{path}.seq_len", f"negative length {request.seq_len}")
    if request.prefix_len < 0:
        yield CaseError(f"{path}.prefix_len", f"negative length {request.prefix_len}")
    if request.extend_len < 0:
        yield CaseError(f"{path}.extend_len", f"negative length {request.extend_len}")
    window_end = request.prefix_len + request.extend_len
    if window_end > request.seq_len:
        yield CaseError(
            f"{path}.extend_len",
            f"window ends at {window_end}, past seq_len {request.seq_len}",
        )
    held: list[tuple[int, int, int]] = []  # (start, end, item) of every earlier item's spans, sorted
    first_of: list[int] = []  # each earlier item's first position
    last_of: dict[str, int] = {}  # modality -> the last position of its latest item
    for i, item in enumerate(request.items):
        item_at = f"{path}.items[{i}]"
        if item.modality not in MODALITIES:
            yield CaseError(
                f"{item_at}.modality",
                f"must be one of {', '.join(MODALITIES)}, got {item.modality!r}",
            )
        if item.device is not None and item.device not in DEVICES:
            yield CaseError(f"{item_at}.device", f"must be one of {', '.join(DEVICES)}, got {item.device!r}")
        if not item.spans:
            yield CaseError(f"{item_at}.spans", "an item needs at least one span")
        yield from _span_problems(item_at, item, request.seq_len, held, first_of, last_of.get(item.modality))
        for start, end in item.spans:
            if 0 <= start <= end < request.seq_len:
                insort(held, (start, end, i))
        if item.spans:
            first_of.append(item.spans[0][0])
            last_of[item.modality] = max(last_of.get(item.modality, -1), max(end for _, end in item.spans))
        if item.rows is not None and item.rows != item.token_count:
            yield CaseError(
                f"{item_at}.rows",
                f"{item.rows} embedding rows for {item.token_count} placeholder tokens",
            )
        if item.grid_key not in ITEM_GRID_KEYS:
            yield CaseError(
                f"{item_at}.grid_key",
                f"must be one of {', '.join(ITEM_GRID_KEYS)}, got {item.grid_key!r}",
            )
        for g, row in enumerate(item.grid):
            if len(row) != 3 or any(n < 1 for n in row):
                yield CaseError(f"{item_at}.grid[{g}]", f"expected three positive ints (t, h, w), got {row}")
        yield from _split_form_problems(item_at, item)
        if item.frame_rows:
            yield from _pruned_problems(item_at, i, item, request)


def _span_problems(
    item_at: str,
    item: Item,
    seq_len: int,
    held: list[tuple[int, int, int]],
    first_of: list[int],
    modality_end: int | None,
) -> Iterator[CaseError]:
    """An item's spans: in range, increasing within the item, no position held by an earlier item,
    the item after the previous one (by first position), and after the previous item of its modality.

    Items of different modalities may interleave (an audio track in the gaps between its video's
    frames); a position held by two items, or two items of one modality interleaved, may not.
    """
    # Every break of these rules also broke the old one (spans increasing across the request), whose
    # words the problem keeps, with the end of every span before: saved findings name problems so.
    before = max((end for _, end, _ in held), default=-1)
    previous_end = -1
    for s, (start, end) in enumerate(item.spans):
        span_at = f"{item_at}.spans[{s}]"
        if end < start:
            yield CaseError(span_at, f"end {end} < start {start}")
        elif start < 0 or end >= seq_len:
            yield CaseError(span_at, f"({start}, {end}) outside [0, {seq_len})")
        elif (
            start <= previous_end
            or _held_within(held, start, end) is not None
            or (s == 0 and first_of and start <= first_of[-1])
        ):
            yield CaseError(
                span_at,
                f"starts at {start}, not after the previous span's end {max(before, previous_end)}"
                " (spans must be disjoint and increasing)",
            )
        elif s == 0 and modality_end is not None and start <= modality_end:
            yield CaseError(
                span_at,
                f"starts at {start}, not after the previous {item.modality} item's end {modality_end}"
                " (items of one modality never interleave)",
            )
        previous_end = max(previous_end, end)


def _pruned_problems(item_at: str, i: int, item: Item, request: Request) -> Iterator[CaseError]:
    """An EVS-pruned video: a raw video of a span per frame, its kept rows adding up to its tokens,
    the only video of its request (the engine prunes one video per call), nothing inside its extent
    (the engine moves the text between frames)."""
    at = f"{item_at}.frame_rows"
    if item.modality != "video":
        yield CaseError(at, f"EVS prunes videos, not {item.modality} items")
    elif item.precomputed:
        yield CaseError(at, "EVS prunes the encoder's output; a precomputed item has none")
    elif len(item.spans) < 2 or len(item.frame_rows) != len(item.spans):
        yield CaseError(at, f"one count per frame span: {len(item.frame_rows)} for {len(item.spans)} spans")
    elif any(n < 0 for n in item.frame_rows):
        yield CaseError(at, f"negative row count in {list(item.frame_rows)}")
    elif sum(item.frame_rows) != item.token_count:
        kept = sum(item.frame_rows)
        yield CaseError(at, f"{kept} rows kept for {item.token_count} placeholders (pruning keeps the total)")
    else:
        extent = item.extent
        for j, other in enumerate(request.items):
            if j == i:
                continue
            if other.modality == "video":
                yield CaseError(at, f"items[{j}] is another video of the request (EVS prunes one per call)")
            elif any(start < extent.stop and end >= extent.start for start, end in other.spans):
                yield CaseError(at, f"items[{j}] lies inside the pruned video's extent (pruning moves it)")


def _held_within(held: list[tuple[int, int, int]], start: int, end: int) -> tuple[int, int, int] | None:
    """An earlier item's span sharing a position with ``(start, end)`` (the held spans are disjoint)."""
    k = bisect_right(held, (end, sys.maxsize, sys.maxsize))
    for other in held[max(0, k - 2) : k]:
        if other[1] >= start:
            return other
    return None


def _split_form_problems(item_at: str, item: Item) -> Iterator[CaseError]:
    """The R5 forms: known names, a flat grid of one row, model data sized by a grid."""
    if item.grid_form not in GRID_FORMS:
        yield CaseError(
            f"{item_at}.grid_form", f"must be one of {', '.join(GRID_FORMS)}, got {item.grid_form!r}"
        )
    elif item.grid_form == "flat" and len(item.grid) != 1:
        yield CaseError(f"{item_at}.grid_form", f"a flat grid is one row [t, h, w], not {len(item.grid)}")
    if item.feature_form not in FEATURE_FORMS:
        yield CaseError(
            f"{item_at}.feature_form", f"must be one of {', '.join(FEATURE_FORMS)}, got {item.feature_form!r}"
        )
    if item.feature_rows is not None and item.feature_rows < 0:
        yield CaseError(f"{item_at}.feature_rows", f"negative row count {item.feature_rows}")
    seen: set[str] = set()
    for d, (key, form) in enumerate(item.model_data):
        at = f"{item_at}.model_data[{d}]"
        if key not in MODEL_DATA_KEYS:
            yield CaseError(at, f"unknown key {key!r}; known: {', '.join(MODEL_DATA_KEYS)}")
        elif key in seen:
            yield CaseError(at, f"key {key!r} given twice")
        elif MODEL_DATA_KEYS[key] != "scalar" and not item.grid:
            yield CaseError(at, f"{key!r} is sized by the grid's rows, and the item has none")
        if form not in FEATURE_FORMS:
            yield CaseError(at, f"form must be one of {', '.join(FEATURE_FORMS)}, got {form!r}")
        seen.add(key)
