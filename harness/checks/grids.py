"""R5 checks: the one-grid-per-item rule and the per-image split that satisfies it.

The split checks draw every form a processor hands the splitter (``SPLIT_BRANCHES``:
images, videos, items without a grid, and the layouts outside the rule), with
features and model data in each container and precomputed embeddings, up to
three items a request, each split on its own, and compare every value of every
part (``mmharness.item_data.view``). A failure on a
layout no processor produces (a flat grid, an image whose grid rows differ from
its spans, feature rows off the grid's ``t*h*w`` total) is a hazard.

A target may have an engine that never receives some forms (vLLM's field
configs see tensors of the model's own fields): it names why in its
``split_unreceived(item) -> str | None`` (a hook), and the check then tries the item
with tensor features and no model data, or checks nothing for it.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

from mmharness import item_data, reference, tensors
from mmharness.checks.common import REFERENCE
from mmharness.checks.outcome import (
    Failure,
    Hazard,
    Outcome,
    expect_equal,
    expect_same,
    is_clear_error,
    observe,
    raised,
    show_error,
    template,
    value_of,
)
from mmharness.checks.registry import DIFFERENTIAL, METAMORPHIC, check
from mmharness.model import FEATURE_FORMS, GRID_KEYS, MODEL_DATA_KEYS, Case, Item, Request
from mmharness.reference import EITHER, OUTSIDE, SPLIT, WHOLE, Split
from mmharness.targets.base import ONE_GRID, FeatureItem, Target
from mmharness.targets.base import SPLIT as SPLIT_CAPABILITY

_FORMS: dict[str, Any] = {
    "feature_forms": FEATURE_FORMS,
    "model_data": tuple(MODEL_DATA_KEYS),
    "precomputed": True,
}
SPLIT_BRANCHES: tuple[dict[str, Any], ...] = (
    {"modalities": ("image",), **_FORMS},
    {"modalities": ("video",), **_FORMS},
    {
        "modalities": ("image", "video", "audio"),
        "grid_forms": ("absent",),
        "layouts": ("aligned", "feature_rows_differ"),
        **_FORMS,
    },
    {
        "modalities": ("image", "video"),
        "grid_forms": ("rows", "flat"),
        "layouts": ("grid_rows_differ", "feature_rows_differ"),
        **_FORMS,
    },
    {"modalities": ("image", "video"), "layouts": ("feature_rows_differ",), **_FORMS},
)
"""The split checks' examples, one branch each (so each gets its share of the CI budget): images, a
grid row per span; videos, a span per frame or per video; items without a grid (an entry per span,
or entries that match no span: an audio clip of several runs, a video's frames without its grid);
and the layouts outside the rule: flat grids, grid rows that match no span layout, feature rows off
the grid's ``t*h*w`` total (with the grid rows off too, or alone)."""


def _grid_cases(aggregated: bool | None, max_items: int = 1):
    """One request holding 1..max_items grid items laid out one after another."""

    def examples(device: str):
        from hypothesis import strategies as st
        from mmharness import strategies as mst

        def wrap(case: Case, more: list[Item]):
            items = case.requests[0].items
            whole = Request(items[-1].spans[-1][1] + 1, 0, items[-1].spans[-1][1] + 1, items)
            return _laid_out(replace(case, requests=(whole,)), more), {}

        more = st.lists(mst.grid_items(aggregated=aggregated), max_size=max_items - 1)
        return st.builds(wrap, mst.grid_cases(aggregated=aggregated, device=device), more)

    return examples


def _split_cases(aggregated: bool | None, *, images: int = 1, max_items: int = 3):
    """One request of 1..max_items items laid out one after another, each from a ``SPLIT_BRANCHES``
    branch (the images' branch ``images`` times as likely as each other), each split on its own.
    With ``aggregated=None`` only the images' branch draws items of one span too (each must pass
    untouched): the others spend the budget on items a splitter cuts."""

    def examples(device: str):
        from hypothesis import strategies as st
        from mmharness import strategies as mst

        table = [0] * images + list(range(1, len(SPLIT_BRANCHES)))
        branches = [
            mst.grid_items(aggregated=aggregated if k == 0 else True, **options)
            for k, options in enumerate(SPLIT_BRANCHES)
        ]

        @st.composite
        def item(draw: Any) -> Item:
            return draw(branches[table[draw(st.integers(0, len(table) - 1))]])

        @st.composite
        def one(draw: Any) -> tuple[Case, dict]:
            # The format (hidden size, dtype, device) from a case of one token, its item replaced.
            case = draw(mst.grid_cases(aggregated=False, max_seq_len=1, device=device))
            items = draw(st.lists(item(), min_size=1, max_size=max_items))
            first = items[0]
            end = first.spans[-1][1] + 1
            case = replace(case, requests=(Request(end, 0, end, (first,)),))
            return _laid_out(case, items[1:]), {}

        return one()

    return examples


def _laid_out(case: Case, more: list[Item]) -> Case:
    """The case's request with ``more`` items after its own, each starting where the last ended."""
    items = list(case.requests[0].items)
    for item in more:
        shift = items[-1].spans[-1][1] + 1
        spans = tuple((start + shift, end + shift) for start, end in item.spans)
        items.append(replace(item, spans=spans, hash=item.hash + len(items)))
    if not more:
        return case
    seq_len = items[-1].spans[-1][1] + 1
    return replace(case, requests=(Request(seq_len, 0, seq_len, tuple(items)),))


def _feature_items(case: Case) -> list[FeatureItem]:
    return [FeatureItem(item, tensors.item_features(case, item)) for item in case.requests[0].items]


def _received(target: Target, case: Case, item: Item) -> tuple[Case, Item] | None:
    """The item in a form the target's engine receives (and its case): as drawn, with tensor features
    and no model data, or ``None`` (nothing to check) where it receives neither (``split_unreceived``)."""
    if target.split_unreceived(item) is None:
        return case, item
    plain = replace(item, feature_form="tensor", model_data=())
    if target.split_unreceived(plain) is not None:
        return None
    items = tuple(plain if other is item else other for other in case.requests[0].items)
    return replace(case, requests=(replace(case.requests[0], items=items),)), plain


def _each_received(target: Target, case: Case) -> list[tuple[Case, Item]]:
    """Every item of the request the target's engine receives, each with its case."""
    found = (_received(target, case, item) for item in case.requests[0].items)
    return [pair for pair in found if pair is not None]


def _kind(item: Item) -> type[Failure]:
    """A divergence on a layout processors produce; a hazard on any other (docs/rules.md, R5)."""
    return Failure if reference.split_from_processors(item) else Hazard


def _signature(kind: type[Failure], rule: Split, item: Item, text: str) -> str:
    """A hazard's signature names its layout outside the rule; a divergence's names the form of item it
    failed on (layout and grid key): the same way of failing on another form is another bug, and a
    baseline holding one (0.5.7..0.5.22 leave Kimi-keyed images whole) must not hide the other (a
    splitter that no longer cuts any image)."""
    if kind is not Failure:
        return f"not from a processor ({template(rule.layout)}): {template(text)}"
    key = f"; {item.grid_key}" if item.grid_form != "absent" else ""
    return f"{template(text)} ({template(rule.layout)}{key})"


def _split(target: Target, case: Case, item: Item) -> tuple[FeatureItem, Split, Outcome]:
    whole = item_data.feature_item(case, item)
    return whole, reference.split_rule(item), observe(partial(target.split_item, case, whole))


def _is_whole(parts: list[FeatureItem], whole: FeatureItem) -> bool:
    return len(parts) == 1 and item_data.view(parts[0]) == item_data.view(whole)


def _judge(case: Case, whole: FeatureItem, rule: Split, outcome: Outcome) -> list[FeatureItem] | None:
    """The target's parts held to the rule: exactly its parts, the item whole where the rule allows,
    or a clear refusal of an item outside it. Returns the parts (``None`` after a refusal)."""
    kind = _kind(whole.item)
    if outcome.raised:
        if rule.kind == OUTSIDE and is_clear_error(outcome.error):
            return None
        expected = "a clear refusal or the item whole" if rule.kind == OUTSIDE else f"{len(rule.parts)} parts"
        raise kind(
            f"split raised on {rule.layout}",
            expected=expected,
            actual=show_error(outcome.error),
            signature=_signature(kind, rule, whole.item, f"split: {raised(outcome.error)}"),
        )
    parts = list(outcome.value)
    if rule.kind in (WHOLE, EITHER, OUTSIDE) and _is_whole(parts, whole):
        return parts
    if rule.kind == OUTSIDE:
        raise kind(
            f"split cut an item the rule leaves whole ({rule.layout}) into {len(parts)} part(s)",
            expected="the item whole, or a clear refusal",
            actual=_describe(parts),
            signature=_signature(kind, rule, whole.item, "split: cut an item the rule leaves whole"),
        )
    if rule.kind == SPLIT and len(rule.parts) > 1 and _is_whole(parts, whole):
        raise kind(  # the signature of "fewer parts", which baselines and docs/atlas.md know it by
            f"split left whole an item the rule cuts into {len(rule.parts)} parts ({rule.layout})",
            expected=f"{len(rule.parts)} parts",
            actual="the item whole",
            signature=_signature(kind, rule, whole.item, "split items: fewer entries"),
        )
    _compare_parts(kind, rule, whole.item, item_data.expected_parts(whole, rule), parts)
    return parts


def _describe(parts: list[FeatureItem]) -> str:
    return "; ".join(
        f"spans {list(p.item.spans)}, grid {list(p.item.grid)}, features {item_data.show(p.features)}"
        for p in parts
    )


def _compare_parts(
    kind: type[Failure], rule: Split, item: Item, expected: list[FeatureItem], actual: list[FeatureItem]
) -> None:
    if len(actual) != len(expected):
        fewer = "fewer" if len(actual) < len(expected) else "more"
        raise kind(
            f"split gave {len(actual)} parts instead of {len(expected)} ({rule.layout})",
            expected=_describe(expected),
            actual=_describe(actual),
            signature=_signature(kind, rule, item, f"split items: {fewer} entries"),
        )
    for k, (want, got) in enumerate(zip(expected, actual, strict=True)):
        wanted, seen = item_data.view(want), item_data.view(got)
        if wanted.keys() != seen.keys():
            raise kind(
                f"split part {k}: other model data keys",
                expected=", ".join(sorted(wanted)),
                actual=", ".join(sorted(seen)),
                signature=_signature(kind, rule, item, "split: a part's model data keys differ"),
            )
        for field, value in wanted.items():
            if seen[field] != value:
                how = _difference(value, seen[field])
                raise kind(
                    f"split part {k}: {field}: {how} ({rule.layout})",
                    expected=_shown(field, want, value),
                    actual=_shown(field, got, seen[field]),
                    signature=_signature(kind, rule, item, f"split: a part's {field}: {how}"),
                )


def _shown(field: str, part: FeatureItem, canonical: Any) -> str:
    if field == "features":
        return item_data.show(part.features)
    if field == "precomputed embeddings":
        return item_data.show(part.embedding)
    if field.startswith("model data "):
        key = field.removeprefix("model data ")[1:-1]
        return item_data.show(part.model_data.get(key))
    return repr(canonical)


def _difference(expected: Any, actual: Any) -> str:
    """How two canonical values differ, as a kind for signatures."""
    if not (isinstance(expected, tuple) and isinstance(actual, tuple)) or not expected or not actual:
        return "missing" if actual is None else "unexpected" if expected is None else "differ"
    if expected[0] != actual[0]:
        return f"{actual[0]} instead of {expected[0]}"
    if expected[0] in ("tensor", "numpy"):
        if expected[1] != actual[1]:
            return "wrong dtype"
        if expected[2] != actual[2]:
            if len(expected[2]) != len(actual[2]):
                return f"{len(actual[2])}-D instead of {len(expected[2])}-D"
            if expected[2][:1] != actual[2][:1]:
                return "fewer rows" if actual[2][0] < expected[2][0] else "more rows"
            return "wrong shape"
        return "other values"
    if expected[0] == "sequence" and len(expected[1]) != len(actual[1]):
        return "fewer entries" if len(actual[1]) < len(expected[1]) else "more entries"
    return "other values"


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
    needs={SPLIT_CAPABILITY},
    examples=_split_cases(None),
)
def split_matches_reference(target: Target, case: Case, params: dict) -> None:
    """The split gives each grid row's spans, grid row and rows of every value, in its form (R5)."""
    for received, item in _each_received(target, case):
        _judge(received, *_split(target, received, item))


