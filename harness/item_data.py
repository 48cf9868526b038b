"""R5's item data: the values a processor hands a splitter, in their forms, and read back as plain data.

A case names an item's forms (``Item.grid_form``, ``feature_form``,
``feature_rows``, ``model_data``, ``precomputed``); this module makes the values
(rows from ``mmharness.tensors``, so every run and device agrees) and reads any
value back as plain data (``canonical``), so a split's parts compare exactly
whatever container an engine hands them back in. A list and a tuple are one
form: SGLang's item transport decodes tuples as lists. torch and numpy are
imported on first use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from mmharness import tensors
from mmharness.model import MODEL_DATA_KEYS, Case, GridRow, Item
from mmharness.reference import OUTSIDE, WHOLE, Split, SplitPart, split_rule

if TYPE_CHECKING:
    import torch

PATCH_WIDTH = 2
"""Width of each row of ``patch_pixel_values``."""
MERGE_SIZE = 2
"""The value of the scalar ``merge_size``."""
_SALT = {key: 0xDA7A + n for n, key in enumerate(MODEL_DATA_KEYS)}


@dataclass(frozen=True)
class FeatureItem:
    """An item with the vision features an engine would carry for it (R5).

    ``features`` comes in the item's ``feature_form`` (a tensor unless it says
    otherwise; ``None`` for a precomputed item, whose rows are ``embedding``, in the same form);
    ``model_data`` is the engine item's model data beside its grid
    (``feature_item`` makes all three). It lives here, below the targets that
    take it, because this module builds it and the targets use this module.
    """

    item: Item
    features: Any
    embedding: Any = None
    model_data: Mapping[str, Any] = field(default_factory=dict)


# Making the values --------------------------------------------------------------------


def feature_item(case: Case, item: Item) -> FeatureItem:
    """The item with everything an engine item would carry for it: features (or precomputed rows) and
    model data, each in its form. Its grid a target builds itself (``grid``)."""
    values = features(case, item), embedding(case, item), model_data(case, item)
    return FeatureItem(item, values[0], embedding=values[1], model_data=values[2])


def features(case: Case, item: Item) -> Any:
    """The item's vision features in its form: ``feature_count`` rows; ``None`` for a precomputed item."""
    if item.precomputed:
        return None
    return in_form(tensors.item_features(case, item), item.feature_form)


def embedding(case: Case, item: Item) -> Any:
    """A precomputed item's rows, one per placeholder in span order, in its ``feature_form``: a 2-D
    tensor, a numpy array, or a list or tuple of row tensors (the splitters take precomputed rows in
    every container they take features in); ``None`` for an item the encoder embeds."""
    return in_form(tensors.item_rows(case, item), item.feature_form) if item.precomputed else None


def grid(item: Item) -> Any:
    """The grid as the engine item carries it: ``[N, 3]``, one row as ``[3]``, or ``None`` (absent), in
    the item's ``feature_form``: a processor that hands numpy arrays or lists hands its grid so too (the
    splitters test a grid's rank for tensors, arrays and nested sequences alike)."""
    if item.grid_form == "absent":
        return None
    import torch

    value = torch.tensor([list(row) for row in item.grid], dtype=torch.long).reshape(-1, 3)
    return in_form(value.reshape(-1) if item.grid_form == "flat" else value, item.feature_form, plain=True)


def model_data(case: Case, item: Item) -> dict[str, Any]:
    """Each model-data entry of the item, in its form (``MODEL_DATA_KEYS`` says what it lines up with)."""
    import torch

    patches = item.patch_count
    data: dict[str, Any] = {}
    for key, form in item.model_data:
        if key == "num_patches":
            value = torch.tensor([t * h * w for t, h, w in item.grid], dtype=torch.long)
        elif key == "image_sizes":
            value = torch.tensor([[h, w] for _, h, w in item.grid], dtype=torch.long).reshape(-1, 2)
        elif key == "patch_pixel_values":
            value = tensors.block(item.hash ^ _SALT[key], patches, replace(case, hidden=PATCH_WIDTH))
        elif key == "patch_newline_mask":
            value = tensors.block(item.hash ^ _SALT[key], patches, replace(case, hidden=1)).reshape(-1) > 0
        else:  # merge_size: one value for the whole item
            data[key] = _scalar(MERGE_SIZE, form)
            continue
        plain = value.dtype in (torch.long, torch.bool)
        data[key] = in_form(value, form, plain=plain)
    return data


def _scalar(value: int, form: str) -> Any:
    if form == "tensor":
        import torch

        return torch.tensor(value)
    if form == "numpy":
        import numpy as np

        return np.array(value)
    return value


def in_form(value: torch.Tensor, form: str, *, plain: bool = False) -> Any:
    """A tensor as ``form``: itself, a numpy array, or a list or tuple of its rows (row tensors, or
    Python values where ``plain``)."""
    if form == "tensor":
        return value
    if form == "numpy":
        return _numpy(value)
    rows = value.tolist() if plain else list(value.unbind(0))
    return tuple(rows) if form == "tuple" else rows


