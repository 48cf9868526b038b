"""``mmharness matrix``: checks against several targets; where each way of failing starts and ends.

Targets are taken in the order given (list releases oldest first, and "first"
and "last" read as releases). Each cell keeps the signatures of its findings,
so the matrix says, per check and per distinct way of failing, the first and
the last target that shows it: the release atlas. A target that cannot be
loaded gets an ``error`` cell in every row, with its one-line reason, and never
stops the others. With ``workers > 1`` targets run in that many processes;
the cells are the same as a serial run's.

Interrupted (``mmharness.interrupts``), a matrix keeps the targets that
finished and those in progress: there, the cells of the checks that finished,
the partial cell of the check that was running (``interrupted``, its findings
unshrunk if need be) and ``NOT_RUN`` cells for the checks that never began; the
findings saved so far are in its cells, serially or with workers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmharness.checks.outcome import COULD_NOT_TEST, DIVERGENCE, HAZARD
from mmharness.checks.registry import Check
from mmharness.runner import PASSED, SKIPPED, Interrupted, Result, fails_run, run_check
from mmharness.workers import ordered

FORMAT = "mmharness.matrix/2"
ERROR = "error"
NOT_RUN = "not run"
"""A check an interruption stopped before it began on a target in progress."""
SYMBOLS = {
    PASSED: "pass",
    DIVERGENCE: "DIVERGE",
    HAZARD: "hazard",
    COULD_NOT_TEST: "no-test",
    SKIPPED: "skip",
    ERROR: "error",
    NOT_RUN: "-",
}
PARTIAL = "*"
"""Marks the symbol of a cell whose check an interruption stopped part-way."""
_COLORS = {
    PASSED: "32",
    DIVERGENCE: "31",
    HAZARD: "33",
    COULD_NOT_TEST: "35",
    SKIPPED: "2",
    ERROR: "35",
    NOT_RUN: "2",
}


@dataclass(frozen=True)
class Seen:
    """One finding in one cell: its kind, signature, message and the example that first showed it."""

    kind: str
    signature: str
    message: str
    first_failure_at: int | None
    saved: str | None = None
    """The shrunk case, when the matrix was asked to save findings."""


@dataclass(frozen=True)
class Cell:
    """One check on one target: status, why, examples run, and its findings."""

    status: str
    reason: str = ""
    examples_run: int = 0
    findings: tuple[Seen, ...] = ()
    interrupted: bool = False
    """The check was stopped part-way: its status is what it had found by then."""


@dataclass(frozen=True)
class Span:
    """One way a check fails, across the targets: its kind, the targets showing it, and how soon."""

    kind: str
    signature: str
    message: str
    targets: tuple[str, ...]
    found_at: tuple[int | None, ...]
    """Examples to the first failure of this kind, per target in ``targets``."""

    @property
    def first(self) -> str:
        return self.targets[0]

    @property
    def last(self) -> str:
        return self.targets[-1]


@dataclass
class Matrix:
    """Check x target cells, in the order checks and targets were given."""

    targets: list[str]
    checks: list[str]
    cells: dict[tuple[str, str], Cell] = field(default_factory=dict)
    target_errors: dict[str, str] = field(default_factory=dict)
    releases: dict[str, str] = field(default_factory=dict)
    command: str = ""
    """The command line that made it, kept in the JSON for the atlas."""
    interrupted: bool = False
    """Stopped by a signal: only the targets that finished or were in progress are in it."""

    def cell(self, check_id: str, target: str) -> Cell:
        return self.cells[(check_id, target)]

    def finished(self, target: str) -> bool:
        """Every check ran to its end on the target (or it did not load)."""
        cells = [self.cell(c, target) for c in self.checks]
        return not any(cell.interrupted or cell.status == NOT_RUN for cell in cells)

    def first_failing(self, check_id: str, *, strict: bool = False) -> str | None:
        """The first target (in the order given) it fails on; hazards count when ``strict``."""
        failing = (t for t in self.targets if fails_run(self.cell(check_id, t).status, strict=strict))
        return next(failing, None)

    def spans(self, check_id: str) -> list[Span]:
        """Each distinct way the check fails, with the targets that show it, in target order."""
        seen: dict[str, tuple[str, str, list[str], list[int | None]]] = {}
        for target in self.targets:
            for one in self.cell(check_id, target).findings:
                entry = seen.setdefault(one.signature, (one.kind, one.message, [], []))
                entry[2].append(target)
                entry[3].append(one.first_failure_at)
        order = (DIVERGENCE, COULD_NOT_TEST, HAZARD)
        spans = [Span(k, sig, m, tuple(ts), tuple(at)) for sig, (k, m, ts, at) in seen.items()]
        return sorted(spans, key=lambda s: (order.index(s.kind), self.targets.index(s.first), s.signature))

    def as_json(self, *, strict: bool = False) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "command": self.command,
            "interrupted": self.interrupted,
            "targets": [
                {"spec": t, "release": self.releases.get(t), "error": self.target_errors.get(t)}
                for t in self.targets
            ],
            "checks": [
                {
                    "id": c,
                    "first_failing": self.first_failing(c, strict=strict),
                    "findings": [
                        {
                            "kind": s.kind,
                            "signature": s.signature,
                            "message": s.message,
                            "first": s.first,
                            "last": s.last,
                            "targets": list(s.targets),
                            "first_failure_at": list(s.found_at),
                        }
                        for s in self.spans(c)
                    ],
                    "results": {
                        t: {
                            "status": self.cell(c, t).status,
                            "reason": self.cell(c, t).reason,
                            "examples": self.cell(c, t).examples_run,
                            "interrupted": self.cell(c, t).interrupted,
                            "findings": [
                                {
                                    "kind": one.kind,
                                    "signature": one.signature,
                                    "message": one.message,
                                    "first_failure_at": one.first_failure_at,
                                    **({"saved": one.saved} if one.saved else {}),
                                }
                                for one in self.cell(c, t).findings
                            ],
                        }
                        for t in self.targets
                    },
                }
                for c in self.checks
            ],
        }

    @classmethod
    def from_json(cls, data: Any) -> Matrix:
        """A matrix back from its ``as_json`` form; ``NotAMatrix`` says why ``data`` is not one."""
        if not isinstance(data, dict):
            raise NotAMatrix(f"it holds a JSON {_json_type(data)}, not an object")
        if data.get("format") != FORMAT:
            raise NotAMatrix(f"its format is {data.get('format')!r}, not {FORMAT!r}")
        try:
            return cls._from_json(data)
        except KeyError as error:
            raise NotAMatrix(f"it lacks {error}") from None
        except (TypeError, AttributeError, ValueError) as error:
            raise NotAMatrix(f"malformed: {error}") from None

    @classmethod
    def _from_json(cls, data: dict[str, Any]) -> Matrix:
        targets = [t["spec"] for t in data["targets"]]
        matrix = cls(targets, [c["id"] for c in data["checks"]], command=data.get("command", ""))
        matrix.interrupted = bool(data.get("interrupted", False))
        for t in data["targets"]:
            if t.get("error"):
                matrix.target_errors[t["spec"]] = t["error"]
            if t.get("release"):
                matrix.releases[t["spec"]] = t["release"]
        for c in data["checks"]:
            for spec, cell in c["results"].items():
                findings = tuple(Seen(**one) for one in cell["findings"])
                interrupted = bool(cell.get("interrupted", False))
                cell_of = Cell(cell["status"], cell["reason"], cell["examples"], findings, interrupted)
                matrix.cells[(c["id"], spec)] = cell_of
        missing = [(c, t) for c in matrix.checks for t in targets if (c, t) not in matrix.cells]
        if missing:
            raise NotAMatrix(f"check {missing[0][0]!r} has no result for target {missing[0][1]!r}")
        return matrix


class NotAMatrix(ValueError):
    """A document that is not a matrix report (``mmharness matrix --json``); the message says why."""


def _json_type(value: Any) -> str:
    names = {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _column(
    spec: str,
    check_ids: Sequence[str],
    profile: str,
    max_examples: int | None,
    seed: int | None,
    findings: str | None = None,
    deadline: float | None = None,
) -> tuple[str, str | None, str | None, dict[str, Cell]]:
    """One target's cells: ``(spec, release, load error, check id -> cell)``; runs in a worker process.

    Interrupted, the cells so far: the partial cell of the check that was
    running, and ``NOT_RUN`` for the checks after it.
    """
    from mmharness import interrupts
    from mmharness.checks import all_checks
    from mmharness.targets.base import TargetError
    from mmharness.targets.specs import resolve

    try:
        target = resolve(spec)
    except TargetError as error:
        return spec, None, str(error), {c: Cell(ERROR, str(error)) for c in check_ids}
    release = target.describe().get("release")
    checks = all_checks()
    cells = {}
    for check_id in check_ids:
        if interrupts.requested() is not None:  # asked to stop between checks
            break
        try:
            result = run_check(
                checks[check_id],
                target,
                profile=profile,
                max_examples=max_examples,
                seed=seed,
                deadline=deadline,
            )
        except Interrupted as stop:
            result = stop.result
        cells[check_id] = _cell(result, spec, findings)
        if result.interrupted:
            break
    for check_id in check_ids[len(cells) :]:
        cells[check_id] = Cell(NOT_RUN, "interrupted before it began")
    return spec, (str(release) if release else None), None, cells


def _cell(result: Result, spec: str, findings: str | None) -> Cell:
    """A check's result as a cell, its findings saved under ``findings`` when given."""
    from mmharness import report

    seen = []
    for f in result.findings:
        saved = None
        if findings is not None and f.example is not None:
            saved = report.save(result, f, spec, Path(findings) / _slug(spec))
        seen.append(Seen(f.kind, f.signature, f.failure.message, f.first_failure_at, saved))
    return Cell(result.status, result.reason, result.examples_run, tuple(seen), result.interrupted)


