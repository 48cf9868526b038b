"""LMDeploy's PyTorch engine: its releases, source trees and installed package as targets."""

from __future__ import annotations

from pathlib import Path

from mmharness.targets.engine import Engine
from mmharness.targets.specs import engine_forms

NAME = "lmdeploy"
"""The engine's name: its entry point's, and its specs' (``lmdeploy``, ``lmdeploy==X``)."""

FUZZ_TARGETS: dict[str, str] = {}
"""Fuzz target name -> the module holding its entry point: none yet (no LMDeploy parser is fuzzed)."""


def _claims(spec: str) -> bool:
    """A path to an LMDeploy package under any name, or a directory holding one (``Layout.package_dir``)."""
    from mmharness.engines.lmdeploy.layout import RULES

    given = Path(spec).expanduser()
    return given.is_dir() and RULES.package_dir(given) is not None


SPEC_FORMS = engine_forms(
    NAME,
    "LMDeploy",
    "mmharness.engines.lmdeploy.adapter",
    example="0.18.0",
    path="a dir holding lmdeploy/ (wheel, site-packages, a checkout; or its copy under another name)",
    claims=_claims,
)

ENGINE = Engine(NAME, __name__, SPEC_FORMS, FUZZ_TARGETS)
"""What the harness knows of this engine (``mmharness.targets.engine``), registered in pyproject.toml."""
