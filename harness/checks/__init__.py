"""Checks: named properties over examples, each guarding one rule (see ``registry``)."""

from mmharness.checks.outcome import Failure, Hazard
from mmharness.checks.registry import CHECKS, Check, all_checks, select

__all__ = ["CHECKS", "Check", "Failure", "Hazard", "all_checks", "select"]