def _numpy(value: torch.Tensor) -> Any:
    import torch

    if value.dtype == torch.bfloat16:  # numpy has no bfloat16; the values are small integers, exact
        value = value.float()
    return value.detach().cpu().numpy()


# Cutting the values as the rule says ---------------------------------------------------


def take_rows(value: Any, lo: int, hi: int) -> Any:
    """Rows ``[lo, hi)`` of a value, in its form."""
    return None if value is None else value[lo:hi]


def take_entry(value: Any, k: int) -> Any:
    """Entry ``k`` of a row-aligned value, keeping its leading dimension (a sequence of one)."""
    if isinstance(value, (list, tuple)):
        return [value[k]]
    return value[k : k + 1]


def expected_parts(item: FeatureItem, rule: Split | None = None) -> list[FeatureItem]:
    """The parts R5 cuts ``item`` into (the item itself when it has one span); ``ValueError`` outside
    the rule."""
    rule = split_rule(item.item) if rule is None else rule
    if rule.kind == WHOLE:
        return [item]
    if rule.kind == OUTSIDE:
        whole = item.item
        raise ValueError(f"cannot split {len(whole.spans)} spans: {rule.layout}")
    return [_part(item, part) for part in rule.parts]


def _part(item: FeatureItem, part: SplitPart) -> FeatureItem:
    whole = item.item
    data: dict[str, Any] = {}
    for key, value in item.model_data.items():
        alignment = MODEL_DATA_KEYS.get(key, "scalar")
        if alignment == "row":
            data[key] = take_entry(value, part.index)
        elif alignment == "patch" and part.patches is not None:
            data[key] = take_rows(value, part.patches.start, part.patches.stop)
        else:
            data[key] = value
    features, rows = part.features, part.embedding
    return FeatureItem(
        part_item(whole, part),
        None if features is None else take_rows(item.features, features.start, features.stop),
        embedding=None if rows is None else take_rows(item.embedding, rows.start, rows.stop),
        model_data=data,
    )


def part_item(whole: Item, part: SplitPart) -> Item:
    """The case item a part stands for: the whole's fields, with the part's spans and grid row."""
    if part.grid_row is None:  # no grid: the part owns one entry (and its image's patch counts)
        index = part.index
        grid = (whole.grid[index],) if len(whole.grid) == len(whole.spans) else ()
        rows = None if whole.precomputed else 1
        return replace(whole, spans=part.spans, grid=grid, feature_rows=rows)
    return replace(whole, spans=part.spans, grid=(part.grid_row,), grid_form="rows", feature_rows=None)


# Reading values back -------------------------------------------------------------------


def read_grid(value: Any) -> tuple[tuple[GridRow, ...], str]:
    """An engine item's grid value back as rows and a ``GRID_FORMS`` name (``absent`` for ``None``)."""
    if value is None:
        return (), "absent"
    plain = value.tolist() if hasattr(value, "tolist") else value
    if isinstance(plain, (list, tuple)) and plain and all(isinstance(r, (list, tuple)) for r in plain):
        return tuple(tuple(int(n) for n in row) for row in plain), "rows"
    if isinstance(plain, (list, tuple)):
        return (tuple(int(n) for n in plain),), "flat"
    return ((int(plain),),), "flat"


def canonical(value: Any) -> Any:
    """A value as plain, comparable data: its kind, dtype, shape and entries (list and tuple alike)."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return ("sequence", tuple(canonical(v) for v in value))
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float, str)):
        return (type(value).__name__, value)
    kind = "tensor" if type(value).__module__.startswith("torch") else "numpy"
    if hasattr(value, "shape") and hasattr(value, "tolist"):
        dtype = str(value.dtype).removeprefix("torch.")
        plain = value.detach().cpu().tolist() if kind == "tensor" else value.tolist()
        return (kind, dtype, tuple(value.shape), plain)
    return ("object", repr(value))


def show(value: Any) -> str:
    """A short description of a value for a finding: its form, shape and dtype."""
    if value is None:
        return "None"
    if isinstance(value, (list, tuple)):
        inner = f" of {show(value[0])}" if value else ""
        return f"{type(value).__name__} of {len(value)}{inner}"
    if hasattr(value, "shape"):
        kind = "tensor" if type(value).__module__.startswith("torch") else "numpy"
        return f"{kind}{list(value.shape)} {str(value.dtype).removeprefix('torch.')}"
    return f"{type(value).__name__} {value!r}"


def view(item: FeatureItem) -> dict[str, Any]:
    """Everything a part is compared by: spans, the grid the engine item carries, and each value."""
    it = item.item
    grid_value = ((), "absent") if it.grid_form == "absent" else (it.grid, it.grid_form)
    return {
        "spans": tuple(tuple(span) for span in it.spans),
        "grid": grid_value,
        "features": canonical(item.features),
        "precomputed embeddings": canonical(item.embedding),
        **{f"model data {key!r}": canonical(value) for key, value in sorted(item.model_data.items())},
    }
