"""The boundary classes of a case: the layouts where scheduling bugs live.

A check's generator must reach each class within the CI profile, or the bug
that lives there goes unseen on some release. ``classes(case)`` names the ones
a case belongs to; ``benchmarks/boundary_classes.py`` reports, per check, the
first example of each class under the CI profile, and
``tests/test_strategies.py`` asserts that the checks reach them.
"""

from __future__ import annotations

from dataclasses import replace

from mmharness.checks.registry import Check
from mmharness.model import MODEL_DATA_KEYS, VIDEO_GRID_KEY, Case, Item, interleaves
from mmharness.runner import run_check
from mmharness.targets.base import Target

CLASSES = (
    "window starts on an item edge",
    "window ends on an item edge",
    "empty window",
    "one-token item",
    "multi-span item",
    "two items in one request",
    "a request without items before one with items",
    "3-D embeddings",
    "same hash, different token counts",
)

CONVENTION_CLASSES = {
    "a request mixing modalities": (
        "embed_mask.matches_reference",
        "prefill.matches_reference",
        "prefill.path_independent",
    ),
    "image, video and audio in one request": ("embed_mask.matches_reference", "prefill.matches_reference"),
    "a multi-run audio clip beside another modality": ("embed_mask.matches_reference",),
    "items of two modalities interleaved": ("embed_mask.matches_reference",),
    "per-request lists shorter than the batch": ("prefill.short_lists",),
    "a request with items past the lists' end": ("prefill.short_lists",),
    "an EVS-pruned video": ("embed_mask.matches_reference", "prefill.matches_reference"),
}
"""Classes of the engines' calling conventions (docs/rules.md, R3 and R3e), each with the checks whose
CI run must reach it: SGLang embeds each modality apart and reads each item's modality to do so, and
EAGLE hands per-request lists shorter than the batch, and EVS moves a pruned video's placeholders."""


SPLIT_CLASSES = (
    "video, a grid row per video",
    "numpy features",
    "list features",
    "tuple features",
    "row-aligned model data",
    "patch-aligned model data",
    "scalar model data",
    "numpy model data",
    "list or tuple model data",
    "no grid, patch data cut by num_patches",
    "precomputed embeddings",
    "grid rows differ from the spans",
    "flat grid",
    "feature rows differ from t*h*w",
    "no grid",
    "no grid, entries differ from the spans",
)
"""The forms of an item being split (two spans or more) that the R5 split checks must reach: each
form processors hand a splitter, and each layout outside the rule (docs/rules.md, R5)."""


def split_classes(item: Item) -> set[str]:
    """The ``SPLIT_CLASSES`` an item belongs to (none for an item of one span or without R5 data)."""
    if len(item.spans) < 2 or not (item.grid or item.grid_form != "rows"):
        return set()
    found = set()
    video = item.modality == "video" and item.grid_key == VIDEO_GRID_KEY
    if video and item.grid_form == "rows":
        found.add("video, a grid row per video")
    if not item.precomputed and item.feature_form != "tensor":
        found.add(f"{item.feature_form} features")
    for key, form in item.model_data:
        found.add(f"{MODEL_DATA_KEYS[key]}-aligned model data".replace("scalar-aligned", "scalar"))
        if form != "tensor":
            found.add("numpy model data" if form == "numpy" else "list or tuple model data")
    if item.precomputed:
        found.add("precomputed embeddings")
    keys = dict(item.model_data)
    if item.grid_form == "absent":
        found.add("no grid")
        if not item.precomputed and item.feature_count != len(item.spans):
            found.add("no grid, entries differ from the spans")
        if "num_patches" in keys and any(MODEL_DATA_KEYS[key] == "patch" for key in keys):
            found.add("no grid, patch data cut by num_patches")
    elif item.grid_form == "flat":
        found.add("flat grid")
    else:
        frames = sum(t for t, _, _ in item.grid)
        if len(item.spans) not in ((len(item.grid), frames) if video else (len(item.grid),)):
            found.add("grid rows differ from the spans")
        if item.feature_rows is not None and not item.precomputed:
            found.add("feature rows differ from t*h*w")
    return found


def classes(case: Case) -> set[str]:
    """The boundary classes this case belongs to (``CLASSES``, and ``SPLIT_CLASSES`` of its items)."""
    found = set()
    seen_empty = False
    for request in case.requests:
        edges = {p for item in request.items for s, e in item.spans for p in (s, e + 1)}
        if request.items and request.prefix_len in edges:
            found.add("window starts on an item edge")
        if request.items and request.prefix_len + request.extend_len in edges and request.extend_len:
            found.add("window ends on an item edge")
        if request.extend_len == 0:
            found.add("empty window")
        if any(item.token_count == 1 for item in request.items):
            found.add("one-token item")
        if any(len(item.spans) > 1 for item in request.items):
            found.add("multi-span item")
        if len(request.items) >= 2:
            found.add("two items in one request")
        if request.items and seen_empty:
            found.add("a request without items before one with items")
        seen_empty = seen_empty or not request.items
    if case.ndim == 3:
        found.add("3-D embeddings")
    counts: dict[int, set[int]] = {}
    for _, _, item in case.items():
        counts.setdefault(item.hash, set()).add(item.token_count)
    if any(len(tokens) > 1 for tokens in counts.values()):
        found.add("same hash, different token counts")
    for _, _, item in case.items():
        found |= split_classes(item)
    return found | convention_classes(case)


def convention_classes(case: Case) -> set[str]:
    """The ``CONVENTION_CLASSES`` this case belongs to."""
    found = set()
    for k, request in enumerate(case.requests):
        modalities = {item.modality for item in request.items}
        if len(modalities) > 1:
            found.add("a request mixing modalities")
            if any(i.modality == "audio" and len(i.spans) > 1 for i in request.items):
                found.add("a multi-run audio clip beside another modality")
        if interleaves(request):
            found.add("items of two modalities interleaved")
        if {"image", "video", "audio"} <= modalities:
            found.add("image, video and audio in one request")
        if k >= case.listed and request.items:
            found.add("a request with items past the lists' end")
        if any(item.frame_rows for item in request.items):
            found.add("an EVS-pruned video")
    if case.listed < len(case.requests):
        found.add("per-request lists shorter than the batch")
    return found


def drawn(check: Check, target: Target, *, profile: str = "ci") -> list[Case]:
    """The cases a run of the check draws, in order (shrinking's included, if it fails)."""
    cases: list[Case] = []

    def recorded(device: str):
        return check.examples(device).map(lambda example: cases.append(example[0]) or example)

    run_check(replace(check, examples=recorded), target, profile=profile)
    return cases


def first_seen(check: Check, target: Target, *, profile: str = "ci") -> dict[str, int]:
    """Class -> the 1-based index of the first example of that class a run of the check draws."""
    first: dict[str, int] = {}
    for index, case in enumerate(drawn(check, target, profile=profile), 1):
        for name in classes(case):
            first.setdefault(name, index)
    return first
