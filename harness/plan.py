"""A run decided before anything runs: the target, what it is compared with, the checks x devices, the
search settings, and the passes that follow the search (a baseline, coverage, lost coverage).

``mmharness check`` turns its options into a ``Plan`` (refusing bad ones in one
line first); ``mmharness.executor`` runs it; the passes and views read the
ledger it leaves. Everything a worker process needs to run one unit is in the
plan, so a unit runs the same in process or in a worker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mmharness.baseline import Baseline
    from mmharness.checks.registry import Check
    from mmharness.runner import Result
    from mmharness.session import Session
    from mmharness.targets.base import Target


@dataclass(frozen=True)
class Plan:
    """``search``: the options every check's search takes (``Session``'s: profile, max_examples, seed,
    deadline, stop_at, shrink); ``database``: the ``--database`` spec, opened where a unit runs;
    ``coverage``: the engine files measured (``None``: no ``--coverage``); ``allow_lost``: check ids
    whose lost coverage is allowed (``--allow-lost``)."""

    spec: str
    target: Target
    checks: Sequence[Check]
    devices: Sequence[str]
    findings: Path
    search: Mapping[str, Any] = field(default_factory=dict)
    database: str | None = None
    regressions: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    against: str | None = None
    other: Target | None = None
    workers: int = 1
    coverage: list[str] | None = None
    fail_fast: bool = False
    strict: bool = False
    baseline: Baseline | None = None
    allow_lost: frozenset[str] = frozenset()
    ledger: Path | None = None
    identity: Mapping[str, Any] = field(default_factory=dict)
    """The target's identity (``baseline.identity``): what a baseline and a report know it by."""

    @property
    def units(self) -> list[tuple[Check, str]]:
        """Each check on each device, devices outermost: the run order."""
        return [(check, device) for device in self.devices for check in self.checks]

    def session(self) -> Session:
        """The session every unit of this plan runs in (in this process)."""
        from mmharness.session import Session

        return Session(
            self.target,
            self.spec,
            database=open_database(self.database, self.search.get("profile", "ci")),
            findings=self.findings,
            regressions=self.regressions,
            against=self.other,
            against_spec=self.against,
            ledger=self.ledger,
            **self.search,
        )

    def worker_unit(self, check: Check, device: str) -> tuple:
        """The arguments of ``executor.run_in_worker`` for one unit: plain data a worker can take."""
        options = {
            **self.search,
            "database": self.database,
            "regressions": {check.id: self.regressions.get(check.id, ())},
            "against_spec": self.against,
            "ledger": self.ledger,
        }
        return self.spec, check.id, device, options, self.coverage

    def fails(self, result: Result) -> bool:
        """Whether a result fails the run: a finding the baseline does not know, of a failing kind."""
        from mmharness.runner import fails_run

        known = self.baseline
        return any(
            fails_run(f.kind, strict=self.strict)
            for f in result.findings
            if known is None or not known.knows(result.check.id, result.device, f.signature)
        )


def open_database(spec: str | None, profile: str) -> Any:
    """A ``--database`` spec opened where a unit runs (the profile's default where none is given); the
    command opened it once before the run, so a bad one was refused there."""
    from mmharness.database import default_spec
    from mmharness.database import open_database as opened

    return opened(spec or default_spec(profile))


def ledger_path(findings: Path, given: str | None) -> Path:
    """Where a run's ledger goes: ``--ledger FILE``, else ``ledger.ndjson`` in the findings directory."""
    from mmharness.ledger import NAME

    return Path(given) if given else findings / NAME
