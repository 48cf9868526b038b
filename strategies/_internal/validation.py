"""Eager argument checks that raise ``InvalidArgument`` when a strategy is built.

Hypothesis reports a bad option where the strategy is defined, not deep inside a
failing example; these helpers give the same experience and the same message
style (``max_spans=0 must be >= 1``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from hypothesis.errors import InvalidArgument

T = TypeVar("T")


def check_int(name: str, value: object, *, min_value: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{name}={value!r} must be an int")
    if min_value is not None and value < min_value:
        raise InvalidArgument(f"{name}={value!r} must be >= {min_value}")
    return value


def check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{name}={value!r} must be True or False")
    return value


def check_order(low_name: str, low: int, high_name: str, high: int) -> None:
    if low > high:
        raise InvalidArgument(f"{low_name}={low} must be <= {high_name}={high}")


def check_choice(name: str, value: T, allowed: Sequence[T]) -> T:
    if value not in allowed:
        raise InvalidArgument(f"{name}={value!r} must be one of {', '.join(map(repr, allowed))}")
    return value


def check_subset(name: str, values: object, allowed: Sequence[T]) -> tuple[T, ...]:
    """A non-empty selection from ``allowed``, deduplicated, in the caller's order."""
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, set, frozenset)):
        raise InvalidArgument(f"{name}={values!r} must be a sequence of values, not a single value")
    if isinstance(values, (set, frozenset)):
        # Sets iterate in hash order; the allowed order keeps draws reproducible.
        chosen = tuple(v for v in allowed if v in values) + tuple(v for v in values if v not in allowed)
    else:
        chosen = tuple(dict.fromkeys(values))
    if not chosen:
        raise InvalidArgument(f"{name}={values!r} must not be empty")
    for value in chosen:
        if value not in allowed:
            raise InvalidArgument(f"{name} contains {value!r}; allowed: {', '.join(map(repr, allowed))}")
    return chosen


def check_positive_ints(name: str, values: object) -> tuple[int, ...]:
    """A non-empty, deduplicated sequence of ints >= 1 (e.g. hidden sizes)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, set, frozenset)):
        raise InvalidArgument(f"{name}={values!r} must be a sequence of ints")
    for i, value in enumerate(values):
        check_int(f"{name}[{i}]", value, min_value=1)
    unique = sorted(values) if isinstance(values, (set, frozenset)) else dict.fromkeys(values)
    chosen = tuple(unique)
    if not chosen:
        raise InvalidArgument(f"{name}={values!r} must not be empty")
    return chosen
