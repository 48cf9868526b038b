"""``ToyTarget``: the toy engine's rule file loaded by path, behind the ``Target`` protocol."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mmharness.api import ALL_CAPABILITIES, CHUNK, Case, Factory, Layout, LoadedTarget, TargetError

RELEASE = Path(__file__).resolve().parent / "release"
"""A directory holding the toy engine's package, as an unpacked wheel would."""
CHUNK_MODULE = "toyserve.mm.chunk"
LAYOUT = Layout("toyserve", "mm", {CHUNK_MODULE: "mm/chunk.py"})


class ToyTarget(LoadedTarget):
    """R1 through the engine's ``embedding_chunk``; every other rule missing, saying why."""

    engine_label = "the toy engine"

    def __init__(self, engine: Any, name: str) -> None:
        super().__init__(engine, name)
        module = engine.module(CHUNK_MODULE)
        if module is None:
            raise TargetError(f"{name}: {CHUNK_MODULE} did not load ({engine.errors.get(CHUNK_MODULE)})")
        self._chunk: Callable[..., Any] = module.embedding_chunk
        self.capabilities = frozenset({CHUNK})
        self.missing = dict.fromkeys(ALL_CAPABILITIES - self.capabilities, "the toy engine has only R1")

    def rule_functions(self) -> dict[str, Callable[..., Any]]:
        return {"embedding_chunk": self._chunk}

    def embedding_chunk(self, embedding: Any, case: Case, request: int) -> tuple[Any, int, int]:
        req = case.requests[request]
        offsets = [span for item in req.items for span in item.spans]
        with self.watched():
            return self._chunk(embedding, req.prefix_len, req.extend_len, offsets)


FACTORY = Factory(ToyTarget, LAYOUT, ("toyserve/mm/chunk.py",), example="1.0", absent="has no mm/chunk.py")
