"""JUnit XML as a view of a run's records: what the run did not exercise as properties, then a
testcase per lost check or engine function (first), per unit and per
changed known finding. A divergence fails; a could-not-test, a lost check and a check that did not
finish err; a hazard fails under ``--strict``; a skip and a check never begun are skipped. A finding
a baseline tolerates counts as the exit code counts it: not at all."""

from __future__ import annotations

from collections.abc import Sequence
from xml.etree import ElementTree

from mmharness import records
from mmharness.views import NOT_STARTED, SKIPPED, UNFINISHED, Row, of, rows, tolerated

_ERRORS = (records.COULD_NOT_TEST, UNFINISHED)
_SKIPS = (SKIPPED, NOT_STARTED)


def as_junit(
    ledger: Sequence[records.Record],
    spec: str,
    *,
    strict: bool = False,
    interrupted: bool = False,
    against: str | None = None,
) -> str:
    from mmharness.runner import fails_run

    lost = [r for r in of(ledger, records.Lost) if not r.allowed]
    changes = of(ledger, records.Changed)
    units = [(row, _status(row, tolerated(ledger))) for row in rows(ledger)]
    statuses = [status for _, status in units]
    suite = ElementTree.Element(
        "testsuite",
        name=f"mmharness[{spec} against {against}]" if against else f"mmharness[{spec}]",
        tests=str(len(units) + len(changes) + len(lost)),
        failures=str(
            sum(fails_run(s, strict=strict) and s not in _ERRORS for s in statuses) + strict * len(changes)
        ),
        errors=str(sum(s in _ERRORS for s in statuses) + len(lost)),
        skipped=str(sum(s in _SKIPS for s in statuses)),
    )
    properties = ElementTree.SubElement(suite, "properties")
    ElementTree.SubElement(properties, "property", name="interrupted", value=str(interrupted).lower())
    for untested in of(ledger, records.Untested):  # what the run did not exercise, before the verdicts
        ElementTree.SubElement(properties, "property", name="untested", value=untested.what)
    for one in lost:
        text = f"{one.shown()} (allow with --allow-lost {one.what})"
        name = f"{one.what}[{one.device}]" if one.of == records.CHECK else one.what
        _testcase(suite, f"mmharness.lost.{one.of}", name, "error", text, text)
    for row, status in units:
        _unit(suite, row, status, spec, strict=strict, against=against)
    for change in changes:
        text = change.shown() + (f"; saved to {change.saved}" if change.saved else "")
        name = f"{change.check}[{change.device}] known: {change.signature}"
        _testcase(suite, "mmharness.baseline", name, "failure" if strict else "system-out", text, text)
    return ElementTree.tostring(suite, encoding="unicode")


def _status(row: Row, known: set[tuple[str, str, str]]) -> str:
    """A unit's status as the run counts it: its worst finding a baseline does not tolerate."""
    from mmharness.runner import status_of

    if not row.ran:
        return row.status
    return status_of([f for f in row.findings if (row.check, row.device, f.signature) not in known])  # type: ignore[arg-type]


def _unit(suite, row: Row, status: str, spec: str, *, strict: bool, against: str | None) -> None:
    from mmharness.runner import fails_run
    from mmharness.views.console import details

    text = "\n".join(details(f, spec, against=against, deadline=row.deadline) for f in row.findings)
    name = f"{row.check}[{row.device}]"
    if status in _ERRORS:
        message = row.reason if status == records.COULD_NOT_TEST else "unfinished: the run stopped first"
        _testcase(suite, f"mmharness.{row.rule}", name, "error", message, text)
    elif fails_run(status, strict=strict):
        _testcase(suite, f"mmharness.{row.rule}", name, "failure", row.reason, text)
    elif status in _SKIPS:
        message = row.reason if status == SKIPPED else "not started: the run stopped before this check began"
        _testcase(suite, f"mmharness.{row.rule}", name, "skipped", message, None)
    else:
        _testcase(suite, f"mmharness.{row.rule}", name, "system-out" if row.findings else None, None, text)


def _testcase(
    suite, classname: str, name: str, tag: str | None, message: str | None, text: str | None
) -> None:
    """One testcase, with its ``tag`` (failure, error, skipped, system-out; ``None``: a pass)."""
    case = ElementTree.SubElement(suite, "testcase", classname=classname, name=name)
    if tag is None:
        return
    node = ElementTree.SubElement(case, tag, **({"message": message} if message is not None else {}))
    if text is not None and tag != "skipped":
        node.text = text
