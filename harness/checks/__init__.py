"""Checks: named properties over examples, each guarding one rule (see ``registry``)."""

from mmharness.checks.outcome import Failure, Hazard
from mmharness.checks.registry import CHECKS, Check, SelectionError, all_checks, select, selected

__all__ = [
    "CHECKS",
    "Check",
    "Failure",
    "Hazard",
    "SelectionError",
    "all_checks",
    "select",
    "selected",
]
