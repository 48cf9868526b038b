"""A third-party target in about 40 lines: one engine function behind the harness's Target protocol.

The "engine" here is ``toy_chunk``, standing in for your engine's own code; the
adapter declares the one capability it implements (R1, ``chunk``), so the
harness runs the R1 checks and skips the rest with the reason it gives.
Register it from your package's ``pyproject.toml``::

    [project.entry-points."mmharness.targets"]
    toy = "toy_adapter:ToyTarget"

then ``mmharness targets`` lists ``toy`` and ``mmharness check --target toy`` checks it.
"""

from typing import ClassVar

from mmharness.api import CHUNK, Case, Target


def toy_chunk(embedding, start, length, spans):
    """The engine function under test: rows of the placeholder positions in [start, start + length)."""
    positions = [p for first, last in spans for p in range(first, last + 1)]
    inside = [k for k, p in enumerate(positions) if start <= p < start + length]
    before = sum(p < start for p in positions)
    flat = embedding.reshape(-1, embedding.shape[-1])
    return flat[inside], before, before + len(inside)


class ToyTarget(Target):
    """Subclassing ``Target`` gives the defaults of what it does not declare: paths, notes(), unloaded."""

    name = "toy"
    capabilities = frozenset({CHUNK})
    missing: ClassVar[dict[str, str]] = {"precomputed": "the toy engine has no precomputed embeddings"}

    def describe(self) -> dict:
        return {"target": self.name, "engine": "toy_chunk", "capabilities": sorted(self.capabilities)}

    def embedding_chunk(self, embedding, case: Case, request: int):
        req = case.requests[request]
        spans = [span for item in req.items for span in item.spans]
        return toy_chunk(embedding, req.prefix_len, req.extend_len, spans)


assert isinstance(ToyTarget(), Target)
