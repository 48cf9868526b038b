"""Engine objects without their constructors: a ``StandIn`` holds only the state a method reads.

An engine class's constructor often wants a whole engine configuration (a
scheduler, a model runner). A stand-in skips it: it carries the state the
method under test reads and answers every other name with the class's own
function, bound to it, so the method runs as written. A state attribute it
lacks is a ``HarnessGap`` naming it (could not test), never a divergence.
Any engine package may use it (vLLM's step driver does).
"""

from __future__ import annotations

import inspect
import types
from typing import Any, ClassVar

from mmharness.targets.base import HarnessGap


class StandIn:
    """An engine object without its constructor: set state, plus the engine class's own methods."""

    _mm_engine: ClassVar[str] = "the engine"
    """Who reads the state, in a gap's message (a subclass names its engine). Every name the stand-in
    itself holds starts ``_mm_``, so none hides a name the engine's method reads."""

    def __init__(self, cls: type, what: str, /, **state: Any) -> None:
        object.__setattr__(self, "_mm_cls", cls)
        object.__setattr__(self, "_mm_what", what)
        self.__dict__.update(state)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        member = inspect.getattr_static(self._mm_cls, name, None)
        if isinstance(member, property):
            return member.fget(self)
        if isinstance(member, (types.FunctionType, staticmethod, classmethod)):
            bound = member.__get__(self, self._mm_cls)
            self.__dict__[name] = bound  # a method is looked up once per stand-in, not per call
            return bound
        raise HarnessGap(
            f"{self._mm_engine}'s {self._mm_what} read {name!r}, which the harness's stand-in does not hold",
            what=f"{self._mm_what}.{name}",
        )


def parameters(fn: Any, *, required: bool = False) -> list[str]:
    """The names ``fn`` takes by name (``self`` and ``*args``/``**kwargs`` left out); ``required``: only
    those without a default."""
    params = list(inspect.signature(fn).parameters.values())
    if params and params[0].name == "self":
        params = params[1:]
    return [
        p.name
        for p in params
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and (not required or p.default is p.empty)
    ]
