"""``mmharness matrix``: the selected checks against several targets; where each first fails.

Targets are taken in the order given (list releases oldest first and "first
failing" reads as "first failing release"). A target that cannot be loaded gets
an ``error`` cell in every row, with its one-line reason, and never stops the others.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.checks.registry import Check
from harness.runner import FAILED, HAZARD, PASSED, SKIPPED, Result, run_check

ERROR = "error"
SYMBOLS = {PASSED: "pass", FAILED: "FAIL", HAZARD: "hazard", SKIPPED: "skip", ERROR: "error"}
_COLORS = {PASSED: "32", FAILED: "31", HAZARD: "33", SKIPPED: "2", ERROR: "35"}


@dataclass(frozen=True)
class Cell:
    """One check on one target: its status, why (for anything but a pass), examples run."""

    status: str
    reason: str = ""
    examples_run: int = 0


@dataclass
class Matrix:
    """Check x target statuses, in the order checks and targets were given."""

    targets: list[str]
    checks: list[str]
    cells: dict[tuple[str, str], Cell] = field(default_factory=dict)
    target_errors: dict[str, str] = field(default_factory=dict)
    releases: dict[str, str] = field(default_factory=dict)

    def cell(self, check_id: str, target: str) -> Cell:
        return self.cells[(check_id, target)]

    def first_failing(self, check_id: str, *, strict: bool = False) -> str | None:
        """The first target (in the order given) it fails on; hazards count when ``strict``."""
        failing = {FAILED, HAZARD} if strict else {FAILED}
        return next((t for t in self.targets if self.cell(check_id, t).status in failing), None)

    def as_json(self, *, strict: bool = False) -> dict[str, Any]:
        return {
            "format": "mmharness.matrix/1",
            "targets": [
                {"spec": t, "release": self.releases.get(t), "error": self.target_errors.get(t)}
                for t in self.targets
            ],
            "checks": [
                {
                    "id": c,
                    "first_failing": self.first_failing(c, strict=strict),
                    "results": {
                        t: {
                            "status": self.cell(c, t).status,
                            "reason": self.cell(c, t).reason,
                            "examples": self.cell(c, t).examples_run,
                        }
                        for t in self.targets
                    },
                }
                for c in self.checks
            ],
        }


def run_matrix(
    specs: Sequence[str],
    checks: Sequence[Check],
    profile: str = "ci",
    *,
    device: str = "cpu",
    max_examples: int | None = None,
    seed: int | None = None,
    progress: Callable[[str, Result | None], None] | None = None,
) -> Matrix:
    """Run each check on each target; a target that does not load gets errors in its column."""
    from harness.targets.base import TargetError
    from harness.targets.specs import resolve

    matrix = Matrix(targets=list(specs), checks=[c.id for c in checks])
    for spec in specs:
        try:
            target = resolve(spec)
        except TargetError as error:
            matrix.target_errors[spec] = str(error)
            for check in checks:
                matrix.cells[(check.id, spec)] = Cell(ERROR, str(error))
            if progress:
                progress(spec, None)
            continue
        release = target.describe().get("release")
        if release:
            matrix.releases[spec] = str(release)
        for check in checks:
            result = run_check(
                check, target, profile=profile, device=device, max_examples=max_examples, seed=seed
            )
            matrix.cells[(check.id, spec)] = Cell(result.status, result.reason, result.examples_run)
            if progress:
                progress(spec, result)
    return matrix


def render(matrix: Matrix, *, color: bool = False, strict: bool = False) -> str:
    """A fixed-width table: a row per check, a column per target, then the first failing target."""
    headers = ["check", *matrix.targets, "first failing"]
    rows = []
    for check_id in matrix.checks:
        statuses = [matrix.cell(check_id, t).status for t in matrix.targets]
        rows.append((check_id, statuses, matrix.first_failing(check_id, strict=strict) or "-"))
    widths = [max(len(headers[0]), *(len(r[0]) for r in rows))] if rows else [len(headers[0])]
    widths += [max(len(t), max(len(s) for s in SYMBOLS.values())) for t in matrix.targets]
    widths.append(max(len(headers[-1]), *(len(r[2]) for r in rows)) if rows else len(headers[-1]))

    def paint(status: str, width: int) -> str:
        text = SYMBOLS[status].ljust(width)
        return f"\033[{_COLORS[status]}m{text}\033[0m" if color else text

    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for check_id, statuses, first in rows:
        cells = [paint(s, w) for s, w in zip(statuses, widths[1:-1], strict=True)]
        lines.append("  ".join([check_id.ljust(widths[0]), *cells, first]).rstrip())
    for spec, error in matrix.target_errors.items():
        lines.append(f"{spec}: {error}")
    return "\n".join(lines)