@check(
    "grid.split_then_encode",
    rule="R5",
    family=METAMORPHIC,
    needs={SPLIT_CAPABILITY, ONE_GRID},
    examples=_split_cases(True, images=2),  # the one-grid model encodes image parts only
)
def split_then_encode(target: Target, case: Case, params: dict) -> None:
    """The parts hold every value of the item, none lost or repeated; image parts pass the one-grid check."""
    for received, item in _each_received(target, case):
        _split_then_encode(target, received, item)


def _split_then_encode(target: Target, case: Case, item: Item) -> None:
    whole, rule, outcome = _split(target, case, item)
    if outcome.raised:
        _judge(case, whole, rule, outcome)  # a clear refusal of an item outside the rule passes
        return
    parts = list(outcome.value)
    _expect_lossless(_kind(item), rule, whole, parts)
    one_grid = item.modality == "image" and item.grid_key in GRID_KEYS and item.grid_form == "rows"
    if rule.kind == SPLIT and one_grid and not item.precomputed:
        # The one-grid model takes tensors (its processor makes them): each part's features and grid as one.
        tensors_only = [
            replace(
                part, item=replace(part.item, feature_form="tensor"), features=_as_tensor(part.features, case)
            )
            for part in parts
        ]
        encoded = value_of(
            observe(partial(target.image_feature, case, tensors_only)),
            f"image_feature on the {len(parts)} split item(s)",
            "their features",
        )
        expect_equal(case, "features of the split items", _as_tensor(whole.features, case), encoded)


