"""Every output of a run is a view of its records: the console (``console``), the JSON report
(``json_report``), JUnit (``junit``) and a baseline file (``mmharness.baseline.dump``).

``rows`` is what they share: one ``Row`` per planned unit (check x device), in
run order, with its findings and how it ended, whether it ran to its end, was
stopped part-way, never began, or was skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from mmharness import records

PASSED, SKIPPED = "passed", "skipped"
UNFINISHED, NOT_STARTED = records.UNFINISHED, records.NOT_STARTED
LABELS = {
    PASSED: "PASS",
    records.DIVERGENCE: "DIVERGENCE",
    records.HAZARD: "HAZARD",
    records.COULD_NOT_TEST: "COULD-NOT-TEST",
    SKIPPED: "SKIP",
    UNFINISHED: "UNFINISHED",
    NOT_STARTED: "NOT STARTED",
}


@dataclass
class Row:
    """One unit of the run: ``status`` is its worst finding's kind, ``passed``, ``skipped``,
    ``unfinished`` (stopped part-way: its findings are what it had) or ``not started``."""

    check: str
    device: str
    rule: str = ""
    status: str = NOT_STARTED
    reason: str = ""
    examples: int = 0
    cases: int = 0
    deadline: float | None = None
    findings: list[records.Finding] = field(default_factory=list)
    notes: tuple[str, ...] = ()
    """The target's notes once the check had run, in the process that ran it."""

    @property
    def found_at(self) -> int | None:
        return min((f.found_at for f in self.findings if f.found_at is not None), default=None)

    @property
    def ran(self) -> bool:
        """Whether it ran to its end (a pass or a verdict), so what it did not find it did not miss."""
        return self.status not in (SKIPPED, UNFINISHED, NOT_STARTED)


def rows(ledger: Sequence[records.Record]) -> list[Row]:
    """The units of a run, in the order its plan (``Started``) names them."""
    started = next((r for r in ledger if isinstance(r, records.Started)), None)
    order = list(started.units) if started is not None else []
    by_unit: dict[tuple[str, str], Row] = {}
    for unit in order:
        by_unit[tuple(unit)] = Row(*unit)
    for record in ledger:
        if isinstance(record, records.Unit) and not isinstance(record, _NOT_OF_A_ROW):
            _add(by_unit.setdefault(record.unit, Row(*record.unit)), record)
    for first in of(ledger, records.Found):  # met, then the run ended before the check recorded it
        row = by_unit.setdefault(first.unit, Row(*first.unit))
        if all(f.signature != first.signature for f in row.findings):
            row.findings.append(_as_found(first))
    return list(by_unit.values())


_NOT_OF_A_ROW = (records.Found, records.Tolerated, records.Changed)
"""Unit records that are not how a unit ran: first sightings (``rows`` keeps those no finding
superseded), and the passes' own."""


def _as_found(first: records.Found) -> records.Finding:
    """A way of failing the run recorded only as first met: a finding of its case as found."""
    kinds = {cls.KIND: cls for cls in (records.Divergence, records.Hazard, records.CouldNotTest)}
    kind = kinds[first.verdict]
    note = "case as first met (the run ended before the check did)"
    return kind(
        first.check, first.device, first.signature, first.message, case=first.case, shrunk=False, note=note
    )


def _add(row: Row, record: records.Record) -> None:
    if isinstance(record, records.Finding):
        row.findings.append(record)
    elif isinstance(record, records.Ended):
        row.rule, row.status, row.reason = record.rule, record.status, record.reason
        row.examples, row.cases, row.deadline = record.examples, record.cases, record.deadline
        row.notes = tuple(record.notes)
    elif isinstance(record, records.Skipped):
        row.rule, row.status, row.reason = record.rule, SKIPPED, record.reason
    elif isinstance(record, records.Unfinished):
        row.rule, row.status, row.examples = record.rule or row.rule, record.state, record.examples


def of(ledger: Iterable[records.Record], kind: type) -> list:
    """The records of ``kind``, in order."""
    return [r for r in ledger if isinstance(r, kind)]


def tolerated(ledger: Iterable[records.Record]) -> set[tuple[str, str, str]]:
    """``(check, device, signature)`` of each finding a baseline tolerates."""
    return {(r.check, r.device, r.signature) for r in of(ledger, records.Tolerated)}
