"""R4 checks: the placeholder count and the embedding-length adjustment."""

from __future__ import annotations

from functools import partial

from mmharness import reference, tensors
from mmharness.checks.common import REFERENCE, plain
from mmharness.checks.outcome import Failure, Hazard, describe, expect_equal, expect_same, observe
from mmharness.checks.registry import DIFFERENTIAL, HAZARD, check
from mmharness.model import Case
from mmharness.targets.base import ADJUST, COUNT, Target


def _cases(device: str):
    from mmharness import strategies as mst

    return plain(mst.cases(device=device))


def _lengths(min_wanted: int, max_wanted: int):
    def examples(device: str):
        from hypothesis import strategies as st
        from mmharness import strategies as mst

        return st.tuples(
            mst.cases(max_requests=0, device=device),
            st.integers(0, 12),
            st.integers(min_wanted, max_wanted),
        ).map(lambda drawn: (drawn[0], {"rows": drawn[1], "wanted": drawn[2]}))

    return examples


@check("count.matches_reference", rule="R4", family=DIFFERENTIAL, needs={COUNT}, examples=_cases, sweeps=True)
def count_matches_reference(target: Target, case: Case, params: dict) -> None:
    """The count equals the reference's and the placeholder count of the mask built from input_ids."""
    import torch

    input_ids, placeholders = tensors.input_ids(case)
    in_mask = int(torch.isin(input_ids, placeholders).sum())
    expect_equal(case, "reference count vs input_ids placeholders", reference.count_mm_tokens(case), in_mask)
    expect_same(
        case,
        "MM tokens in extend",
        observe(partial(REFERENCE.count_mm_tokens, case)),
        observe(partial(target.count_mm_tokens, case)),
    )


def _adjust(target: Target, case: Case, params: dict):
    embedding = tensors.shaped(tensors.block(1, params["rows"], case), case)
    return observe(partial(target.adjust_embedding_length, embedding, params["wanted"]))


@check(
    "adjust.matches_reference",
    rule="R4",
    family=DIFFERENTIAL,
    needs={ADJUST},
    examples=_lengths(1, 12),
    params=("rows", "wanted"),
)
def adjust_matches_reference(target: Target, case: Case, params: dict) -> None:
    """Extra rows are cut from the front (keep the last n); too few raise "Insufficient ...".

    A ``[1, n, H]`` embedding keeps its last rows along the row axis; the engines'
    callers flatten before they adjust, so a difference there is a hazard.
    """
    expected, actual = _adjust(REFERENCE, case, params), _adjust(target, case, params)
    try:
        expect_same(case, "adjusted embedding", expected, actual)
    except Failure as failure:
        if case.ndim != 3:
            raise
        raise Hazard(
            f"[1, n, H] embedding: {failure.message}",
            expected=failure.expected,
            actual=failure.actual,
            signature="[1, n, H] embedding (its callers flatten first): not its last rows",
        ) from None


@check(
    "adjust.zero_keeps_all",
    rule="R4",
    family=HAZARD,
    needs={ADJUST},
    examples=_lengths(0, 0),
    params=("rows", "wanted"),
)
def zero_keeps_all(target: Target, case: Case, params: dict) -> None:
    """Adjusting to zero placeholders leaves no rows (``embedding[-0:]`` keeps them all)."""
    outcome = _adjust(target, case, params)
    if not outcome.raised and outcome.value.shape[-2] != 0:
        raise Hazard(
            f"{params['rows']} rows adjusted to 0 placeholders kept rows",
            expected="tensor[0, hidden]",
            actual=describe(outcome.value),
        )
