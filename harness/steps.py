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

from mmharness.model import Case, Item, Request

PREFILL, EMBED, SKIP, CACHE = "prefill", "embed", "skip", "cache"
CHUNKS = (PREFILL, EMBED)
"""The steps that compute chunks."""
PATHS = ("default", "other")
"""A step on the target's default path, or on its other one (``Target.paths``: SGLang's per-request
path, vLLM's V2 gather; the default where it has no other)."""
FORMS = ("tensor", "list")
CACHE_SIZES = ("unlimited", "half", "tiny", "zero", "pair")
"""``half``: room for half the case's rows (evicting); ``tiny``: two rows; ``pair``: room for the case's
two largest distinct items, so a third evicts one of two free entries (which one is the cache's order)."""
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


def revisit(case: Case) -> Case:
    """``case`` and one more request: another user sending every item of the earlier requests again,
    in their order, one after another (a text token before each), its whole sequence to prefill.

    Run after the others on one cache, it asks again for what the cache kept and what it evicted: a hit
    or an encode, so which free entry an engine evicts for room shows in its encoder calls and cache
    events; two of its items with one hash are one item held twice by one request. A case whose
    per-request lists are shorter than the batch (EAGLE's) is returned as it is.
    """
    if case.prefix_listed is not None or case.extend_listed is not None or not any(case.items()):
        return case
    again: list[Item] = []
    at = 0
    for _, _, item in case.items():
        shift = at + 1 - item.extent.start
        again.append(replace(item, spans=tuple((s + shift, e + shift) for s, e in item.spans)))
        at += 1 + len(item.extent)
    return replace(case, requests=(*case.requests, Request(at + 1, 0, at + 1, tuple(again))))


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
