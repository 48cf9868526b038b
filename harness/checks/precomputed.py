"""R2 checks: the precomputed-embedding concat against the reference, under permutation, and its hazard."""

from __future__ import annotations

from functools import partial

from mmharness.checks.common import REFERENCE, blocks_in_order, permute, permuted, plain, refused_partial
from mmharness.checks.outcome import Hazard, Outcome, expect_same, observe
from mmharness.checks.registry import DIFFERENTIAL, HAZARD, METAMORPHIC, check
from mmharness.model import Case
from mmharness.targets.base import PRECOMPUTED, Target


def _cases(*coverages: str):
    """Cases of the given coverages, equally likely (repeat one to weight it)."""

    def examples(device: str):
        from hypothesis import strategies as st
        from mmharness import strategies as mst

        return plain(st.one_of(*(mst.cases(coverage=c, device=device) for c in coverages)))

    return examples


def _precomputed(target: Target, case: Case) -> Outcome:
    return observe(partial(target.precomputed_embedding, case))


@check(
    "precomputed.matches_reference",
    rule="R2",
    family=DIFFERENTIAL,
    needs={PRECOMPUTED},
    examples=_cases("all", "all", "partial", "none"),
    sweeps=True,
)
def matches_reference(target: Target, case: Case, params: dict) -> None:
    """The batch's precomputed rows, ``None`` fallback or partial-coverage error equal the reference's.

    Partial coverage may always be refused with the documented error, even where
    the rule allows a silent fallback: refusing is the original rule (all
    precomputed or all raw), and safer (``precomputed.partial_fallback``).
    """
    actual = _precomputed(target, case)
    if refused_partial(case, actual):
        return
    expect_same(case, "precomputed embedding", _precomputed(REFERENCE, case), actual)


@check(
    "precomputed.permutation",
    rule="R2",
    family=METAMORPHIC,
    needs={PRECOMPUTED},
    examples=lambda device: permuted(device, "all"),
    params=("permutation",),
)
def permutation(target: Target, case: Case, params: dict) -> None:
    """Permuting fully precomputed requests permutes the result's per-request blocks."""
    order = params["permutation"]
    call = partial(_precomputed, target)
    expect_same(
        case,
        f"precomputed embedding of requests in order {order}",
        blocks_in_order(call, case, order),
        call(permute(case, order)),
    )


@check(
    "precomputed.partial_fallback",
    rule="R2",
    family=HAZARD,
    needs={PRECOMPUTED},
    examples=_cases("partial"),
)
def partial_fallback(target: Target, case: Case, params: dict) -> None:
    """Partially precomputed batches are refused loudly rather than silently re-encoded."""
    outcome = _precomputed(target, case)
    if not outcome.raised and outcome.value is None:
        dropped = sum(item.precomputed for _, _, item in case.items())
        raise Hazard(
            f"{dropped} precomputed item(s) ignored: the batch falls back to the encoder"
            " (a different grouping of the same items raises instead)",
            expected="NotImplementedError or the precomputed rows",
            actual="None",
        )
