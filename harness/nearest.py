"""``mmharness targets SPEC --nearest``: which release a target (a fork) behaves like, and how it differs.

A fork's files say little about where it sits: its rule files differ from
every release's in digests (formatting, logging, unrelated edits), and a
release's files differ from its neighbours' in ways no rule sees. What counts
is behaviour, so each candidate release is compared with the target as
``check --against`` compares two targets (``mmharness.against``: the same
case and params on both, every observable normalised and compared, each
difference a change judged fix, regression or neutral).

The sample is fixed: each check runs under the ``ci`` profile, whose seed
comes from the check's id, with a small budget (``max_examples``), so every
candidate is shown the same cases, in the same order, on every run, and
rankings compare. Ranking needs only *whether* and *how soon* a check
changes, so each check's search stops at its first change, unshrunk
(``Session.stop_at``): a distant release costs a few examples per check, an
identical one the whole budget, and no time goes into shrinking changes nobody
reads. A candidate is **identical** when no check both can run shows a change
on any sample case (a check either cannot run is skipped, as ``check
--against`` skips it, and does not count; nor does a could-not-test).

Candidates are ranked by the number of checks with a change, then by how
many sample cases agreed before the changes began (more: nearer), then in
the order given. The **nearest** (the first) then has each of its changed
checks searched again over the same budget, shrinking each change (the
``Session`` of ``check --against``), so every class of change is reported with
one shrunk example: what ``check --target SPEC --against NEAREST`` would show
for those checks. Candidates run in worker processes (``workers``), a unit
each; each process loads the target once.

As a CI step (``exit_code``, ``as_json``): the run exits 1 when the nearest's
changes include a regression (a rule the target breaks where that release
follows it), 0 when the nearest behaves identically or differs only by fixes
and neutral changes, 4 when no candidate could be compared; the JSON holds the
ranking, every candidate's checks, and the nearest's changes with their
judgement, shrunk case and replay line. Interrupted before every candidate was
compared to its end, it names no nearest (one not measured may be nearer than
those that were): the ranking holds the candidates that finished, the rest are
listed as not compared (``Nearest.unranked``), and the run exits as interrupted.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmharness.against import CHANGES, REGRESSION, change_of
from mmharness.checks.outcome import DIVERGENCE, HAZARD
from mmharness.runner import SKIPPED, Interrupted
from mmharness.workers import ordered

if TYPE_CHECKING:
    from mmharness.checks.registry import Check
    from mmharness.runner import Result
    from mmharness.targets.base import Target

MAX_EXAMPLES = 20
"""Sample cases per check and candidate by default: enough to tell neighbouring releases apart (a
change usually shows within a few), small enough to compare with every cached release."""
PROFILE = "ci"
"""The profile whose seed is fixed per check: the same sample for every candidate and every run."""

SAME, CHANGED, NOT_COMPARED = "same", "changed", "not compared"
FORMAT = "mmharness.nearest/1"
"""The ``--json`` document's format."""
NO_REGRESSION, REGRESSED, NONE_COMPARED = 0, 1, 4
"""Exit codes (``exit_code``): the nearest is identical or changed without a regression; its changes
include a regression; no candidate could be compared (as ``check``'s 4: nothing ran)."""


class NearestError(ValueError):
    """A ``--nearest`` that cannot run (no candidates); the message says what to give instead."""


@dataclass(frozen=True)
class Compared:
    """One check's sample on the target and one candidate: plain data, so a worker can send it back."""

    check: str
    outcome: str
    """``SAME`` (every sample case alike), ``CHANGED`` (a change met), ``NOT_COMPARED`` (see ``reason``)."""
    alike: int = 0
    """Sample cases that ran alike (before the first change, when one was met)."""
    change: str | None = None
    """The first change's kind (``against.REGRESSION``, ``FIX``, ``NEUTRAL``)."""
    signature: str = ""
    """The first change's signature."""
    reason: str = ""
    """For ``NOT_COMPARED``: why (a target lacks what it needs, could not test, a case past its deadline)."""


