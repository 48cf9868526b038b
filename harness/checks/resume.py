"""R3p and chunk progress: where a forward may start after a prefix-cache hit, and how a long prompt is
cut into chunks, each judged on the positions the rule names (``reference.prefix_resume_steps``,
``reference.chunk_progress``), never on an engine's own arithmetic.

Both draw one request whose items are each one range (what a cache keyed by spans holds), a hit or a
chunk budget, and hand the target only those: the rule is the same whichever engine plans the step.
"""

from __future__ import annotations

from functools import partial

from mmharness import reference
from mmharness.checks.common import unreceived
from mmharness.checks.outcome import Failure, observe, value_of
from mmharness.checks.registry import DIFFERENTIAL, check
from mmharness.model import Case
from mmharness.targets.base import BLOCK_KEYS, CHUNK_PLAN, PREFIX_RESUME, Target

BLOCK_SIZES = (1, 2, 3, 4, 8, 16)
"""KV block sizes drawn: 1 makes every position a boundary, 3 one no power of two is."""


def _one_request(device: str, *, coverage: str = "any", min_items: int = 1, requests: int = 1):
    from mmharness import strategies as mst

    return mst.cases(
        min_requests=requests,
        max_requests=requests,
        min_items_total=min_items,
        max_spans_per_item=1,
        coverage=coverage,
        device=device,
    )


def _hits(device: str):
    """A case (text alone too: a hit there still lands on a block boundary), a hit (``0..seq_len`` tokens
    found cached) and a block size."""
    from hypothesis import strategies as st

    def add_hit(case: Case):
        seq_len = case.requests[0].seq_len
        return st.tuples(st.integers(0, seq_len), st.sampled_from(BLOCK_SIZES)).map(
            lambda drawn: (case, {"hit": drawn[0], "block_size": drawn[1]})
        )

    return _one_request(device, min_items=0).flatmap(add_hit)


@check(
    "prefix.resume_on_boundary",
    rule="R3p",
    family=DIFFERENTIAL,
    needs={PREFIX_RESUME},
    examples=_hits,
    params=("hit", "block_size"),
)
def resume_on_boundary(target: Target, case: Case, params: dict) -> None:
    """After a prefix-cache hit the forward resumes at or before the hit, on a block boundary, in no item."""
    if unreceived(target, case) is not None:
        return
    hit, block_size = params["hit"], params["block_size"]
    call = partial(target.prefix_resume_step, case, 0, hit=hit, block_size=block_size)
    step = value_of(observe(call), f"the resumed step of a hit of {hit}", "a step")
    allowed = reference.prefix_resume_steps(case.requests[0], hit, block_size)
    if step not in allowed:
        raise Failure(
            f"a hit of {hit} tokens (blocks of {block_size}) resumes at a step the rule forbids (R3p)",
            expected=f"one of {allowed} (at or before the hit, on a block boundary, inside no item)",
            actual=f"{step}",
            signature="prefix hit resumes off a boundary or inside an item",
        )


def _batches(device: str):
    """Three requests of encoded items (whose blocks at one index are compared) and a block size."""
    from hypothesis import strategies as st

    return _one_request(device, coverage="none", requests=3).flatmap(
        lambda case: st.sampled_from(BLOCK_SIZES).map(lambda size: (case, {"block_size": size}))
    )


@check(
    "prefix.blocks_keyed_by_content",
    rule="R3p",
    family=DIFFERENTIAL,
    needs={BLOCK_KEYS},
    examples=_batches,
    params=("block_size",),
)
def blocks_keyed_by_content(target: Target, case: Case, params: dict) -> None:
    """Two full KV blocks at one index share a prefix cache's key only where they hold the same rows."""
    if unreceived(target, case) is not None:
        return
    block_size, seen = params["block_size"], {}
    for r, request in enumerate(case.requests):
        for block in range(request.seq_len // block_size):
            call = partial(target.prefix_block_key, case, r, block=block, block_size=block_size)
            key = value_of(observe(call), f"requests[{r}] block {block}'s key", "a key")
            rows = reference.block_rows(request, block, block_size)
            first, held = seen.setdefault((block, key), (r, rows))
            if held != rows:
                raise Failure(
                    f"block {block} (of {block_size}) of requests[{first}] and requests[{r}] share a prefix"
                    " cache key but hold other rows (R3p): one would be served the other's KV",
                    expected=f"other keys, or the same rows: {held}",
                    actual=f"{rows} under the same key {key!r}",
                    signature="blocks of other content share a prefix cache key",
                )


def _budgets(device: str):
    """A case of encoded items (precomputed rows are per token: R2 and R3 judge them) and a chunk budget
    (tokens one chunk may hold before an item raises it)."""
    from hypothesis import strategies as st

    return _one_request(device, coverage="none").flatmap(
        lambda case: st.integers(1, max(1, case.requests[0].seq_len)).map(lambda b: (case, {"budget": b}))
    )


@check(
    "chunks.progress",
    rule="R3c",
    family=DIFFERENTIAL,
    needs={CHUNK_PLAN},
    examples=_budgets,
    params=("budget",),
)
def progress(target: Target, case: Case, params: dict) -> None:
    """Every planned chunk is non-empty and ends inside no item, and the chunks tile the prompt."""
    if unreceived(target, case) is not None:
        return
    request = case.requests[0]
    start = reference.prefix_resume_steps(request, request.prefix_len, 1)[-1]
    call = partial(target.prefill_chunks, case, 0, start=start, budget=params["budget"])
    chunks = value_of(observe(call), f"the chunks from {start}", "a list of (start, end)")
    broken = reference.chunk_progress(request, start, chunks)
    if broken is not None:
        raise Failure(
            f"chunks of a prompt from {start} (budget {params['budget']}) break chunk progress: {broken}",
            expected=f"non-empty chunks from {start} to {request.seq_len}, none ending inside an item",
            actual=f"{chunks}",
        )
