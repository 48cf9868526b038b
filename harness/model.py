"""The case model: plain frozen dataclasses that every other module speaks.

A case describes a prefill batch symbolically. Tensor contents are never stored:
an item's rows are a pure function of ``(hash, rows)`` (see ``mmharness.tensors``),
so cases stay small, compare by value and shrink well.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cached_property
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
    """The container of the item's vision features and model data (``FEATURE_FORMS``) (R5)."""
    feature_rows: int | None = None
    """Feature rows (first dimension) when not the grid's ``t*h*w`` total: one per image, or a
    mismatch on purpose; ``None``: they agree (R5)."""
    model_data: tuple[tuple[str, str], ...] = ()
    """``(key, form)`` of each ``MODEL_DATA_KEYS`` entry the engine item carries beside its grid (R5)."""

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


def listed_windows(case: Case) -> Case:
    """The case as R3 reads its per-request lists: every request past either list's end with an
    empty window, and the lists whole again (the same step, in the ordinary convention)."""
    if case.prefix_listed is None and case.extend_listed is None:
        return case
    listed = case.listed
    requests = tuple(r if k < listed else replace(r, extend_len=0) for k, r in enumerate(case.requests))
    return replace(case, requests=requests, prefix_listed=None, extend_listed=None)


def validate(case: Case) -> None:
    """Raise ``CaseError`` naming the first field that breaks a rule of docs/rules.md (Terms)."""
    for problem in problems(case):
        raise problem


def is_well_formed(case: Case) -> bool:
    return next(problems(case), None) is None


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
    previous_end = -1
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
        for s, (start, end) in enumerate(item.spans):
            span_at = f"{item_at}.spans[{s}]"
            if end < start:
                yield CaseError(span_at, f"end {end} < start {start}")
            elif start < 0 or end >= request.seq_len:
                yield CaseError(span_at, f"({start}, {end}) outside [0, {request.seq_len})")
            elif start <= previous_end:
                yield CaseError(
                    span_at,
                    f"starts at {start}, not after the previous span's end {previous_end}"
                    " (spans must be disjoint and increasing)",
                )
            previous_end = max(previous_end, end)
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
