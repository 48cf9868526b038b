"""Harness faults: an error raised by the harness's own supply code is its gap, never the engine's verdict.

A loaded engine runs on what the harness supplies: the shims and stand-ins it calls, the items, tensors
and stand-in model built for it, the step driver that calls it. An exception raised there says nothing
about the engine, so ``gap`` makes it a ``HarnessGap`` naming the harness part, where
- the raise's own frame (torch's and the standard library's skipped) lies in a supply module
  (``is_supply``), or in harness code that engine code called, or
- the engine read an attribute an object the harness built lacks: an instance (or class) of a supply
  module, or a value handed over as ``supplied`` (a plain tensor where a processor may hand a tensor
  that carries more).
Not a fault: a stand-in refusing what the engine handed it as the engine's own code would (a wrong sum,
an item it was never given), its error marked ``engines_own``; and a raise in a target whose code is the
harness's (the reference, the engine model) or in an engine adapter's protocol methods (which read the
engine's answers back), the code under test.
"""

from __future__ import annotations

import sys
import traceback
import weakref
from typing import Any, TypeVar

from mmharness.targets.base import HarnessGap

ENGINES_OWN = "_mm_engines_own"
"""The attribute ``engines_own`` sets on an error; an exception class a stand-in raises only as the engine's
outcome (an exit the engine asked for) may set it ``True`` on the class."""
_NOT_SUPPLY = (
    "mmharness.model",
    "mmharness.reference",
    "mmharness.checks",
    "mmharness.targets.reference",
    "mmharness.targets.engine_model",
    "mmharness.targets.mutants",
)
"""The harness's modules that are no supply: the domain, the checks, and the harness's own targets."""
_LIBRARIES = frozenset({*sys.stdlib_module_names, "torch", "numpy"})

_E = TypeVar("_E", bound=BaseException)
_T = TypeVar("_T")


def engines_own(error: _E) -> _E:
    """Mark ``error``, raised by a stand-in on what the engine handed it, as the engine's own outcome."""
    setattr(error, ENGINES_OWN, True)
    return error


_SUPPLIED: dict[int, tuple[weakref.ref, str]] = {}


def supplied(value: _T, what: str) -> _T:
    """``value``, remembered (while it lives) as what the harness hands the engine under the name
    ``what``: an attribute the engine reads and it lacks is the harness's gap. A value that cannot be
    weakly referenced (a list) is not remembered."""
    key = id(value)
    try:
        ref = weakref.ref(value, lambda dead: _forget(key, dead))
    except TypeError:
        return value
    _SUPPLIED[key] = (ref, what)
    return value


def _forget(key: int, dead: weakref.ref) -> None:
    entry = _SUPPLIED.get(key)
    if entry is not None and entry[0] is dead:
        del _SUPPLIED[key]


def supplied_as(value: Any) -> str | None:
    """What the harness supplied ``value`` as (``supplied``), or ``None``."""
    entry = _SUPPLIED.get(id(value))
    return entry[1] if entry is not None and entry[0]() is value else None


def is_supply(module: str) -> bool:
    """Whether a module is the harness's supply code: a harness module outside ``_NOT_SUPPLY`` and no
    engine adapter (``engines.NAME.adapter``: its protocol methods read the engine's answers back)."""
    if not module.startswith("mmharness.") or module.rpartition(".")[2] == "adapter":
        return False
    return not any(module == name or module.startswith(name + ".") for name in _NOT_SUPPLY)


def gap(error: BaseException) -> HarnessGap | None:
    """The harness's gap behind ``error`` (itself, its cause or the error it was raised while handling),
    or ``None`` where it is the target's outcome; an error marked ``engines_own`` ends the search."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if getattr(error, ENGINES_OWN, False):
            return None
        found = _attribute_gap(error) or _raised_gap(error)
        if found is not None:
            return found
        seen.add(id(error))
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    return None


def _attribute_gap(error: BaseException) -> HarnessGap | None:
    """An attribute read on an object the harness built that it lacks."""
    if not isinstance(error, AttributeError) or error.obj is None or not error.name:
        return None
    obj, name = error.obj, error.name
    what = supplied_as(obj)
    if what is not None:
        built = f"{what}, which the harness supplies as a plain {type(obj).__name__} lacking it"
    else:
        cls = obj if isinstance(obj, type) else type(obj)
        if not is_supply(cls.__module__):
            return None
        what = f"the harness's {cls.__name__}"
        built = f"{what}, which lacks it"
    return HarnessGap(
        f"the engine read {name!r} of {built}: the harness cannot supply it", what=f"{what}.{name}"
    )


def _raised_gap(error: BaseException) -> HarnessGap | None:
    """A raise in supply code, or in harness code that engine code called."""
    frames = [
        (frame.f_globals.get("__name__", ""), getattr(frame.f_code, "co_qualname", frame.f_code.co_name))
        for frame, _ in traceback.walk_tb(error.__traceback__)
    ]
    kept = [(module, name) for module, name in frames if module.partition(".")[0] not in _LIBRARIES]
    if not kept or not kept[-1][0].startswith("mmharness."):
        return None
    module, name = kept[-1]
    called_by_engine = len(kept) > 1 and not kept[-2][0].startswith("mmharness.")
    if not (is_supply(module) or called_by_engine):
        return None
    where = f"{module.removeprefix('mmharness.')}.{name}"
    return HarnessGap(
        f"the harness's own {where} raised {type(error).__name__}({str(error)!r}): a fault in what the"
        " harness supplies, not the engine's",
        what=where,
    )
