"""R1 checks: ``get_embedding_chunk`` against the reference, across schedules, on bad input."""

from __future__ import annotations

from functools import partial

from mmharness import reference, tensors
from mmharness.checks.common import REFERENCE, plain, scheduled, windows, with_window
from mmharness.checks.outcome import (
    Failure,
    Hazard,
    describe,
    expect_equal,
    expect_same,
    is_clear_error,
    observe,
    show_error,
    value_of,
)
from mmharness.checks.registry import DIFFERENTIAL, HAZARD, METAMORPHIC, ROBUSTNESS, check
from mmharness.model import Case, problems
from mmharness.strategies import MALFORMED_KINDS
from mmharness.targets.base import CHUNK, Target


def _cases(device: str):
    from mmharness import strategies as mst

    return plain(mst.cases(min_items_total=1, device=device))


ROW_MISMATCH = "row_mismatch"
SPAN_AND_WINDOW_KINDS = tuple(kind for kind in MALFORMED_KINDS if kind != ROW_MISMATCH)
"""The malformed kinds an engine must refuse; a row mismatch is its own hazard (docs/rules.md)."""


def _malformed(kinds: tuple[str, ...]):
    def examples(device: str):
        from mmharness import strategies as mst

        return plain(mst.malformed_cases(kinds=kinds, device=device))

    return examples


def _chunk(target: Target, case: Case, r: int):
    embedding = tensors.request_embedding(case, case.requests[r].items)
    return observe(partial(target.embedding_chunk, embedding, case, r))


@check("chunk.matches_reference", rule="R1", family=DIFFERENTIAL, needs={CHUNK}, examples=_cases, sweeps=True)
def matches_reference(target: Target, case: Case, params: dict) -> None:
    """Each request's chunk, start and end equal the reference's."""
    for r, request in enumerate(case.requests):
        if request.items:
            expect_same(case, f"requests[{r}] chunk", _chunk(REFERENCE, case, r), _chunk(target, case, r))


@check(
    "chunk.schedule_concat",
    rule="R1",
    family=METAMORPHIC,
    needs={CHUNK},
    examples=scheduled,
    params=("schedule",),
)
def schedule_concat(target: Target, case: Case, params: dict) -> None:
    """Chunks over any prefill schedule concatenate to the whole-sequence chunk, starts meeting ends."""
    import torch

    whole = _chunk(target, with_window(case, 0, 0, case.requests[0].seq_len), 0)
    whole_chunk, _, whole_end = value_of(whole, "whole-sequence chunk", "a tensor")
    pieces, cursor = [], 0
    for prefix_len, extend_len in windows(params["schedule"]):
        piece = _chunk(target, with_window(case, 0, prefix_len, extend_len), 0)
        chunk, start, end = value_of(piece, f"chunk at window ({prefix_len}, {extend_len})", "a tensor")
        expect_equal(case, f"window ({prefix_len}, {extend_len}) start", cursor, start)
        cursor = end
        pieces.append(chunk)
    expect_equal(case, "last end", whole_end, cursor)
    expect_equal(case, "concatenated chunks", whole_chunk, torch.cat(pieces))


def _bad_request(case: Case) -> int:
    """The index of the request the case's first problem is in."""
    path = next(problems(case)).path
    return int(path.split("[", 1)[1].split("]", 1)[0])


@check(
    "chunk.rejects_malformed",
    rule="R1",
    family=ROBUSTNESS,
    needs={CHUNK},
    examples=_malformed(SPAN_AND_WINDOW_KINDS),
)
def rejects_malformed(target: Target, case: Case, params: dict) -> None:
    """Malformed spans or windows give a clear error or exactly the rows at the window's positions.

    R1 never sees ``seq_len``, and an empty or negative window has an obvious
    answer; what must not happen is a tensor that is not the rows whose
    positions lie in the window (unsorted or overlapping spans silently shifted).
    The engine's own processors never produce such input, so a failure here is
    a hazard, not a divergence.
    """
    r = _bad_request(case)
    outcome = _chunk(target, case, r)
    if outcome.raised and is_clear_error(outcome.error):
        return
    walked = _walked_chunk(case, r)
    shown = "no tensor" if walked is None else _show_chunk(case, walked)
    if not outcome.raised and walked is not None:
        try:
            expect_equal(case, f"requests[{r}] chunk", walked, outcome.value)
            return
        except Failure:
            pass
    raise Hazard(
        f"malformed requests[{r}] ({next(problems(case))}) was served a chunk that is not its window's rows",
        expected=f"a clear ValueError/RuntimeError, or {shown}",
        actual=show_error(outcome.error) if outcome.raised else _show_chunk(case, outcome.value),
    )


def _show_chunk(case: Case, chunk: tuple) -> str:
    rows, start, end = chunk
    return f"{describe(rows)}{tensors.explain_rows(case, rows)}, start {start}, end {end}"


def _walked_chunk(case: Case, r: int):
    """The rows whose positions lie in the window, walking the spans as given; ``None`` if undefined."""
    request = case.requests[r]
    flat = tensors.request_embedding(case, request.items)
    flat = flat.reshape(-1, flat.shape[-1])
    spans = tuple(span for item in request.items for span in item.spans)
    inside, start, end = reference.embedding_chunk(spans, request.prefix_len, request.extend_len)
    if len(reference.span_positions(spans)) != flat.shape[0]:
        return None
    return flat[inside], start, end


@check(
    "chunk.row_mismatch_accepted",
    rule="R1",
    family=HAZARD,
    needs={CHUNK},
    examples=_malformed((ROW_MISMATCH,)),
)
def row_mismatch_accepted(target: Target, case: Case, params: dict) -> None:
    """An embedding whose row count differs from its span length is refused, not silently shifted."""
    r = _bad_request(case)
    outcome = _chunk(target, case, r)
    if not outcome.raised:
        raise Hazard(
            f"requests[{r}]: {next(problems(case))}; the chunk was served anyway (rows of later items shift)",
            expected="a clear error",
            actual=describe(outcome.value[0]),
        )
