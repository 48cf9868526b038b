"""Multi-step prefill programs over a case: chunks of several requests interleaved on one cache.

Drawn step by step against the progress the program has made so far
(``mmharness.steps.advance``), so every chunk continues where its request
stopped; half the chunk lengths end on a span edge (each +-1). Programs shrink
toward fewer steps, each prefilling what is left of the first open request.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st
from hypothesis.strategies import DrawFn, SearchStrategy
from mmharness import steps as program
from mmharness.model import Case
from mmharness.strategies._internal.choices import integer, pick
from mmharness.strategies._internal.validation import check_int, check_order, check_subset


@st.composite
def _programs(draw: DrawFn, case: Case, max_steps: int, paths: tuple[str, ...], forms: tuple[str, ...]):
    progress = [0] * len(case.requests)
    pressure = integer(draw, 0, 3) == 3
    if pressure and sum(1 for request in case.requests if request.seq_len) <= max_steps:
        return _pressure(case, paths, forms)  # a cache step and a prefill per request: max_steps holds
    drawn: list[dict] = []
    if integer(draw, 0, 3) == 0:  # a quarter of the programs start on an evicting cache
        drawn.append({"op": program.CACHE, "size": program.CACHE_SIZES[integer(draw, 1, 4)]})
    for _ in range(integer(draw, 1, max_steps)):
        kinds = [program.PREFILL] * 3 + [program.EMBED, program.SKIP, program.CACHE]
        kind = kinds[integer(draw, 0, len(kinds) - 1)]
        open_requests = [r for r in range(len(case.requests)) if program.remaining(case, progress, r) > 0]
        if kind == program.CACHE or not open_requests:
            step = {"op": program.CACHE, "size": program.CACHE_SIZES[integer(draw, 0, 4)]}
        elif kind == program.SKIP:
            r = open_requests[integer(draw, 0, len(open_requests) - 1)]
            rest = program.remaining(case, progress, r)
            step = {"op": program.SKIP, "request": r, "length": pick(draw, 1, rest, [1, rest])}
        else:
            chosen = [r for r in open_requests if draw(st.booleans())] or open_requests[:1]
            lengths = []
            for r in chosen:
                rest = program.remaining(case, progress, r)
                points = program.edges(case.requests[r], progress[r])
                lengths.append(rest - pick(draw, 0, rest - 1, [rest - p for p in points]))
            step = {
                "op": kind,
                "requests": chosen,
                "lengths": lengths,
                "path": paths[integer(draw, 0, len(paths) - 1)],
                "form": forms[integer(draw, 0, len(forms) - 1)],
                "scribble": draw(st.booleans()),
            }
        drawn.append(step)
        progress = program.advance(case, progress, step)
    return drawn


def _pressure(case: Case, paths: tuple[str, ...], forms: tuple[str, ...]) -> list[dict]:
    """A cache with room for two items, then each request prefilled whole, one a step, in order.

    Where the case holds three distinct items, the third evicts one of two free entries; a later
    request wanting one of them (``steps.revisit``'s) hits or encodes it again, by the cache's order.
    """
    steps: list[dict] = [{"op": program.CACHE, "size": "pair"}]
    for r, request in enumerate(case.requests):
        if request.seq_len:
            chunk = {"op": program.PREFILL, "requests": [r], "lengths": [request.seq_len]}
            steps.append({**chunk, "path": paths[0], "form": forms[0], "scribble": False})
    return steps


def prefill_programs(
    case: Case,
    *,
    max_steps: int = 6,
    paths: Sequence[str] = program.PATHS,
    forms: Sequence[str] = program.FORMS,
) -> SearchStrategy[list[dict]]:
    """Programs of prefill, end-to-end, prefix-cache skip and cache steps over ``case``'s requests.

    ``paths`` (the target's ``default`` path, or its ``other``, by whatever name the target gives it)
    and ``forms`` (encoder output forms) are what the prefill steps may use; ``scribble`` marks a step
    after which the encoder's output buffers are overwritten (an encoder that reuses its buffers).
    A quarter of the programs put the cache under pressure: room for two items, each request
    prefilled whole in turn, so a third item evicts one of two free entries.
    """
    check_int("max_steps", max_steps, min_value=1)
    check_order("max_steps", max_steps, "the most a program holds", program.MAX_STEPS)
    chosen_paths = tuple(check_subset("paths", paths, program.PATHS))
    chosen_forms = tuple(check_subset("forms", forms, program.FORMS))
    return _programs(case, max_steps, chosen_paths, chosen_forms)
