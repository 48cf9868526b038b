"""Vision grids and the grid-carrying items of R5 (one grid row per item, and the split that gives it).

An aggregated item (N spans, N grid rows) is what a model such as Kimi-K3
rejects and what the splitter must cut into N one-row items; a one-row item
must pass untouched. Each grid row is one integer choice decoded into
``(t, h, w)``, which shrinks toward ``(1, 1, 1)``.

By default ``grid_items`` draws that founding layout only: image items, a
rank-2 grid, tensor features of ``t*h*w`` rows per grid row. Its keyword
options open every other form a processor hands the splitter (``docs/rules.md``,
R5): videos under ``video_grid_thw`` (a span per frame or per video), audio
clips and items without a grid, flat (rank-1) grids, features and model data
as numpy arrays, lists and tuples, row-aligned, patch-aligned and scalar model
data, precomputed embeddings, and layouts where the grid's rows differ from the
spans or the feature rows from the grid's ``t*h*w`` total. Each option value is
one choice, the founding layout weighted up, so every class turns up within a
few dozen examples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import DrawFn, SearchStrategy
from mmharness.model import (
    DTYPES,
    FEATURE_FORMS,
    GRID_FORMS,
    GRID_KEYS,
    MODALITIES,
    MODEL_DATA_KEYS,
    NDIMS,
    VIDEO_GRID_KEY,
    Case,
    GridRow,
    Item,
    Request,
    Span,
)
from mmharness.strategies._internal.cases import Format, check_format
from mmharness.strategies._internal.choices import index, integer, pick
from mmharness.strategies._internal.items import HASH_BASE_LIMIT
from mmharness.strategies._internal.requests import draw_window, window_points
from mmharness.strategies._internal.spans import GAP_FAVOURED, place_spans
from mmharness.strategies._internal.validation import check_bool, check_int, check_order, check_subset

LAYOUTS = ("aligned", "grid_rows_differ", "feature_rows_differ")
"""How an item's grid, spans and feature rows relate: as a processor makes them (a span per image, a
span per frame or per video; ``t*h*w`` feature rows per grid row, or one entry per image without a
grid), grid rows that match no span layout, or feature rows off the grid's ``t*h*w`` total."""


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


def grids(*, min_rows: int = 1, max_rows: int = 4, max_dim: int = 3) -> SearchStrategy[tuple[GridRow, ...]]:
    """Vision grids: ``min_rows..max_rows`` rows of ``(t, h, w)``, each in ``1..max_dim``."""
    check_int("min_rows", min_rows, min_value=0)
    check_int("max_rows", max_rows, min_value=1)
    check_order("min_rows", min_rows, "max_rows", max_rows)
    check_int("max_dim", max_dim, min_value=1)
    return _grids(min_rows, max_rows, max_dim)


def _row_bounds(aggregated: bool | None, max_rows: int, max_seq_len: int) -> tuple[int, int]:
    """The allowed span count (== grid row count in the founding layout), checked against what fits."""
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


@dataclass(frozen=True)
class _Options:
    low: int
    high: int
    max_rows: int
    max_dim: int
    stop: int
    modalities: tuple[str, ...] = ("image",)
    feature_forms: tuple[str, ...] = ("tensor",)
    grid_forms: tuple[str, ...] = ("rows",)
    layouts: tuple[str, ...] = ("aligned",)
    model_data: tuple[str, ...] = ()
    precomputed: bool = False


