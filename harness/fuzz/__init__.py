"""atheris entry points, one module per parser, and what they share.

Each entry point feeds libFuzzer's bytes to one parser and lets through only
the parser's documented error (rule R7). Anything else is a finding: before it
propagates (and libFuzzer stops with its own crash file), ``write_finding``
saves a self-contained JSON record, so the input survives even when the crash
file is lost in a CI workspace, and a maintainer can read it without tooling.
For the engine parsers the record also holds the decoded payload, so the record
is itself a corpus input: fed back to the entry point it replays the payload.

Three kinds of findings besides an undocumented exception: an expected error
that breaks the parser's error policy (no message, say), ``SilentAcceptance``
(the harness saw the parser return normally on a payload it must refuse) and
``Hang`` (an input ran past its CPU deadline). A baseline of known findings,
matched by exception class and engine location, lets a CI smoke run continue
past them and fail only on new ones.

libFuzzer ends the process itself (``exit`` when done, ``_Exit`` on a finding,
a timeout or a signal), so no ``atexit`` or ``finally`` of that process runs:
``supervised`` runs a fuzzer in a child process inside a scratch directory,
and the parent removes it whichever way the child ends.

Nothing here imports atheris or a parser: an entry point must import its parser
inside ``atheris.instrument_imports()``, which only instruments fresh imports.
"""

from __future__ import annotations

import base64
import contextlib
import dis
import hashlib
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import traceback
import warnings
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FINDING_FORMAT = "mmharness.fuzz-finding/1"
BASELINE_FORMAT = "mmharness.fuzz-baseline/1"
FINDINGS_ENV = "MMHARNESS_FINDINGS"
"""Directory for finding files; ``./findings`` when unset."""

ErrorPolicy = Callable[[BaseException], "str | None"]
"""Judges an error of an expected class: ``None`` when acceptable, else why it is a finding."""


def findings_dir() -> Path:
    return Path(os.environ.get(FINDINGS_ENV) or "findings")


class SilentAcceptance(Exception):
    """Raised by the harness when a parser returned normally on a payload it must refuse.

    ``kind`` names the property (``mixed-format``...): it is the finding's
    location for baselines, since no engine line raised anything.
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind


class Hang(BaseException):
    """An input ran past its CPU deadline (a ``BaseException``, so engine ``except Exception`` keeps out)."""


# Where an error comes from -------------------------------------------------------------


@dataclass(frozen=True)
class Location:
    """The innermost frame of an error inside the parser's own files."""

    file: str
    line: int
    function: str

    @property
    def where(self) -> str:
        """Release-independent key: ``io_struct.py:GenerateReqInput.__getitem__``."""
        return f"{Path(self.file).name}:{self.function}"


def innermost_frame(error: BaseException, files: Collection[str] = ()) -> Location | None:
    """The innermost traceback frame in one of ``files`` (any frame when ``files`` is empty).

    ``files`` may map each path to the name a record shows (``sglang/srt/...``),
    so saved findings carry no machine-local paths.
    """
    found = None
    tb = error.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if not files or code.co_filename in files:
            shown = files[code.co_filename] if isinstance(files, Mapping) else code.co_filename
            found = Location(shown, tb.tb_lineno, getattr(code, "co_qualname", code.co_name))
        tb = tb.tb_next
    return found


_RAISES = {dis.opmap[name] for name in ("RAISE_VARARGS",) if name in dis.opmap}


def raised_deliberately(error: BaseException, files: Collection[str]) -> bool:
    """Whether a ``raise`` statement in one of ``files`` raised ``error`` (not Python, not a library).

    ``len(5)`` raises ``TypeError`` from inside Python: the innermost frame is
    then executing a call, not a ``raise``.
    """
    tb = error.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    if code.co_filename not in files or not 0 <= tb.tb_lasti < len(code.co_code):
        return False
    return code.co_code[tb.tb_lasti] in _RAISES


