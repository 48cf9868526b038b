"""vLLM: its releases, source trees and installed package as targets, driven step by step."""

from __future__ import annotations

from pathlib import Path

from mmharness.targets.engine import Engine
from mmharness.targets.specs import engine_forms

NAME = "vllm"
"""The engine's name: its entry point's, and its specs' (``vllm``, ``vllm==X``)."""

FUZZ_TARGETS = {"vllm-mm-kwargs": "mmharness.engines.vllm.fuzz"}
"""Fuzz target name -> the module holding its entry point."""


def _claims(spec: str) -> bool:
    """A path to a vLLM package under any name (a fork's ``myvllm/`` too), or a directory holding one (the
    driver needs several files together); several renamed copies are refused (``Layout.package_dir``)."""
    from mmharness.engines.vllm.layout import RULES

    given = Path(spec).expanduser()
    return given.is_dir() and RULES.package_dir(given) is not None


SPEC_FORMS = engine_forms(
    NAME,
    "vLLM",
    "mmharness.engines.vllm.adapter",
    example="0.33.0",
    path="a dir holding vllm/ (wheel, site-packages, a checkout; or its copy under another name)",
    claims=_claims,
)

ENGINE = Engine(NAME, __name__, SPEC_FORMS, FUZZ_TARGETS)
"""What the harness knows of this engine (``mmharness.targets.engine``), registered in pyproject.toml."""
