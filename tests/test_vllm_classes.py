"""The vLLM atlas's classes on the smallest cases a deployment can send (docs/atlas-vllm-notes.json).

Each class the atlas lists over 0.12-0.32 is vLLM's own code, not the step
driver's: 0.33.0 fixed it, so 0.33.0 passes the case, and a copy of 0.33.0 with
the earlier releases' line seeded back fails it the same way the atlas says the
earlier releases do. The cases are realistic ones, not the shrunk minima: two
images whose placeholder ranges touch (or lie one token apart), an encoder
cache of one image (vLLM's floor: its largest item), an EAGLE drafter.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mmharness import reference
from mmharness.checks import all_checks
from mmharness.checks.outcome import Failure, Hazard
from mmharness.deadline import NoProgress
from mmharness.model import Case, Item, Request

CHECKS = all_checks()
RELEASE = "0.33.0"
STUCK = f"no progress: {reference.LIVELOCK}"
LOOKAHEAD_CUT = "a step cut an item to keep a drafter's look-ahead off the next item"
EVICTED_HELD = "evicted a cache entry a live request still held"

pytestmark = pytest.mark.network

SCHEDULER = "vllm/v1/core/sched/scheduler.py"
MANAGER = "vllm/v1/core/encoder_cache_manager.py"

# 0.12-0.32: a request that cannot allocate an item stops one token before it, for the drafter.
SHIFTED_STOP = (
    SCHEDULER,
    "                if num_computed_tokens < start_pos:\n"
    "                    # We only schedule the decoder tokens just before the\n"
    "                    # encoder input. No drafter shift here: its read-ahead into\n"
    "                    # this unencoded input falls back to token embeddings.\n"
    "                    num_new_tokens = min(\n"
    "                        num_new_tokens, start_pos - num_computed_tokens\n"
    "                    )\n",
    "                if num_computed_tokens + shift_computed_tokens < start_pos:\n"
    "                    num_new_tokens = start_pos - (\n"
    "                        num_computed_tokens + shift_computed_tokens\n"
    "                    )\n",
)
# 0.26-0.32: an entry stays referenced until the request passes its end plus the drafter's look-ahead.
DEFERRED_FREE = (
    SCHEDULER,
    "                start_pos + num_tokens\n"
    "                <= request.num_computed_tokens - request.num_output_placeholders\n",
    "                start_pos + num_tokens + (1 if self.use_eagle else 0)\n"
    "                <= request.num_computed_tokens - request.num_output_placeholders\n",
)
# 0.12-0.20: a request's cached inputs are every input whose identifier is cached, and one reference per
# request and identifier (no count of the occurrences it allocated).
BY_IDENTIFIER = [
    (
        MANAGER,
        "        return self.request_cached_ids.get(request.request_id, set())\n",
        "        return {\n"
        "            i\n"
        "            for i in range(len(request.mm_features))\n"
        "            if request.mm_features[i].identifier in self.cached\n"
        "        }\n",
    ),
    (MANAGER, "        if mm_hash in self.request_hash_refs.get(req_id, ()):\n            return\n", ""),
]


def image(start: int, length: int, hash_: int) -> Item:
    return Item(((start, start + length - 1),), hash=hash_)


def one_request(*items: Item, seq_len: int) -> Case:
    return Case((Request(seq_len, 0, seq_len, items),), hidden=4)


def options(**drawn: int) -> dict[str, int]:
    """A check's drawn scheduler options (``mmharness.strategies.run_options``): zero is vLLM's default."""
    return {
        "cache_size": 0,
        "encoder_budget": 0,
        "token_budget": 0,
        "other_path": 0,
        "whole": 0,
        "drafter": 0,
    } | drawn


TOUCHING = one_request(image(1, 4, 7), image(5, 4, 8), seq_len=10)
"""Two four-token images back to back (``<image><image>`` where a range holds its delimiters)."""
ONE_APART = one_request(image(1, 4, 7), image(6, 4, 8), seq_len=11)
"""The same with one text token between them (``<image>\\n<image>``)."""
DRAFTER_ON_ONE_IMAGE_CACHE = options(drafter=1, cache_size=4)


def release(root: Path):
    from mmharness.engines.vllm import adapter

    return adapter.from_path(str(root), name="vllm", release=RELEASE)


def run(target, check_id: str, case: Case, params: dict[str, int]) -> None:
    CHECKS[check_id].property(target, case, params)


@pytest.mark.parametrize("case", [TOUCHING, ONE_APART], ids=["touching", "one apart"])
def test_a_prompt_with_two_images_and_a_drafter_finishes_its_prefill(vllm_release_dir, case):
    run(release(vllm_release_dir), "prefill.draft_lookahead", case, DRAFTER_ON_ONE_IMAGE_CACHE)


def test_stopping_one_token_before_an_image_the_cache_cannot_take_never_resumes(
    vllm_release_dir, seeded_copy
):
    """0.12-0.20: the image before holds the only cache room until the request passes its end, which the
    request, one token short of it, never does: a real livelock, not the driver's."""
    target = release(seeded_copy(vllm_release_dir, [SHIFTED_STOP]))
    with pytest.raises(NoProgress) as stuck:
        run(target, "prefill.draft_lookahead", TOUCHING, DRAFTER_ON_ONE_IMAGE_CACHE)
    assert stuck.value.signature == STUCK
    assert "request 0, waiting at position 4 of its window's end 10" in stuck.value.message
    run(target, "prefill.draft_lookahead", ONE_APART, DRAFTER_ON_ONE_IMAGE_CACHE)  # past the first: freed


