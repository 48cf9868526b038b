"""Vision grids and the grid-carrying image items of R5 (one grid row per item).

An aggregated item (N spans, N grid rows) is what a model such as Kimi-K3
rejects and what the splitter must cut into N one-row items; a one-row item
must pass untouched. Each grid row is one integer choice decoded into
``(t, h, w)``, which shrinks toward ``(1, 1, 1)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import DrawFn, SearchStrategy
from mmharness.model import DTYPES, GRID_KEYS, NDIMS, Case, GridRow, Item, Request
from mmharness.strategies._internal.cases import Format, check_format
from mmharness.strategies._internal.choices import integer, pick
from mmharness.strategies._internal.items import HASH_BASE_LIMIT
from mmharness.strategies._internal.requests import draw_window, window_points
from mmharness.strategies._internal.spans import GAP_FAVOURED, place_spans
from mmharness.strategies._internal.validation import check_int, check_order


def _draw_rows(draw: DrawFn, count: int, max_dim: int) -> tuple[GridRow, ...]:
    rows = []
    for _ in range(count):
        x = integer(draw, 0, max_dim**3 - 1)
        rows.append((x % max_dim + 1, x // max_dim % max_dim + 1, x // max_dim**2 + 1))
    return tuple(rows)


@st.composite
def _grids(draw: DrawFn, min_rows: int, max_rows: int, max_dim: int) -> tuple[GridRow, ...]:
    count = integer(draw, min_rows, max_rows)
    return _draw_rows(draw, count, max_dim)


def grids(
    *, min_rows: int = 1, max_rows: int = 4, max_dim: int = 3
) -> SearchStrategy[tuple[GridRow, ...]]:
    """Vision grids: ``min_rows..max_rows`` rows of ``(t, h, w)``, each in ``1..max_dim``."""
    check_int("min_rows", min_rows, min_value=0)
    check_int("max_rows", max_rows, min_value=1)
    check_order("min_rows", min_rows, "max_rows", max_rows)
    check_int("max_dim", max_dim, min_value=1)
    return _grids(min_rows, max_rows, max_dim)


def _row_bounds(aggregated: bool | None, max_rows: int, max_seq_len: int) -> tuple[int, int]:
    """The allowed grid row count (== span count), checked against what fits."""
    if aggregated is not None and not isinstance(aggregated, bool):
        raise InvalidArgument(f"aggregated={aggregated!r} must be None, True or False")
    check_int("max_rows", max_rows, min_value=1)
    check_int("max_seq_len", max_seq_len, min_value=1)
    if aggregated is False:
        return 1, 1
    low = 2 if aggregated else 1
    high = min(max_rows, max_seq_len)
    if low > high:
        raise InvalidArgument(
            f"aggregated=True needs 2 grid rows (one span each) but max_rows={max_rows}, "
            f"max_seq_len={max_seq_len}"
        )
    return low, high


def _draw_grid_item(
    draw: DrawFn, low: int, high: int, max_dim: int, stop: int
) -> tuple[Item, int]:
    count = integer(draw, low, high)
    spans, end = place_spans(draw, start=0, stop=stop, count=count)
    grid = _draw_rows(draw, count, max_dim)
    grid_key = GRID_KEYS[integer(draw, 0, len(GRID_KEYS) - 1)]
    hash_ = integer(draw, 0, HASH_BASE_LIMIT)
    item = Item(spans=tuple(spans), hash=hash_, modality="image", grid=grid, grid_key=grid_key)
    return item, end


@st.composite
def _grid_items(draw: DrawFn, low: int, high: int, max_dim: int, stop: int) -> Item:
    return _draw_grid_item(draw, low, high, max_dim, stop)[0]


def grid_items(
    *,
    aggregated: bool | None = None,
    max_rows: int = 4,
    max_dim: int = 3,
    max_seq_len: int = 40,
) -> SearchStrategy[Item]:
    """Image items with N spans and an N-row grid under ``image_grid_thw`` or ``grid_thws``.

    ``aggregated=True`` gives N >= 2 (must be split), ``False`` gives N == 1,
    ``None`` either. Spans lie inside ``[0, max_seq_len)``.
    """
    low, high = _row_bounds(aggregated, max_rows, max_seq_len)
    check_int("max_dim", max_dim, min_value=1)
    return _grid_items(low, high, max_dim, max_seq_len)


@st.composite
def _grid_cases(
    draw: DrawFn, low: int, high: int, max_dim: int, stop: int, fmt: Format
) -> Case:
    item, end = _draw_grid_item(draw, low, high, max_dim, stop)
    seq_len = end + pick(draw, 0, stop - end, GAP_FAVOURED)
    prefix, extend = draw_window(draw, seq_len, window_points(seq_len, item.spans))
    return fmt.draw_case(draw, [Request(seq_len, prefix, extend, (item,))])


def grid_cases(
    *,
    aggregated: bool | None = None,
    max_rows: int = 4,
    max_dim: int = 3,
    max_seq_len: int = 40,
    hiddens: Sequence[int] = (4, 8),
    dtypes: Sequence[str] = DTYPES,
    ndims: Sequence[int] = NDIMS,
    device: str = "cpu",
) -> SearchStrategy[Case]:
    """One-request cases holding one ``grid_items`` item, for R5 checks that need a format."""
    low, high = _row_bounds(aggregated, max_rows, max_seq_len)
    check_int("max_dim", max_dim, min_value=1)
    fmt = check_format(hiddens=hiddens, dtypes=dtypes, ndims=ndims, device=device)
    return _grid_cases(low, high, max_dim, max_seq_len, fmt)
