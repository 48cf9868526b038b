"""Hypothesis strategies for mmharness: batches of multimodal requests and their parts.

A thin facade, like ``hypothesis.strategies``: everything public is re-exported
here and listed in ``__all__``; the topic modules live in ``strategies._internal``.
Importing this package never imports torch.
"""

from strategies._internal.cases import cases
from strategies._internal.coverage import COVERAGES
from strategies._internal.grids import grid_cases, grid_items, grids
from strategies._internal.malformed import MALFORMED_KINDS, malformed_cases
from strategies._internal.requests import requests
from strategies._internal.schedules import schedules
from strategies._internal.spans import spans

__all__ = [
    "COVERAGES",
    "MALFORMED_KINDS",
    "cases",
    "grid_cases",
    "grid_items",
    "grids",
    "malformed_cases",
    "requests",
    "schedules",
    "spans",
]