def where_of(error: BaseException, files: Collection[str] = ()) -> str:
    """A finding's location key: the silent-acceptance kind, else the engine frame, else ``?``."""
    if isinstance(error, SilentAcceptance):
        return error.kind
    location = innermost_frame(error, files) or innermost_frame(error)
    return location.where if location else "?"


# Saving findings -----------------------------------------------------------------------


def write_finding(
    parser: str,
    data: bytes,
    error: BaseException,
    *,
    payload: Any = None,
    target: Mapping[str, str] | None = None,
    reason: str | None = None,
    files: Collection[str] = (),
) -> Path:
    """Save ``data`` and the unexpected ``error`` as ``<parser>-<sha1>.json``; return the path.

    The name depends only on the input, so a crash found twice is saved once.
    ``payload`` (the decoded, JSON-able input), ``target`` (spec and release),
    ``reason`` (why an expected-class error is a finding) and the engine
    location (from ``files``, the parser's source files) are added when given.
    """
    try:
        text: str | None = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    record: dict[str, Any] = {
        "format": FINDING_FORMAT,
        "parser": parser,
        "exception": f"{type(error).__name__}: {error}",
    }
    if target is not None:
        record["target"] = dict(target)
    if reason is not None:
        record["reason"] = reason
    if files or isinstance(error, SilentAcceptance):
        record["where"] = where_of(error, files)
        location = innermost_frame(error, files)
        if location is not None:
            record["location"] = {"file": location.file, "line": location.line, "function": location.function}
    if payload is not None:
        record["payload"] = payload
    record["traceback"] = "".join(traceback.format_exception(error))
    record["input_b64"] = base64.b64encode(data).decode("ascii")
    record["input_text"] = text
    directory = findings_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{parser}-{hashlib.sha1(data).hexdigest()}.json"
    path.write_text(json.dumps(record, indent=2, default=repr) + "\n", encoding="utf-8")
    return path


# Known findings ------------------------------------------------------------------------


@dataclass(frozen=True)
class Known:
    parser: str
    exception: str
    where: str
    note: str = ""


@dataclass(frozen=True)
class FuzzBaseline:
    """Known findings, matched by parser, exception class and location (never by line number)."""

    known: tuple[Known, ...] = ()

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> FuzzBaseline:
        """Read a baseline file; ``ValueError`` with what is wrong (the CLI makes it a usage error)."""
        from mmharness.jsonfile import JSONFileError, read_json

        try:
            document = read_json(str(path), "a fuzz baseline")  # bounded in size and depth
        except JSONFileError as error:
            raise ValueError(str(error)) from None
        if not isinstance(document, dict) or document.get("format") != BASELINE_FORMAT:
            raise ValueError(f'{path}: not a baseline (expected "format": "{BASELINE_FORMAT}")')
        entries = document.get("known")
        if not isinstance(entries, list):
            raise ValueError(f'{path}: "known" must be a list')
        known = []
        for index, entry in enumerate(entries):
            if not isinstance(entry, dict) or not all(
                isinstance(entry.get(key), str) for key in ("parser", "exception", "where")
            ):
                raise ValueError(f"{path}: known[{index}] needs string parser, exception and where")
            known.append(Known(entry["parser"], entry["exception"], entry["where"], entry.get("note", "")))
        return cls(tuple(known))

    def match(self, parser: str, error: BaseException, files: Collection[str] = ()) -> Known | None:
        where = where_of(error, files)
        name = type(error).__name__
        for known in self.known:
            if (known.parser, known.exception, known.where) == (parser, name, where):
                return known
        return None


# The guard -----------------------------------------------------------------------------


