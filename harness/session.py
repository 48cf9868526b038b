"""One check run's settings, shared by every way of running checks.

``mmharness check``, the pytest plugin and ``matrix`` each run many checks on
one target with one set of options, then save what each found. Doing both
through a ``Session`` means a finding is searched for, replayed from the
regressions and saved the same way whichever of the three ran it; when they each
called ``run_check`` themselves, each forgot a different option.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mmharness.checks.registry import Check, Example
    from mmharness.runner import Result
    from mmharness.targets.base import Target


@dataclass(frozen=True)
class Session:
    """``target`` (named ``spec`` in saved findings) and the search options of every check run on it.

    ``findings``: where ``keep`` saves each finding's shrunk case (``None``: not saved, as in a
    worker process, whose parent keeps its results). ``regressions``: saved cases per check id,
    run before each search (``check --regressions``). ``against`` (named ``against_spec``): a
    known-good target every case also runs on, each difference a change (``mmharness.against``);
    a check it cannot run is skipped, naming it. ``stop_at``: finding kinds that end a check's
    search at once, unshrunk (``run_check``): whether it fails, not how (``mmharness.nearest``).
    ``shrink`` False: findings are kept as found, each with its choice sequence, for ``shrink`` to
    shrink later (``matrix`` shrinks each class once, on the first target that found it). ``ledger``:
    where each way of failing is recorded as first met (``records.Found``), from whichever process.
    ``shrink_seconds``: with ``stop_at``, the first failure is shrunk for that long at most
    (``--fail-fast``); ``tolerated``: per ``(check id, device)``, a baseline's signatures, which do not
    end such a search.
    """

    target: Target
    spec: str
    profile: str = "ci"
    max_examples: int | None = None
    seed: int | None = None
    deadline: float | None = None
    database: Any = None
    findings: Path | None = None
    regressions: Mapping[str, Sequence[Example]] = field(default_factory=dict)
    against: Target | None = None
    against_spec: str | None = None
    stop_at: Collection[str] = ()
    shrink: bool = True
    ledger: Path | None = None
    shrink_seconds: float | None = None
    tolerated: Mapping[tuple[str, str], Collection[str]] = field(default_factory=dict)

    def run(
        self, check: Check, device: str = "cpu", *, on_example: Callable[[int], None] | None = None
    ) -> Result:
        """The check's result on this session's target (not yet kept: see ``keep``)."""
        from mmharness.runner import Result, run_check

        compared = self._compared(check, device)
        if isinstance(compared, Result):
            return compared
        result = run_check(
            compared,
            self.target,
            profile=self.profile,
            device=device,
            max_examples=self.max_examples,
            seed=self.seed,
            database=self.database,
            on_example=on_example,
            deadline=self.deadline,
            explicit=self.regressions.get(check.id, ()),
            stop_at=self.stop_at,
            shrink=self.shrink,
            on_found=self._recorder(check, device),
            shrink_seconds=self.shrink_seconds,
            tolerated=self.tolerated.get((check.id, device), ()),
        )
        return replace(result, target_notes=tuple(self.target.notes()))

    def _recorder(self, check: Check, device: str) -> Callable[[Any], None] | None:
        """What appends a way of failing to the ledger as first met (``None``: no ledger)."""
        if self.ledger is None:
            return None
        from mmharness import ledger, records

        path = self.ledger

        def found(failure: Any) -> None:
            case = records.case_document(failure.example)
            first = records.Found(check.id, device, failure.kind, failure.signature, failure.message, case)
            ledger.append(path, first)

        return found

    def shrink_found(
        self, check: Check, signature: str, choices: bytes, known: Collection[str] = (), device: str = "cpu"
    ) -> Result | None:
        """What a search with ``shrink`` False found (``signature``, ``Finding.choices``, the other
        signatures it found: ``known``) shrunk as ``run`` would have, with what shrinking met besides
        (``runner.shrink_found``), and kept (``keep``); ``None`` where the check cannot run here."""
        from mmharness.runner import Result, shrink_found, status_of

        compared = self._compared(check, device)
        if isinstance(compared, Result):
            return None
        found = shrink_found(
            compared, self.target, signature, choices, known=known, device=device, deadline=self.deadline
        )
        return self.keep(Result(compared, status_of(found), device, findings=found, deadline=self.deadline))

    def _compared(self, check: Check, device: str) -> Check | Result:
        """The check as this session runs it: against ``against`` (each difference a change), or the
        result of a check that cannot run on both."""
        if self.against is None:
            return check
        from mmharness import against

        spec = self.against_spec or self.against.name
        unrunnable = against.not_run(check, self.target, self.against, spec, device)
        return unrunnable if unrunnable is not None else against.against(check, self.against)

    def keep(self, result: Result) -> Result:
        """``result`` with each finding's case saved under ``findings`` (``finding.saved``: its file)."""
        if self.findings is None:
            return result
        from mmharness import report

        for finding in result.findings:
            if finding.example is not None:
                finding.saved = report.save(result, finding, self.spec, self.findings)
        return result
