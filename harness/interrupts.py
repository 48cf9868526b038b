"""Ctrl-C and SIGTERM end a run cleanly, with what was found so far.

The first signal sets a flag, and where it lands decides what else happens:

- inside a running example (a frame of ``runner.run_example`` is on the stack:
  the check's property, the target, the engine), ``Stop`` is raised there and
  then, so an example that runs long or hangs does not hold the run up.
  ``Stop`` is a ``KeyboardInterrupt``: ``observe``, ``run_example`` and an
  engine's ``except Exception`` let it through, so it is never the target's
  error nor a finding; the runner ends the check with what it had found
  (``runner.Interrupted``);
- anywhere else (Hypothesis generating or shrinking, the harness between
  checks) only the flag is set, and the runner stops before the next example
  (``check``): a ``KeyboardInterrupt`` raised from a garbage-collection callback
  inside Hypothesis or torch would be swallowed.

Inside an example too, ``Stop`` is not raised where it could do harm: during an
import (a module half executed) or inside ``mmharness.deadline`` (its timer
must be disarmed whole); and one raised from a garbage-collection callback is
swallowed. So until the run stops, the example in progress is tried again
every ``AGAIN`` seconds: a thread has the main thread's handler run
(``_thread.interrupt_main`` with ``_AGAIN``, not a signal sent to the process,
so it never kills it) and raise ``Stop`` if it is in an example then.

The command then reports the checks that finished, the findings of those in
progress (unshrunk if need be) and its ``--json``/``--junit`` marked as
interrupted, and exits 130 (SIGINT) or 143 (SIGTERM). A second signal raises
``KeyboardInterrupt`` wherever it lands.

Worker processes (``mmharness.workers``) ignore SIGINT and SIGTERM: their parent
asks them to stop with ``STOP`` (SIGUSR1), which ``listen`` turns into the same
flag and the same ``Stop`` inside a running example. SIGALRM is not used here
(it is the runner's, for per-example deadlines).
"""

from __future__ import annotations

import _thread
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}
STOP = signal.SIGUSR1
"""What a parent sends its worker processes to stop them at their next example."""
_requested: int | None = None
"""The signal that asked the run in progress to stop."""
_last: int | None = None
"""The signal that stopped the last run (``handled`` block), for ``exit_code`` after it."""
AGAIN = 0.5
"""Seconds between tries to stop the example in progress, once asked to stop."""
_AGAIN = getattr(signal, "SIGRTMIN", signal.SIGUSR2)
"""The number whose handler the tries run (simulated in the main thread: never delivered)."""
_trying: tuple[threading.Event, threading.Event] | None = None
"""The tries of the run in progress: set the first event to end them; the second is set once they have."""


class Stop(KeyboardInterrupt):
    """Raised where a run can stop cleanly, after a signal asked it to."""


def requested() -> int | None:
    """The signal that asked the run to stop, if one did."""
    return _requested


def stop_if_asked() -> None:
    """Stop here if a signal asked for it."""
    if _requested is not None:
        raise Stop(signal.Signals(_requested).name)


def _ask(signum: int, frame: FrameType | None) -> None:
    global _requested, _trying
    if _requested is not None:  # asked twice: stop now
        raise KeyboardInterrupt
    _requested = signum
    # A bare thread: ``threading.Thread.start`` takes a lock the interrupted code may hold.
    _trying = threading.Event(), threading.Event()
    _thread.start_new_thread(_try_again, _trying)
    if _inside_example(frame):
        raise Stop(signal.Signals(signum).name)


def _try_again(done: threading.Event, ended: threading.Event) -> None:
    try:
        while not done.wait(AGAIN):
            _thread.interrupt_main(_AGAIN)
    finally:
        ended.set()


def _again(signum: int, frame: FrameType | None) -> None:
    """A try to stop the example in progress (``_try_again``)."""
    if _requested is not None and _inside_example(frame):
        raise Stop(signal.Signals(_requested).name)


def _inside_example(frame: FrameType | None) -> bool:
    """Whether the signal landed while an example runs (``runner.run_example`` is on the stack), and
    where raising is safe: not in the deadline's code, a garbage-collection callback, a finaliser or an
    import (``deadline.shelter``: Python would swallow it, print it, or crash later)."""
    from mmharness.deadline import shelter

    if frame is None or shelter(frame) is not None:
        return False
    runner = sys.modules.get("mmharness.runner")
    code = getattr(getattr(runner, "run_example", None), "__code__", None)
    while code is not None and frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def listen(signum: int) -> None:
    """``signum`` asks this process to stop, from now on (a worker process's ``STOP``)."""
    signal.signal(signum, _ask)
    signal.signal(_AGAIN, _again)


@contextmanager
def handled() -> Iterator[None]:
    """SIGINT and SIGTERM set the flag while the block runs; the previous handlers come back after."""
    global _requested, _last, _trying
    _requested = None
    previous = {signum: signal.signal(signum, _ask) for signum in EXIT}
    previous[_AGAIN] = signal.signal(_AGAIN, _again)
    try:
        yield
    finally:
        if _trying is not None:  # no more tries (and none pending) before the handler goes
            _trying[0].set()
            _trying[1].wait(1.0)
            _trying = None
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        # Past the block nothing stops at the flag (a later run in this process starts afresh);
        # ``exit_code`` still tells what stopped this one.
        _last, _requested = _requested, None


def exit_code() -> int:
    """130 or 143: what the signal that stopped the run (in progress, or the last one) exits with."""
    return EXIT.get(_requested if _requested is not None else _last, 130)