@dataclass(frozen=True)
class Candidate:
    """One candidate release's comparison with the target, check by check."""

    spec: str
    release: str | None = None
    error: str | None = None
    """Why it did not load (then nothing was compared)."""
    compared: tuple[Compared, ...] = ()
    interrupted: bool = False

    @property
    def changed(self) -> list[Compared]:
        return [c for c in self.compared if c.outcome == CHANGED]

    @property
    def checked(self) -> int:
        """Checks both targets ran (changed or not)."""
        return sum(c.outcome != NOT_COMPARED for c in self.compared)

    @property
    def alike(self) -> int:
        return sum(c.alike for c in self.compared)

    @property
    def identical(self) -> bool:
        return self.error is None and not self.interrupted and self.checked > 0 and not self.changed

    @property
    def kinds(self) -> Counter[str]:
        """The first change of each changed check, by kind."""
        return Counter(c.change for c in self.changed if c.change)

    def distance(self) -> tuple[int, int, int]:
        """Sort key, nearest first: loaded and complete, fewer checks changed, more cases alike."""
        unusable = self.error is not None or self.interrupted or self.checked == 0
        return (int(unusable), len(self.changed), -self.alike)


@dataclass
class Nearest:
    """Candidates ranked nearest first, and the nearest's changes, each shrunk (``changes``)."""

    target: str
    candidates: list[Candidate]
    max_examples: int
    changes: list[Result] = field(default_factory=list)
    """The nearest's changed checks searched again with shrinking: each finding a class of change."""
    interrupted: bool = False
    unranked: tuple[str, ...] = ()
    """Candidates an interruption kept from being compared to their end (stopped part-way, or never
    begun): while any is, no candidate is named nearest, since it may be nearer than those measured."""

    @property
    def nearest(self) -> Candidate | None:
        if self.unranked:
            return None
        usable = [c for c in self.candidates if c.distance()[0] == 0]
        return usable[0] if usable else None

    @property
    def identical(self) -> list[Candidate]:
        return [c for c in self.candidates if c.identical]

    @property
    def regressed(self) -> bool:
        """Whether the nearest's changes include a regression: a first change in the ranking's sample, or
        a class the shrinking search found."""
        chosen = self.nearest
        if chosen is None:
            return False
        shrunk = (change_of(f) for r in self.changes for f in r.findings)
        return chosen.kinds[REGRESSION] > 0 or REGRESSION in shrunk


def exit_code(nearest: Nearest) -> int:
    """What a CI step reads (``NO_REGRESSION``, ``REGRESSED``, ``NONE_COMPARED``); an interrupted run
    exits as interrupted instead (the caller's)."""
    if nearest.nearest is None:
        return NONE_COMPARED
    return REGRESSED if nearest.regressed else NO_REGRESSION


def engine_candidates(target: Target, spec: str) -> list[str]:
    """Every cached release (``NAME==X``, oldest first) of the engine ``target`` belongs to, less
    ``spec`` itself: the default candidates. ``NearestError`` for a target of no engine."""
    from mmharness.targets.releases import cached
    from mmharness.targets.specs import engines

    module = type(target).__module__
    engine = next((e for e in engines() if module.startswith(f"{e.package}.")), None)
    if engine is None:
        raise NearestError(
            f"{spec} is no engine's target, so it has no releases to compare with: name candidates"
            " with --candidate SPEC"
        )
    found = [c for c in cached(engine.name) if c != spec]
    if not found:
        raise NearestError(
            f"no release of {engine.name} is in the cache to compare {spec} with: load some first"
            f" (e.g. `mmharness targets {engine.name}==X`), or name candidates with --candidate SPEC"
        )
    return found