class _Deadline:
    """A CPU-time deadline for one input: ``ITIMER_VIRTUAL`` raises ``Hang`` in the main thread.

    libFuzzer owns ``SIGALRM`` (its own ``-timeout``), so the virtual timer's
    ``SIGVTALRM`` is used instead; where there is none, inputs run unbounded.
    """

    def __init__(self, seconds: float | None) -> None:
        usable = hasattr(signal, "setitimer") and hasattr(signal, "SIGVTALRM")
        self.seconds = seconds if usable else None
        self._installed = False

    def _install(self) -> bool:
        if not self._installed and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGVTALRM, self._expired)
            self._installed = True
        return self._installed

    def _expired(self, signum: int, frame: Any) -> None:
        raise Hang(f"the input ran past its deadline of {self.seconds} CPU seconds")

    def __enter__(self) -> None:
        if self.seconds and self._install():
            signal.setitimer(signal.ITIMER_VIRTUAL, self.seconds)

    def __exit__(self, *exc: Any) -> None:
        if self.seconds and self._installed:
            signal.setitimer(signal.ITIMER_VIRTUAL, 0)


def guarded(
    parser: str,
    parse: Callable[[bytes], object],
    expected: type[BaseException] | tuple[type[BaseException], ...],
    *,
    policy: ErrorPolicy | None = None,
    payload: Callable[[bytes], Any] | None = None,
    target: Mapping[str, str] | None = None,
    files: Collection[str] = (),
    baseline: FuzzBaseline | None = None,
    deadline_s: float | None = None,
) -> Callable[[bytes], None]:
    """A ``TestOneInput`` for ``parse``: ``expected`` errors pass, others are saved, re-raised.

    ``policy`` may still reject an expected error (then it is a finding with the
    policy's reason); ``payload`` decodes an input for the saved record;
    ``files`` are the parser's source files (for the location); a finding the
    ``baseline`` knows is reported once and let through; ``deadline_s`` bounds
    each input's CPU time (``Hang``).
    """
    deadline = _Deadline(deadline_s)
    seen_known: set[Known] = set()

    def finding(data: bytes, error: BaseException, reason: str | None) -> None:
        known = baseline.match(parser, error, files) if baseline else None
        if known is not None:
            if known not in seen_known:
                seen_known.add(known)
                print(
                    f"mmharness: known finding (baseline), going on: {known.exception} at {known.where}",
                    file=sys.stderr,
                )
            return
        try:
            decoded = payload(data) if payload is not None else None
        except Exception:  # the record keeps the raw bytes anyway
            decoded = None
        path = write_finding(parser, data, error, payload=decoded, target=target, reason=reason, files=files)
        why = f" ({reason})" if reason else ""
        print(f"mmharness: unexpected {type(error).__name__}{why}; finding saved to {path}", file=sys.stderr)
        crash = findings_dir() / f"crash-{hashlib.sha1(data).hexdigest()}"  # libFuzzer writes the input there
        spec = f" --target {shlex.quote(target['spec'])}" if target and target.get("spec") else ""
        print(f"reproduce with: mmharness fuzz {parser}{spec} -- {shlex.quote(str(crash))}", file=sys.stderr)
        raise error

    def test_one_input(data: bytes) -> None:
        try:
            with deadline:
                parse(data)
        except expected as error:
            reason = policy(error) if policy is not None else None
            if reason is not None:
                finding(data, error, reason)
        except (Exception, Hang) as error:
            finding(data, error, None)

    return test_one_input


def bundled_main(parser: str, main: Callable[..., None], *, release: str, env: str) -> None:
    """The entry point of a ClusterFuzzLite build (``.clusterfuzzlite/fuzz_*.py``) of an engine parser.

    Packaged by ``compile_python_fuzzer``, the release fetched at build time and the
    known findings ship in the bundle (``sys._MEIPASS``); run from a checkout, they
    come from the cache and ``corpus/``. ``release`` is the default spec
    (``ENGINE==X``); the variable ``env`` names another version of that engine.
    """
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle is not None:
        os.environ.setdefault("MMHARNESS_CACHE", str(Path(bundle) / "mmharness-cache"))
    known = Path(bundle or "corpus") / "fuzz-baseline.json"
    baseline = FuzzBaseline.load(known) if known.is_file() else None
    engine, _, version = release.partition("==")
    main(sys.argv, parser=parser, target=f"{engine}=={os.environ.get(env, version)}", baseline=baseline)


