"""What the commands share: the exit codes, ``UsageError``, and the checks that refuse a bad option
in one line before anything runs (no release downloaded, no check started)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mmharness.exits import (  # noqa: F401 - the commands' shared names
    COULD_NOT_TEST_EXIT,
    DIVERGED,
    EXIT_CODES,
    NOTHING_RAN,
    PASSED_EXIT,
    USAGE_ERROR,
)


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


class Interrupted(KeyboardInterrupt):
    """A signal outside a run's ``interrupts.handled`` block (a target loading): the message says what it
    stopped, printed as one line (exit 130); a ``KeyboardInterrupt``, so callers that keep what they have
    on one still do."""


DEADLINE_HELP = (
    "seconds one case may run: one still running then is a divergence of its own (did not finish in S s),"
    " saved and replayable; 0: no limit (default 10, at least 60 on CUDA, or $MMHARNESS_DEADLINE)"
)
MAX_EXAMPLES = 1_000_000
INT_MAX = 2**31 - 1
"""The largest value of a libFuzzer integer flag (``-max_total_time`` for ``bench --fuzz-seconds``)."""


def seconds(value: str) -> float:
    """``--deadline``: a number of seconds, 0 or more."""
    import math

    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (no limit) or more seconds, got {value}")
    return number


def check_max_examples(value: int | None) -> None:
    if value is not None and not 1 <= value <= MAX_EXAMPLES:
        raise UsageError(f"--max-examples must be in [1, {MAX_EXAMPLES}], got {value}")


def worker_count(value: str) -> int:
    """``-n N|auto`` as a number of processes."""
    from mmharness.workers import count

    try:
        return count(value)
    except ValueError as error:
        raise UsageError(str(error)) from None


def writable(option: str, path: str | None, *, directory: bool = False) -> None:
    """Refuse an output path before any check runs, not after all of them (see ``report.writable``).

    A directory that does not exist yet is not made here: its nearest existing ancestor is tried
    instead, so a run that writes nothing (a check that cannot run, a clean search) leaves no empty
    ``./findings`` behind; it is made when the first file is written into it."""
    from mmharness.report import writable

    if path is None:
        return
    probed = Path(path)
    if directory:
        while not probed.exists() and probed.parent != probed:
            probed = probed.parent
    problem = writable(str(probed), directory=directory)
    if problem:
        raise UsageError(f"{option} {path}: {problem}")


def write_output(option: str, path: str, text: str) -> None:
    """Write an output the user named (``report.write``: atomic); one the disk refuses (full, past a
    file-size limit, read-only) is one line naming it, exit 2: a report that is not there is said."""
    from mmharness import report

    try:
        report.write(path, text)
    except OSError as error:
        raise UsageError(f"{option} {path}: cannot write it ({error.strerror or error})") from None


def distinct(outputs: dict[str, str | None]) -> None:
    """Refuse one path given to two outputs (option -> path): one would overwrite the other."""
    seen: dict[str, str] = {}
    for option, path in outputs.items():
        if path is None:
            continue
        where = os.path.realpath(os.path.expanduser(path))
        if where in seen:
            raise UsageError(f"{seen[where]} and {option} name the same file {path}: give each its own")
        seen[where] = option


def findings_option(given: str | None) -> tuple[str, str]:
    """Where findings go and who said so, for messages: ``--findings`` when given (``given``), else
    ``$MMHARNESS_FINDINGS`` when set, else the default ``./findings`` (named as ``--findings``)."""
    if given:
        return "--findings", given
    from_environment = os.environ.get("MMHARNESS_FINDINGS")
    return ("$MMHARNESS_FINDINGS", from_environment) if from_environment else ("--findings", "findings")


class _Engine(argparse.Action):
    """``--engine NAME``: checked against the registered engines, then kept in ``$MMHARNESS_ENGINE``,
    which worker processes inherit and every resolution of a path spec in the run reads
    (``specs.chosen_engine``); replay lines repeat it (``report.replay_command``)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        value: object,
        option_string: str | None = None,
    ) -> None:
        from mmharness.targets.specs import ENGINE_VARIABLE, engines

        known = [engine.name for engine in engines()]
        if value not in known:
            parser.error(
                f"{option_string} {value!r}: unknown engine; registered engines are {', '.join(known)}"
            )
        os.environ[ENGINE_VARIABLE] = value
        setattr(namespace, self.dest, value)


