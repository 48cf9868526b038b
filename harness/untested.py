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
process that ran the check): every function not driven (a note opening
``targets.base.NOT_DRIVEN``) even where the header showed it, the others
less those already printed before the run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from mmharness.targets.base import NOT_DRIVEN

if TYPE_CHECKING:
    from mmharness.runner import Result


def report(results: Sequence[Result], shown: Iterable[str] = ()) -> list[str]:
    """One line per thing untested, grouped (each reason with the checks it covers); ``shown``: notes
    the run already printed, not repeated."""
    from mmharness.runner import COULD_NOT_TEST, SKIPPED

    lines = [f"skipped ({_ids(checks)}): {reason}" for reason, checks in _grouped(results, SKIPPED).items()]
    lines += [
        f"could not test ({_ids(checks)}): {reason}"
        for reason, checks in _grouped(results, COULD_NOT_TEST).items()
    ]
    notes = dict.fromkeys(note for r in results for note in r.target_notes)
    lines += [f"not driven: {note.removeprefix(NOT_DRIVEN)}" for note in notes if note.startswith(NOT_DRIVEN)]
    already = set(shown)
    reached = [note for note in notes if note not in already and not note.startswith(NOT_DRIVEN)]
    return lines + [f"reached during the run: {note}" for note in reached]


def _grouped(results: Sequence[Result], status: str) -> dict[str, list[str]]:
    """Reason -> the checks (ids, in run order) with ``status`` for it: a could-not-test by each finding's
    signature (the gap it names), a skip by its reason."""
    grouped: dict[str, list[str]] = {}
    for result in results:
        if result.status != status:
            continue
        reasons = [f.signature for f in result.findings if f.kind == status] or [result.reason]
        for reason in dict.fromkeys(reasons):
            grouped.setdefault(reason, []).append(result.check.id)
    return grouped


def _ids(checks: list[str]) -> str:
    unique = list(dict.fromkeys(checks))
    return ", ".join(unique) if len(unique) <= 4 else f"{', '.join(unique[:3])} and {len(unique) - 3} more"
