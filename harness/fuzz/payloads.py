"""Engine request payloads for the fuzzers: JSON in, Python values (tensors included) out.

A payload is a JSON object whose keys are the parser's own parameter or field
names (``image_data``, ``data_dict``...). It comes from the fuzz input in one of
two ways:

- **JSON**: the input is a UTF-8 JSON object (the seeds, libFuzzer's mutations
  that stay valid, and saved findings: a finding record is unwrapped to its
  ``payload``, so a saved finding replays as an input);
- **structured**: any other input drives ``atheris.FuzzedDataProvider`` through a
  target's generator (``Draw``), which builds a payload of the documented request
  forms. Mutations that break the JSON still explore the documented forms.

Either way the payload stays JSON-able (that is what a finding records); tensors
are written ``{"tensor": [2, 3]}`` (optionally ``"dtype": "int64"``) and
``with_tensors`` turns each such marker into a deterministic torch tensor of
that shape (values ``0, 1, 2, ...`` modulo 251). A marker over the harness's own
limits (``MAX_TENSOR_ELEMENTS``) makes the input ``OutsideLimits``: skipped,
never a finding, since the allocation would be the harness's, not the engine's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, TypeVar

from mmharness.fuzz import FINDING_FORMAT

MAX_INPUT_BYTES = 1 << 16
MAX_TENSOR_ELEMENTS = 4096
MAX_TENSOR_DIMS = 4
TENSOR_KEY = "tensor"
DTYPES = ("float32", "float16", "bfloat16", "int64", "int32", "uint8", "bool")

T = TypeVar("T")


class OutsideLimits(Exception):
    """The harness will not build this input (over its own size limits): skipped, not a finding."""


def decode_json(data: bytes) -> dict[str, Any] | None:
    """The JSON object ``data`` holds (a finding record gives its payload), else ``None``."""
    if len(data) > MAX_INPUT_BYTES or data.lstrip()[:1] != b"{":
        return None
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(document, dict):
        return None
    if document.get("format") == FINDING_FORMAT:
        inner = document.get("payload")
        return inner if isinstance(inner, dict) else None
    return document


def tensor_shape(value: Any) -> list[int] | None:
    """The shape of a ``{"tensor": [...]}`` marker, ``None`` for any other value."""
    if not isinstance(value, dict) or TENSOR_KEY not in value or not set(value) <= {TENSOR_KEY, "dtype"}:
        return None
    shape = value[TENSOR_KEY]
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        return None
    if value.get("dtype", "float32") not in DTYPES:
        return None
    return shape


def with_tensors(value: Any, depth: int = 0) -> Any:
    """``value`` with every tensor marker replaced by its tensor (lists and dicts copied)."""
    if depth > 64:
        raise OutsideLimits("nesting deeper than 64")
    shape = tensor_shape(value)
    if shape is not None:
        return _tensor(shape, value.get("dtype", "float32"))
    if isinstance(value, dict):
        return {key: with_tensors(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list):
        return [with_tensors(item, depth + 1) for item in value]
    return value


def _tensor(shape: list[int], dtype: str) -> Any:
    if len(shape) > MAX_TENSOR_DIMS or math.prod(shape) > MAX_TENSOR_ELEMENTS:
        raise OutsideLimits(f"tensor {shape} over the harness's limit of {MAX_TENSOR_ELEMENTS} elements")
    return _made(tuple(shape), dtype).clone()  # a parser may write into it


@lru_cache(maxsize=256)
def _made(shape: tuple[int, ...], dtype: str) -> Any:
    """Building a tensor costs ten times a copy, and fuzz inputs ask for the same few shapes."""
    import torch

    values = torch.arange(math.prod(shape), dtype=torch.int64) % 251
    return values.reshape(shape).to(getattr(torch, dtype))


class Draw:
    """Structured choices from fuzz bytes (``atheris.FuzzedDataProvider``), for payload generators."""

    def __init__(self, data: bytes) -> None:
        import atheris

        self._fdp = atheris.FuzzedDataProvider(data)

    def int(self, low: int, high: int) -> int:
        return self._fdp.ConsumeIntInRange(low, high)

    def flag(self) -> bool:
        return self._fdp.ConsumeBool()

    def pick(self, options: Sequence[T]) -> T:
        return options[self._fdp.ConsumeIntInRange(0, len(options) - 1)]

    def text(self, longest: int = 12) -> str:
        return self._fdp.ConsumeUnicodeNoSurrogates(self.int(0, longest))

    def tensor(self, most_dims: int = 3) -> dict[str, Any]:
        marker: dict[str, Any] = {TENSOR_KEY: [self.int(0, 6) for _ in range(self.int(0, most_dims))]}
        if self.int(0, 7) == 0:
            marker["dtype"] = self.pick(DTYPES)
        return marker

    def grid(self) -> Any:
        """A vision grid: ``[t, h, w]`` rows, sometimes as a tensor, sometimes malformed."""
        rows = [[self.int(0, 2), self.int(0, 4), self.int(0, 4)] for _ in range(self.int(0, 3))]
        return self.pick((rows, rows, {TENSOR_KEY: [len(rows), 3], "dtype": "int64"}, [], 3))

    def spans(self) -> Any:
        """Offsets: inclusive ``[start, end]`` pairs, sometimes malformed."""
        pairs = [[self.int(0, 40), self.int(0, 40)] for _ in range(self.int(0, 3))]
        return self.pick((pairs, pairs, [[1, 2, 3]], [7], {TENSOR_KEY: [len(pairs), 2], "dtype": "int64"}))

    def scalar(self) -> Any:
        """Any JSON leaf, or a small container of leaves."""
        kind = self.int(0, 7)
        if kind < len(self._LEAVES):
            return self._LEAVES[kind](self)
        if kind == 5:
            return [self.pick(self._LEAVES)(self) for _ in range(self.int(0, 3))]
        return {self.text(4): self.pick(self._LEAVES)(self)}

    _LEAVES: tuple[Callable[[Draw], Any], ...] = (
        lambda draw: None,
        lambda draw: draw.flag(),
        lambda draw: draw.int(-3, 1 << 20),
        lambda draw: draw.int(-5, 5) / 2,
        lambda draw: draw.text(),
    )
    """Each kind of JSON leaf, drawn only when chosen (drawing all five cost most of an input)."""
