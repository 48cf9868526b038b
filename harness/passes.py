"""What follows a run's search, each a pass over its records that appends records of its own: a
baseline's tolerance and the replay of its known cases, the coverage a comparison lost, and the
exit code that the records add up to.

Each pass reads what the search recorded, never the search's objects, so it
works the same on a run in process, in workers, or read back from a ledger.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mmharness import records
from mmharness.views import NOT_STARTED, SKIPPED, UNFINISHED, of, rows, tolerated

if TYPE_CHECKING:
    from mmharness.baseline import Baseline
    from mmharness.plan import Plan


def tolerance(ledger: Sequence[records.Record], known: Baseline) -> list[records.Tolerated]:
    """A record for each finding ``known`` tolerates (by unit and signature)."""
    return [
        records.Tolerated(row.check, row.device, finding.signature, known.path)
        for row in rows(ledger)
        for finding in row.findings
        if known.knows(row.check, row.device, finding.signature)
    ]


def changed_known(ledger: Sequence[records.Record], plan: Plan) -> list[records.Changed]:
    """The baseline's known findings whose own case, replayed on the target (against the run's other
    target, where it compares), no longer fails as recorded (``baseline.recheck``), each case saved."""
    from mmharness import baseline, report
    from mmharness.checks import all_checks

    assert plan.baseline is not None
    ran = {(row.check, row.device): row.deadline for row in rows(ledger) if row.ran}
    changes = baseline.recheck(
        plan.baseline, plan.target, ran, other=plan.other, other_spec=plan.against or ""
    )
    shown = []
    for entry, now in changes:
        note = f"the baseline's case of {entry.kind}: {entry.signature}"
        saved = report.save_case(all_checks()[entry.check], entry.example, plan.spec, plan.findings, note)
        how = tuple((f.kind, f.signature) for f in now.findings)
        case = records.case_document(entry.example)
        shown.append(
            records.Changed(entry.check, entry.device, entry.signature or "", entry.kind, how, case, saved)
        )
    return shown


def lost(plan: Plan) -> list[records.Lost]:
    """What runs on the target compared with and not here, known before anything runs: each check the
    target cannot run (skipped, or a file that holds it did not load) that the other can, and each engine
    function driven there and not here (``engine_functions``), with why; allowed by name with
    ``--allow-lost``."""
    if plan.other is None:
        return []
    import fnmatch

    from mmharness.runner import not_run

    other, spec = plan.other, plan.against or ""

    def allowed(name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in plan.allow_lost)

    found = []
    for check, device in plan.units:
        mine = not_run(check, plan.target, device)
        if mine is not None and not_run(check, other, device) is None:
            found.append(records.Lost(check.id, records.CHECK, device, spec, mine.reason, allowed(check.id)))
    theirs = other.engine_functions()
    for name, why in plan.target.engine_functions().items():
        if why is not None and name in theirs and theirs[name] is None:
            found.append(records.Lost(name, records.FUNCTION, "", spec, why, allowed(name)))
    return found


def exit_code(ledger: Sequence[records.Record], *, strict: bool) -> int:
    """What a finished run's records add up to: 1 for a divergence the baseline does not know (under
    ``--strict`` also a hazard, a could-not-test, a changed known finding or lost coverage), 3 where the
    harness could not test part of the target or coverage was lost, 4 where nothing ran at all."""
    from mmharness.exits import COULD_NOT_TEST_EXIT, DIVERGED, NOTHING_RAN, PASSED_EXIT
    from mmharness.runner import fails_run

    units = rows(ledger)
    if units and all(row.status == SKIPPED for row in units):
        return NOTHING_RAN
    known = tolerated(ledger)
    kinds = [
        f.kind for row in units for f in row.findings if (row.check, row.device, f.signature) not in known
    ]
    kinds += [records.HAZARD] * len(of(ledger, records.Changed))  # shown, and fatal under --strict
    kinds += [records.COULD_NOT_TEST] * sum(not r.allowed for r in of(ledger, records.Lost))
    kinds += [records.COULD_NOT_TEST] * sum(row.status in (UNFINISHED, NOT_STARTED) for row in units)
    if any(fails_run(kind, strict=strict) for kind in kinds):
        return DIVERGED
    return COULD_NOT_TEST_EXIT if records.COULD_NOT_TEST in kinds else PASSED_EXIT