def _options(
    aggregated: bool | None,
    max_rows: int,
    max_dim: int,
    max_seq_len: int,
    modalities: Sequence[str],
    feature_forms: Sequence[str],
    grid_forms: Sequence[str],
    layouts: Sequence[str],
    model_data: Sequence[str],
    precomputed: bool,
) -> _Options:
    """Every option checked at once, as Hypothesis checks its own: a bad one fails where it is given."""
    low, high = _row_bounds(aggregated, max_rows, max_seq_len)
    check_int("max_dim", max_dim, min_value=1)
    modalities = check_subset("modalities", modalities, MODALITIES)
    grid_forms = check_subset("grid_forms", grid_forms, GRID_FORMS)
    if "audio" in modalities and "absent" not in grid_forms:
        raise InvalidArgument(
            f"modalities={modalities!r} holds 'audio', which carries no grid: grid_forms needs 'absent'"
        )
    keys: tuple[str, ...] = ()
    if isinstance(model_data, (str, bytes)) or not isinstance(model_data, (Sequence, set, frozenset)):
        raise InvalidArgument(f"model_data={model_data!r} must be a sequence of keys, not a single value")
    if model_data:
        keys = check_subset("model_data", model_data, tuple(MODEL_DATA_KEYS))
    return _Options(
        low,
        high,
        max_rows,
        max_dim,
        max_seq_len,
        modalities,
        check_subset("feature_forms", feature_forms, FEATURE_FORMS),
        grid_forms,
        check_subset("layouts", layouts, LAYOUTS),
        keys,
        check_bool("precomputed", precomputed),
    )


def _choose(draw: DrawFn, options: tuple[str, ...], favoured: str) -> str:
    """One of ``options`` (no draw for one), ``favoured`` twice as likely as each other one."""
    weighted = (favoured, *options) if favoured in options and len(options) > 1 else options
    return weighted[integer(draw, 0, len(weighted) - 1)]


def _one_of(draw: DrawFn, options: tuple[str, ...]) -> str:
    """One of ``options``, uniformly (no draw for one)."""
    return options[integer(draw, 0, len(options) - 1)]


def _draw_grid_item(draw: DrawFn, opts: _Options) -> tuple[Item, int]:
    # The forms first: early choices vary most between the examples a run generates. With the
    # default options none of them draws, so the founding layout's choices are what they were.
    modality = _choose(draw, opts.modalities, "image")
    grid_form = "absent" if modality == "audio" else _one_of(draw, opts.grid_forms)
    layout = _draw_layout(draw, opts.layouts)
    feature_form = _one_of(draw, opts.feature_forms)
    precomputed = opts.precomputed and modality != "audio" and integer(draw, 0, 3) == 3
    model_data = _draw_model_data(draw, opts, grid_form)
    if modality == "video" and grid_form == "rows":
        rows, count, frames = _video_layout(draw, opts, layout)
    else:
        frames = None
        count = integer(draw, opts.low, opts.high)
        rows = count
        if grid_form == "flat":
            rows = 1
        elif "grid_rows_differ" in layout:
            rows = _other_than(draw, count, opts.max_rows) or count
    if precomputed:  # one token per patch where it follows the grid: small rows, so that they fit
        grid = _fitting(_with_frames(_draw_rows(draw, rows, min(opts.max_dim, 2)), frames), opts.stop)
        lengths = _precomputed_lengths(grid, count, frames, grid_form, layout)
        spans, end = _place(draw, lengths, count, opts.stop)
    else:
        spans, end = place_spans(draw, start=0, stop=opts.stop, count=count)
        grid = _with_frames(_draw_rows(draw, rows, opts.max_dim), frames)
    grid_key = VIDEO_GRID_KEY if modality == "video" else GRID_KEYS[integer(draw, 0, len(GRID_KEYS) - 1)]
    hash_ = integer(draw, 0, HASH_BASE_LIMIT)
    feature_rows = None
    if not precomputed:
        feature_rows = _feature_rows(draw, grid, count, grid_form, layout)
    item = Item(
        spans=tuple(spans),
        hash=hash_,
        precomputed=precomputed,
        modality=modality,
        grid=grid,
        grid_key=grid_key,
        grid_form=grid_form,
        feature_form=feature_form,
        feature_rows=feature_rows,
        model_data=model_data,
    )
    return item, end


def _draw_layout(draw: DrawFn, layouts: tuple[str, ...]) -> frozenset[str]:
    """Which mismatches an item has: none (``aligned``, favoured), or one or both of the others (both
    favoured: one item then stands for two classes)."""
    allowed = [name for name in LAYOUTS[1:] if name in layouts]
    if not allowed or ("aligned" in layouts and _choose(draw, ("aligned", "differ"), "aligned") == "aligned"):
        return frozenset()
    both = frozenset(allowed)
    subsets = [both, both, frozenset(allowed[:1]), frozenset(allowed[1:])] if len(allowed) > 1 else [both]
    return subsets[integer(draw, 0, len(subsets) - 1)]


