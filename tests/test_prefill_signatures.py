"""``prefill.encoder_calls`` names where unneeded encoder work lay (issue 17).

A baseline tolerates a hazard by its signature. One signature for every kind of
unneeded encoder work let a release that already shows one kind (0.5.17 encodes
items outside their windows) hide a mutant that adds another (an empty window
encoding the item straddling its start): the signature now names the item's
place relative to its request's window (``reference.place``), and for an item
encoded twice how the batch holds it. The old text stays its prefix, so notes
matching it by substring (docs/atlas-notes.json) still match.
"""

from __future__ import annotations

from typing import Any

import pytest
from mmharness import reference
from mmharness.checks import all_checks
from mmharness.checks.outcome import Hazard
from mmharness.model import Case, Item, Request
from mmharness.targets.base import Encoder
from mmharness.targets.reference import ReferenceTarget
from mmharness.targets.specs import resolve

ENCODER_CALLS = all_checks()["prefill.encoder_calls"]
OUTSIDE = "items outside every window were encoded"
TWICE = "an item was encoded more than once in one batch"


class Wasteful(ReferenceTarget):
    """The reference, which first hands ``extra`` to the encoder in a call of their own: the rows stay
    right, the work is wasted."""

    def __init__(self, *extra: Item) -> None:
        self.extra = list(extra)

    def chunked_prefill_embedding(self, case: Case, encoder: Encoder, *, cache: Any = None, path="batched"):
        encoder(self.extra)
        return super().chunked_prefill_embedding(case, encoder, cache=cache, path=path)


def one(hash_: int, *spans: tuple[int, int]) -> Item:
    return Item(tuple(spans), hash=hash_)


HEAD, TAIL = one(1, (0, 1)), one(2, (5, 6))
VIDEO = one(3, (0, 1), (6, 7))  # a window of positions 3..4 lies in its gap


def signature(target: Any, *requests: Request) -> str:
    with pytest.raises(Hazard) as raised:
        ENCODER_CALLS.property(target, Case(tuple(requests), hidden=4), {})
    return raised.value.signature


def test_the_place_of_an_item_relative_to_its_window():
    assert reference.place(Request(8, 4, 4, (HEAD,)), HEAD) == reference.BEFORE
    assert reference.place(Request(8, 0, 3, (TAIL,)), TAIL) == reference.AFTER
    assert reference.place(Request(8, 0, 2, (TAIL,)), TAIL) == reference.AFTER
    assert reference.place(Request(8, 1, 0, (HEAD,)), HEAD) == reference.EMPTY_WINDOW
    assert reference.place(Request(8, 3, 2, (VIDEO,)), VIDEO) == reference.IN_GAP
    assert reference.place(Request(8, 1, 1, (HEAD,)), HEAD) == reference.INSIDE


@pytest.mark.parametrize(
    ("requests", "extra", "place"),
    [
        ((Request(8, 4, 4, (HEAD, TAIL)),), (HEAD,), "wholly before its window: prefix-cached"),
        ((Request(8, 0, 3, (HEAD, TAIL)),), (TAIL,), "wholly after its window"),
        ((Request(8, 1, 0, (HEAD,)), Request(8, 0, 8, (TAIL,))), (HEAD,), "in an empty window"),
        ((Request(8, 3, 2, (VIDEO,)),), (VIDEO,), "its window in a gap of the item"),
        # A token count no item of the batch has (an engine that measured the item wrong).
        ((Request(8, 0, 8, (HEAD,)),), (one(1, (0, 2)),), "no item of the batch"),
        # Items in several places: the least likely, whatever the call order.
        ((Request(8, 4, 4, (HEAD,)), Request(8, 1, 0, (TAIL,))), (HEAD, TAIL), "in an empty window"),
        ((Request(8, 4, 4, (HEAD,)), Request(8, 1, 0, (TAIL,))), (TAIL, HEAD), "in an empty window"),
        # One key held in an empty window and after another window: the likelier (0.5.17 encodes a request's
        # items together, ahead of its window, and knows nothing of the other request's empty window).
        (
            (Request(8, 1, 0, (one(1, (0, 1)),)), Request(8, 0, 2, (one(1, (4, 5)),))),
            (HEAD,),
            "wholly after its window",
        ),
    ],
)
def test_unneeded_encoder_work_is_signed_by_where_the_item_lay(requests, extra, place):
    assert signature(Wasteful(*extra), *requests) == f"{OUTSIDE} ({place})"


@pytest.mark.parametrize(
    ("requests", "held"),
    [
        ((Request(8, 0, 8, (HEAD,)),), "the batch holds it once"),
        ((Request(8, 0, 8, (HEAD,)), Request(8, 0, 8, (HEAD,))), "several requests hold it"),
        ((Request(8, 0, 8, (HEAD, one(1, (4, 5)))),), "its request holds it more than once"),
    ],
)
def test_an_item_encoded_twice_is_signed_by_how_the_batch_holds_it(requests, held):
    assert signature(Wasteful(HEAD), *requests) == f"{TWICE} ({held})"


def test_the_path_stays_named_after_the_place():
    """The engine model's mutant encodes, on its per-request path, an item whose extent holds the window
    start even when the window is empty: the seeded bug of 0.5.17's `extend_seq_len >= 0`."""
    mutant = resolve("mutant:prefill_per_request_encodes_straddling")
    found = signature(mutant, Request(8, 2, 0, (one(1, (0, 3)),)), Request(8, 0, 8, (TAIL,)))
    assert found == f"{OUTSIDE} (in an empty window) on the per_request path"