# One run in a scratch directory ------------------------------------------------------------

FORWARDED = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
"""Signals the parent passes on to the fuzzing child (and answers ``128 + N`` for: 130, 143, 129)."""


def supervised(prefix: str, work: Callable[[Path], int | None]) -> int:
    """``work(scratch)`` in a child process, in a fresh scratch directory removed on every way out;
    the child's exit code.

    libFuzzer ends the child itself, so the parent waits for it and then removes
    the directory. In the child ``TMPDIR`` is the scratch directory, so temporary
    files of libFuzzer or of a loaded engine go with it. SIGINT, SIGTERM and SIGHUP
    sent to the parent are passed on to the child, and once it has ended the answer
    is 130, 143 or 129 (``mmharness.interrupts.EXIT``); a second signal kills the
    child. A signal the process was started ignoring stays ignored, in both. A
    child killed by signal N answers ``128 + N``. Where there is no ``fork``,
    ``work`` runs in this process (and a libFuzzer exit skips the cleanup).
    """
    from mmharness.interrupts import EXIT

    if not hasattr(os, "fork"):
        scratch = Path(tempfile.mkdtemp(prefix=prefix))
        try:
            return work(scratch) or 0
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    parent = os.getpid()
    child = 0
    received: list[int] = []

    def forward(signum: int, frame: Any) -> None:
        if os.getpid() != parent:  # the child, before it put its own handlers back: end as the signal would
            os._exit(128 + signum)
        received.append(signum)
        if child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signum if len(received) == 1 else signal.SIGKILL)

    in_main_thread = threading.current_thread() is threading.main_thread()
    # A signal ignored when the run began (SIGINT in a shell's background job) stays ignored.
    forwarded = [s for s in FORWARDED if signal.getsignal(s) is not signal.SIG_IGN] if in_main_thread else []
    previous = {signum: signal.signal(signum, forward) for signum in forwarded}
    scratch = Path(tempfile.mkdtemp(prefix=prefix))
    status = 0
    try:
        if not received:
            sys.stdout.flush()
            sys.stderr.flush()
            with warnings.catch_warnings():  # 3.12 warns of fork() beside threads; the child only fuzzes
                warnings.simplefilter("ignore", DeprecationWarning)
                child = os.fork()
            if child == 0:
                _child(scratch, work, previous)
            if received:  # a signal between fork() and knowing the child's pid
                os.kill(child, received[0])
            status = os.waitpid(child, 0)[1]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    if received:
        return EXIT.get(received[0], 128 + received[0])
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def _child(scratch: Path, work: Callable[[Path], int | None], previous: Mapping[int, Any]) -> None:
    """The fuzzing process: ``work`` with the caller's signal handlers and ``TMPDIR``; never returns."""
    code = 1
    try:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        os.environ["TMPDIR"] = str(scratch)
        tempfile.tempdir = None
        code = work(scratch) or 0
    except SystemExit as stop:  # atheris's way out after an uncaught exception: SystemExit(-1)
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
        code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    except KeyboardInterrupt:
        code = 130
    except BaseException:
        traceback.print_exc()
    finally:
        _exit_process(code)


def _exit_process(code: int) -> None:
    """End the child with C's ``exit``: libFuzzer's exit handler then saves the input that was running
    and answers 77 (a finding), as it would in a process of its own. Python is not finalised (nothing
    of the caller's stack unwinds in the child), so its streams are flushed here."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    try:
        import ctypes

        ctypes.CDLL(None).exit(code)
    except BaseException:
        pass
    os._exit(code)
