"""Hypothesis strategies for mmharness: batches of multimodal requests and their parts.

A thin facade, like ``hypothesis.strategies``: everything public is re-exported
here and listed in ``__all__``; the topic modules live in ``mmharness.strategies._internal``.
Importing this package never imports torch.
"""

from mmharness.strategies._internal.cases import cases
from mmharness.strategies._internal.coverage import COVERAGES
from mmharness.strategies._internal.grids import grid_cases, grid_items, grids
from mmharness.strategies._internal.malformed import MALFORMED_KINDS, malformed_cases
from mmharness.strategies._internal.programs import prefill_programs
from mmharness.strategies._internal.requests import requests
from mmharness.strategies._internal.schedules import eviction_runs, run_options, schedules
from mmharness.strategies._internal.spans import spans

__all__ = [
    "COVERAGES",
    "MALFORMED_KINDS",
    "cases",
    "eviction_runs",
    "grid_cases",
    "grid_items",
    "grids",
    "malformed_cases",
    "prefill_programs",
    "requests",
    "run_options",
    "schedules",
    "spans",
]
