"""What of a target a ``check`` run did not exercise: the fork report ``check`` ends with.

A verdict of "passed" says nothing of code that never ran. A fork maintainer
asks what of *their* changes the run covered: which checks were skipped and
why (a function missing, or of a form the harness cannot call), which could
not test and on what (a stubbed name, a setting nobody declared), which engine
functions the harness knows by name and never called, and what the code
reached only as the one-process harness serves it (collectives of a process
group of one, paths for more ranks never taken, settings read at one value).
The first two come from the results; the rest from the target's notes as they
stood once each check had run (``Result.target_notes``, gathered in the
process that ran the check), less those already printed before the run, and
from the target's ``engine_functions`` (each function not driven, with why).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from mmharness.records import COULD_NOT_TEST
from mmharness.views import SKIPPED, Row, rows

if TYPE_CHECKING:
    from mmharness.records import Record
    from mmharness.targets.base import Target


def report(ledger: Sequence[Record], target: Target, shown: Iterable[str] = ()) -> list[str]:
    """One line per thing untested, grouped (each reason with the checks it covers); ``shown``: notes
    the run already printed before it began, not repeated."""
    units = rows(ledger)
    lines = [f"skipped ({_ids(checks)}): {reason}" for reason, checks in _grouped(units, SKIPPED).items()]
    lines += [
        f"could not test ({_ids(checks)}): {reason}"
        for reason, checks in _grouped(units, COULD_NOT_TEST).items()
    ]
    lines += [
        f"not driven: {name}: {why}" for name, why in target.engine_functions().items() if why is not None
    ]
    already = set(shown)
    reached = dict.fromkeys(note for row in units for note in row.notes if note not in already)
    return lines + [f"reached during the run: {note}" for note in reached]


def _grouped(units: Sequence[Row], status: str) -> dict[str, list[str]]:
    """Reason -> the checks (ids, in run order) with ``status`` for it: a could-not-test by each finding's
    signature (the gap it names), a skip by its reason."""
    grouped: dict[str, list[str]] = {}
    for row in units:
        if row.status != status:
            continue
        reasons = [f.signature for f in row.findings if f.kind == status] or [row.reason]
        for reason in dict.fromkeys(reasons):
            grouped.setdefault(reason, []).append(row.check)
    return grouped


def _ids(checks: list[str]) -> str:
    unique = list(dict.fromkeys(checks))
    return ", ".join(unique) if len(unique) <= 4 else f"{', '.join(unique[:3])} and {len(unique) - 3} more"
