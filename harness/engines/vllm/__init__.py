"""vLLM: its releases, source trees and installed package as targets, driven step by step."""

from __future__ import annotations

from pathlib import Path

from mmharness.targets.specs import SpecForm

RELEASE = "vllm=="
FUZZ_TARGETS = {"vllm-mm-kwargs": "mmharness.engines.vllm.fuzz"}
"""Fuzz target name -> the module holding its entry point."""


def _installed(spec: str):
    from mmharness.engines.vllm import adapter

    return adapter.installed()


def _release(spec: str):
    from mmharness.engines.vllm import adapter

    return adapter.from_release(spec.removeprefix(RELEASE))


def _path(spec: str):
    from mmharness.engines.vllm import adapter

    return adapter.from_path(spec)


def _claims(spec: str) -> bool:
    """A path to a vLLM package, or a directory holding one (the driver needs several files together)."""
    from mmharness.engines.vllm.layout import RULES

    given = Path(spec).expanduser()
    return given.is_dir() and RULES.package_dir(given) is not None


SPEC_FORMS = (
    SpecForm("vllm", "the installed vllm package, imported normally", lambda s: s == "vllm", _installed),
    SpecForm(
        "vllm==X",
        "vLLM release X, downloaded once and loaded by path (e.g. vllm==0.33.0)",
        lambda s: s.startswith(RELEASE),
        _release,
    ),
    SpecForm("PATH", "a dir holding vllm/ (wheel, site-packages, a checkout)", _claims, _path, paths=True),
)