def engine_option(parser: argparse.ArgumentParser) -> None:
    """``--engine NAME`` on a command that takes ``--target``: which engine a path spec is."""
    parser.add_argument(
        "--engine",
        action=_Engine,
        metavar="NAME",
        help="the engine a path spec is (skips detecting it; needed where a directory holds several);"
        " kept for worker processes and replay lines in $MMHARNESS_ENGINE",
    )


@contextmanager
def _loading(spec: str) -> Iterator[None]:
    """A target that does not load is a usage error; Ctrl-C while it loads (outside any run's
    ``interrupts.handled`` block) is one line saying so, not a traceback."""
    from mmharness.targets.base import TargetError

    try:
        yield
    except TargetError as error:
        raise UsageError(str(error)) from None
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted while loading {spec}") from None


def resolve_target(spec: str):
    """A ``--target`` spec as a loaded target; one that does not load is a usage error."""
    from mmharness.targets.specs import resolve

    with _loading(spec):
        return resolve(spec)


def loaded_target(spec: str):
    """``resolve_target``, once per spec and ``--env`` values in a process (``specs.loaded``)."""
    from mmharness.targets.specs import loaded

    with _loading(spec):
        return loaded(spec)


ENV_HELP = (
    "set an engine setting (an environment variable its code reads) for this run, before any target loads;"
    " repeat for more; a setting read and not set is the default its engine's own declarations give"
    " (`mmharness targets SPEC` lists those read)"
)


def env_option(parser: argparse.ArgumentParser) -> None:
    """``--env NAME=VALUE`` (repeatable), on the commands that take ``--target``."""
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help=ENV_HELP)


def apply_env(args: argparse.Namespace) -> None:
    """Set the ``--env`` values in this process's environment (workers inherit it); a malformed one is a
    usage error naming the flag. Called first by each command's ``run``."""
    from mmharness.targets.settings import apply

    try:
        apply(getattr(args, "env", None) or [])
    except ValueError as error:
        raise UsageError(f"--env: {error}") from None


def selected_checks(groups: list[str] | None):
    """``--checks``: the checks the groups select."""
    from mmharness.checks import SelectionError, selected

    try:
        return selected(groups, "--checks")
    except SelectionError as error:
        raise UsageError(str(error)) from None


def command_line(argv: list[str]) -> str:
    """The command as run, one ``--target`` per line when there are many."""
    import shlex

    words = ["mmharness", *argv]
    lines, line = [], []
    for word in words:
        if word == "--target" and line and len(words) > 12:
            lines.append(shlex.join(line))
            line = []
        line.append(word)
    lines.append(shlex.join(line))
    return " \\\n    ".join(lines)


def exit_code(kinds: list[str], *, strict: bool) -> int:
    """From the kinds of the findings (or the statuses of the results) that count against a run."""
    from mmharness.checks.outcome import COULD_NOT_TEST
    from mmharness.runner import fails_run

    if any(fails_run(kind, strict=strict) for kind in kinds):
        return DIVERGED
    return COULD_NOT_TEST_EXIT if COULD_NOT_TEST in kinds else PASSED_EXIT


def nothing_ran(results) -> bool:
    """Every check (or replayed case) skipped: not a success, whatever the reason."""
    from mmharness.runner import SKIPPED

    if results and all(r.status == SKIPPED for r in results):
        print("nothing ran: every check was skipped (see the reasons above)", file=sys.stderr)
        return True
    return False