def compare_all(
    target_spec: str,
    candidates: Sequence[str],
    checks: Sequence[Check],
    *,
    max_examples: int = MAX_EXAMPLES,
    workers: int = 1,
    progress: Callable[[Candidate], None] | None = None,
) -> Nearest:
    """Each candidate against the target on the fixed sample, ranked nearest first (``Nearest``, its
    changes not yet searched: ``search_changes``). Interrupted, the candidates that finished."""
    args = [(target_spec, spec, [c.id for c in checks], max_examples) for spec in candidates]
    answers = ordered(_candidate, args, min(workers, len(args)) if args else 1)
    done: list[Candidate] = []
    try:
        for candidate in answers:
            done.append(candidate)
            if progress:
                progress(candidate)
    except KeyboardInterrupt:
        pass  # the candidates not done are unranked below
    finally:
        answers.close()  # stops the workers
    ranked = sorted(done, key=Candidate.distance)  # stable: ties keep the order given
    finished = {c.spec for c in done if not c.interrupted}
    unranked = tuple(spec for spec in dict.fromkeys(candidates) if spec not in finished)
    return Nearest(target_spec, ranked, max_examples, interrupted=bool(unranked), unranked=unranked)


def _candidate(target_spec: str, spec: str, check_ids: Sequence[str], max_examples: int) -> Candidate:
    """One candidate against the target (in a worker process): each check's sample, to its first change."""
    from mmharness.checks import all_checks
    from mmharness.session import Session
    from mmharness.targets.base import TargetError
    from mmharness.targets.specs import loaded

    try:
        target, other = loaded(target_spec), loaded(spec)
    except TargetError as error:
        return Candidate(spec, error=str(error))
    release = other.describe().get("release")
    session = Session(
        target,
        target_spec,
        profile=PROFILE,
        max_examples=max_examples,
        against=other,
        against_spec=spec,
        stop_at=(DIVERGENCE, HAZARD),
    )
    checks = all_checks()
    compared = []
    for check_id in check_ids:
        try:
            result = session.run(checks[check_id])
        except Interrupted:  # the one being compared is left out: the candidate is incomplete
            return Candidate(spec, _text(release), compared=tuple(compared), interrupted=True)
        compared.append(_compared(result))
    return Candidate(spec, _text(release), compared=tuple(compared))


def _text(release: Any) -> str | None:
    return str(release) if release else None


def _compared(result: Result) -> Compared:
    """A check's stopped search as plain data: its first change, if any, and the cases alike before it."""
    check = result.check.id
    if result.status == SKIPPED:
        return Compared(check, NOT_COMPARED, reason=result.reason)
    changes = [f for f in result.findings if change_of(f) is not None]
    if changes:
        first = min(changes, key=lambda f: f.first_failure_at or 0)
        alike = max((first.first_failure_at or 1) - 1, 0)
        return Compared(check, CHANGED, alike, change_of(first), first.signature)
    if result.findings:  # could not test, or a case past its deadline: no behaviour to compare
        first = result.findings[0]
        return Compared(check, NOT_COMPARED, reason=f"{first.kind}: {first.failure.message}")
    return Compared(check, SAME, result.examples_run)


def search_changes(
    nearest: Nearest, target: Target, other: Target, *, findings: Path | None = None
) -> list[Result]:
    """The nearest's changed checks searched again on the same sample, each change shrunk (saved under
    ``findings`` when given): what ``check --against`` shows for them. Kept in ``nearest.changes``."""
    from mmharness.checks import all_checks
    from mmharness.session import Session

    chosen = nearest.nearest
    if chosen is None:
        return []
    session = Session(
        target,
        nearest.target,
        profile=PROFILE,
        max_examples=nearest.max_examples,
        findings=findings,
        against=other,
        against_spec=chosen.spec,
    )
    checks = all_checks()
    for compared in chosen.changed:
        nearest.changes.append(session.keep(session.run(checks[compared.check])))
    return nearest.changes


def ranking_lines(nearest: Nearest) -> list[str]:
    """The ranked candidates as a table: rank, candidate (its release), checks changed of those both
    ran, sample cases alike, and the kinds of the first change of each changed check."""
    rows = [("rank", "candidate", "checks changed", "cases alike", "first changes")]
    for rank, candidate in enumerate(nearest.candidates, 1):
        release = candidate.release
        name = candidate.spec + (f" ({release})" if release and release not in candidate.spec else "")
        if candidate.error is not None:
            rows.append(("-", name, "-", "-", f"could not load: {candidate.error}"))
            continue
        kinds = ", ".join(f"{candidate.kinds[k]} {k}" for k in CHANGES if candidate.kinds[k])
        shown = "identical" if candidate.identical else kinds or "nothing compared"
        if candidate.interrupted:
            shown += " (interrupted)"
        changed = f"{len(candidate.changed)} of {candidate.checked}"
        rows.append((str(rank), name, changed, str(candidate.alike), shown))
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]) - 1)]
    return ["  ".join([*(v.ljust(w) for v, w in zip(row, widths, strict=False)), row[-1]]) for row in rows]


