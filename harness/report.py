"""What every output writes with: a finding's case saved for ``replay``, the line that replays it,
and files written whole (a reader never sees half a report). The outputs themselves are views of a
run's records (``mmharness.views``)."""

from __future__ import annotations

import hashlib
import os
import secrets
import shlex
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from mmharness.runner import Example, Finding, Result

if TYPE_CHECKING:
    from mmharness.checks.registry import Check


def replay_command(
    path: str, target_spec: str, deadline: float | None = None, against: str | None = None
) -> str:
    """The command replaying a saved case (with ``deadline``: the one a case that did not finish had;
    with ``against``: on both targets, as ``check --against`` ran it)."""
    from mmharness.targets import settings
    from mmharness.targets.specs import ENGINE_VARIABLE

    command = f"mmharness replay {shlex.quote(path)} --target {shlex.quote(target_spec)}"
    command += f" --against {shlex.quote(against)}" if against else ""
    engine = os.environ.get(ENGINE_VARIABLE, "").strip()  # --engine: the spec alone may not say which
    command += f" --engine {shlex.quote(engine)}" if engine else ""
    command += "".join(f" {shlex.quote(word)}" for word in settings.env_options())  # --env, as run
    return command + (f" --deadline {deadline:g}" if deadline else "")


def save(result: Result, finding: Finding, target_spec: str, directory: Path) -> str:
    """Write a finding's shrunk example as a case document; return its path."""
    note = f"{finding.kind}: {finding.failure.message}"
    return save_case(result.check, finding.example, target_spec, directory, note)


def save_case(check: Check, example: Example, target_spec: str, directory: Path, note: str) -> str:
    """Write an example of ``check`` as a case document naming the target, the engine and the settings
    it ran under (what ``replay`` needs); return its path."""
    from mmharness import payload
    from mmharness.targets import settings
    from mmharness.targets.specs import ENGINE_VARIABLE

    case, params = example
    text = payload.dumps(
        case,
        check=check.id,
        rule=check.rule,
        target=target_spec,
        engine=os.environ.get(ENGINE_VARIABLE, "").strip() or None,
        params=params,
        note=note,
        env=settings.given(),
    )
    digest = hashlib.sha1(text.encode()).hexdigest()[:10]
    path = directory / f"{check.id}-{digest}.json"
    write(str(path), text)
    return str(path)


def writable(path: str, *, directory: bool = False) -> str | None:
    """Why ``path`` cannot take an output (``None`` if it can), found by trying, before a run.

    A file output must be a regular file (or not exist yet) in a directory where a
    file can be created, since ``write`` replaces it atomically; a device such as
    ``/dev/full`` is refused rather than replaced.
    """
    where = Path(path)
    try:
        if directory:
            if where.exists() and not where.is_dir():
                return "not a directory"
            where.mkdir(parents=True, exist_ok=True)
            folder = where
        else:
            if where.is_dir():
                return "is a directory"
            if where.exists() and not where.is_file():
                return "not a regular file (a device, a pipe): give a file path"
            where.parent.mkdir(parents=True, exist_ok=True)
            folder = where.parent
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".mmharness-probe-"):
            pass
    except OSError as error:
        return f"cannot write there ({error.strerror or error})"
    return None


def write(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically: a reader never sees half a report.

    The text goes to a temporary file beside ``path`` that then replaces it. A new
    file gets the mode any other would (``0o666`` less the umask), an existing
    one keeps its own: the temporary file is not left private (``0o600``).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        kept = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        kept = None
    temporary, descriptor = _temporary_beside(target)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            out.write(text)
        if kept is not None:
            os.chmod(temporary, kept)
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _temporary_beside(target: Path) -> tuple[Path, int]:
    """A new file next to ``target``, created ``0o666`` so that the umask (and a default ACL) applies."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        temporary = target.parent / f".{target.name}.{secrets.token_hex(6)}"
        try:
            return temporary, os.open(temporary, flags, 0o666)
        except FileExistsError:
            continue
