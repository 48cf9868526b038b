"""A time limit per case: a case still running at its deadline is a divergence of its own.

``limit(seconds)`` arms a real-time timer (``setitimer``) whose SIGALRM handler
raises ``DidNotFinish`` in whatever the main thread runs then: the engine's
loop, usually. It is a ``BaseException``, so neither an engine's ``except
Exception`` nor ``observe`` takes it for an answer, and an engine that swallows
it anyway is interrupted again every ``REPEAT`` seconds. The runner turns it
into a divergence ("did not finish in N s") that shrinks, is saved and replays
like any other.

Signals are set only in a main thread (the command's, or a worker process's);
elsewhere, and where a real-time timer is already running (pytest-timeout's
signal method), a case runs without a deadline of its own. The handler never
raises inside this module, so disarming is never cut short, nor in a
garbage-collection callback, a finaliser or an import (where Python swallows
it, or crashes later): it tries again a moment later. A case whose deadline
passed while it imported (torch, the first time a case needs it) gets the whole
deadline again once the import is done: the harness was slow, not the engine.
The previous handler comes back afterwards.

``NoProgress`` is the same verdict from a target's step driver: its engine
stopped advancing (a step that moved no request on, or more steps than the
case can need), known without waiting for the clock.
"""

from __future__ import annotations

import gc
import signal
import threading
from types import FrameType, TracebackType
from typing import Any

SIGNATURE = "did not finish in N s"
"""The signature of every deadline finding, whatever the deadline (baselines match across ``--deadline``)."""
REPEAT = 0.5
"""Seconds between further interrupts when the first one was swallowed."""


class Unfinished(BaseException):
    """A case that did not finish; the runner reports it as a divergence with this message and signature."""

    def __init__(self, message: str, *, signature: str, expected: str, actual: str) -> None:
        super().__init__(message)
        self.message = message
        self.signature = signature
        self.expected = expected
        self.actual = actual


class DidNotFinish(Unfinished):
    """The case ran past its deadline; ``actual`` names where it was interrupted."""

    def __init__(self, seconds: float, where: str = "") -> None:
        shown = f"{seconds:g} s"
        super().__init__(
            f"did not finish in {shown}",
            signature=SIGNATURE,
            expected=f"an outcome within {shown}",
            actual=f"still running after {shown}" + (f", in {where}" if where else ""),
        )
        self.seconds = seconds


class NoProgress(Unfinished):
    """A target's driver found its engine stuck: the message says how, the signature without numbers."""

    def __init__(self, message: str, *, signature: str, expected: str = "", actual: str = "") -> None:
        super().__init__(
            f"no progress: {message}",
            signature=f"no progress: {signature}",
            expected=expected or "every step moves a request on, until every window is done",
            actual=actual or message,
        )


def available() -> bool:
    """Whether a deadline can be set here: a real-time timer, in the main thread."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def limit(seconds: float | None) -> Deadline:
    """``with limit(seconds):`` raises ``DidNotFinish`` in the block once it has run ``seconds``.

    ``None`` or ``0``: no limit. Not in a main thread, or with a real-time timer
    already running: no limit either (quietly).
    """
    return Deadline(seconds)


class Deadline:
    """The timer of one ``limit`` block; ``fired`` tells whether it interrupted the block."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.armed = False
        self.fired = False
        self.importing = False
        """The deadline passed during an import (torch's, the first time a case needs it)."""
        self._previous: Any = None

    def __enter__(self) -> Deadline:
        if not self.seconds or self.seconds <= 0 or not available():
            return self
        if signal.getitimer(signal.ITIMER_REAL)[0] > 0:
            return self  # someone else's timer is running: leave it alone
        self._previous = signal.signal(signal.SIGALRM, self._fired)
        self.armed = True
        signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self.armed:
            return
        self.armed = False  # from here the handler raises nothing
        signal.setitimer(signal.ITIMER_REAL, 0)
        # None: the previous handler was not set from Python; the default is the nearest to it
        signal.signal(signal.SIGALRM, signal.SIG_DFL if self._previous is None else self._previous)

    def _fired(self, signum: int, frame: FrameType | None) -> None:
        if not self.armed:
            return
        sheltered = shelter(frame)
        if sheltered is not None:
            self.importing = self.importing or sheltered == IMPORT
            signal.setitimer(signal.ITIMER_REAL, 0.001)  # a moment later, in the case's own code
            return
        if self.importing:  # the harness was slow, not the case: it gets its time again
            self.importing = False
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
            return
        self.fired = True
        signal.setitimer(signal.ITIMER_REAL, REPEAT)  # again, should the engine swallow this one
        raise DidNotFinish(self.seconds, _where(frame))


HERE, IMPORT = "here", "import"


def shelter(frame: FrameType | None) -> str | None:
    """Why the handler must not raise in ``frame``, or ``None``: ``HERE`` in this module (disarming
    is never cut short), in a garbage-collection callback (Hypothesis times its collections with
    one), a finaliser or ``weakref``'s code (its callbacks run as objects die), where Python would
    swallow the exception or crash on it; ``IMPORT`` in an
    import (a C extension cut short in its initialisation crashes the process later)."""
    if frame is None:
        return None
    code = frame.f_code
    if frame.f_globals.get("__name__") in (__name__, "weakref") or code.co_name == "__del__":
        return HERE
    if any(getattr(callback, "__code__", None) is code for callback in gc.callbacks):
        return HERE
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return IMPORT
        frame = frame.f_back
    return None


def _where(frame: FrameType | None) -> str:
    """Where the case was interrupted: the function, file and line."""
    if frame is None:
        return ""
    code = frame.f_code
    file = code.co_filename.rsplit("/", 1)[-1]
    return f"{code.co_name} ({file}:{frame.f_lineno})"
