"""R5 checks: the one-grid-per-item rule and the per-image split that satisfies it."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from mmharness import tensors
from mmharness.checks.common import REFERENCE
from mmharness.checks.outcome import Outcome, expect_equal, expect_same, observe, value_of
from mmharness.checks.registry import DIFFERENTIAL, METAMORPHIC, check
from mmharness.model import Case, Item, Request
from mmharness.targets.base import ONE_GRID, SPLIT, FeatureItem, Target


def _grid_cases(aggregated: bool | None, max_items: int = 1):
    """One request holding 1..max_items grid items laid out one after another."""

    def examples(device: str):
        from hypothesis import strategies as st
        from mmharness import strategies as mst

        def wrap(case: Case, more: list[Item]):
            items = list(case.requests[0].items)
            for item in more:
                shift = items[-1].spans[-1][1] + 1
                spans = tuple((start + shift, end + shift) for start, end in item.spans)
                items.append(replace(item, spans=spans, hash=item.hash + len(items)))
            seq_len = items[-1].spans[-1][1] + 1
            return replace(case, requests=(Request(seq_len, 0, seq_len, tuple(items)),)), {}

        more = st.lists(mst.grid_items(aggregated=aggregated), max_size=max_items - 1)
        return st.builds(wrap, mst.grid_cases(aggregated=aggregated, device=device), more)

    return examples


def _feature_items(case: Case) -> list[FeatureItem]:
    return [FeatureItem(item, tensors.item_features(case, item)) for item in case.requests[0].items]


def _feature_item(case: Case) -> FeatureItem:
    return _feature_items(case)[0]


def _parts(target: Target, case: Case) -> Outcome:
    """The split as comparable data: (spans, grid, features) per part."""
    outcome = observe(partial(target.split_item, case, _feature_item(case)))
    if outcome.raised:
        return outcome
    return Outcome(value=[(p.item.spans, p.item.grid, p.features) for p in outcome.value])


@check(
    "grid.one_grid_rule",
    rule="R5",
    family=DIFFERENTIAL,
    needs={ONE_GRID},
    examples=_grid_cases(None, max_items=3),
)
def one_grid_rule(target: Target, case: Case, params: dict) -> None:
    """Items of one grid row pass through; any item of another count raises the documented ValueError."""

    def features(t: Target) -> Outcome:
        return observe(partial(t.image_feature, case, _feature_items(case)))

    expect_same(case, "image feature", features(REFERENCE), features(target))


@check(
    "grid.split_matches_reference",
    rule="R5",
    family=DIFFERENTIAL,
    needs={SPLIT},
    examples=_grid_cases(None),
)
def split_matches_reference(target: Target, case: Case, params: dict) -> None:
    """The split gives one item per span, each with one grid row and its t*h*w feature rows."""
    expect_same(case, "split items", _parts(REFERENCE, case), _parts(target, case))


@check(
    "grid.split_then_encode",
    rule="R5",
    family=METAMORPHIC,
    needs={SPLIT, ONE_GRID},
    examples=_grid_cases(True),
)
def split_then_encode(target: Target, case: Case, params: dict) -> None:
    """Every split item passes the one-grid check and their features concatenate to the original."""
    whole = _feature_item(case)
    parts = value_of(observe(partial(target.split_item, case, whole)), "split", "split items")
    encoded = value_of(
        observe(partial(target.image_feature, case, parts)),
        f"image_feature on the {len(parts)} split item(s)",
        "their features",
    )
    expect_equal(case, "features of the split items", whole.features, encoded)