def _other_than(draw: DrawFn, count: int, max_rows: int) -> int | None:
    """A grid row count in ``1..max_rows`` other than ``count``; ``None`` if there is none."""
    choices = [n for n in range(1, max(max_rows, count + 1) + 1) if n != count]
    return choices[integer(draw, 0, len(choices) - 1)] if choices else None


def _video_layout(draw: DrawFn, opts: _Options, layout: frozenset[str]) -> tuple[int, int, list[int]]:
    """Videos (grid rows), span count and frames per video: a span per frame, or one per video; with
    ``grid_rows_differ``, a span count that is neither."""
    videos = integer(draw, 1, min(opts.max_rows, opts.high))
    frames = [integer(draw, 1, opts.max_dim) for _ in range(videos)]
    while sum(frames) > opts.stop:
        frames[frames.index(max(frames))] -= 1
    per_video = integer(draw, 0, 1) == 1 or opts.high == 1
    if opts.high == 1:  # one span: one video
        videos, frames = 1, frames[:1]
    elif opts.low == 2 and (videos if per_video else sum(frames)) < 2:  # two spans at least
        per_video, frames[0] = False, 2
    count = videos if per_video else sum(frames)
    if "grid_rows_differ" in layout:
        top = min(opts.stop, max(opts.high, sum(frames) + 1))
        others = [n for n in range(opts.low, top + 1) if n not in (videos, sum(frames))]
        if others:
            count = others[integer(draw, 0, len(others) - 1)]
    return videos, count, frames


def _with_frames(grid: tuple[GridRow, ...], frames: list[int] | None) -> tuple[GridRow, ...]:
    """A video's grid: each row's ``t`` its video's frames."""
    if frames is None:
        return grid
    return tuple((t, h, w) for t, (_, h, w) in zip(frames, grid, strict=True))


def _fitting(grid: tuple[GridRow, ...], stop: int) -> tuple[GridRow, ...]:
    """The grid, its largest rows made ``(t, 1, 1)`` (frames kept), then ``(1, 1, 1)``, until its
    patches fit in ``stop`` tokens."""
    rows = list(grid)
    while sum(t * h * w for t, h, w in rows) > stop:
        largest = max(range(len(rows)), key=lambda k: rows[k][0] * rows[k][1] * rows[k][2])
        t, h, w = rows[largest]
        rows[largest] = (t, 1, 1) if h * w > 1 else (1, 1, 1)
    return tuple(rows)


def _precomputed_lengths(
    grid: tuple[GridRow, ...], count: int, frames: list[int] | None, grid_form: str, layout: frozenset[str]
) -> list[int] | None:
    """Span lengths of a precomputed item whose rows follow the grid (a token per patch; a frame's
    span ``h*w``); one token per span without a grid; ``None`` (drawn) for the other layouts."""
    if layout or grid_form == "flat":
        return None
    if grid_form == "absent":
        return [1] * count
    if frames is not None:
        if count == sum(frames):
            return [h * w for (t, h, w) in grid for _ in range(t)]
        return [t * h * w for t, h, w in grid] if count == len(grid) else None
    return [t * h * w for t, h, w in grid] if count == len(grid) else None


