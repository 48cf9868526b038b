"""Placeholders for the engine names the harness does not load, and the record of what was faked.

An engine file loaded by path imports dozens of names from the rest of its
engine. Those the rules need faithfully get a *shim* from the engine's package
(``mmharness.engines.NAME.shims``); every other name gets a ``Stub``. A stub
survives whatever module-level code does with an imported name, because a file
must load before anything can be tested. Once the load is over it turns loud:
using a stub at call time (calling it, reading its attributes, taking its truth
value, comparing it) records the name and raises ``StubReached``, so a run that
reaches code the harness did not load becomes a *could not test* verdict
naming the stub, never an engine divergence. ``isinstance`` against a stub
stays silent and false at call time too: nothing the harness builds is an
instance of an engine class it did not load, which is the faithful answer.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mmharness.targets.base import HarnessGap


class StubReached(HarnessGap, AttributeError):
    """Engine code used, at call time, a name the harness serves from a stub.

    An ``AttributeError`` too, so ``getattr(stub, name, default)`` in engine
    code behaves as it would on a missing attribute; the record keeps the name
    either way.
    """


@dataclass
class Record:
    """What one load faked: stubbed and shimmed names, stubbed packages, and stubs used at call time."""

    stubbed: set[str] = field(default_factory=set)
    shimmed: set[str] = field(default_factory=set)
    packages: set[str] = field(default_factory=set)
    """Third-party top-level packages served from stubs (only when a load opts in, see the loader)."""
    item_misses: set[str] = field(default_factory=set)
    """Attributes the engine asked of the harness's item type that it does not know."""
    armed: bool = False
    """Set when the load is over: from then on a stub used is a harness gap."""
    reached: list[str] = field(default_factory=list)
    """Names used at call time, in order (a gap even where engine code caught the error)."""
    settings: dict[str, tuple[Any, str]] = field(default_factory=dict)
    """Engine settings the loaded code read: name -> (value, where it came from); see
    ``mmharness.targets.settings``."""
    settings_note: str | None = None
    """Why the engine's settings declarations are not at hand, when they are not (a note of the target)."""
    followed: dict[str, str] = field(default_factory=dict)
    """Engine modules run from the target's own tree although no layout names them (a fork's helper
    module, see ``loader.Namespace.follows``): module -> the engine module that imported it."""
    unfollowed: dict[str, str] = field(default_factory=dict)
    """Modules in the followed directories that stayed stubs: module -> why (work on import, an error)."""

    def reach(self, name: str) -> StubReached:
        self.reached.append(name)
        return StubReached(
            f"the engine used {name} at run time, which the harness serves from a stub", what=name
        )


class Stub:
    """A placeholder for an engine name the harness does not load.

    While its file loads it survives anything: calls, attribute reads,
    subclassing (``__mro_entries__``, class keywords such as ``msgspec.Struct``'s
    ``kw_only=True`` included), decorating (a call with one function or class
    returns it unchanged), annotations (``X | None``, ``X[int]``), ``isinstance``
    (never matches), truth tests (falsy, so feature switches read from it are off).
    After the load (``record.armed``) every use but ``isinstance`` raises
    ``StubReached``.

    A stub may stand for a module (``from sglang.srt.managers import
    schedule_batch``), so a ``resolve`` hook, when given, answers its attributes:
    that is how ``schedule_batch.MultimodalDataItem`` still reaches a shim.
    """

    __slots__ = ("_mm_class", "_mm_name", "_mm_record", "_mm_resolve")

    def __init__(
        self,
        name: str,
        record: Record | None = None,
        resolve: Callable[[str, str], Any] | None = None,
    ) -> None:
        object.__setattr__(self, "_mm_name", name)
        object.__setattr__(self, "_mm_class", None)
        object.__setattr__(self, "_mm_record", record)
        object.__setattr__(self, "_mm_resolve", resolve)

    def _mm_use(self, how: str = "") -> None:
        """Raise when used after the load: the harness cannot stand in for this name."""
        record = self._mm_record
        if record is not None and record.armed:
            raise record.reach(f"{self._mm_name}{how}")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        if self._mm_resolve is not None:
            return self._mm_resolve(self._mm_name, name)
        self._mm_use(f".{name}")
        return Stub(f"{self._mm_name}.{name}", self._mm_record)

    def __setattr__(self, name: str, value: Any) -> None:
        """Engine code may set attributes on a stub at load time (a registry, a flag); ignore them."""
        self._mm_use(f".{name} = ...")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._mm_use("()")
        if len(args) == 1 and not kwargs and (inspect.isfunction(args[0]) or isinstance(args[0], type)):
            return args[0]
        return Stub(f"{self._mm_name}()", self._mm_record)

    def __mro_entries__(self, bases: tuple) -> tuple[type]:
        if self._mm_class is None:
            name = self._mm_name.rsplit(".", 1)[-1]
            namespace = {"__doc__": f"stub of {self._mm_name}", "__init_subclass__": _any_class_keywords}
            object.__setattr__(self, "_mm_class", type(name, (), namespace))
        return (self._mm_class,)

    def __getitem__(self, key: Any) -> Stub:
        self._mm_use("[...]")
        return self

    def __or__(self, other: Any) -> Stub:
        self._mm_use(" | ...")
        return self

    __ror__ = __or__

    def __instancecheck__(self, obj: Any) -> bool:
        return False

    def __subclasscheck__(self, cls: Any) -> bool:
        return False

    def __bool__(self) -> bool:
        self._mm_use(" (as a truth value)")
        return False

    def __iter__(self):
        self._mm_use(" (iterated)")
        return iter(())

    def __len__(self) -> int:
        self._mm_use(" (len)")
        return 0

    def __enter__(self) -> Stub:
        self._mm_use(" (as a context manager)")
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def _mm_compare(self, other: Any) -> Any:
        self._mm_use(" (compared)")
        return NotImplemented

    __lt__ = __le__ = __gt__ = __ge__ = _mm_compare

    def _mm_number(self, other: Any) -> Any:
        self._mm_use(" (in arithmetic)")
        return NotImplemented

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _mm_number
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _mm_number

    def __index__(self) -> int:
        self._mm_use(" (as a number)")
        raise TypeError(f"{self!r} is not a number")

    __int__ = __float__ = __index__

    def __repr__(self) -> str:
        return f"<mmharness stub {self._mm_name}>"


def _any_class_keywords(cls: type, **keywords: Any) -> None:
    """A stub base class takes the class keywords its real counterpart takes, and ignores them."""
