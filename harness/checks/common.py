"""Pieces every check module shares: the reference target, example builders, case edits."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING

from mmharness import reference
from mmharness.checks.outcome import DIVERGENCE, Failure, Hazard, Outcome, same_error, unfinished, value_of
from mmharness.deadline import Unfinished
from mmharness.model import Case
from mmharness.targets.reference import ReferenceTarget

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy
    from mmharness.checks.registry import Example, Property
    from mmharness.targets.base import Target

REFERENCE = ReferenceTarget()


def plain(cases: SearchStrategy[Case]) -> SearchStrategy[Example]:
    """Examples that are just a case (no extra parameters)."""
    return cases.map(lambda case: (case, {}))


def unreceived(target: Target, case: Case) -> str | None:
    """Why the target never receives this case (``Target.unreceived``), or ``None``: input its engine's
    own processors never hand it is no test of it, so a check leaves it out (an EVS-pruned video for a
    release without EVS, items of two modalities interleaved for vLLM), and the target is told
    (``leave_out``: a loaded target's notes, so the run's untested report says it), so a pass is not
    read as covering it. A target that does not say which cases it receives is given no EVS-pruned
    video (``UNDECLARED_EVS``): EVS is one engine's convention.
    """
    why = target.unreceived(case)
    if why is not None:
        target.leave_out(why)
    return why


def with_window(case: Case, request: int, prefix_len: int, extend_len: int) -> Case:
    """The case with one request's prefill window moved."""
    requests = list(case.requests)
    requests[request] = replace(requests[request], prefix_len=prefix_len, extend_len=extend_len)
    return replace(case, requests=tuple(requests))


def windows(schedule: list[int]) -> list[tuple[int, int]]:
    """``(prefix_len, extend_len)`` of each chunk of a schedule (chunk lengths in order)."""
    out, start = [], 0
    for length in schedule:
        out.append((start, length))
        start += length
    return out


def scheduled(device: str) -> SearchStrategy[Example]:
    """One request with items and a schedule of prefill chunks over its whole sequence."""
    from mmharness import strategies as mst

    def add_schedule(case: Case) -> SearchStrategy[Example]:
        request = case.requests[0]
        cuts = sorted({p for item in request.items for s, e in item.spans for p in (s, e + 1)})
        return mst.schedules(seq_len=request.seq_len, cuts=tuple(cuts)).map(
            lambda schedule: (case, {"schedule": list(schedule)})
        )

    return mst.cases(min_requests=1, max_requests=1, min_items_total=1, device=device).flatmap(add_schedule)


def permuted(device: str, coverage: str) -> SearchStrategy[Example]:
    """A batch of two or more requests and a permutation of them."""
    from hypothesis import strategies as st
    from mmharness import strategies as mst

    return mst.cases(min_requests=2, coverage=coverage, device=device).flatmap(
        lambda case: st.permutations(range(len(case.requests))).map(
            lambda order: (case, {"permutation": list(order)})
        )
    )


def permute(case: Case, order: list[int]) -> Case:
    return replace(case, requests=tuple(case.requests[k] for k in order))


def alone(case: Case, request: int) -> Case:
    """The batch holding only one of the case's requests."""
    return replace(case, requests=(case.requests[request],))


def blocks_in_order(call: Callable[[Case], Outcome], case: Case, order: list[int]) -> Outcome:
    """Each request's result on its own, concatenated in ``order``; ``None`` if none has rows.

    This is what the whole batch in that order must give: the permutation property.
    """
    import torch

    blocks = []
    for r in order:
        one = value_of(call(alone(case, r)), f"requests[{r}] alone", "a tensor or None")
        if one is not None:
            blocks.append(one.reshape(-1, one.shape[-1]))
    return Outcome(value=torch.cat(blocks) if blocks else None)


COLLISION = "hash collision"


def hazard_on_collision(prop: Property) -> Property:
    """A divergence on a batch where one hash has two token counts becomes a hazard, so marked.

    An engine hashes item content, so equal hashes with different token counts
    come only from a hash collision or a client-supplied hash: input its own
    processors do not produce. Serving wrong rows then is a hazard (docs/rules.md),
    with one signature for all its symptoms, apart from the same symptoms with
    honest hashes.
    """

    def guarded(target, case: Case, params: dict) -> None:
        with collisions_as_hazards(case):
            prop(target, case, params)

    guarded.__doc__ = prop.__doc__
    return guarded


@contextmanager
def collisions_as_hazards(case: Case) -> Iterator[None]:
    """Inside, a divergence on a batch with a hash collision is the collision hazard (as above); so is a
    case that did not finish there (equal hashes promise equal content: what breaks that promise gets no
    more than a hazard, a stall or a hang included)."""
    try:
        yield
    except Unfinished as stuck:
        if not reference.has_any_collision(case):
            raise
        raise _collision_hazard(unfinished(stuck)) from None
    except Failure as failure:
        if failure.kind != DIVERGENCE or not reference.has_any_collision(case):
            raise
        raise _collision_hazard(failure) from None


def _collision_hazard(failure: Failure) -> Hazard:
    return Hazard(
        f"{COLLISION}: {failure.message}",
        expected=failure.expected,
        actual=failure.actual,
        signature=f"{COLLISION}: not each item's own rows, nor a clear error",
    )


def refused_partial(case: Case, actual: Outcome) -> bool:
    """Partial coverage refused with R2's documented error: always allowed (docs/rules.md, R2)."""
    refusal = NotImplementedError(reference.PARTIAL_PRECOMPUTED_MESSAGE)
    return reference.is_partially_precomputed(case) and actual.raised and same_error(refusal, actual.error)
