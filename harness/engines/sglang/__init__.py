"""SGLang: its releases, forks and installed package as targets, and its payload parsers as fuzz targets."""

from __future__ import annotations

from pathlib import Path

from mmharness.targets.specs import SpecForm

RELEASE = "sglang=="
FUZZ_TARGETS = {
    "sglang-image-data": "mmharness.engines.sglang.fuzz",
    "sglang-mm-data": "mmharness.engines.sglang.fuzz",
    "sglang-mm-items": "mmharness.engines.sglang.fuzz",
}
"""Fuzz target name -> the module holding its entry point."""


def _installed(spec: str):
    from mmharness.engines.sglang import adapter

    return adapter.installed()


def _release(spec: str):
    from mmharness.engines.sglang import adapter

    return adapter.from_release(spec.removeprefix(RELEASE))


def _path(spec: str):
    from mmharness.engines.sglang import adapter

    return adapter.from_path(spec)


def _claims(spec: str) -> bool:
    """A path to an SGLang package (or a checkout holding one), or one of its rules files."""
    from mmharness.engines.sglang.layout import RULES

    given = Path(spec).expanduser()
    if given.is_file():
        return given.name in RULES.single_files
    return given.is_dir() and RULES.package_dir(given) is not None


SPEC_FORMS = (
    SpecForm(
        "sglang", "the installed sglang package, imported normally", lambda s: s == "sglang", _installed
    ),
    SpecForm(
        "sglang==X",
        "SGLang release X, downloaded once and loaded by path (e.g. sglang==0.5.23)",
        lambda s: s.startswith(RELEASE),
        _release,
    ),
    SpecForm(
        "PATH",
        "a dir holding sglang/ (wheel, site-packages, fork's python/), or a rules file",
        _claims,
        _path,
        paths=True,
        files=True,
    ),
)
