"""JUnit XML as a view of a run's records: a testcase per lost check (first), per unit and per
changed known finding. A divergence fails; a could-not-test, a lost check and a check that did not
finish err; a hazard fails under ``--strict``; a skip and a check never begun are skipped."""

from __future__ import annotations

from collections.abc import Sequence
from xml.etree import ElementTree

from mmharness import records
from mmharness.views import NOT_STARTED, SKIPPED, UNFINISHED, Row, of, rows, tolerated


def as_junit(
    ledger: Sequence[records.Record],
    spec: str,
    *,
    strict: bool = False,
    interrupted: bool = False,
    against: str | None = None,
) -> str:
    from mmharness.runner import fails_run
    from mmharness.views.console import details

    shown = f"{spec} against {against}" if against else spec
    known = tolerated(ledger)
    lost = [r for r in of(ledger, records.Lost) if not r.allowed]
    changes = of(ledger, records.Changed)
    units = rows(ledger)

    def failing(row: Row) -> list[records.Finding]:
        return [f for f in row.findings if (row.check, row.device, f.signature) not in known]

    def status(row: Row) -> str:
        from mmharness.runner import status_of

        return row.status if not row.ran else status_of(failing(row))  # type: ignore[arg-type]

    statuses = [status(row) for row in units]
    errors = sum(s in (records.COULD_NOT_TEST, UNFINISHED) for s in statuses) + len(lost)
    failed = sum(fails_run(s, strict=strict) and s != records.COULD_NOT_TEST for s in statuses)
    suite = ElementTree.Element(
        "testsuite",
        name=f"mmharness[{shown}]",
        tests=str(len(units) + len(changes) + len(lost)),
        failures=str(failed + (len(changes) if strict else 0)),
        errors=str(errors),
        skipped=str(sum(s in (SKIPPED, NOT_STARTED) for s in statuses)),
    )
    properties = ElementTree.SubElement(suite, "properties")
    ElementTree.SubElement(properties, "property", name="interrupted", value=str(interrupted).lower())
    for one in lost:
        case = ElementTree.SubElement(
            suite, "testcase", classname="mmharness.lost", name=f"{one.check}[{one.device}]"
        )
        text = f"runs on {one.other} and not here: {one.reason} (allow with --allow-lost {one.check})"
        ElementTree.SubElement(case, "error", message=text).text = text
    for row, state in zip(units, statuses, strict=True):
        case = ElementTree.SubElement(
            suite, "testcase", classname=f"mmharness.{row.rule}", name=f"{row.check}[{row.device}]"
        )
        text = "\n".join(details(f, spec, against=against, deadline=row.deadline) for f in row.findings)
        if state in (records.COULD_NOT_TEST, UNFINISHED):
            message = (
                row.reason
                if state == records.COULD_NOT_TEST
                else "unfinished: the run stopped before this check ended"
            )
            ElementTree.SubElement(case, "error", message=message).text = text
        elif fails_run(state, strict=strict):
            ElementTree.SubElement(case, "failure", message=row.reason).text = text
        elif state in (SKIPPED, NOT_STARTED):
            message = (
                row.reason if state == SKIPPED else "not started: the run stopped before this check began"
            )
            ElementTree.SubElement(case, "skipped", message=message)
        elif row.findings:
            ElementTree.SubElement(case, "system-out").text = text
    for change in changes:
        name = f"{change.check}[{change.device}] known: {change.signature}"
        case = ElementTree.SubElement(suite, "testcase", classname="mmharness.baseline", name=name)
        text = change.shown() + (f"; saved to {change.saved}" if change.saved else "")
        ElementTree.SubElement(case, "failure" if strict else "system-out", message=text).text = text
    return ElementTree.tostring(suite, encoding="unicode")
