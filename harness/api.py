"""What an adapter or engine author needs, in one place: the target protocol and its hooks, the pieces an
engine package is built from, its vocabulary and the case model.

A facade like ``mmharness.strategies``: everything here is re-exported from
the modules that hold it and listed in ``__all__``; importing it never imports
torch. ``docs/examples/toy_adapter.py`` is a whole target built on it, and
``tests/toy_engine/`` a whole third engine (``mmharness.testing`` checks one).
"""

from mmharness.model import Case, CaseError, Item, Request, Row
from mmharness.reach import Excluded
from mmharness.targets.base import (
    ADJUST,
    ALL_CAPABILITIES,
    BLOCK_KEYS,
    CHUNK,
    CHUNK_PLAN,
    COUNT,
    DRAFT_LOOKAHEAD,
    EMBED_AND_MASK,
    HOOKS,
    METHODS,
    ONE_GRID,
    PER_REQUEST_PATH,
    PRECOMPUTED,
    PREFILL,
    PREFIX_RESUME,
    SCHEDULER_OPTIONS,
    SPLIT,
    WHOLE_ITEMS,
    Encoder,
    EngineHooks,
    FeatureItem,
    HarnessGap,
    Target,
    TargetError,
)
from mmharness.targets.engine import ENGINE_GROUP, Engine
from mmharness.targets.loaded import Factory, LoadedTarget
from mmharness.targets.loader import Layout, NoShims
from mmharness.targets.settings import Declarations
from mmharness.targets.specs import SpecForm, engine_forms
from mmharness.targets.standin import StandIn
from mmharness.tensors import (
    input_ids,
    item_embedding,
    item_features,
    materialise,
    placeholder_id,
    request_embedding,
)

__all__ = [
    "ADJUST",
    "ALL_CAPABILITIES",
    "BLOCK_KEYS",
    "CHUNK",
    "CHUNK_PLAN",
    "COUNT",
    "DRAFT_LOOKAHEAD",
    "EMBED_AND_MASK",
    "ENGINE_GROUP",
    "HOOKS",
    "METHODS",
    "ONE_GRID",
    "PER_REQUEST_PATH",
    "PRECOMPUTED",
    "PREFILL",
    "PREFIX_RESUME",
    "SCHEDULER_OPTIONS",
    "SPLIT",
    "WHOLE_ITEMS",
    "Case",
    "CaseError",
    "Declarations",
    "Encoder",
    "Engine",
    "EngineHooks",
    "Excluded",
    "Factory",
    "FeatureItem",
    "HarnessGap",
    "Item",
    "Layout",
    "LoadedTarget",
    "NoShims",
    "Request",
    "Row",
    "SpecForm",
    "StandIn",
    "Target",
    "TargetError",
    "engine_forms",
    "input_ids",
    "item_embedding",
    "item_features",
    "materialise",
    "placeholder_id",
    "request_embedding",
]