def test_a_free_deferred_by_the_look_ahead_livelocks_images_one_token_apart(vllm_release_dir, seeded_copy):
    """0.26-0.32: the image before stays referenced one token longer, so one text token between the two
    images no longer frees its room."""
    target = release(seeded_copy(vllm_release_dir, [SHIFTED_STOP, DEFERRED_FREE]))
    with pytest.raises(NoProgress) as stuck:
        run(target, "prefill.draft_lookahead", ONE_APART, DRAFTER_ON_ONE_IMAGE_CACHE)
    assert "request 0, waiting at position 5 of its window's end 11" in stuck.value.message


def test_with_items_whole_a_stop_for_the_drafter_inside_the_image_before_never_resumes(
    vllm_release_dir, seeded_copy
):
    """The cache takes one of two touching images; the step stops one token before the second, inside the
    first (0.12-0.32), where the request holds the cache's only room and never moves again: the cut comes
    with the livelock, which a driver ending every request at the first empty step hid. 0.33.0 stops at
    the second image's start."""
    case = one_request(image(1, 2, 5), image(3, 2, 6), seq_len=6)
    drawn = options(whole=1, drafter=1, cache_size=2)
    run(release(vllm_release_dir), "prefill.whole_items", case, drawn)
    with pytest.raises(NoProgress) as stuck:
        run(release(seeded_copy(vllm_release_dir, [SHIFTED_STOP])), "prefill.whole_items", case, drawn)
    assert stuck.value.signature == STUCK
    assert "request 0, waiting at position 2 of its window's end 6" in stuck.value.message


def test_a_request_repeating_an_image_keeps_it_until_its_last_occurrence(vllm_release_dir, seeded_copy):
    """Request 1 sends image 2 twice; past the first it still needs the entry its drafter's look-ahead
    allocated for the second, which request 0's larger image must not evict (0.12-0.20 do)."""
    case = Case(
        (
            Request(11, 2, 3, (image(2, 1, 0), image(4, 7, 1))),
            Request(5, 3, 1, (image(0, 1, 2), Item(((1, 1), (2, 2), (3, 3)), hash=3), image(4, 1, 2))),
        ),
        hidden=4,
    )
    drawn = options(drafter=1, cache_size=7)
    run(release(vllm_release_dir), "prefill.draft_lookahead", case, drawn)
    with pytest.raises(Hazard) as evicted:
        run(release(seeded_copy(vllm_release_dir, BY_IDENTIFIER)), "prefill.draft_lookahead", case, drawn)
    assert evicted.value.signature == EVICTED_HELD


# A scheduler that never rolls a step back to keep an item whole: the token budget alone ends a step.
NO_WHOLE_ITEMS = (
    SCHEDULER,
    "                self.scheduler_config.disable_chunked_mm_input\n                and not",
    "                False\n                and not",
)


def test_a_budget_cut_one_token_before_the_next_image_is_the_whole_items_divergence(
    vllm_release_dir, seeded_copy
):
    """Text, then two touching images, a token budget of 5, items whole and a drafter. 0.33.0 rolls its
    second step back to one token before the second image, inside the first: the look-ahead hazard. A
    scheduler that keeps no item whole stops its first step there too, by the budget alone, having got
    every token it asked for: that cut is the divergence, not the hazard it happens to look like."""
    case = one_request(image(2, 4, 5), image(6, 2, 6), seq_len=8)
    drawn = options(whole=1, drafter=1, token_budget=5)
    with pytest.raises(Hazard) as cut:
        run(release(vllm_release_dir), "prefill.whole_items", case, drawn)
    assert cut.value.signature == LOOKAHEAD_CUT
    with pytest.raises(Failure) as failed:
        run(release(seeded_copy(vllm_release_dir, [NO_WHOLE_ITEMS])), "prefill.whole_items", case, drawn)
    assert not isinstance(failed.value, Hazard)
    assert failed.value.message == "a step cut an item it started, with items scheduled whole"


# 0.12-0.31: an input scheduled a second time in the same step (a duplicate) is not registered as held.
DUPLICATE_UNHELD = (
    SCHEDULER,
    "        for input_id in duplicate_input_ids:\n"
    "            self.encoder_cache_manager.check_and_update_cache(request, input_id)\n",
    "",
)


def test_an_item_repeated_within_one_step_keeps_its_entry_for_its_later_occurrence(
    vllm_release_dir, seeded_copy
):
    """Request 0 sends the same three-token audio twice back to back and its first step covers the first
    and part of the second (a duplicate in that step); request 1's image waits for the one-item cache.
    0.33.0 registers the duplicate as a holder, so the entry stays for the second occurrence's last
    token. A scheduler that does not (0.12-0.31) drops the only reference once request 0 passes the first
    occurrence, and request 1's allocation evicts the entry request 0 still needs."""
    audio = [Item(((s, s), (s + 1, s + 1), (s + 2, s + 2)), hash=0, modality="audio") for s in (0, 3)]
    case = Case((Request(6, 0, 5, tuple(audio)), Request(3, 0, 2, (image(0, 1, 1),))), hidden=4)
    drawn = options(drafter=1, cache_size=3)
    run(release(vllm_release_dir), "prefill.draft_lookahead", case, drawn)
    with pytest.raises(Hazard) as evicted:
        run(
            release(seeded_copy(vllm_release_dir, [DUPLICATE_UNHELD])), "prefill.draft_lookahead", case, drawn
        )
    assert evicted.value.signature == EVICTED_HELD
