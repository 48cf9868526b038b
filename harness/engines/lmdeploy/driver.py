"""LMDeploy's sequence methods and chunk planner run as written, on stand-in sequences.

``SchedulerSequence`` wants a session and a whole engine configuration; a ``Sequence`` stand-in holds
only what the two rules read: the block size (``SequenceMeta``), the release's own span records (a
``PrefixCacheState`` of ``MultimodalSpan``s, ``HistoryEmbeddings`` of precomputed items, a
``HistoryMultiModals`` of ``MultiModalData``) and the step counters. A case's item becomes one
half-open range ``[first, last + 1)``, as LMDeploy's processors make it; a precomputed item is an
``InputEmbeddings`` (its embeddings are handed in, not encoded). Anything else a method reads is a
``HarnessGap`` naming it (``StandIn``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mmharness.engines.lmdeploy import layout
from mmharness.model import Request
from mmharness.targets import loader
from mmharness.targets.base import BLOCK_KEYS, CHUNK_PLAN, PREFIX_RESUME
from mmharness.targets.standin import StandIn

CLAMP = "clamp_prefix_cache_match_step"
IDENTITY = "get_prefix_cache_extra_identity"
PLAN = "plan_long_context_chunk"
LIMIT = "get_long_context_chunk_limit"
SORT = "sort_long_context_multimodals"
_CLASSES = {
    "SchedulerSequence": layout.MESSAGES,
    "SequenceMeta": layout.MESSAGES,
    "HistoryEmbeddings": layout.MESSAGES,
    "InputEmbeddings": layout.MESSAGES,
    "HistoryMultiModals": layout.MESSAGES,
    "PrefixCacheState": layout.PREFIX_STATE,
    "MultimodalSpan": layout.PREFIX_STATE,
    "MultiModalData": layout.DATA_TYPE,
}


CLAMP_NEEDS = ("SchedulerSequence", "SequenceMeta", "HistoryEmbeddings", "PrefixCacheState", "MultimodalSpan")
PLAN_NEEDS = ("HistoryMultiModals", "MultiModalData")
"""The classes each rule's stand-in is built from, besides its functions."""


class Sequence(StandIn):
    """A ``SchedulerSequence`` without its constructor (a gap names LMDeploy)."""

    _mm_engine = "LMDeploy"


@dataclass(frozen=True)
class Pieces:
    """The release's classes and functions the two rules run through; ``None`` where it lacks one."""

    classes: dict[str, type]
    plan: Callable[..., Any] | None
    limit: Callable[..., Any] | None
    sort: Callable[..., Any] | None

    def functions(self) -> dict[str, Callable[..., Any]]:
        sequence = self.classes.get("SchedulerSequence")
        found = {f"SchedulerSequence.{name}": getattr(sequence, name, None) for name in (CLAMP, IDENTITY)}
        found.update({PLAN: self.plan, LIMIT: self.limit, SORT: self.sort})
        return {name: fn for name, fn in found.items() if callable(fn)}

    def sequence(self, request: Request, *, block_size: int = 1, start: int = 0) -> Sequence:
        """A stand-in of the request's sequence, its prompt consumed up to ``start``."""
        c = self.classes
        spans, embeddings, datas = [], [], {}
        for item in request.items:
            first, end = item.extent.start, item.extent.stop
            if item.precomputed:
                embeddings.append(c["InputEmbeddings"](None, first, end))
                continue
            spans.append(c["MultimodalSpan"](first, end, item.modality, str(item.hash)))
            datas.setdefault(item.modality, []).append(c["MultiModalData"](data=None, start=first, end=end))
        return Sequence(
            c["SchedulerSequence"],
            "SchedulerSequence",
            _seq_meta=c["SequenceMeta"](block_size=block_size, enable_prefix_caching=True),
            prefix_cache=c["PrefixCacheState"](multimodal_spans=spans),
            history_embeddings=c["HistoryEmbeddings"](embeddings),
            history_multimodals=c["HistoryMultiModals"](datas),
            _num_history_ids=start,
            _num_token_ids=request.seq_len - start,
        )

    def clamp(self, seq: Sequence, step: int) -> int:
        return seq.clamp_prefix_cache_match_step(step)

    def chunks(self, seq: Sequence, budget: int) -> list[tuple[int, int]]:
        """Plan chunk after chunk as the input maker's chunker does (the budget and the sorted items
        taken once, each item dropped once a chunk passes its end), until the prompt is done or a chunk
        makes no progress (the last planned is then the empty one)."""
        limit = self.limit(seq, budget)
        pending = self.sort(seq.get_input_multimodals())
        planned = []
        for _ in range(seq._num_token_ids):  # a chunk of one token at least: never more rounds
            plan = self.plan(seq, limit, pending)
            planned.append((plan.chunk_start, plan.chunk_end))
            if plan.chunk_size <= 0 or plan.chunk_end >= seq.num_all_ids:
                break
            seq._num_history_ids += plan.chunk_size
            seq._num_token_ids -= plan.chunk_size
            pending = {k: [d for d in v if d.end > plan.chunk_end] for k, v in pending.items()}
            pending = {k: v for k, v in pending.items() if v}
        return planned


def detect(engine: loader.Engine) -> tuple[Pieces, dict[str, str]]:
    """The release's pieces, and each capability it lacks -> why (the function or class absent)."""
    classes = {}
    for name, module_name in _CLASSES.items():
        found = getattr(engine.module(module_name), name, None)
        if isinstance(found, type):
            classes[name] = found
    long_context = engine.module(layout.LONG_CONTEXT)
    pieces = Pieces(classes, *(getattr(long_context, name, None) for name in (PLAN, LIMIT, SORT)))
    lacking = {}
    absent = [name for name in (*CLAMP_NEEDS, *PLAN_NEEDS) if name not in classes]
    for capability, method in ((PREFIX_RESUME, CLAMP), (BLOCK_KEYS, IDENTITY)):
        if set(absent) & set(CLAMP_NEEDS) or not hasattr(classes["SchedulerSequence"], method):
            lacking[capability] = f"this release has no SchedulerSequence.{method}"
    if absent or not all(map(callable, (pieces.plan, pieces.limit, pieces.sort))):
        planner = layout.RULES.files[layout.LONG_CONTEXT]
        lacking[CHUNK_PLAN] = f"this release has no {planner} planner ({PLAN}, {LIMIT}, {SORT})"
    return pieces, lacking
