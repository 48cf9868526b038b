"""R3e check: ``get_embedding_and_mask`` end to end, whichever path produced the rows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

from mmharness import reference, tensors
from mmharness.checks.common import plain, refused_partial, unreceived
from mmharness.checks.outcome import (
    Failure,
    Hazard,
    Outcome,
    describe,
    expect_equal,
    expect_same,
    observe,
    template,
)
from mmharness.checks.registry import DIFFERENTIAL, check
from mmharness.model import Case
from mmharness.targets.base import EMBED_AND_MASK, PRECOMPUTED, UNLIMITED_CACHE, Encoder, Target


def _cases(device: str):
    """Every batch the end-to-end path receives, items of two modalities interleaved among them (an
    audio track in its video's gaps: the engine embeds each modality apart and scatters by the mask),
    and one-request batches with an EVS-pruned video (the engine moves its placeholders to the rows
    each frame kept, and the mask must follow; only a one-request batch holds one, so the branch draws
    no other): each a branch of its own, so both come early."""
    from hypothesis import strategies as st
    from mmharness import strategies as mst

    return st.one_of(
        plain(mst.cases(min_items_total=1, device=device)),
        plain(mst.cases(min_items_total=1, interleaved=True, device=device)),
        plain(mst.cases(min_requests=1, max_requests=1, min_items_total=1, evs=True, device=device)),
    )


@check(
    "embed_mask.matches_reference",
    rule="R3e",
    family=DIFFERENTIAL,
    needs={EMBED_AND_MASK},
    examples=_cases,
    sweeps=True,
)
def matches_reference(target: Target, case: Case, params: dict) -> None:
    """The mask marks exactly the placeholders and the rows, in mask order, are the reference's.

    A target without precomputed-embedding support (no R2 function) is given
    raw items only: it cannot honour what it does not implement.
    """
    if unreceived(target, case) is None:
        compare(target, case, Encoder(case), target.new_cache(UNLIMITED_CACHE))


def compare(
    target: Target,
    case: Case,
    encoder: Encoder,
    cache: object,
    what: str = "",
    explain: Callable[[Failure, Outcome], Failure] | None = None,
    allowed: Callable[[Case, Outcome], bool] | None = None,
) -> None:
    """R3e for one call with this encoder and cache.

    ``what`` prefixes the failure (a step's name); ``explain`` may turn a failure
    into another, given the target's outcome (the stateful check's hazards);
    ``allowed`` accepts an outcome outright (a refusal the caller's rules allow).
    """
    if PRECOMPUTED not in target.capabilities:
        case = raw_only(case)
    expected = observe(partial(reference.embedding_and_mask, case))
    actual = observe(partial(target.embedding_and_mask, case, encoder, cache=cache))
    if allowed is not None and allowed(case, actual):
        return
    try:
        _compare(case, encoder, expected, actual)
    except Failure as failure:
        if what:
            failure.message = f"{what}: {failure.message}"
            failure.signature = f"{template(what)}: {failure.signature}"
        raise (explain(failure, actual) if explain else failure) from None


def _compare(case: Case, encoder: Encoder, expected: Outcome, actual: Outcome) -> None:
    if refused_partial(case, actual):
        return
    if expected.raised and not actual.raised and reference.is_partially_precomputed(case):
        expected = observe(partial(by_modality, case))
    if expected.raised or actual.raised:
        expect_same(case, "embedding and mask", expected, actual)
        return
    precomputed = [item.precomputed for _, _, item in case.items()]
    if precomputed and all(precomputed) and encoder.calls:
        raise Failure(
            "every item is precomputed, yet the encoder ran",
            expected="no encoder call (the precomputed rows are used)",
            actual=f"encoder calls {encoder.calls}",
        )
    rows, mask = expected.value
    embedding, actual_mask = actual.value
    if actual_mask is None:
        got_mask = [False] * len(mask)
    else:
        _expect_usable_mask(case, actual_mask, len(mask))
        got_mask = actual_mask.reshape(-1).tolist()
    expect_equal(case, "mask over input_ids", mask, got_mask)
    got_rows = tensors.materialise(case, []) if embedding is None else embedding
    if not any(mask) and got_rows.numel():
        raise Hazard(
            "a window without placeholders was handed rows (embedding[-0:] keeps every row)",
            expected="no rows",
            actual=describe(got_rows) + tensors.explain_rows(case, got_rows),
        )
    expect_same(
        case,
        "rows in mask order",
        Outcome(value=tensors.materialise(case, rows)),
        Outcome(value=got_rows.reshape(-1, got_rows.shape[-1])),
    )


def by_modality(case: Case) -> tuple[list, list[bool]]:
    """R3e as an engine that embeds each modality apart sees the batch (SGLang's ``embed_mm_inputs``):
    R2's coverage rule holds within each modality's items, so a batch whose images are all
    precomputed and whose audio is raw is served, not refused."""
    for modality in sorted({item.modality for _, _, item in case.items()}):
        reference.precomputed_embedding(of_modality(case, modality))
    return reference.embedding_and_mask(raw_only(case))


def of_modality(case: Case, modality: str) -> Case:
    """Every request with only its items of ``modality``: what one modality's call is given."""
    requests = tuple(
        replace(r, items=tuple(i for i in r.items if i.modality == modality)) for r in case.requests
    )
    return replace(case, requests=requests)


def raw_only(case: Case) -> Case:
    """The case with no item precomputed."""
    requests = tuple(
        replace(r, items=tuple(replace(item, precomputed=False) for item in r.items)) for r in case.requests
    )
    return replace(case, requests=requests)


def _expect_usable_mask(case: Case, mask, tokens: int) -> None:
    """A mask a model can scatter with: bool, on the case's device, ``[N]`` or ``[N, 1]``."""
    import torch

    if (
        mask.dtype != torch.bool
        or mask.device.type != case.device
        or tuple(mask.shape) not in ((tokens,), (tokens, 1))
    ):
        raise Failure(
            "the mask is not a boolean [N] or [N, 1] tensor on the case's device",
            expected=f"torch.bool [{tokens}] or [{tokens}, 1] on {case.device}",
            actual=describe(mask),
        )