def change_lines(nearest: Nearest) -> list[str]:
    """What the ranking means: the identical candidates, the nearest, and its changes (each shrunk)."""
    from mmharness.views import console

    lines = []
    identical = nearest.identical
    if identical:
        lines.append(
            "identical on every sample case of every check both run: " + ", ".join(c.spec for c in identical)
        )
    chosen = nearest.nearest
    if nearest.unranked:
        compared = len(nearest.candidates) - sum(c.interrupted for c in nearest.candidates)
        lines.append(
            f"interrupted: {compared} of {compared + len(nearest.unranked)} candidate(s) compared, not"
            f" {', '.join(nearest.unranked)}; no nearest is named from part of the candidates"
        )
        return lines
    if chosen is None:
        lines.append("no candidate could be compared")
        return lines
    if chosen.identical:
        lines.append(f"nearest: {chosen.spec} (no change)")
        return lines
    counted = Counter(change_of(f) for r in nearest.changes for f in r.findings)
    kinds = ", ".join(f"{counted[k]} {k}" for k in CHANGES if counted[k])
    lines.append(
        f"nearest: {chosen.spec}, {len(chosen.changed)} of {chosen.checked} checks changed"
        + (f" ({kinds}); each change with one shrunk case:" if kinds else "")
    )
    for result in nearest.changes:
        for finding in result.findings:
            if change_of(finding) is not None:
                lines += ["", console.finding_details(result, finding, nearest.target, against=chosen.spec)]
    return lines


def as_json(nearest: Nearest, checks: Sequence[str], *, code: int) -> dict:
    """The ``--json`` document: the ranking (each candidate's checks, identical or not), the nearest,
    and its changes with their judgement, shrunk case and replay line (``None`` where not saved:
    ``--findings DIR`` saves them); ``exit`` is the run's exit code."""
    from mmharness import report

    chosen = nearest.nearest
    candidates = [
        {
            "rank": None if candidate.error is not None else rank,
            "spec": candidate.spec,
            "release": candidate.release,
            "error": candidate.error,
            "interrupted": candidate.interrupted,
            "identical": candidate.identical,
            "checks_changed": len(candidate.changed),
            "checks_compared": candidate.checked,
            "cases_alike": candidate.alike,
            "first_changes": {kind: candidate.kinds[kind] for kind in CHANGES if candidate.kinds[kind]},
            "compared": [dataclasses.asdict(compared) for compared in candidate.compared],
        }
        for rank, candidate in enumerate(nearest.candidates, 1)
    ]
    changes = [
        {
            "check": result.check.id,
            "rule": result.check.rule,
            "change": change_of(finding),
            "kind": finding.kind,
            "signature": finding.signature,
            "message": finding.failure.message,
            "expected": finding.failure.expected,
            "actual": finding.failure.actual,
            "shrunk": finding.shrunk,
            "saved": finding.saved,
            "replay": report.replay_command(finding.saved, nearest.target, against=chosen.spec)
            if finding.saved and chosen is not None
            else None,
        }
        for result in nearest.changes
        for finding in result.findings
        if change_of(finding) is not None
    ]
    return {
        "format": FORMAT,
        "target": nearest.target,
        "profile": PROFILE,
        "max_examples": nearest.max_examples,
        "checks": list(checks),
        "interrupted": nearest.interrupted,
        "exit": code,
        "nearest": None if chosen is None else chosen.spec,
        "not_compared": list(nearest.unranked),
        "identical": [c.spec for c in nearest.identical],
        "regression": nearest.regressed,
        "candidates": candidates,
        "changes": changes,
    }
