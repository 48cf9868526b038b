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
from mmharness.strategies._internal.choices import Tape, index, integer, pick
from mmharness.strategies._internal.spans import place_copy, place_spans

HASH_BASE_LIMIT = 1000
"""Fresh hashes are ``base + k`` with ``base`` drawn once per batch: small, distinct, cheap."""


class ItemDraft(NamedTuple):
    """An item before coverage is decided; ``precomputed`` is a batch-wide choice."""

    spans: tuple[Span, ...]
    hash: int
    modality: str
    frame_rows: tuple[int, ...] = ()
    """An EVS-pruned video's rows per frame (``Item.frame_rows``); equal hashes prune alike."""

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


PAIR_SHAPES = ((2, 1), (2, 2))
"""``(frames, audio runs)`` of a video with its audio track interleaved (Qwen2.5-Omni's
``use_audio_in_video``): the audio's runs in the gaps after the video's frames, so one item's spans
lie inside the other's extent (docs/rules.md, Terms)."""


def _pair_shapes(interleaved: bool, later: int, room: int) -> int:
    """How many pair shapes fit: a pair is two items (one of the ``later`` ones) and a token per run."""
    if not interleaved or later < 1:
        return 0
    return sum(1 for frames, runs in PAIR_SHAPES if frames + runs <= room)


def draw_frame_rows(draw: DrawFn | Tape, spans: tuple[Span, ...]) -> tuple[int, ...]:
    """The rows each frame of an EVS-pruned video kept: any split of its tokens over its frames.

    Each frame but the last favours the processor's estimate (its span: nothing
    moves), nothing (the frame pruned away) and everything left; the last
    frame keeps the rest. Shrinks toward every row in the last frame.
    """
    left = sum(end - start + 1 for start, end in spans)
    rows = []
    for start, end in spans[:-1]:
        kept = pick(draw, 0, left, (min(end - start + 1, left), 0, left))
        rows.append(kept)
        left -= kept
    return (*rows, left)


def _pair(
    draw: DrawFn | Tape, shape: int, pos: int, stop: int, reserve: int, pool: HashPool
) -> tuple[list[ItemDraft], int]:
    """A video and its audio track, runs alternating (frame, audio, frame, ...): two items, fresh hashes."""
    frames, runs = PAIR_SHAPES[shape]
    placed, pos = place_spans(draw, start=pos, stop=stop, count=frames + runs, reserve=reserve)
    video = ItemDraft(tuple(placed[0::2]), pool.fresh(draw), "video")
    audio = ItemDraft(tuple(placed[1::2]), pool.fresh(draw), "audio")
    return [video, audio], pos


def draw_items(
    draw: DrawFn | Tape,
    *,
    count: int,
    max_spans: int,
    stop: int,
    pool: HashPool,
    interleaved: bool = False,
    evs: bool = False,
) -> tuple[list[ItemDraft], int]:
    """``count`` items laid out in ``[0, stop)``; returns them and where they end.

    One token is reserved for every later item, so every choice is valid as drawn.
    With ``interleaved``, two items may be drawn as one: a video with its audio
    track in the gaps between its frames (``PAIR_SHAPES``). With ``evs``, a
    request's first video may be EVS-pruned (``Item.frame_rows``; half of the
    items drawn before it are); the request then has no other video (a multi-span item
    after it is an audio clip, a duplicate of a video a fresh item). Both
    kinds of shape come after every other shape.
    """
    items: list[ItemDraft] = []
    pos = 0
    while len(items) < count:
        later = count - 1 - len(items)
        cap = min(max_spans, stop - pos - later)
        one_video = evs and any(item.modality == "video" for item in items)  # an EVS request has one
        room = stop - pos - (later - 1)  # a pair is two items: its second is one of the later ones
        pairs = _pair_shapes(interleaved and max_spans >= 2 and not one_video, later, room)
        pruned = 1 if evs and cap >= 2 and not one_video else 0
        plain = SHAPES_PER_SPAN_CAP * cap
        # Each pair shape as often as a span count is (``cap`` slots), an EVS video as often as all the
        # plain shapes together (until the request has a video): the classes a caller asked for.
        kind, shape, source = pool.head(draw, plain + pairs * cap + pruned * plain)
        drawn: list[ItemDraft] = []
        if kind == "duplicate" and source is not None and not (one_video and source.modality == "video"):
            copy = place_copy(draw, source.spans, start=pos, stop=stop, reserve=later)
            if copy is not None:
                placed, pos = copy
                drawn = [ItemDraft(tuple(placed), source.hash, source.modality, source.frame_rows)]
        if not drawn and shape >= plain + pairs * cap:
            n_spans = (shape - plain - pairs * cap) % (cap - 1) + 2  # 2 .. cap frames
            placed, pos = place_spans(draw, start=pos, stop=stop, count=n_spans, reserve=later)
            spans = tuple(placed)
            drawn = [ItemDraft(spans, pool.fresh(draw), "video", draw_frame_rows(draw, spans))]
        elif not drawn and shape >= plain:
            drawn, pos = _pair(draw, (shape - plain) % pairs, pos, stop, later - 1, pool)
        if not drawn:
            n_spans, modality = _shape(shape, cap)
            if modality == "video" and one_video:
                modality = "audio"
            placed, pos = place_spans(draw, start=pos, stop=stop, count=n_spans, reserve=later)
            spans = tuple(placed)
            hash_ = None
            if kind == "collision" and source is not None:
                hash_ = pool.colliding_hash(source, sum(e - s + 1 for s, e in spans))
            drawn = [ItemDraft(spans, pool.fresh(draw) if hash_ is None else hash_, modality)]
        items.extend(drawn)
        pool.items.extend(drawn)
    return items, pos
