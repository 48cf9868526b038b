"""Work spread over processes, in the manner of pytest-xdist: same answers, in the same order.

Workers ignore SIGINT and SIGTERM: the parent hears the signal (``mmharness.interrupts``),
stops waiting, kills the workers and reports what had finished. Results come
back in submission order, so a parallel run prints and reports exactly what a
serial one would.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


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

    Closing the iterator early (``--fail-fast``, a signal) kills the workers:
    a unit in progress is not waited for.
    """
    if workers <= 1:
        if initializer is not None:
            initializer(*initargs)
        yield from (function(*args) for args in arguments)
        return
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_start, initargs=(initializer, initargs))
    try:
        futures = [pool.submit(function, *args) for args in arguments]
        yield from (_waited(future) for future in futures)
    finally:
        for child in multiprocessing.active_children():
            child.kill()
        pool.shutdown(wait=True, cancel_futures=True)


def _waited(future: Future) -> Any:
    """A worker's answer, waited for in short steps so that a signal is heard at once."""
    from mmharness import interrupts

    while True:
        interrupts.check()
        try:
            return future.result(timeout=0.2)
        except TimeoutError:
            continue


def _start(initializer: Callable[..., None] | None, initargs: tuple[Any, ...]) -> None:
    """Workers leave signals to the parent, which stops them (a worker's traceback helps nobody)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if initializer is not None:
        initializer(*initargs)
