"""``LMDeployTarget``: an LMDeploy release (by path or installed) behind the ``Target`` protocol.

LMDeploy's PyTorch engine carries two rules in small methods of its scheduler's sequence and one
planner: the prefix-cache clamp (``SchedulerSequence.clamp_prefix_cache_match_step``, R3p) and the
long-context chunk planner (``plan_long_context_chunk`` with ``get_long_context_chunk_limit``, chunk
progress). Each runs as written on a stand-in sequence (``driver``) holding the release's own span
records; the capabilities are those whose functions the loaded files define, and every other rule is
missing with its reason.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable
from typing import Any

from mmharness.engines.lmdeploy import driver, layout
from mmharness.model import Case
from mmharness.targets import base, loader
from mmharness.targets.base import BLOCK_KEYS, CHUNK_PLAN, PREFIX_RESUME, TargetError
from mmharness.targets.loaded import Factory, LoadedTarget

NOT_REACHED = {
    base.CHUNK: "LMDeploy has no chunk function over embedding rows: its input maker hands a chunk the items"
    " wholly inside it (HistoryMultiModals.get_datas, not driven yet)",
    base.PRECOMPUTED: "LMDeploy's precomputed embeddings (InputEmbeddings) are not driven by the harness yet",
    base.PREFILL: "LMDeploy's gather (model_inputs.py, VisionModelInputs) is not driven by the harness yet",
    base.PER_REQUEST_PATH: "LMDeploy has one embedding path, not driven by the harness yet",
    base.EMBED_AND_MASK: "LMDeploy's merge of rows and mask is not driven by the harness yet",
    base.COUNT: "LMDeploy's placeholder count (R4) is not driven by the harness yet",
    base.ADJUST: "LMDeploy has no embedding length adjustment the harness drives yet",
    base.ONE_GRID: "LMDeploy's models take every grid row an item carries: it has no one-grid rule",
    base.SPLIT: "LMDeploy's processors' item split (R5) is not driven by the harness yet",
    base.WHOLE_ITEMS: "LMDeploy has no whole-item option: its chunker never cuts an item (R3c)",
    base.DRAFT_LOOKAHEAD: "LMDeploy's MTP drafter (spec_decode/spec_agent.py) is not driven yet",
    base.SHORT_LISTS: "R3 with per-request lists shorter than the batch: LMDeploy's R3 is not driven yet",
}
NOT_DRIVEN: dict[str, str] = {}
TEXT = "text"
"""A text position's token in a block key (every text position alike: only items can tell blocks apart)."""
_OWNERS = {
    PREFIX_RESUME: (layout.MESSAGES, layout.PREFIX_STATE),
    BLOCK_KEYS: (layout.MESSAGES, layout.PREFIX_STATE),
    CHUNK_PLAN: (layout.LONG_CONTEXT, layout.MESSAGES, layout.DATA_TYPE),
}


class LMDeployTarget(LoadedTarget):
    """R3p and chunk progress through the release's own functions, on stand-in sequences."""

    engine_label = "LMDeploy"
    paths = ("pytorch",)

    def __init__(self, engine: loader.Engine, name: str) -> None:
        super().__init__(engine, name)
        self.pieces, lacking = driver.detect(engine)
        self.capabilities = frozenset(c for c in _OWNERS if c not in lacking)
        self.missing = {**NOT_REACHED, **lacking}
        self.unloaded = base.unloaded(lacking, engine.errors, _OWNERS)

    def engine_fields(self) -> dict[str, Any]:
        """The capabilities, and each rule function found with its form (its parameters as the release
        declares them: what the driver calls it with)."""
        forms = {name: f"{name}{_form(fn)}" for name, fn in self.pieces.functions().items()}
        return {"functions": forms, **self.capability_fields()}

    def rule_functions(self) -> dict[str, Callable[..., Any]]:
        return self.pieces.functions()

    def engine_functions(self) -> dict[str, str | None]:
        driven = dict.fromkeys(self.pieces.functions())
        return {**driven, **NOT_DRIVEN}

    def unreceived(self, case: Case) -> str | None:
        """LMDeploy's item is one half-open range (``MultiModalData``): an item of several spans, or an
        EVS-pruned video, is never made by its processors."""
        if any(len(item.spans) > 1 or item.frame_rows for _, _, item in case.items()):
            return "an item of several spans (LMDeploy's item is one half-open range)"
        return None

    def prefix_resume_step(self, case: Case, request: int, *, hit: int, block_size: int) -> int:
        """The step ``clamp_prefix_cache_match_step`` rewinds a hit of ``hit`` tokens to."""
        seq = self.pieces.sequence(case.requests[request], block_size=block_size)
        with self.watched():
            return self.pieces.clamp(seq, hit)

    def prefix_block_key(self, case: Case, request: int, *, block: int, block_size: int) -> Hashable:
        """The block's key in LMDeploy's prefix trie: its tokens (every item position the modality's one
        placeholder token, as LMDeploy's processors make them) and ``get_prefix_cache_extra_identity``."""
        req = case.requests[request]
        seq = self.pieces.sequence(req, block_size=block_size)
        start, end = block * block_size, (block + 1) * block_size
        tokens = {p: item.modality for item in req.items for p in item.extent}
        with self.watched():
            extra = seq.get_prefix_cache_extra_identity(start, end)
        return tuple(tokens.get(p, TEXT) for p in range(start, end)), extra

    def prefill_chunks(self, case: Case, request: int, *, start: int, budget: int) -> list[tuple[int, int]]:
        """The chunks the planner cuts the prompt into from ``start``, ``budget`` tokens a chunk."""
        seq = self.pieces.sequence(case.requests[request], start=start)
        with self.watched():
            return self.pieces.chunks(seq, budget)


def _form(fn: Callable[..., Any]) -> inspect.Signature:
    """A function's parameters as declared (its return annotation names the harness's module alias)."""
    return inspect.signature(fn).replace(return_annotation=inspect.Signature.empty)


def _target(engine: loader.Engine, name: str) -> LMDeployTarget:
    if not engine.modules:
        raise TargetError(f"{name}: none of LMDeploy's {layout.RULES.kind} loaded ({engine.errors})")
    return LMDeployTarget(engine, name)


FACTORY = Factory(
    _target,
    layout.RULES,
    layout.RELEASE_MEMBERS,
    example="0.18.0",
    absent="has no PyTorch engine multimodal files (lmdeploy/pytorch/messages.py)",
)
load = FACTORY.load
from_path = FACTORY.from_path
fetch = FACTORY.fetch
from_release = FACTORY.from_release
installed = FACTORY.installed
