"""Two input classes the engines accept (issue 17): items of different modalities interleaved (an
audio track in its video's gaps) and EVS-pruned videos (``Item.frame_rows``).

Offline: what the case model accepts and refuses, the reference's answers, the
case format, and that the strategies draw each class within the first 20
examples when asked (and never otherwise: a check asks in a branch of its own).
With the ``network`` marker: real SGLang releases serve both classes as the rules
say, releases that never receive EVS leave it out, a single-line bug in 0.5.22's
EVS handling that only the EVS class exposes, and 0.5.23's divergence on a window
between a pruned video's original spans.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from hypothesis import Phase, given, seed, settings
from mmharness import payload, reference, tensors
from mmharness import strategies as mst
from mmharness.checks import all_checks
from mmharness.checks.common import plain, unreceived
from mmharness.checks.outcome import DIVERGENCE
from mmharness.model import Case, CaseError, Item, Request, interleaves, pruned, validate
from mmharness.runner import PASSED, SKIPPED, replay, run_check
from mmharness.targets.base import Encoder, HarnessGap
from mmharness.targets.reference import ReferenceTarget
from mmharness.targets.specs import resolve

CHECKS = all_checks()

# A video of two frames with its audio track in the gap and after it (Qwen2.5-Omni's layout).
VIDEO = Item(((0, 1), (4, 5)), hash=1, modality="video")
AUDIO = Item(((2, 3), (6, 6)), hash=2, modality="audio")
OMNI = Request(8, 0, 8, (VIDEO, AUDIO))

# An EVS video: the processor's estimate one row per frame, the first frame really keeping both
# (EVS keeps the first frame whole), so the text between the frames moves right.
PRUNED = Item(((0, 0), (3, 3)), hash=3, modality="video", frame_rows=(2, 0))


def case_of(*requests: Request) -> Case:
    return Case(tuple(requests), hidden=4)


# The case model --------------------------------------------------------------------------


def test_items_of_different_modalities_may_interleave():
    validate(case_of(OMNI))
    assert interleaves(OMNI)
    assert not interleaves(Request(8, 0, 8, (Item(((0, 1),), hash=1), AUDIO)))


@pytest.mark.parametrize(
    ("items", "message"),
    [
        # A position held by two items (the words of the rule before interleaving, as findings saved).
        (
            (VIDEO, dataclasses.replace(AUDIO, spans=((1, 3),))),
            "starts at 1, not after the previous span's end 5",
        ),
        # Two items of one modality interleaved.
        ((VIDEO, dataclasses.replace(AUDIO, modality="video")), "previous video item's end 5"),
        # Items not in position order.
        ((AUDIO, VIDEO), "starts at 0, not after the previous span's end 6"),
    ],
)
def test_what_interleaving_never_allows(items, message):
    with pytest.raises(CaseError, match=message) as raised:
        validate(case_of(Request(8, 0, 8, items)))
    assert "not after" in raised.value.reason, "the malformed kinds' reason, as before"


def test_a_pruned_video_is_well_formed_and_moves_its_placeholders():
    request = Request(6, 0, 6, (PRUNED, Item(((5, 5),), hash=4)))
    validate(case_of(request))
    served = pruned(request)
    assert served.items[0].spans == ((0, 1),) and served.items[0].frame_rows == ()
    assert served.items[1] == request.items[1], "nothing outside the extent moves"


@pytest.mark.parametrize(
    ("spans", "frame_rows", "moved"),
    [  # Three layouts worked by hand: frames keep their order, the text between them its length.
        (((1, 2), (5, 7), (10, 11)), (1, 4, 2), ((1, 1), (4, 7), (10, 11))),
        (((1, 2), (7, 9)), (1, 4), ((1, 1), (6, 9))),
        (((0, 1), (4, 6)), (0, 5), ((2, 6),)),
    ],
)
def test_the_moved_layout(spans, frame_rows, moved):
    item = Item(spans, hash=1, modality="video", frame_rows=frame_rows)
    assert pruned(Request(14, 0, 14, (item,))).items[0].spans == moved


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"modality": "audio"}, "EVS prunes videos"),
        ({"precomputed": True}, "a precomputed item has none"),
        ({"frame_rows": (2,)}, "one count per frame span"),
        ({"frame_rows": (3, -1)}, "negative row count"),
        ({"frame_rows": (2, 1)}, "3 rows kept for 2 placeholders"),
    ],
)
def test_what_a_pruned_video_must_be(change, message):
    with pytest.raises(CaseError, match=message) as raised:
        validate(case_of(Request(6, 0, 6, (dataclasses.replace(PRUNED, **change),))))
    assert raised.value.path == "requests[0].items[0].frame_rows"


def test_a_pruned_video_is_its_requests_only_video_and_holds_nothing():
    other = Item(((5, 5),), hash=4, modality="video")
    with pytest.raises(CaseError, match="another video"):
        validate(case_of(Request(6, 0, 6, (PRUNED, other))))
    inside = Item(((1, 1), (2, 2)), hash=4, modality="audio")
    with pytest.raises(CaseError, match="inside the pruned video's extent"):
        validate(case_of(Request(6, 0, 6, (PRUNED, inside))))


# The reference ----------------------------------------------------------------------------


def test_the_reference_serves_each_item_its_own_rows_at_its_own_positions():
    rows = reference.window_rows(OMNI)
    assert [(row.hash, row.index) for row in rows] == [(1, 0), (1, 1), (2, 0), (2, 1), (1, 2), (1, 3), (2, 2)]
    # R1 over the whole request: the rows (item order) taken in position order.
    assert reference.request_chunk(replace_window(OMNI, 1, 5)) == ([1, 4, 5, 2, 3], 1, 6)
    spans = tuple(span for item in OMNI.items for span in item.spans)
    assert reference.request_chunk(Request(8, 1, 4, (Item(spans[:2], hash=1),))) == (
        reference.embedding_chunk(spans[:2], 1, 4)
    )


def replace_window(request: Request, prefix: int, extend: int) -> Request:
    return dataclasses.replace(request, prefix_len=prefix, extend_len=extend)


def test_the_reference_serves_the_moved_layout_of_a_pruned_video():
    case = case_of(Request(4, 1, 1, (PRUNED,)))  # a window of the text between the frames, as processed
    assert reference.embedding_mask(case) == [True], "after the move it holds the first frame's second row"
    assert [(row.hash, row.index) for row in reference.chunked_prefill_embedding(case)] == [(3, 1)]
    assert reference.count_mm_tokens(case) == 0, "the count of the processor's offsets is what it was"
    target = ReferenceTarget()
    encoder = Encoder(case)
    assert target.chunked_prefill_embedding(case, encoder).shape[0] == 1
    assert encoder.encoded == [(3, 2)]
    assert tensors.sequence_ids(PRUNED_REQUEST) == [tensors.placeholder_id(PRUNED), 7, 7, 7]


PRUNED_REQUEST = Request(4, 0, 4, (Item(((0, 0),), hash=3, modality="video"),))


# The case format --------------------------------------------------------------------------


def test_pruned_videos_need_format_1_3_and_round_trip():
    case = case_of(Request(6, 0, 6, (PRUNED,)), OMNI)
    text = payload.dumps(case)
    assert '"format": "mmharness.case/1.3"' in text and payload.loads(text) == case
    with pytest.raises(payload.PayloadError, match="frame_rows: EVS-pruned videos need format"):
        payload.loads(text.replace("mmharness.case/1.3", "mmharness.case/1.2"))
    with pytest.raises(payload.PayloadError, match=r"frame_rows\[1\]"):
        payload.loads(text.replace('"frame_rows": [2, 0]', '"frame_rows": [2, -1]'))
    assert '"format": "mmharness.case/1"' in payload.dumps(case_of(OMNI)), "interleaving needs no new format"


# The strategies ---------------------------------------------------------------------------


def classes(case: Case) -> set[str]:
    found = set()
    for request in case.requests:
        if interleaves(request):
            found.add("interleaved")
        if any(item.frame_rows for item in request.items):
            found.add("evs")
    return found


def first_seen(strategy, name: str, seed_value: int, budget: int = 20) -> int | None:
    seen: list[int] = []

    @seed(seed_value)
    @settings(max_examples=budget, database=None, phases=[Phase.generate])
    @given(strategy)
    def run(case):
        validate(case)
        seen.append(name in classes(case))

    run()
    return seen.index(True) + 1 if True in seen else None


CLASS_OPTIONS = [("interleaved", {"interleaved": True}), ("evs", {"evs": True, "min_items_total": 1})]


@pytest.mark.parametrize(("name", "options"), CLASS_OPTIONS)
@pytest.mark.parametrize("seed_value", range(8))
def test_each_class_is_drawn_within_the_first_20_examples_when_asked(name, options, seed_value):
    assert first_seen(mst.cases(**options), name, seed_value) is not None


@settings(max_examples=200, database=None, phases=[Phase.generate])
@given(mst.cases(collisions=True))
def test_neither_class_is_drawn_unless_asked(case):
    assert not classes(case)


@settings(max_examples=100, database=None)
@given(mst.cases(evs=True, interleaved=True, collisions=True))
def test_both_classes_together_are_well_formed(case):
    validate(case)
    if any(item.frame_rows for _, _, item in case.items()):
        assert len(case.requests) == 1


# Real releases ----------------------------------------------------------------------------


def with_class(check_id: str, **options):
    """The check, drawing its cases with a class turned on (what the check owners would write)."""
    check = CHECKS[check_id]
    extra = {"collisions": True} if check_id.startswith("prefill.") else {"min_items_total": 1}
    return dataclasses.replace(
        check, examples=lambda device: plain(mst.cases(device=device, **extra, **options))
    )


CLASS_CHECKS = ("embed_mask.matches_reference", "prefill.matches_reference")


@pytest.mark.network
@pytest.mark.parametrize("version", ["0.5.23", "0.5.22"])
@pytest.mark.parametrize(
    "check_id", [*CLASS_CHECKS, "chunk.matches_reference", "precomputed.matches_reference"]
)
def test_interleaved_items_are_served_as_the_rules_say(sglang_release, version, check_id):
    result = run_check(with_class(check_id, interleaved=True), sglang_release(version), max_examples=40)
    assert result.status == PASSED, (result.reason, [f.signature for f in result.findings])


@pytest.mark.network
@pytest.mark.parametrize("check_id", CLASS_CHECKS)
def test_pruned_videos_are_served_as_the_rules_say_by_0_5_22(sglang_release, check_id):
    target = sglang_release("0.5.22")
    assert target.describe()["evs_result"] == "the release's own"  # its evs_module.py (tests/test_evs.py)
    result = run_check(with_class(check_id, evs=True), target, max_examples=40)
    assert result.status == PASSED, (result.reason, [f.signature for f in result.findings])


@pytest.mark.network
@pytest.mark.parametrize(
    ("version", "why"),
    [("0.5.7", "first appears in 0.5.8"), ("0.5.8", "takes only its own VideoEVSDataItem")],
)
def test_a_release_without_evs_never_receives_a_pruned_video(sglang_release, version, why):
    """0.5.7 has no EVS; 0.5.8's asserts its own item type, which the harness does not build: both
    leave EVS cases out (no could-not-test from merely drawing them), and once a check has drawn one
    their notes say so (the fork report's "untested")."""
    target = sglang_release(version)
    case = case_of(Request(6, 0, 6, (PRUNED,)))
    assert why in target.unreceived(case)
    assert target.unreceived(case_of(OMNI)) is None
    with pytest.raises(HarnessGap, match=why):
        target.embedding_and_mask(case, Encoder(case))
    for check_id in CLASS_CHECKS:  # a replay of such a case is a skip saying why, never a pass
        result = replay(CHECKS[check_id], target, (case, {}))
        assert result.status == SKIPPED and why in result.reason and "never receives" in result.reason
    unreceived(target, case)  # what a check does when it draws one
    assert any(why in note and "drawn and left out, so untested" in note for note in target.notes())


@pytest.mark.network
def test_0_5_23_serves_text_where_a_pruned_video_moved_its_rows(sglang_release):
    """0.5.23 skips a request whose window reaches none of its multi-span items' offsets
    (mm_schedule.py, "Do not encode them for chunks ... between their spans"), but EVS has moved
    the first frame's second row into that window: the step serves it as text and the row is never
    served. 0.5.22, which has no such skip, moves the placeholders in every window."""
    case = case_of(Request(4, 1, 1, (PRUNED,)))
    rows, mask = sglang_release("0.5.23").embedding_and_mask(case, Encoder(case))
    assert mask is None and rows is None
    rows, mask = sglang_release("0.5.22").embedding_and_mask(case, Encoder(case))
    assert mask.reshape(-1).tolist() == [True] and rows.shape[0] == 1


_RECOUNT = "    if input_ids is not original_input_ids:\n"
"""0.5.22's get_embedding_and_mask: once EVS has rewritten input_ids, count the placeholders of the
moved mask, not of the processor's offsets."""


@pytest.mark.network
def test_a_stale_count_after_evs_is_found_only_by_pruned_videos(sglang_release, seeded_copy):
    root = Path(sglang_release("0.5.22").describe()["source"])
    bug = "    if input_ids is original_input_ids:\n"
    target = resolve(str(seeded_copy(root, [("sglang/srt/managers/mm_schedule.py", _RECOUNT, bug)])))
    check_id = "embed_mask.matches_reference"
    check = CHECKS[check_id]
    without = dataclasses.replace(
        check, examples=lambda device: check.examples(device).filter(lambda ex: "evs" not in classes(ex[0]))
    )
    assert run_check(without, target).status == PASSED, "the check without its EVS cases misses it"
    result = run_check(check, target, stop_at=(DIVERGENCE,))  # met at example 3, unshrunk
    assert result.status == DIVERGENCE
    assert any("maybe_assert_sum" in f.signature for f in result.findings), result.findings


class _ItemOrder(ReferenceTarget):
    """A seeded bug: the end-to-end rows of a request, item after item, not in the mask's position order
    (the same rows; where the window holds two interleaved items, the wrong row at a position)."""

    def embedding_and_mask(self, case, encoder, *, cache=None):
        embedding, mask = super().embedding_and_mask(case, encoder, cache=cache)
        if embedding is None or not any(interleaves(r) for r in case.requests):
            return embedding, mask
        rows = []
        for request in case.requests:
            window = range(request.prefix_len, request.prefix_len + request.extend_len)
            for item in request.items:
                whole = tensors.item_embedding(case, item)
                rows += [whole[k] for k, at in enumerate(item.positions()) if at in window]
        return torch.stack(rows), mask


def test_the_end_to_end_check_catches_interleaved_items_served_in_item_order():
    """embed_mask.matches_reference draws items of two modalities interleaved; rows served item after
    item rather than in position order diverge (on a saved case of that class, and on the CI run)."""
    case = Case(
        (
            Request(
                8, 0, 8, (Item(((0, 1), (3, 6)), 1, modality="video"), Item(((2, 2),), 2, modality="audio"))
            ),
        )
    )
    check = CHECKS["embed_mask.matches_reference"]
    assert run_check(check, ReferenceTarget(), profile="ci", explicit=[(case, {})]).status == PASSED
    assert (
        run_check(check, _ItemOrder(), profile="ci", explicit=[(case, {})], stop_at=(DIVERGENCE,)).status
        == DIVERGENCE
    )
    assert run_check(check, _ItemOrder(), profile="ci", stop_at=(DIVERGENCE,)).status == DIVERGENCE
