"""The primitives every strategy here is built from: biased bounded integer choices.

Draws are the cost of the hot path (a batch takes dozens), so integer
strategies are built once per range size and kept unwrapped, which roughly
halves the cost of a draw.

Hypothesis shrinks toward fewer choices first, then smaller ones. So every
choice puts its simplest value at 0, and the strategies are laid out so that a
simpler structure never takes more choices than a complex one (otherwise the
shrinker would prefer the complex one). Hence two kinds of choice: ``integer``
skips the draw for a one-value range, for counts whose range only the options
decide; ``index``, ``pick`` and ``pick_pair`` always cost exactly one choice, for
values whose range depends on earlier values.

Every choice costs the engine the same fixed overhead whatever its range, so a
request's whole layout is read from one bytes choice through a ``Tape`` (see
``Tape``): every function here takes either a Hypothesis ``draw`` or a tape.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from hypothesis import strategies as st
from hypothesis.strategies import DrawFn, SearchStrategy

_FROM_ZERO: dict[int, SearchStrategy[int]] = {}


def _from_zero(size: int) -> SearchStrategy[int]:
    strategy = _FROM_ZERO.get(size)
    if strategy is None:
        lazy = st.integers(0, size)
        # Skip the lazy wrapper's per-draw unwrapping where this Hypothesis has one.
        strategy = _FROM_ZERO[size] = getattr(lazy, "wrapped_strategy", lazy)
    return strategy


def width(size: int) -> int:
    """Bytes a tape spends on a choice among ``size`` values (at least one)."""
    return max((max(size, 2) - 1).bit_length() + 7, 8) // 8


class Tape:
    """Choices read in order from one bytes choice; reading past its end gives zeros.

    A value among ``size`` is the next ``width(size)`` bytes scaled into
    ``[0, size)``: uniform, monotone in the bytes, and ``0`` for zero bytes, so
    the shrinker, which zeroes and lowers bytes from the left, takes every
    choice toward its simplest value, earlier choices first, as it does with
    separate choices. One choice for a whole request removes most of the
    engine's per-choice cost from the hot path.
    """

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, size: int) -> int:
        """A value in ``[0, size)``."""
        n = width(size)
        pos = self.pos
        self.pos = pos + n
        raw = int.from_bytes(self.data[pos : pos + n], "big") << 8 * max(0, pos + n - len(self.data))
        return raw * size >> 8 * n


_BLOBS: dict[int, SearchStrategy[bytes]] = {}


def draw_tape(draw: DrawFn, size: int) -> Tape:
    """A tape of ``size`` bytes, as one choice."""
    strategy = _BLOBS.get(size)
    if strategy is None:
        lazy = st.binary(min_size=size, max_size=size)
        strategy = _BLOBS[size] = getattr(lazy, "wrapped_strategy", lazy)
    return Tape(draw(strategy))


def integer(draw: DrawFn | Tape, low: int, high: int) -> int:
    """An int in ``[low, high]``, shrinking toward ``low``; no draw when they are equal."""
    if high <= low:
        return low
    if type(draw) is Tape:
        return low + draw.take(high - low + 1)
    return low + draw(_from_zero(high - low))


class Biased(NamedTuple):
    """An int in ``[low, high]``: half uniform, half one of ``favoured``, as one index.

    Index ``0`` is ``low``; indices below ``uniform`` map to ``low + i``, the
    rest spread evenly over ``favoured``. Exposed as a space (``size`` and
    ``decode``) so two of them can share one draw.
    """

    low: int
    uniform: int
    weight: int
    favoured: tuple[int, ...]

    @classmethod
    def of(cls, low: int, high: int, favoured: Sequence[int] = (), *, spread: int | None = None) -> Biased:
        """The space for ``[low, high]``.

        ``spread`` narrows the uniform half to ``[low, low + spread]``; favoured
        values may lie beyond it, but values outside ``[low, high]`` are dropped.
        """
        if high <= low:
            return cls(low, 1, 0, ())
        top = high if spread is None else min(high, low + max(spread, 0))
        chosen = tuple(v for v in favoured if low <= v <= high)
        uniform = top - low + 1
        return cls(low, uniform, max(uniform, len(chosen)) if chosen else 0, chosen)

    @property
    def size(self) -> int:
        return self.uniform + self.weight

    def decode(self, x: int) -> int:
        if x < self.uniform:
            return self.low + x
        return self.favoured[(x - self.uniform) * len(self.favoured) // self.weight]


def index(draw: DrawFn | Tape, size: int) -> int:
    """An index below ``size`` in exactly one choice, even when ``size == 1``.

    Layout values must cost one choice whatever they are: if a span that fills
    the rest of the sequence saved the draws of a forced trailing gap, the
    shrinker (fewer choices first) would prefer it to the simpler layout.
    """
    if type(draw) is Tape:
        return draw.take(max(size, 1))
    return min(draw(_from_zero(max(size - 1, 1))), size - 1)


def pick(
    draw: DrawFn | Tape, low: int, high: int, favoured: Sequence[int] = (), *, spread: int | None = None
) -> int:
    """One biased choice in ``[low, high]`` (see ``Biased``); shrinks toward ``low``."""
    space = Biased.of(low, high, favoured, spread=spread)
    return space.decode(index(draw, space.size))


def pick_pair(draw: DrawFn | Tape, first: Biased, second: Biased) -> tuple[int, int]:
    """Two biased values from one choice; shrinks toward ``(first.low, second.low)``."""
    x = index(draw, first.size * second.size)
    return first.decode(x % first.size), second.decode(x // first.size)
