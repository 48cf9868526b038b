"""Every fuzz target by name: the case parser, then each registered engine's ``fuzz_targets``, then
every check as ``check:ID`` (``mmharness.fuzz.checks``: the check's Hypothesis test on any target).

``mmharness fuzz`` offers these names (``--list`` lists them with their engines) and
``mmharness bench`` measures them; both read them here, so neither command imports
the other. Only names and module paths are held: an entry point's module (which may
load an engine) is imported when that fuzzer runs. The engines are
``mmharness.targets.specs.engines()``, read when first asked for.
"""

from __future__ import annotations

from mmharness.targets.specs import engines

CASE_PARSER = "case-parser"
"""The harness's own parser: the one fuzz target that needs no engine release."""

CASE_PARSER_MODULE = "mmharness.fuzz.case_parser"

CHECK_PREFIX = "check:"
"""``check:ID``: the check ``ID`` fuzzed against a target (``mmharness.fuzz.checks``)."""
CHECKS_MODULE = "mmharness.fuzz.checks"
ANY_ENGINE = "any"
"""A check fuzz target's engine in ``--list``: it runs against any target (``--target``)."""


def by_engine() -> dict[str, dict[str, str]]:
    """Engine package -> its fuzz targets (name -> entry point module): an engine's fuzzers load only its
    releases, so a run against one engine's target skips the others'."""
    return {engine.package: dict(engine.fuzz_targets) for engine in engines()}


def fuzz_parsers() -> dict[str, str]:
    """Fuzz target name -> the module holding its entry point: the case parser's, then each engine's."""
    return {
        CASE_PARSER: CASE_PARSER_MODULE,
        **{name: module for targets in by_engine().values() for name, module in targets.items()},
    }


def check_targets() -> dict[str, str]:
    """``check:ID`` -> ``ID`` for every registered check, in id order."""
    from mmharness.checks import all_checks

    return {f"{CHECK_PREFIX}{check_id}": check_id for check_id in all_checks()}


def listing() -> list[tuple[str, str]]:
    """``(fuzz target, engine name)`` for every fuzz target, the case parser's engine ``-`` (it has
    none), each check's ``any`` (it runs against any target), for ``mmharness fuzz --list``."""
    return (
        [(CASE_PARSER, "-")]
        + [(name, engine.name) for engine in engines() for name in engine.fuzz_targets]
        + [(name, ANY_ENGINE) for name in check_targets()]
    )
