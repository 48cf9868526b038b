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
from mmharness.model import Case
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


def classes(case: Case) -> set[str]:
    """The boundary classes this case belongs to."""
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
