"""The JSON report (``mmharness.report/2``) as a view of a run's records: what did not run first
(``lost``, ``not_finished``, ``untested``), then a result per unit with its findings, then the
baseline's changed known findings. A report serves as a baseline (``mmharness.baseline.load``)."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any

from mmharness import records
from mmharness.views import NOT_STARTED, UNFINISHED, Row, of, rows

FORMAT = "mmharness.report/2"


def as_json(
    ledger: Sequence[records.Record],
    spec: str,
    *,
    strict: bool = False,
    identity: dict | None = None,
    interrupted: bool = False,
    coverage: dict | None = None,
    against: str | None = None,
    untested: Sequence[str] = (),
) -> dict[str, Any]:
    """The report of a run; ``coverage`` (``check --coverage``'s figures) is kept under that key."""
    units = rows(ledger)
    document: dict[str, Any] = {
        "format": FORMAT,
        "target": spec,
        "against": against,
        "identity": identity or {},
        "strict": strict,
        "interrupted": interrupted,
        "lost": [dataclasses.asdict(r) for r in of(ledger, records.Lost)],
        "not_finished": [
            {"check": r.check, "device": r.device, "state": r.status}
            for r in units
            if r.status in (UNFINISHED, NOT_STARTED)
        ],
        "untested": list(untested),
        "results": [_result(row, against) for row in units if row.status != NOT_STARTED],
        "baseline_changes": [_changed(c) for c in of(ledger, records.Changed)],
    }
    if coverage is not None:
        document["coverage"] = coverage
    return document


def _result(row: Row, against: str | None) -> dict[str, Any]:
    from mmharness.checks import all_checks

    check = all_checks().get(row.check)
    return {
        "check": row.check,
        "rule": row.rule,
        "family": check.family if check else "",
        "device": row.device,
        "status": row.status,
        "reason": row.reason,
        "examples": row.examples,
        "cases": row.cases,
        "first_failure_at": row.found_at,
        "interrupted": row.status == UNFINISHED,
        "findings": [_finding(f, against) for f in row.findings],
    }


def _finding(finding: records.Finding, against: str | None) -> dict[str, Any]:
    shown = {
        "kind": finding.kind,
        "signature": finding.signature,
        "message": finding.message,
        "expected": finding.expected,
        "actual": finding.actual,
        "first_failure_at": finding.found_at,
        "case_hash": case_hash(finding.case),
        "saved": finding.saved,
        "shrunk": finding.shrunk,
        "case": finding.case,
    }
    if against:
        shown["change"] = finding.change if isinstance(finding, records.Comparison) else None
    return shown


def _changed(change: records.Changed) -> dict[str, Any]:
    return {
        "check": change.check,
        "device": change.device,
        "signature": change.signature,
        "kind": change.verdict,
        "now": [{"kind": kind, "signature": signature} for kind, signature in change.now],
        "shown": change.shown(),
        "saved": change.saved,
    }


def case_hash(case: dict | None) -> str | None:
    """A short hash of a finding's case document, to tell two baselined cases apart."""
    if case is None:
        return None
    from mmharness import payload

    return hashlib.sha1(payload.text(case).encode()).hexdigest()[:10]
