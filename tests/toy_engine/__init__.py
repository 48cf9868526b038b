"""A toy third engine for ``tests/test_engine_contract.py``: the whole contract, with nothing else edited.

Its one spec form, ``toy``, resolves to the reference model under another name; its one fuzz target,
``toy-parser``, describes itself (running it needs atheris and is not asked of it). The test registers
``ENGINE`` in the ``mmharness.engines`` entry-point group by patching ``importlib.metadata.entry_points``.
"""

from __future__ import annotations

from mmharness.targets.base import Target
from mmharness.targets.engine import Engine
from mmharness.targets.specs import SpecForm


def _resolve(spec: str) -> Target:
    from mmharness.targets.reference import ReferenceTarget

    return ReferenceTarget()


TOY = SpecForm("toy", "the toy engine (the reference model, renamed)", lambda s: s == "toy", _resolve)

ENGINE = Engine("toy", __name__, (TOY,), {"toy-parser": "toy_engine.fuzz"})
