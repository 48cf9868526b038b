"""Work spread over processes, in the manner of pytest-xdist: same answers, in the same order.

Answers come back in submission order, so a parallel run prints and reports
exactly what a serial one would, interrupted or not.

Interrupted (``mmharness.interrupts``), a run keeps what it has: ``ordered``
yields the answer of every unit that had started (finished, or the partial
answer of one stopped part-way), then raises ``interrupts.Stop``. A partial
answer is what the interruption carries as ``result`` (``runner.Interrupted``);
a function may also catch its interruption and return what it has
(``matrix._column``). Serially, that is the unit in progress. In parallel,
workers ignore SIGINT and SIGTERM (a Ctrl-C reaches the whole process group):
the parent hears the signal, stops waiting and sends every worker
``interrupts.STOP``, which a worker hears as its own interruption (its unit
stops at the next example, or at once inside a running one, and a unit not yet
begun answers nothing); the parent takes the answers for up to ``GRACE``
seconds and kills whatever has not answered by then. A second signal kills the
workers at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from mmharness import interrupts

T = TypeVar("T")
GRACE = 10.0
"""Seconds the workers have, once asked to stop, to answer with what they have."""


def count(value: str) -> int:
    """``-n`` as a number: ``auto`` is every core this process may use."""
    if value == "auto":
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"--workers must be a number or auto, got {value!r}") from None
    if number < 1:
        raise ValueError(f"--workers must be >= 1, got {number}")
    return number


def ordered(
    function: Callable[..., T],
    arguments: Iterable[tuple[Any, ...]],
    workers: int,
    *,
    initializer: Callable[..., None] | None = None,
    initargs: tuple[Any, ...] = (),
) -> Iterator[T]:
    """``function(*args)`` for each tuple of arguments, in order; in ``workers`` processes when > 1.

    Interrupted, the answers of the units that had started, then ``interrupts.Stop``.
    Closing the iterator early (``--fail-fast``, a second signal) kills the
    workers: a unit in progress is not waited for.
    """
    if workers <= 1:
        if initializer is not None:
            initializer(*initargs)
        yield from _serial(function, arguments)
        return
    pool = None
    try:
        with _stop_ignored():  # a worker stopped before it listens for STOP must not die of it
            pool = ProcessPoolExecutor(workers, initializer=_start, initargs=(initializer, initargs))
            futures = [pool.submit(_call, function, args) for args in arguments]
        for k, future in enumerate(futures):
            try:
                answer = _waited(future)
                if isinstance(answer, _Nothing):  # a worker was stopped by someone else
                    interrupts.stop_if_asked()
                    raise interrupts.Stop(signal.Signals(interrupts.STOP).name)
            except interrupts.Stop:
                yield from _drained(pool, futures[k:])
                raise
            yield answer
        interrupts.stop_if_asked()  # asked during the last unit: it may have stopped part-way
    finally:
        if pool is not None:
            for process in list((getattr(pool, "_processes", None) or {}).values()):
                process.kill()
            pool.shutdown(wait=True, cancel_futures=True)


def _serial(function: Callable[..., T], arguments: Iterable[tuple[Any, ...]]) -> Iterator[T]:
    for args in arguments:
        interrupts.stop_if_asked()
        try:
            answer = function(*args)
        except KeyboardInterrupt as stop:
            if not hasattr(stop, "result"):
                raise
            yield stop.result
            raise interrupts.Stop(*stop.args) from stop
        yield answer
    interrupts.stop_if_asked()  # asked during the last unit: it may have stopped part-way (matrix._column)


def _waited(future: Future) -> Any:
    """A worker's answer, waited for in short steps so that a signal is heard at once."""
    while True:
        interrupts.stop_if_asked()
        try:
            return future.result(timeout=0.2)
        except TimeoutError:
            continue


def _drained(pool: ProcessPoolExecutor, futures: list[Future]) -> Iterator[Any]:
    """Ask every worker to stop; the answers of the units that had started, in order, for ``GRACE`` s."""
    for future in futures:
        future.cancel()  # not handed to a worker yet
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(ProcessLookupError, TypeError):
            os.kill(process.pid, interrupts.STOP)
    deadline = time.monotonic() + GRACE
    for future in futures:
        if future.cancelled():
            continue
        try:
            answer = future.result(timeout=max(0.0, deadline - time.monotonic()))
        except (TimeoutError, BrokenProcessPool):
            return  # the rest are killed
        if not isinstance(answer, _Nothing):
            yield answer


class _Nothing:
    """A worker's answer for a unit it did not begin, or stopped with nothing to show."""


def _call(function: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """One unit in a worker: not begun once asked to stop; stopped part-way, its partial answer."""
    if interrupts.requested() is not None:
        return _Nothing()
    try:
        return function(*args)
    except KeyboardInterrupt as stop:
        return getattr(stop, "result", _Nothing())


@contextlib.contextmanager
def _stop_ignored() -> Iterator[None]:
    """``STOP`` ignored while the workers start (they inherit it), until each ``listen``s for it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(interrupts.STOP, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(interrupts.STOP, signal.SIG_DFL if previous is None else previous)


def _start(initializer: Callable[..., None] | None, initargs: tuple[Any, ...]) -> None:
    """Workers leave SIGINT and SIGTERM to the parent, which stops them with ``STOP``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    interrupts.listen(interrupts.STOP)
    if initializer is not None:
        initializer(*initargs)