def run_matrix(
    specs: Sequence[str],
    checks: Sequence[Check],
    profile: str = "ci",
    *,
    max_examples: int | None = None,
    seed: int | None = None,
    workers: int = 1,
    progress: Callable[[str, int | None], None] | None = None,
    command: str = "",
    findings: str | None = None,
    deadline: float | None = None,
) -> Matrix:
    """Run each check on each target; a target that does not load gets errors in its column.

    ``progress`` is told each target as its column comes in, with the number of
    checks that ran on it (``None``: it did not load). Interrupted
    (``mmharness.interrupts``), it keeps the targets that finished and those in
    progress, and says so (``interrupted``); worker processes are stopped.
    """
    matrix = Matrix(targets=list(specs), checks=[c.id for c in checks], command=command)
    args = [(spec, matrix.checks, profile, max_examples, seed, findings, deadline) for spec in specs]
    columns = ordered(_column, args, min(workers, len(specs)))
    try:
        _collect(matrix, columns, progress)
    except KeyboardInterrupt:
        matrix.interrupted = True
        begun = {t for (_, t), cell in matrix.cells.items() if cell.status != NOT_RUN}
        matrix.targets = [t for t in matrix.targets if t in begun]
        matrix.cells = {(c, t): cell for (c, t), cell in matrix.cells.items() if t in begun}
    finally:
        columns.close()  # stops the workers
    return matrix


