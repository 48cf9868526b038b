"""Multi-step prefill programs: what an engine sees over a request's life, as plain data.

A program is a list of steps over one case's requests, run against one engine
instance and one embedding cache: ``prefill`` (a batch of some requests, each
computing its next chunk, through the encoder path), ``embed`` (the same,
end to end, with the case's precomputed embeddings), ``skip`` (a prefix-cache hit: a request's next
tokens come from the KV cache, no prefill), and ``cache`` (the embedding cache
replaced by one of another size: a shrink, an eviction of everything). A step
is a JSON-able dict, so a failing program is saved and replayed like any case.

``progress`` (tokens computed per request) is the only state the program
itself carries; ``advance`` is shared by the strategy that draws programs and
the check that runs them, so a replayed program means exactly what was drawn.
Lengths are clamped to what is left of a request, so any edit of a saved
program still means something.
"""

from __future__ import annotations

from dataclasses import replace

from mmharness.model import Case, Request

PREFILL, EMBED, SKIP, CACHE = "prefill", "embed", "skip", "cache"
CHUNKS = (PREFILL, EMBED)
"""The steps that compute chunks."""
PATHS = ("default", "other")
"""A step on the target's default path, or on its other one (``Target.paths``: SGLang's per-request
path, vLLM's V2 gather; the default where it has no other)."""
FORMS = ("tensor", "list")
CACHE_SIZES = ("unlimited", "half", "tiny", "zero")
"""``half``: room for half the case's rows (evicting); ``tiny``: two rows."""
MAX_STEPS = 12


def remaining(case: Case, progress: list[int], r: int) -> int:
    return case.requests[r].seq_len - progress[r]


def window_case(case: Case, progress: list[int], requests: list[int], lengths: list[int]) -> Case:
    """The batch of one prefill step: the chosen requests, each with its next window."""
    chosen = tuple(
        replace(case.requests[r], prefix_len=progress[r], extend_len=min(n, remaining(case, progress, r)))
        for r, n in zip(requests, lengths, strict=True)
    )
    return replace(case, requests=chosen)


def advance(case: Case, progress: list[int], step: dict) -> list[int]:
    """Tokens computed per request after the step."""
    after = list(progress)
    if step["op"] in CHUNKS:
        for r, n in zip(step["requests"], step["lengths"], strict=True):
            after[r] += min(n, remaining(case, progress, r))
    elif step["op"] == SKIP:
        r = step["request"]
        after[r] += min(step["length"], remaining(case, progress, r))
    return after


def edges(request: Request, start: int) -> list[int]:
    """Chunk lengths from ``start`` that end a window on a span edge (each +-1), or at the end."""
    rest = request.seq_len - start
    points = {1, rest}
    for item in request.items:
        for first, last in item.spans:
            for edge in (first, last + 1):
                points.update({edge - start - 1, edge - start, edge - start + 1})
    return sorted(p for p in points if 0 < p <= rest)
