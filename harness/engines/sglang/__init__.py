"""SGLang: its releases, forks and installed package as targets, and its payload parsers as fuzz targets."""

from __future__ import annotations

from pathlib import Path

from mmharness.targets.engine import Engine
from mmharness.targets.specs import engine_forms

NAME = "sglang"
"""The engine's name: its entry point's, and its specs' (``sglang``, ``sglang==X``)."""

FUZZ_TARGETS = {
    "sglang-image-data": "mmharness.engines.sglang.fuzz",
    "sglang-mm-data": "mmharness.engines.sglang.fuzz",
    "sglang-mm-items": "mmharness.engines.sglang.fuzz",
}
"""Fuzz target name -> the module holding its entry point."""


def _claims(spec: str) -> bool:
    """A path to an SGLang package under any name (a fork's ``myfork/`` too), or a checkout holding one,
    or one of its rules files; several renamed copies are refused (``Layout.package_dir``)."""
    from mmharness.engines.sglang.layout import RULES

    given = Path(spec).expanduser()
    if given.is_file():
        return given.name in RULES.single_files
    return given.is_dir() and RULES.package_dir(given) is not None


SPEC_FORMS = engine_forms(
    NAME,
    "SGLang",
    "mmharness.engines.sglang.adapter",
    example="0.5.23",
    path="a dir holding sglang/ (wheel, site-packages, fork's python/; or its copy under another name),"
    " or a rules file",
    claims=_claims,
    files=True,
)

ENGINE = Engine(NAME, __name__, SPEC_FORMS, FUZZ_TARGETS)
"""What the harness knows of this engine (``mmharness.targets.engine``), registered in pyproject.toml."""
