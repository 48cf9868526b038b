"""Ctrl-C and SIGTERM end a run cleanly: at the next example, with what was found so far.

A signal only sets a flag; the runner looks at it before each example and stops
there (``Stop``), so the signal never lands inside Hypothesis or torch (where a
``KeyboardInterrupt`` raised from a garbage-collection callback is swallowed).
The command then reports the checks that finished, the findings of the one in
progress (unshrunk if need be) and its ``--json``/``--junit`` marked as
interrupted, and exits 130 (SIGINT) or 143 (SIGTERM). A second signal stops at
once.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}
_requested: int | None = None


class Stop(KeyboardInterrupt):
    """Raised where a run can stop cleanly, after a signal asked it to."""


def requested() -> int | None:
    """The signal that asked the run to stop, if one did."""
    return _requested


def check() -> None:
    """Stop here if a signal asked for it."""
    if _requested is not None:
        raise Stop(signal.Signals(_requested).name)


def _ask(signum: int, frame: object) -> None:
    global _requested
    if _requested is not None:  # asked twice: stop now
        raise KeyboardInterrupt
    _requested = signum


@contextmanager
def handled() -> Iterator[None]:
    """SIGINT and SIGTERM set the flag while the block runs; the previous handlers come back after."""
    global _requested
    _requested = None
    previous = {signum: signal.signal(signum, _ask) for signum in EXIT}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def exit_code() -> int:
    return EXIT.get(_requested, 130)
