"""The engine contract: what an engine package declares, in one typed record.

An engine package (``mmharness.engines.NAME``, or a third party's) exposes one
``ENGINE``, an ``Engine``, and registers it in the ``mmharness.engines``
entry-point group (``NAME = "package:ENGINE"``; the shipped engines are declared
in ``pyproject.toml``). The spec registry (``mmharness.targets.specs.engines``)
reads the group; spec forms and fuzz targets come from the engines it finds,
so another engine is an added package and an entry point, not an edit of a list.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mmharness.targets.specs import SpecForm

ENGINE_GROUP = "mmharness.engines"
"""The entry-point group an engine is registered in: each entry point's object is an ``Engine``."""


@dataclass(frozen=True, eq=False)
class Engine:
    """One serving engine as the harness sees it: its name, how its targets are written, its fuzzers."""

    name: str
    """Its short name: the entry point's name, and what its specs start with (``NAME``, ``NAME==X``)."""
    package: str
    """The package holding everything that knows the engine (``__name__`` of the one defining
    ``ENGINE``): a target whose class is defined below it belongs to the engine (``mmharness bench``)."""
    spec_forms: tuple[SpecForm, ...]
    """How its targets are written (``mmharness targets``); ``specs.engine_forms`` builds the usual
    three (installed, ``NAME==X``, a path) from its adapter's ``installed``, ``from_release`` and
    ``from_path``."""
    fuzz_targets: Mapping[str, str] = field(default_factory=dict)
    """Fuzz target name -> the module holding its entry point: ``main(argv, *, parser, target,
    baseline, strict, scratch)``, ``describe(parser, target)`` and ``DEFAULT_TARGET`` (a spec of the
    engine; ``mmharness fuzz NAME`` and ``mmharness bench`` import it only when that fuzzer runs)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "spec_forms", tuple(self.spec_forms))
        object.__setattr__(self, "fuzz_targets", dict(self.fuzz_targets))
