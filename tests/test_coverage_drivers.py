"""What the harness drives for coverage is tested, not only reached: each driver meets a seeded bug.

R3e goes through ``embed_mm_inputs`` with a stand-in model (``inputs.model``):
its image encoder in the mapping, the other modalities found as the model's
``get_<modality>_feature`` methods, all bound as a model's own are. A release
whose fallback lookup is broken then fails R3e; before, every encoder came from
the mapping and the lookup never ran.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mmharness import item_data
from mmharness.checks import all_checks
from mmharness.checks.outcome import COULD_NOT_TEST, DIVERGENCE, HAZARD
from mmharness.engines.sglang.adapter import from_path
from mmharness.engines.sglang.inputs import model as stand_in_model
from mmharness.model import Case, Item, Request
from mmharness.runner import run_check
from mmharness.targets.base import HarnessGap

SPLITTER = "sglang/srt/managers/mm_utils.py"
LOOKUP = 'embedder = getattr(multimodal_model, f"get_{modality_id}_feature", None)'
BROKEN_LOOKUP = (SPLITTER, LOOKUP, LOOKUP.replace("_feature", "_features"))
"""The model's encoder looked up by a name no model defines: a modality outside the mapping has none."""
CHECK = all_checks()["embed_mask.matches_reference"]


@pytest.mark.network
def test_the_release_passes_r3e_through_the_stand_in_model(sglang_release, seeded_copy):
    root = Path(sglang_release("0.5.23").describe()["source"])
    target = from_path(str(seeded_copy(root, [])), name="copy", release="0.5.23")
    result = run_check(CHECK, target, max_examples=40)
    assert result.status != COULD_NOT_TEST, result.reason
    # 0.5.23's known R3e divergence is EVS's (its skip tests the processor's offsets): none else.
    for finding in result.findings:
        case = finding.example[0]
        pruned = any(item.frame_rows for request in case.requests for item in request.items)
        assert finding.kind == HAZARD or pruned, (finding.signature, case)


@pytest.mark.network
def test_a_broken_encoder_lookup_fails_r3e(sglang_release, seeded_copy):
    root = Path(sglang_release("0.5.23").describe()["source"])
    target = from_path(str(seeded_copy(root, [BROKEN_LOOKUP])), name="broken", release="0.5.23-broken")
    result = run_check(CHECK, target, stop_at=(DIVERGENCE,))
    assert result.status == DIVERGENCE, result.reason
    (finding,) = result.findings
    assert "no embedding method found for Modality." in finding.failure.actual, finding.failure.actual


def test_the_stand_in_model_has_bound_encoders_and_nothing_else():
    seen = []
    model = stand_in_model({"image": seen.append, "audio": lambda items: len(items)})
    feature = model.get_image_feature
    assert feature.__name__ == "get_image_feature" and feature.__self__ is model
    feature([1])
    assert seen == [[1]] and model.get_audio_feature([1, 2]) == 2
    with pytest.raises(HarnessGap, match="the harness's stand-in model has no deepstack_visual_indexes"):
        _ = model.deepstack_visual_indexes
    assert getattr(model, "__wrapped__", None) is None


ENTRY = "                new_item.precomputed_embeddings = [item.precomputed_embeddings[i]]\n"
WRONG_ENTRY = (SPLITTER, ENTRY, ENTRY.replace("[i]]", "[0]]"))
"""Precomputed rows handed as a list, split entry by entry: every part given the first entry."""


@pytest.mark.network
@pytest.mark.parametrize("form", ["list", "tuple", "numpy", "tensor"])
def test_precomputed_rows_in_a_container_are_split_as_the_reference_says(sglang_release, seeded_copy, form):
    """Precomputed rows come in the item's container (``item_data.embedding``), as features do: in a list
    they reach the splitter's list branch, where a wrong entry is a divergence the reference shows."""
    item = Item(
        spans=((0, 0), (2, 2), (4, 4)), hash=7, precomputed=True, grid_form="absent", feature_form=form
    )
    case = Case(requests=(Request(seq_len=6, prefix_len=0, extend_len=6, items=(item,)),))
    whole = item_data.feature_item(case, item)
    expected = [item_data.view(part) for part in item_data.expected_parts(whole)]
    release = sglang_release("0.5.23")
    assert [item_data.view(part) for part in release.split_item(case, whole)] == expected
    root = Path(release.describe()["source"])
    wrong = from_path(str(seeded_copy(root, [WRONG_ENTRY])), name="wrong", release="0.5.23-wrong")
    split = [item_data.view(part) for part in wrong.split_item(case, whole)]
    assert (split == expected) is (form not in ("list", "tuple")), split
