"""R3 checks: the encoder path of chunked prefill, against the reference and against itself.

The metamorphic checks need no reference: a result must not depend on the cache
(cold, warm, tiny, zero, evicting), the path, the encoder's output form, the
prefill schedule, or the order of requests in the batch.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

from mmharness import reference
from mmharness.checks.common import (
    REFERENCE,
    blocks_in_order,
    hazard_on_collision,
    permute,
    permuted,
    plain,
    scheduled,
    unreceived,
    windows,
    with_window,
)
from mmharness.checks.outcome import Hazard, Outcome, expect_same, is_clear_error, observe, value_of
from mmharness.checks.registry import DIFFERENTIAL, HAZARD, METAMORPHIC, check
from mmharness.model import Case, listed_windows
from mmharness.targets.base import COUNT, PREFILL, SHORT_LISTS, UNLIMITED_CACHE, Encoder, Target, paths_of


def collision_cases(device: str):
    """Batches whose hashes may collide. Of the checks drawing these, only ``prefill.matches_reference``
    also draws EVS-pruned videos (``reference_cases``). ``prefill.encoder_calls`` cannot: it judges what
    may be encoded by the items' processor positions (``reference.items_in_windows``), which EVS moves,
    so it would call the reference itself a hazard for encoding a video whose moved rows are in the
    window. ``prefill.cache_independent`` and ``prefill.path_independent`` could (EVS cases pass them on
    the reference, 0.5.22 and 0.5.23 without its skip) but compare the engine with itself, where a wrong
    EVS layout is the same on every cache and path (0.5.23's skip passes them); a branch of their own
    would halve the collision cases they draw for the hazards they exist to find. ``prefill.permutation``
    and ``prefill.short_lists`` need several requests, and a pruned video comes in a one-request batch
    (EVS rewrites one request's ``input_ids``). ``prefill.schedule_concat`` could see a chunk between a
    pruned video's spans served as text, which ``prefill.matches_reference`` finds against the
    reference in the same run; its draws stay as they were."""
    from mmharness import strategies as mst

    return plain(mst.cases(collisions=True, device=device))


def reference_cases(device: str):
    """``collision_cases``, and as a branch of its own one-request batches with an EVS-pruned video (R3:
    the rows each frame kept, served where EVS moved them), so those come early. Only a one-request
    batch holds one (EVS moves that request's placeholders), so the branch draws no other."""
    from hypothesis import strategies as st
    from mmharness import strategies as mst

    pruned = mst.cases(
        min_requests=1, max_requests=1, min_items_total=1, collisions=True, evs=True, device=device
    )
    return st.one_of(collision_cases(device), plain(pruned))


def run(
    target: Target,
    case: Case,
    *,
    cache: Any = None,
    form: str = "tensor",
    path: str | None = None,
) -> tuple[Outcome, Encoder]:
    """One ``chunked_prefill_embedding`` call with a fresh recording encoder (and cache unless given), on
    ``path`` (one of the target's own ``paths``; its default unless given)."""
    encoder = Encoder(case, form)
    if cache is None:
        cache = target.new_cache(UNLIMITED_CACHE)
    chosen = paths_of(target)[0] if path is None else path
    call = partial(target.chunked_prefill_embedding, case, encoder, cache=cache, path=chosen)
    return observe(call), encoder


@check(
    "prefill.matches_reference",
    rule="R3",
    family=DIFFERENTIAL,
    needs={PREFILL},
    examples=reference_cases,
    sweeps=True,
)
@hazard_on_collision
def matches_reference(target: Target, case: Case, params: dict) -> None:
    """The encoder path's rows equal the reference's; a hash collision may instead raise a clear error.
    A case the target never receives (``unreceived``) is left out."""
    if unreceived(target, case) is not None:
        return
    actual = run(target, case)[0]
    if refused_collision(case, actual):
        return
    same(case, "chunked prefill embedding", run(REFERENCE, case)[0], actual)


def same(case: Case, what: str, expected: Outcome, actual: Outcome) -> None:
    """R3's comparison: ``None`` and an empty tensor are one answer (the caller treats both as no rows)."""
    expect_same(case, what, expected, actual, none_is_empty=True)


def refused_collision(case: Case, outcome: Outcome, *, anywhere: bool = False) -> bool:
    """R3 lets a target refuse equal hashes with different token counts, if it says so clearly.

    The items that count are those whose extent (first to last position) meets
    a window: an engine that schedules whole placeholder ranges sees a
    multi-span item whose gap holds the window. ``anywhere``: any item of the
    batch counts (an engine option that looks past the windows).
    """
    collides = reference.has_any_collision(case) if anywhere else reference.has_collision(case, extent=True)
    return outcome.raised and is_clear_error(outcome.error) and collides


@check(
    "prefill.encoder_calls",
    rule="R3",
    family=HAZARD,
    needs={PREFILL},
    examples=collision_cases,
    sweeps=True,
)
@hazard_on_collision
def encoder_calls(target: Target, case: Case, params: dict) -> None:
    """On every path, only items inside a window are encoded, each ``(hash, token count)`` once per batch.

    Encoder work a window did not need gives the right rows, late or twice: a
    hazard (the cost is the user's), never a divergence. A path other than the
    default is named in the hazard: each path has its own encoding loop.
    """
    allowed = reference.items_in_windows(case)
    default, *others = paths_of(target)
    for path in (default, *others):
        outcome, encoder = run(target, case, path=path)
        if refused_collision(case, outcome):
            return
        if path != default and outcome.raised:
            continue  # another path's refusal is prefill.path_independent's to judge
        value_of(outcome, "chunked prefill", "a tensor or None")
        where = "" if path == default else f" on the {path} path"
        outside = [key for key in encoder.encoded if key not in allowed]
        if outside:
            raise Hazard(
                f"items outside every window were encoded ({_outside_place(case, outside)}){where}",
                expected=f"only (hash, tokens) in {sorted(allowed)}",
                actual=f"also {outside}",
            )
        repeated = sorted({key for key in encoder.encoded if encoder.encoded.count(key) > 1})
        if repeated:
            raise Hazard(
                f"an item was encoded more than once in one batch ({_held(case, repeated)}){where}",
                expected="each (hash, tokens) once",
                actual=f"{repeated} in calls {encoder.calls}",
            )


NOT_IN_BATCH = "no item of the batch"
_PLACE_NAMES = {  # from the likeliest reason to encode an item no window needs to the least likely
    reference.IN_GAP: "its window in a gap of the item",  # an engine scheduling placeholder ranges
    reference.AFTER: "wholly after its window",  # a request's items encoded together, ahead of time
    reference.BEFORE: "wholly before its window: prefix-cached",
    reference.EMPTY_WINDOW: "in an empty window",  # a request that prefills nothing this step
}
OUTSIDE_PLACES = (*_PLACE_NAMES.values(), NOT_IN_BATCH)
"""How ``prefill.encoder_calls`` names where an unneeded item lay, likeliest first (last: an encoded key
no item of the batch has, an engine that measured an item wrong)."""


def _outside_place(case: Case, keys: list[tuple[int, int]]) -> str:
    """Where the encoded items no window needed lay (``reference.place``), for the hazard's signature:
    each place is its own way of failing, so a baseline holding one (0.5.17 encodes items after and
    before their windows) does not hide another (a request with an empty window encoded). A key several
    items share is named by its likeliest place in ``OUTSIDE_PLACES`` (the engine may have encoded it for
    any of them), and a case by its least likely key: the new way of failing, where there is one."""

    def likeliest(key: tuple[int, int]) -> int:
        held = [(r, item) for r in case.requests for item in r.items if (item.hash, item.token_count) == key]
        names = [_PLACE_NAMES[reference.place(r, item)] for r, item in held] or [NOT_IN_BATCH]
        return min(OUTSIDE_PLACES.index(name) for name in names)

    return OUTSIDE_PLACES[max(map(likeliest, set(keys)))]


def _held(case: Case, keys: list[tuple[int, int]]) -> str:
    """How the batch holds the items encoded more than once, for the hazard's signature: encoding twice
    an item held once (two encoder calls for one item) is another bug than not sharing one between the
    requests (or the item repeated within its request) that hold it. Several: the first in that order."""
    holders = [[r for r, _, item in case.items() if (item.hash, item.token_count) == key] for key in keys]
    if any(len(h) == 1 for h in holders):
        return "the batch holds it once"
    if any(len(set(h)) < len(h) for h in holders):
        return "its request holds it more than once"
    return "several requests hold it"


def _whole_windows(case: Case) -> Case:
    return replace(
        case, requests=tuple(replace(r, prefix_len=0, extend_len=r.seq_len) for r in case.requests)
    )


@check(
    "prefill.cache_independent",
    rule="R3",
    family=METAMORPHIC,
    needs={PREFILL},
    examples=collision_cases,
    sweeps=True,
)
@hazard_on_collision
def cache_independent(target: Target, case: Case, params: dict) -> None:
    """Cold, warm, tiny, zero-size and evicting caches all give the cold cache's result."""
    cold = run(target, case)[0]
    if refused_collision(_whole_windows(case), cold):  # then each item's own rows are allowed too
        cold = run(REFERENCE, case)[0]
    total_rows = sum(item.token_count for _, _, item in case.items())
    for name, size in (
        ("warm", UNLIMITED_CACHE),
        ("tiny", 2 * case.row_bytes),
        ("zero", 0),
        ("evicting", total_rows * case.row_bytes // 2),
    ):
        cache = target.new_cache(size)
        run(target, _whole_windows(case), cache=cache)
        run(target, case, cache=cache)
        actual = run(target, case, cache=cache)[0]
        if refused_collision(_whole_windows(case), actual):
            continue  # the cache holds the other token count of a hash: refusing is allowed
        same(case, f"{name} cache (size {size}) vs cold", cold, actual)


@check(
    "prefill.path_independent",
    rule="R3",
    family=METAMORPHIC,
    needs={PREFILL},
    examples=collision_cases,
    sweeps=True,
)
@hazard_on_collision
def path_independent(target: Target, case: Case, params: dict) -> None:
    """Every other path and a list-per-item encoder give the default path's tensor-encoder result."""
    default, *others = paths_of(target)
    first = run(target, case, path=default)[0]
    same(case, "list-form encoder vs tensor-form", first, run(target, case, form="list", path=default)[0])
    for path in others:
        for form in ("tensor", "list"):
            same(
                case,
                f"{path.replace('_', '-')} path ({form} encoder) vs {default}",
                first,
                run(target, case, form=form, path=path)[0],
            )


@check(
    "prefill.schedule_concat",
    rule="R3",
    family=METAMORPHIC,
    needs={PREFILL},
    examples=scheduled,
    params=("schedule",),
)
def schedule_concat(target: Target, case: Case, params: dict) -> None:
    """Prefilling chunk by chunk on one cache gives, concatenated, the single-chunk result."""
    import torch

    whole = run(target, with_window(case, 0, 0, case.requests[0].seq_len))[0]
    cache = target.new_cache(UNLIMITED_CACHE)
    pieces = []
    for prefix_len, extend_len in windows(params["schedule"]):
        piece = run(target, with_window(case, 0, prefix_len, extend_len), cache=cache)[0]
        rows = value_of(piece, f"chunk at window ({prefix_len}, {extend_len})", "a tensor or None")
        if rows is not None:
            pieces.append(rows)
    joined = Outcome(value=torch.cat(pieces) if pieces else None)
    same(case, f"chunks of schedule {params['schedule']} vs one chunk", whole, joined)


@check(
    "prefill.permutation",
    rule="R3",
    family=METAMORPHIC,
    needs={PREFILL},
    examples=lambda device: permuted(device, "none"),
    params=("permutation",),
)
def permutation(target: Target, case: Case, params: dict) -> None:
    """A batch's result is its requests' results, in request order, whatever that order."""
    order = params["permutation"]

    def call(batch: Case) -> Outcome:
        return run(target, batch)[0]

    same(case, f"requests in order {order}", blocks_in_order(call, case, order), call(permute(case, order)))


def short_list_cases(device: str):
    from mmharness import strategies as mst

    drawn = mst.cases(min_requests=1, min_items_total=1, short_lists=True, collisions=True, device=device)
    return plain(drawn)


@check(
    "prefill.short_lists",
    rule="R3",
    family=DIFFERENTIAL,
    needs={PREFILL, SHORT_LISTS},
    examples=short_list_cases,
    sweeps=True,
)
@hazard_on_collision
def short_lists(target: Target, case: Case, params: dict) -> None:
    """Per-request lists shorter than the batch (EAGLE's ``prefix_length``/``extend_length``): a request
    past either list's end is prefilled nowhere this step (no rows, no tokens counted, nothing encoded);
    the others are served their windows' rows as usual."""
    served = listed_windows(case)
    actual, encoder = run(target, case)
    if refused_collision(served, actual):
        return
    same(case, "chunked prefill, short per-request lists", run(REFERENCE, served)[0], actual)
    if COUNT in target.capabilities:
        expect_same(
            case,
            "MM tokens in extend, short per-request lists",
            observe(partial(REFERENCE.count_mm_tokens, served)),
            observe(partial(target.count_mm_tokens, case)),
        )
    listed = {(i.hash, i.token_count) for r in case.requests[: case.listed] for i in r.items}
    unlisted = sorted(
        {(i.hash, i.token_count) for r in case.requests[case.listed :] for i in r.items} - listed
    )
    encoded = [key for key in unlisted if key in encoder.encoded]
    if encoded:
        raise Hazard(
            "an item of a request past the per-request lists' end was encoded",
            expected=f"nothing of requests {case.listed}.. encoded",
            actual=f"{encoded} in calls {encoder.calls}",
        )
