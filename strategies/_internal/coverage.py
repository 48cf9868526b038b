"""Which items carry precomputed embeddings (R2's coverage).

R2 answers differently for partial coverage inside one multi-item request
(``None``, the encoder fallback) and for a fully precomputed request beside a
raw one (``NotImplementedError``), so "partial" must produce both shapes, not
just "some flag somewhere". Each request gets one choice: none, all, or a bit
pattern over its items.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis.strategies import DrawFn
from mmharness.strategies._internal.choices import integer

COVERAGES = ("any", "all", "none", "partial")
"""``coverage=`` values: "partial" means some but not all items of the case are precomputed."""

_ANY = ("none", "all", "partial")


def min_items_for(coverage: str) -> int:
    """Items a case needs before its coverage can be what was asked."""
    return 2 if coverage == "partial" else 0


def draw_coverage(draw: DrawFn, counts: Sequence[int], coverage: str) -> list[list[bool]]:
    """``precomputed`` flags for requests holding ``counts`` items; shrinks toward none."""
    total = sum(counts)
    if coverage == "any":
        coverage = _ANY[integer(draw, 0, 2 if total >= 2 else 1)]
    if coverage in ("none", "all"):
        return [[coverage == "all"] * n for n in counts]
    flags = [_request_flags(draw, n) for n in counts]
    if total >= 2:
        flat = [f for row in flags for f in row]
        if all(flat) or not any(flat):
            # Flip the last item: inside a multi-item request this is partial
            # coverage there; for a one-item request it sits beside the others.
            last = max(r for r, n in enumerate(counts) if n)
            flags[last][-1] = not flags[last][-1]
    return flags


def _request_flags(draw: DrawFn, n: int) -> list[bool]:
    if n == 0:
        return []
    # Thirds: none, all, a bit pattern (uniform patterns get their last bit flipped).
    patterns = 1 << n
    x = integer(draw, 0, 3 * patterns - 1)
    if x < 2 * patterns:
        return [x >= patterns] * n
    bits = [bool(x >> k & 1) for k in range(n)]
    if n >= 2 and (all(bits) or not any(bits)):
        bits[-1] = not bits[-1]
    return bits
