"""Items of one request, and the hashes that tie items of a batch together.

An item's rows are a pure function of ``(hash, token count)``, so hashes are
what make batches interesting: equal hashes are how an engine's cache and its
per-batch dedup get exercised. A duplicate copies an earlier item's shape (span
lengths and modality) along with its hash, rather than waiting for two random
layouts to agree; an adversarial collision reuses a hash for an item of a
different token count.

Each item starts with a kind choice (where its hash comes from) when reuse is
possible, then a shape or a source choice, then one choice per span. A
duplicate thus takes no fewer choices than a fresh item of the same span
count, and "fresh" is the kind's simplest value, so the shrinker removes
duplicates rather than preferring them.
"""

from __future__ import annotations

from typing import NamedTuple

from hypothesis.strategies import DrawFn
from mmharness.model import Span
from mmharness.strategies._internal.choices import Tape, index, integer
from mmharness.strategies._internal.spans import place_copy, place_spans

HASH_BASE_LIMIT = 1000
"""Fresh hashes are ``base + k`` with ``base`` drawn once per batch: small, distinct, cheap."""


class ItemDraft(NamedTuple):
    """An item before coverage is decided; ``precomputed`` is a batch-wide choice."""

    spans: tuple[Span, ...]
    hash: int
    modality: str

    @property
    def token_count(self) -> int:
        return sum(end - start + 1 for start, end in self.spans)


class Head(NamedTuple):
    """What the first choices of an item decided."""

    kind: str  # "fresh", "duplicate" or "collision"
    shape: int  # index into the item shapes (see ``_shape``)
    source: ItemDraft | None


class HashPool:
    """Every item drawn so far in a batch: the sources for duplicates and collisions."""

    def __init__(self, *, duplicates: bool, collisions: bool) -> None:
        self.kinds = tuple(kind for kind, on in (("duplicate", duplicates), ("collision", collisions)) if on)
        self.items: list[ItemDraft] = []
        self._base: int | None = None
        self._fresh = 0

    def fresh(self, draw: DrawFn | Tape) -> int:
        if self._base is None:
            self._base = integer(draw, 0, HASH_BASE_LIMIT)
        self._fresh += 1
        return self._base + self._fresh - 1

    def head(self, draw: DrawFn | Tape, shapes: int) -> Head:
        """Where the hash comes from (fresh half the time, when reuse is on), and a shape.

        A kind choice whose range does not depend on the pool, then a shape
        (fresh, collision) and/or a source (duplicate, collision) counted from
        the oldest item; so deleting a later item while shrinking leaves every
        other item's meaning alone.
        """
        kinds = self.kinds
        if not self.items or not kinds:
            return Head("fresh", integer(draw, 0, shapes - 1), None)
        x = integer(draw, 0, 2 * len(kinds) - 1)
        kind = "fresh" if x < len(kinds) else kinds[x - len(kinds)]
        shape = 0 if kind == "duplicate" else integer(draw, 0, shapes - 1)
        source = None if kind == "fresh" else self.items[index(draw, len(self.items))]
        return Head(kind, shape, source)

    def colliding_hash(self, source: ItemDraft, token_count: int) -> int | None:
        """A hash already used for a different token count, preferring ``source``'s."""
        if source.token_count != token_count:
            return source.hash
        for item in self.items:
            if item.token_count != token_count:
                return item.hash
        return None


SHAPES_PER_SPAN_CAP = 3
"""Item shapes per allowed span count: images and videos (twice), then audio."""


def _shape(shape: int, cap: int) -> tuple[int, str]:
    """Shapes ``0 .. 3*cap - 1``: span counts ``1..cap`` (twice each; video when > 1), then audio
    with ``1..cap`` spans (a clip interleaved with its transcript: several runs, one item)."""
    n_spans = shape % cap + 1
    if shape >= 2 * cap:
        return n_spans, "audio"
    return n_spans, "video" if n_spans > 1 else "image"


def draw_items(
    draw: DrawFn | Tape, *, count: int, max_spans: int, stop: int, pool: HashPool
) -> tuple[list[ItemDraft], int]:
    """``count`` items laid out left to right in ``[0, stop)``; returns them and where they end.

    One token is reserved for every later item, so every choice is valid as drawn.
    """
    items: list[ItemDraft] = []
    pos = 0
    for i in range(count):
        later = count - 1 - i
        cap = min(max_spans, stop - pos - later)
        kind, shape, source = pool.head(draw, SHAPES_PER_SPAN_CAP * cap)
        item = None
        if kind == "duplicate" and source is not None:
            copy = place_copy(draw, source.spans, start=pos, stop=stop, reserve=later)
            if copy is not None:
                placed, pos = copy
                item = ItemDraft(tuple(placed), source.hash, source.modality)
        if item is None:
            n_spans, modality = _shape(shape, cap)
            placed, pos = place_spans(draw, start=pos, stop=stop, count=n_spans, reserve=later)
            spans = tuple(placed)
            hash_ = None
            if kind == "collision" and source is not None:
                hash_ = pool.colliding_hash(source, sum(e - s + 1 for s, e in spans))
            item = ItemDraft(spans, pool.fresh(draw) if hash_ is None else hash_, modality)
        items.append(item)
        pool.items.append(item)
    return items, pos