def _as_tensor(value: Any, case: Case) -> Any:
    """Features in any form as a tensor of their rows, in the case's dtype and on its device."""
    import torch

    if value is None or isinstance(value, torch.Tensor):
        return value
    dtype = getattr(torch, case.dtype)
    if isinstance(value, (list, tuple)):
        rows = list(value)
        return torch.stack(rows) if rows else torch.empty(0, case.hidden, dtype=dtype, device=case.device)
    return torch.from_numpy(value).to(dtype=dtype, device=case.device)


def _expect_lossless(kind: type[Failure], rule: Split, whole: FeatureItem, parts: list[FeatureItem]) -> None:
    """Joined in order, the parts give back the item's spans, grid rows and every value."""
    joined = {
        "spans": tuple(span for part in parts for span in part.item.spans),
        "features": _joined([part.features for part in parts]),
        "precomputed embeddings": _joined([part.embedding for part in parts]),
    }
    original: dict[str, Any] = {
        "spans": whole.item.spans,
        "features": item_data.canonical(whole.features),
        "precomputed embeddings": item_data.canonical(whole.embedding),
    }
    if whole.item.grid_form == "rows":
        joined["grid rows"] = tuple(row for part in parts for row in part.item.grid)
        original["grid rows"] = whole.item.grid
    for key, value in whole.model_data.items():
        field = f"model data {key!r}"
        values = [part.model_data.get(key) for part in parts]
        if MODEL_DATA_KEYS.get(key, "scalar") == "scalar":  # every part carries it
            joined[field] = {item_data.canonical(v) for v in values} if values else set()
            original[field] = {item_data.canonical(value)}
        else:
            joined[field] = _joined(values)
            original[field] = item_data.canonical(value)
    for field, value in original.items():
        if joined[field] != value:
            raise kind(
                f"the split lost or repeated the item's {field} ({rule.layout})",
                expected=f"{field} of the item, once",
                actual=f"joined from {len(parts)} part(s): {_short(joined[field])}",
                signature=_signature(kind, rule, whole.item, f"split not lossless: {field}"),
            )


def _joined(values: list[Any]) -> Any:
    """The parts' values of one field joined along their first dimension, as plain data."""
    if all(v is None for v in values):
        return None
    if any(v is None for v in values):
        return ("missing in some parts",)
    if all(isinstance(v, (list, tuple)) for v in values):
        return ("sequence", tuple(item_data.canonical(e) for v in values for e in v))
    canon = [item_data.canonical(v) for v in values]
    if len({(c[0], c[1], c[2][1:]) if c[0] in ("tensor", "numpy") else c[0] for c in canon}) != 1:
        return ("mixed forms", tuple(canon))
    kind, dtype, shape, _ = canon[0]
    rows = [row for c in canon for row in (c[3] if len(c[2]) else [c[3]])]
    return (kind, dtype, (len(rows), *shape[1:]), rows)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."
