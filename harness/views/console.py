"""The console view of a run's records: a line per check as it ends, then what did not run (first),
each finding with its case and replay line, the summary table and the baseline's notes."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from mmharness import records
from mmharness.views import LABELS, NOT_STARTED, PASSED, SKIPPED, UNFINISHED, Row, of, rows, tolerated

if TYPE_CHECKING:
    from mmharness.runner import Finding, Result

_COLORS = {
    PASSED: "32",
    records.DIVERGENCE: "31",
    records.HAZARD: "33",
    records.COULD_NOT_TEST: "35",
    SKIPPED: "2",
    UNFINISHED: "35",
    NOT_STARTED: "2",
}
_WIDTH = max(map(len, LABELS.values()))


def use_color(stream: TextIO) -> bool:
    return stream.isatty() and "NO_COLOR" not in os.environ


def result_line(result: Result, *, color: bool = False) -> str:
    """A check's result (``runner.Result``) as its line, where a command holds one rather than records."""
    return line(rows(records.of_result(result))[0], color=color)


def result_details(result: Result, spec: str, *, against: str | None = None) -> str:
    """Every finding of a result, as ``details`` shows each."""
    return "\n".join(finding_details(result, f, spec, against=against) for f in result.findings)


def finding_details(result: Result, finding: Finding, spec: str, *, against: str | None = None) -> str:
    """One finding of a result (``runner.Finding``), as ``details`` shows it."""
    record = records.of_finding(result.check.id, result.device, finding)
    return details(record, spec, against=against, deadline=result.deadline)


def line(row: Row, *, color: bool = False) -> str:
    """A unit's one line: its verdict, the check and rule, and what it ran or why it failed."""
    label = LABELS[row.status].ljust(_WIDTH)
    if color:
        label = f"\033[{_COLORS[row.status]}m{label}\033[0m"
    if row.status == PASSED:
        detail = f"{row.examples} examples" + (f", {row.cases} cases" if row.cases > row.examples else "")
    elif row.status in (SKIPPED, NOT_STARTED):
        detail = row.reason or "the run stopped before this check began"
    elif row.status == UNFINISHED:
        detail = f"stopped after {row.examples} examples, before the check ended"
    else:
        ways = len(row.findings)
        more = f" (+{ways - 1} more way{'s' if ways > 2 else ''} of failing)" if ways > 1 else ""
        detail = f"after {row.found_at} examples: {row.reason}{more}"
    device = f" [{row.device}]" if row.device != "cpu" else ""
    return f"{label} {row.check} ({row.rule}){device}  {detail}"


def details(
    finding: records.Finding,
    spec: str,
    *,
    against: str | None = None,
    deadline: float | None = None,
) -> str:
    """A finding with what a maintainer needs to see and reproduce it. ``against``: the target a
    ``check --against`` run compared with (both are named); ``deadline``: the run's, which the
    replay of a case that did not finish takes too."""
    from mmharness import payload
    from mmharness.deadline import SIGNATURE as DID_NOT_FINISH
    from mmharness.report import replay_command

    check = _check(finding.check)
    lines = [
        f"--- {LABELS[finding.kind]} {finding.check} (rule {check.rule if check else '?'}) on {spec}"
        + (f" against {against}" if against else ""),
        f"    {check.doc if check else ''}",
        f"    {finding.message}",
        f"    signature: {finding.signature}",
        f"    expected: {finding.expected}",
        f"    actual:   {finding.actual}",
    ]
    if finding.case is not None:
        shown = "shrunk case" if finding.shrunk else "case as first seen (interrupted before shrinking)"
        lines.append(f"    {finding.note or shown}:")
        lines += ("      " + text for text in payload.text(finding.case).splitlines())
    if finding.saved:
        limit = deadline if finding.signature == DID_NOT_FINISH else None
        lines += [
            f"    saved to: {finding.saved}",
            f"    reproduce with: {replay_command(finding.saved, spec, limit, against)}",
        ]
    return "\n".join(lines)


def _check(check_id: str):
    from mmharness.checks import all_checks

    return all_checks().get(check_id)