def _place(draw: DrawFn, lengths: list[int] | None, count: int, stop: int) -> tuple[list[Span], int]:
    """``count`` spans of the given lengths (drawn where ``None``), with drawn gaps that fit."""
    if lengths is None or sum(lengths) > stop:
        return place_spans(draw, start=0, stop=stop, count=count)
    spans, pos = [], 0
    room = stop - sum(lengths)
    for length in lengths:
        gap = pick(draw, 0, room, GAP_FAVOURED, spread=max(1, room // len(lengths)))
        room -= gap
        spans.append((pos + gap, pos + gap + length - 1))
        pos += gap + length
    return spans, pos


def _feature_rows(
    draw: DrawFn, grid: tuple[GridRow, ...], count: int, grid_form: str, layout: frozenset[str]
) -> int | None:
    """Feature rows when not the grid's ``t*h*w`` total: one entry per span without a grid; off the
    total (one per image, one more, one fewer) with ``feature_rows_differ``."""
    patches = sum(t * h * w for t, h, w in grid)
    usual = count if grid_form == "absent" else patches
    if "feature_rows_differ" not in layout:
        return count if grid_form == "absent" else None
    others = sorted({n for n in (count, patches, patches + 1, patches - 1) if n >= 0 and n != usual})
    return others[index(draw, len(others))]


def _draw_model_data(draw: DrawFn, opts: _Options, grid_form: str) -> tuple[tuple[str, str], ...]:
    """Each allowed key present or not, each in a form; without a grid, patch-aligned data comes with
    the ``num_patches`` that cuts it (as processors give it)."""
    chosen: dict[str, str] = {}
    for key in opts.model_data:
        if integer(draw, 0, 1):
            chosen[key] = _one_of(draw, opts.feature_forms)
    patched = any(MODEL_DATA_KEYS[key] == "patch" for key in chosen)
    if grid_form == "absent" and patched and "num_patches" not in chosen:
        if "num_patches" in opts.model_data:
            chosen = {"num_patches": opts.feature_forms[0], **chosen}
        else:
            chosen = {key: form for key, form in chosen.items() if MODEL_DATA_KEYS[key] != "patch"}
    return tuple(chosen.items())


@st.composite
def _grid_items(draw: DrawFn, opts: _Options) -> Item:
    return _draw_grid_item(draw, opts)[0]


def grid_items(
    *,
    aggregated: bool | None = None,
    max_rows: int = 4,
    max_dim: int = 3,
    max_seq_len: int = 40,
    modalities: Sequence[str] = ("image",),
    feature_forms: Sequence[str] = ("tensor",),
    grid_forms: Sequence[str] = ("rows",),
    layouts: Sequence[str] = ("aligned",),
    model_data: Sequence[str] = (),
    precomputed: bool = False,
) -> SearchStrategy[Item]:
    """Items carrying a vision grid (R5), as processors hand them to a splitter.

    By default: image items with N spans and an N-row grid under
    ``image_grid_thw`` or ``grid_thws``; ``aggregated=True`` gives N >= 2 (must
    be split), ``False`` gives N == 1, ``None`` either. Spans lie inside
    ``[0, max_seq_len)``.

    ``modalities`` adds videos (under ``video_grid_thw``, a row per video, a
    span per frame or per video) and audio clips (no grid: needs ``absent`` in
    ``grid_forms``); ``grid_forms`` adds ``flat`` (one row as ``[t, h, w]``)
    and ``absent`` (the engine item carries no grid; one feature entry per
    span); ``feature_forms`` the containers of features and model data;
    ``layouts`` adds ``grid_rows_differ`` and ``feature_rows_differ``;
    ``model_data`` the ``MODEL_DATA_KEYS`` an item may carry; ``precomputed``
    items carrying precomputed embeddings instead of features. ``aggregated``
    then counts spans.
    """
    opts = _options(
        aggregated,
        max_rows,
        max_dim,
        max_seq_len,
        modalities,
        feature_forms,
        grid_forms,
        layouts,
        model_data,
        precomputed,
    )
    return _grid_items(opts)


@st.composite
def _grid_cases(draw: DrawFn, opts: _Options, fmt: Format) -> Case:
    item, end = _draw_grid_item(draw, opts)
    seq_len = end + pick(draw, 0, opts.stop - end, GAP_FAVOURED)
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
    modalities: Sequence[str] = ("image",),
    feature_forms: Sequence[str] = ("tensor",),
    grid_forms: Sequence[str] = ("rows",),
    layouts: Sequence[str] = ("aligned",),
    model_data: Sequence[str] = (),
    precomputed: bool = False,
) -> SearchStrategy[Case]:
    """One-request cases holding one ``grid_items`` item (same options), for R5 checks that need a format."""
    opts = _options(
        aggregated,
        max_rows,
        max_dim,
        max_seq_len,
        modalities,
        feature_forms,
        grid_forms,
        layouts,
        model_data,
        precomputed,
    )
    fmt = check_format(hiddens=hiddens, dtypes=dtypes, ndims=ndims, device=device)
    return _grid_cases(opts, fmt)
