"""R6 checks: CPU and CUDA give bit-identical results; a batch mixing them lands where R6 says.

Both need a CUDA device, and are skipped with that reason where none is visible.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from mmharness import tensors
from mmharness.checks.common import REFERENCE, plain
from mmharness.checks.outcome import Outcome, expect_same, observe
from mmharness.checks.prefill import run
from mmharness.checks.registry import DIFFERENTIAL, METAMORPHIC, check
from mmharness.model import Case
from mmharness.targets.base import CHUNK, PRECOMPUTED, PREFILL, Target


def _cases(device: str):
    from mmharness import strategies as mst

    return plain(mst.cases(min_items_total=1, device="cpu"))


def _results(target: Target, case: Case) -> list:
    """Every R1-R3 result the target can give for the case (R6 covers whatever it has)."""
    chunks = [
        observe(
            partial(
                target.embedding_chunk,
                tensors.request_embedding(case, request.items),
                case,
                r,
            )
        )
        for r, request in enumerate(case.requests)
        if request.items
    ]
    results = list(chunks)
    if PRECOMPUTED in target.capabilities:
        results.append(observe(partial(target.precomputed_embedding, case)))
    if PREFILL in target.capabilities:
        results.append(run(target, case)[0])
    return results


@check(
    "device.cpu_equals_cuda",
    rule="R6",
    family=METAMORPHIC,
    needs={CHUNK},
    examples=_cases,
    needs_cuda=True,
)
def cpu_equals_cuda(target: Target, case: Case, params: dict) -> None:
    """Chunks, precomputed concat and encoder-path rows are bit-identical on CPU and CUDA."""
    on_cuda = replace(case, device="cuda")
    pairs = zip(_results(target, case), _results(target, on_cuda), strict=True)
    for k, (cpu, cuda) in enumerate(pairs):
        expect_same(case, f"result {k} on cuda vs cpu", _moved(cpu, "cuda"), cuda)


def _moved(outcome: Outcome, device: str) -> Outcome:
    """The outcome with its tensors moved, so that devices compare equal too."""
    if outcome.raised:
        return outcome
    value = outcome.value
    if isinstance(value, tuple):
        return Outcome(value=tuple(_moved(Outcome(value=v), device).value for v in value))
    return Outcome(value=value.to(device) if hasattr(value, "to") else value)


def _mixed(device: str):
    from mmharness import strategies as mst

    return plain(mst.cases(coverage="all", min_items_total=2, item_devices=("cpu", "cuda")))


@check(
    "device.mixed_precomputed",
    rule="R6",
    family=DIFFERENTIAL,
    needs={PRECOMPUTED},
    examples=_mixed,
    needs_cuda=True,
)
def mixed_precomputed(target: Target, case: Case, params: dict) -> None:
    """Precomputed items on CPU and CUDA concatenate on the first CUDA item's device, bit-identical."""
    import torch

    actual = observe(partial(target.precomputed_embedding, case))
    torch.cuda.synchronize()  # an engine may copy with non_blocking=True: wait before reading
    expect_same(
        case, "precomputed embedding", observe(partial(REFERENCE.precomputed_embedding, case)), actual
    )
