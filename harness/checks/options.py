"""Checks of engine options: scheduling items whole (R3w), a drafter reading ahead (R3d).

Not every engine has these options; a target declaring the capability runs
its prefill with the option on and reports what each scheduler step did, so
the checks can hold every step to the rule, not only the final rows.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from mmharness import reference, tensors
from mmharness.checks.common import REFERENCE, collisions_as_hazards
from mmharness.checks.outcome import Failure, Outcome, observe, value_of
from mmharness.checks.prefill import UNLIMITED, collision_cases, refused_collision, run, same
from mmharness.checks.registry import DIFFERENTIAL, check
from mmharness.model import Case
from mmharness.targets.base import DRAFT_LOOKAHEAD, WHOLE_ITEMS, Encoder, Target


def _served(target: Target, case: Case, method: str, what: str) -> Any:
    """The option's answer, ``None`` for an allowed refusal; a crash on a colliding batch is a hazard.

    An option may look past the windows, so a clear refusal of a collision
    anywhere in the batch is allowed.
    """
    call = partial(getattr(target, method), case, Encoder(case), cache=target.new_cache(UNLIMITED))
    outcome = observe(call)
    if refused_collision(case, outcome, anywhere=True):
        return None
    with collisions_as_hazards(case):
        return value_of(outcome, what, "the rows and the steps")


def _scheduled(case: Case, steps: list) -> Case:
    scheduled = reference.scheduled_windows(case, steps)
    if isinstance(scheduled, str):
        raise Failure(
            "the steps do not prefill the windows",
            expected="steps running on from each prefix",
            actual=scheduled,
        )
    return scheduled


def _scheduled_rows(case: Case, scheduled: Case, rows: Any) -> None:
    with collisions_as_hazards(case):
        same(scheduled, "rows of the tokens scheduled", run(REFERENCE, scheduled)[0], Outcome(value=rows))


@check(
    "prefill.whole_items",
    rule="R3w",
    family=DIFFERENTIAL,
    needs={WHOLE_ITEMS},
    examples=collision_cases,
    sweeps=True,
)
def whole_items(target: Target, case: Case, params: dict) -> None:
    """With items scheduled whole, no step cuts an item it started; the rows are R3's of what it ran.

    A cut does not depend on hashes, so only a crash or the rows are a hazard
    on a batch with a hash collision.
    """
    served = _served(target, case, "whole_item_prefill", "whole-item prefill")
    if served is None:
        return
    rows, steps = served
    scheduled = _scheduled(case, steps)
    cut = reference.cut_items(case, steps)
    if cut:
        raise Failure(
            "a step cut an item it started, with items scheduled whole",
            expected="each step ends before an item it cannot finish",
            actual=f"(request, item) {cut} cut by steps {steps}",
        )
    _scheduled_rows(case, scheduled, rows)


@check(
    "prefill.draft_lookahead",
    rule="R3d",
    family=DIFFERENTIAL,
    needs={DRAFT_LOOKAHEAD},
    examples=collision_cases,
    sweeps=True,
)
def draft_lookahead(target: Target, case: Case, params: dict) -> None:
    """A drafter reading one token ahead is served R3's rows there, never an encoder cache miss.

    Each step's drafter window is the step's window moved one token on. Its
    mask marks placeholder positions only, and every one of an item the step
    itself reached (it starts before the step's end); an item starting at the
    step's end may be left to token embeddings. The rows, in mask order, are
    those positions' rows.
    """
    served = _served(target, case, "draft_prefill", "prefill with a drafter")
    if served is None:
        return
    rows, steps, drafts = served
    _scheduled_rows(case, _scheduled(case, steps), rows)
    with collisions_as_hazards(case):
        for k, start, tokens, draft_rows, draft_mask in drafts:
            _draft_step(case, k, start, tokens, draft_rows, draft_mask)


def _draft_step(case: Case, k: int, start: int, tokens: int, draft_rows: Any, draft_mask: Any) -> None:
    request = case.requests[k]
    window = range(start, start + tokens)
    row_at = {p: item.row(i) for item in request.items for i, p in enumerate(item.positions())}
    needed = {p for item in request.items if item.extent.start < start + tokens - 1 for p in item.positions()}
    marked = [p for p, on in zip(window, draft_mask.reshape(-1).tolist(), strict=True) if on]
    wrong = [p for p in marked if p not in row_at]
    missing = [p for p in window if p in needed and p not in marked]
    what = f"drafter window [{start}, {start + tokens}) of request {k}"
    if wrong or missing:
        raise Failure(
            f"{what}: the mask does not mark the placeholders",
            expected=f"the placeholders of every item the step reached, no text (missing {missing})",
            actual=f"marked {marked}",
        )
    expected = Outcome(value=tensors.materialise(case, [row_at[p] for p in marked]))
    actual = Outcome(value=draft_rows if draft_rows is not None else tensors.materialise(case, []))
    same(case, f"{what}: rows in mask order", expected, actual)
