"""What an adapter author needs, in one place: the target protocol, its vocabulary and the case model.

A facade like ``mmharness.strategies``: everything here is re-exported from
the modules that hold it and listed in ``__all__``; importing it never imports
torch. ``docs/examples/toy_adapter.py`` is a whole target built on it.
"""

from mmharness.model import Case, CaseError, Item, Request, Row
from mmharness.targets.base import (
    ADJUST,
    ALL_CAPABILITIES,
    CHUNK,
    COUNT,
    EMBED_AND_MASK,
    METHODS,
    ONE_GRID,
    PER_REQUEST_PATH,
    PRECOMPUTED,
    PREFILL,
    SPLIT,
    Encoder,
    FeatureItem,
    HarnessGap,
    Target,
    TargetError,
)
from mmharness.targets.specs import SpecForm
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
    "CHUNK",
    "COUNT",
    "EMBED_AND_MASK",
    "METHODS",
    "ONE_GRID",
    "PER_REQUEST_PATH",
    "PRECOMPUTED",
    "PREFILL",
    "SPLIT",
    "Case",
    "CaseError",
    "Encoder",
    "FeatureItem",
    "HarnessGap",
    "Item",
    "Request",
    "Row",
    "SpecForm",
    "Target",
    "TargetError",
    "input_ids",
    "item_embedding",
    "item_features",
    "materialise",
    "placeholder_id",
    "request_embedding",
]
