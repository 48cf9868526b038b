"""Faults to inject into a command, and the invariants every command keeps under them
(``docs/guarantees.md``): what ``tests/test_faults.py`` uses, and any command's fault tests may.

A fault is one of: a signal at a phase (``interrupt_at`` in-process, at the n-th call of the function
that begins it; ``Output.interrupt`` for a subprocess, once it has printed a phase's line); a full
disk (``no_space``: a write raising ``ENOSPC`` after n calls; ``size_limit``: ``RLIMIT_FSIZE`` in a
subprocess, where a write past it fails with ``EFBIG``); a cut file (``cut``). The invariants:
``unfinished`` (a run that did not finish never exits 0), ``one_line`` (an error is one line, never a
traceback), ``replays`` (every finding saved before the fault is on disk and still fails as saved).
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

CLI = "import sys; from mmharness.cli import main; sys.exit(main())"


# Faults ------------------------------------------------------------------------------------------------


def _wrapped(monkeypatch: pytest.MonkeyPatch, where: str, before: Callable[[int], None]) -> list[int]:
    """Replace the function at ``where`` ("module.name") by one calling ``before(n)`` (n: this call's
    number, from 1) and then the original; returns the list of call numbers seen."""
    module, _, name = where.rpartition(".")
    original = getattr(__import__(module, fromlist=[name]), name)
    calls: list[int] = []

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls.append(len(calls) + 1)
        before(calls[-1])
        return original(*args, **kwargs)

    monkeypatch.setattr(where, wrapper)
    return calls


def interrupt_at(monkeypatch: pytest.MonkeyPatch, where: str, *, call: int = 1) -> list[int]:
    """SIGINT to this process as the ``call``-th call of ``where`` begins (a phase of a command run
    in-process: the handler a command installs hears it as a user's Ctrl-C), then the call goes on."""

    def before(n: int) -> None:
        if n == call:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # the handler runs in the main thread at its next instruction

    return _wrapped(monkeypatch, where, before)


def no_space(monkeypatch: pytest.MonkeyPatch, where: str, *, after: int = 0) -> list[int]:
    """A full disk: every call of ``where`` past the first ``after`` raises ``OSError(ENOSPC)``."""

    def before(n: int) -> None:
        if n > after:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), f"<write {n} of {where}>")

    return _wrapped(monkeypatch, where, before)


def size_limit(limit: int) -> Callable[[], None]:
    """A subprocess's ``preexec_fn``: no file it writes may grow past ``limit`` bytes (``EFBIG`` then;
    Python ignores the ``SIGXFSZ`` that would otherwise kill it)."""

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return limited


def cut(path: Path, *, lines: int | None = None, size: int | None = None) -> None:
    """Cut a file short: to its first ``lines`` lines (at a line boundary) or ``size`` bytes (anywhere)."""
    data = path.read_bytes()
    if lines is not None:
        data = b"".join(data.splitlines(keepends=True)[:lines])
    path.write_bytes(data if size is None else data[:size])


# Running the CLI ---------------------------------------------------------------------------------------


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``mmharness ARGV`` in this process: its exit code, standard output and standard error."""
    from mmharness.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@contextlib.contextmanager
def launched(cwd: Path) -> Iterator[Callable[..., subprocess.Popen]]:
    """``start(*args, merged=False, env=None, limit=None)``: the CLI in a process group of its own in
    ``cwd`` (``limit``: ``size_limit``); whatever the test's outcome, nothing is left running.
    ``merged``: standard error goes to standard output, to be read as it comes (``Output``)."""
    started: list[subprocess.Popen] = []

    def start(
        *args: str, merged: bool = False, env: dict[str, str] | None = None, limit: int | None = None
    ) -> subprocess.Popen:
        pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT if merged else subprocess.PIPE}
        process = subprocess.Popen(
            [sys.executable, "-c", CLI, *args],
            cwd=cwd,
            start_new_session=True,
            text=True,
            env={**os.environ, **(env or {})},
            preexec_fn=None if limit is None else size_limit(limit),
            **pipes,
        )
        started.append(process)
        return process

    try:
        yield start
    finally:
        for process in started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)


class Output:
    """A process's merged output, read by a thread as it comes, so that a test can wait for a line."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.lines: list[str] = []
        self.closed = False
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()
        with self.changed:
            self.closed = True
            self.changed.notify_all()

    def wait_for(self, *texts: str, timeout: float = 60) -> None:
        """Until every one of ``texts`` has been printed (each on some line)."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not all(any(text in line for line in self.lines) for text in texts):
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    raise AssertionError(f"never printed {texts}:\n{''.join(self.lines)}")
                self.changed.wait(left)

    def interrupt(self, signum: int = signal.SIGINT, *, timeout: float = 60) -> tuple[int, str]:
        """Send the signal; the exit code and everything printed, once the process has ended."""
        self.process.send_signal(signum)
        code = self.process.wait(timeout=timeout)
        self.reader.join(timeout=10)
        return code, "".join(self.lines)


# Invariants --------------------------------------------------------------------------------------------


def unfinished(code: int) -> None:
    """A run that did not finish never exits 0 (nor 1, which reads as the engine's divergence)."""
    assert code not in (0, 1), f"an unfinished run exited {code}"


def one_line(err: str, *words: str, prefix: str = "mmharness: ") -> str:
    """An error is one line (each of ``words`` in it), never a traceback: of the lines of ``err`` that
    begin with ``prefix`` (progress lines do not), exactly one; that line."""
    lines = [line for line in err.splitlines() if line.strip() and line.startswith(prefix)]
    assert "Traceback" not in err and len(lines) == 1, err
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def replays(saved: list[str], target: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Every saved case is a file, and replayed on ``target`` it fails again (exit 1)."""
    assert saved, "nothing was saved"
    for path in saved:
        assert Path(path).is_file(), f"{path} is not on disk"
        code, out, err = cli(capsys, "replay", path, "--target", target)
        assert code == 1, f"{path} no longer fails on {target}: {out}{err}"