def not_run(ledger: Sequence[records.Record], spec: str, untested: Sequence[str]) -> list[str]:
    """What the run did not run, first in every report: coverage lost against the other target,
    checks stopped part-way or never begun, and the target's untested parts, each with why."""
    lines = []
    for lost in of(ledger, records.Lost):
        allowed = " (allowed: --allow-lost)" if lost.allowed else ""
        lines.append(f"lost coverage: {lost.shown()}{allowed}")
    for row in rows(ledger):
        if row.status in (UNFINISHED, NOT_STARTED):
            lines.append(f"{row.status}: {row.check} [{row.device}]")
    if untested:
        lines.append(f"untested in {spec} (what this run did not exercise):")
        lines += [f"  {text}" for text in untested]
    return lines


def summary(ledger: Sequence[records.Record]) -> str:
    counted = [row.status for row in rows(ledger)]
    counts = {status: counted.count(status) for status in LABELS}
    text = (
        f"{counts[PASSED]} passed, {counts[records.DIVERGENCE]} diverged, {counts[records.HAZARD]} hazards,"
        f" {counts[records.COULD_NOT_TEST]} could not test, {counts[SKIPPED]} skipped"
    )
    stopped = counts[UNFINISHED] + counts[NOT_STARTED]
    return text + (f", {stopped} did not finish" if stopped else "")


def explained(ledger: Sequence[records.Record], *, strict: bool) -> list[str]:
    """What a newcomer needs to read the verdicts: what a hazard is, where one was found. On the
    reference a hazard is the rules' own (the reference is the rules), not a bug in it: said so."""
    from mmharness.targets.reference import ReferenceTarget

    hazards = sum(row.status == records.HAZARD for row in rows(ledger))
    if not hazards or strict:
        return []
    started = of(ledger, records.Started)
    if started and started[0].target == ReferenceTarget.name:
        return [
            f"{hazards} hazard(s) of the rules themselves: the reference is the rules, so every engine"
            " that follows them shares these; the check shows on the reference what it looks for in an"
            " engine (docs/rules.md, Hazards); shown, they fail the run only under --strict"
        ]
    return [
        f"{hazards} hazard(s): the target follows the rules, which let a user's data be lost or misused"
        " there (docs/rules.md, Hazards); shown, they fail the run only under --strict"
    ]


def table(ledger: Sequence[records.Record], stream: TextIO | None = None) -> None:
    """Every unit as a row of the summary table."""
    from mmharness.progress import summary_table

    shown = [
        (row.check, row.device, LABELS[row.status], str(len(row.findings)), str(row.examples), str(row.cases))
        for row in rows(ledger)
    ]
    header = ("check", "device", "verdict", "findings", "examples", "cases")
    summary_table(shown, header, stream or sys.stdout)


def findings(ledger: Sequence[records.Record], spec: str, *, against: str | None = None) -> list[str]:
    """Each finding's details, in run order, a tolerated one marked so."""
    known = tolerated(ledger)
    shown = []
    for row in rows(ledger):
        for finding in row.findings:
            note = (
                "  (tolerated: in the baseline)"
                if (row.check, row.device, finding.signature) in known
                else ""
            )
            shown.append(details(finding, spec, against=against, deadline=row.deadline) + note)
    return shown


def changed(ledger: Sequence[records.Record], spec: str, *, against: str | None = None) -> list[str]:
    """The baseline's known findings whose own case no longer fails as recorded, each with its replay."""
    from mmharness.report import replay_command

    changes = of(ledger, records.Changed)
    if not changes:
        return []
    lines = [
        f"{len(changes)} known finding(s) changed: the baseline's own case no longer fails as recorded"
        " (the code changed where it already failed: a fix, or a change the known signature would"
        " hide; fatal under --strict; once reviewed, write the baseline again)"
    ]
    for change in changes:
        lines.append(f"  {change.check} [{change.device}] {change.signature}: {change.shown()}")
        if change.saved:
            lines.append(f"    saved to: {change.saved}")
            lines.append(f"    reproduce with: {replay_command(change.saved, spec, against=against)}")
    return lines
