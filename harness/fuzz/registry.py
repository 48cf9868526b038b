"""Every fuzz target by name: the case parser, then each engine package's ``FUZZ_TARGETS``.

``mmharness fuzz`` offers these names and ``mmharness bench`` measures them; both
read them here, so neither command imports the other. Only names and module
paths are held: an entry point's module (which may load an engine) is imported
when that fuzzer runs.
"""

from __future__ import annotations

import importlib

from mmharness.targets.specs import ENGINES

CASE_PARSER = "case-parser"
"""The harness's own parser: the one fuzz target that needs no engine release."""

BY_ENGINE: dict[str, dict[str, str]] = {
    engine: dict(importlib.import_module(engine).FUZZ_TARGETS) for engine in ENGINES
}
"""Engine package -> its fuzz targets (name -> entry point module): an engine's fuzzers load only its
releases, so a run against one engine's target skips the others'."""

FUZZ_PARSERS: dict[str, str] = {
    CASE_PARSER: "mmharness.fuzz.case_parser",
    **{name: module for targets in BY_ENGINE.values() for name, module in targets.items()},
}
"""Fuzz target name -> the module holding its entry point: the case parser's, then each engine's."""