def _slug(spec: str) -> str:
    """A directory name for a target's saved findings."""
    return "".join(c if c.isalnum() or c in ".=-" else "_" for c in spec).strip("_") or "target"


def _collect(matrix: Matrix, columns, progress) -> None:
    """Each column as it comes (in the order of the targets); an interruption ends it after the last."""
    for spec, release, error, cells in columns:
        if error is not None:
            matrix.target_errors[spec] = error
        if release:
            matrix.releases[spec] = release
        for check_id, cell in cells.items():
            matrix.cells[(check_id, spec)] = cell
        if progress:
            progress(spec, None if error else sum(cell.status != NOT_RUN for cell in cells.values()))


def render(matrix: Matrix, *, color: bool = False, strict: bool = False) -> str:
    """A fixed-width table (a row per check, a column per target), then each way of failing with its span."""
    headers = ["check", *matrix.targets, "first failing"]
    rows = []
    for check_id in matrix.checks:
        cells = [matrix.cell(check_id, t) for t in matrix.targets]
        rows.append((check_id, cells, matrix.first_failing(check_id, strict=strict) or "-"))
    partial = any(cell.interrupted for _, cells, _ in rows for cell in cells)
    symbol = max(len(s) for s in SYMBOLS.values()) + (len(PARTIAL) if partial else 0)
    widths = [max(len(headers[0]), *(len(r[0]) for r in rows))] if rows else [len(headers[0])]
    widths += [max(len(t), symbol) for t in matrix.targets]
    widths.append(max(len(headers[-1]), *(len(r[2]) for r in rows)) if rows else len(headers[-1]))

    def paint(cell: Cell, width: int) -> str:
        text = (SYMBOLS[cell.status] + (PARTIAL if cell.interrupted else "")).ljust(width)
        return f"\033[{_COLORS[cell.status]}m{text}\033[0m" if color else text

    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for check_id, cells, first in rows:
        painted = [paint(c, w) for c, w in zip(cells, widths[1:-1], strict=True)]
        lines.append("  ".join([check_id.ljust(widths[0]), *painted, first]).rstrip())
    for check_id in matrix.checks:
        for span in matrix.spans(check_id):
            where = span.first if span.first == span.last else f"{span.first} .. {span.last}"
            lines.append(f"{check_id} [{span.kind}] {where} ({len(span.targets)}): {span.signature}")
    for spec, error in matrix.target_errors.items():
        lines.append(f"{spec}: {error}")
    if matrix.interrupted:
        finished = sum(matrix.finished(t) for t in matrix.targets)
        line = f"interrupted: {finished} target(s) finished"
        in_progress = len(matrix.targets) - finished
        if in_progress:
            line += (
                f", {in_progress} in progress ({PARTIAL}: a check stopped part-way,"
                f" {SYMBOLS[NOT_RUN]}: one not begun)"
            )
        lines.append(line)
    return "\n".join(lines)
