"""A toy third engine, built on ``mmharness.api`` alone, with nothing of the checkout edited.

``release/toyserve/`` stands in for an engine's package: one rule file, R1's chunk. ``adapter.py``
loads it by path (a ``Layout`` and a ``Factory`` with no shims) into a ``LoadedTarget``. Its one spec
form, ``toy``, is that copy; its one fuzz target, ``toy-parser``, describes itself (running it needs
atheris and is not asked of it). The tests register ``ENGINE`` in the ``mmharness.engines`` entry-point
group by patching ``importlib.metadata.entry_points`` and hold it to ``mmharness.testing``.
"""

from __future__ import annotations

from mmharness.api import Engine, SpecForm, Target


def _resolve(spec: str) -> Target:
    from toy_engine.adapter import FACTORY, RELEASE

    return FACTORY.from_path(str(RELEASE), name="toy")


TOY = SpecForm("toy", "the toy engine (its rules, in the tests)", lambda s: s == "toy", _resolve)

ENGINE = Engine("toy", __name__, (TOY,), {"toy-parser": "toy_engine.fuzz"})
