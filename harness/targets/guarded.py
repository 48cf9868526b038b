"""What engine code loaded by path sees in place of the calls that would end the harness's process.

An engine file calling ``os._exit(0)`` while it loads (or while a check calls
it) would end the harness with exit code 0 and no report: a false pass. So the
loader serves engine code a guarded ``os`` (``GUARDED_OS``: the real module but
for ``_exit`` and ``abort``), whose ending calls raise ``EngineExit`` naming the
caller instead; a ``sys.exit`` (``SystemExit``) is caught where a file loads.
A file that exits while loading is a file that did not load; a call that exits
is the engine's error on that input, compared as any other.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any, NoReturn

from mmharness.targets.faults import ENGINES_OWN


class EngineExit(Exception):
    """Engine code asked to end the process (``os._exit``, ``os.abort``): raised from here, yet the
    engine's own outcome, never a fault of the harness's supply code (``targets.faults``)."""


setattr(EngineExit, ENGINES_OWN, True)


def _caller() -> str:
    frame = sys._getframe(2)
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def _exit(code: int = 0) -> NoReturn:
    raise EngineExit(f"engine code called os._exit({code}) at {_caller()}")


def _abort() -> NoReturn:
    raise EngineExit(f"engine code called os.abort() at {_caller()}")


class _GuardedOs(types.ModuleType):
    """``os`` for engine code: every attribute of the real module, less the two that end the process."""

    def __getattr__(self, name: str) -> Any:  # what the module itself does not define
        return getattr(os, name)

    def __dir__(self) -> list[str]:
        return dir(os)


GUARDED_OS = _GuardedOs("os", os.__doc__)
GUARDED_OS._exit = _exit
GUARDED_OS.abort = _abort


def exited(error: BaseException) -> str | None:
    """How a load's ``SystemExit`` or ``EngineExit`` reads in its error (``None``: neither)."""
    if isinstance(error, EngineExit):
        return str(error)
    if isinstance(error, SystemExit):
        return f"engine code called sys.exit({error.code!r}) while loading"
    return None
