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

    def run(
        self, check: Check, device: str = "cpu", *, on_example: Callable[[int], None] | None = None
    ) -> Result:
        """The check's result on this session's target (not yet kept: see ``keep``)."""
        from mmharness.runner import run_check

        if self.against is not None:
            from mmharness import against

            spec = self.against_spec or self.against.name
            unrunnable = against.not_run(check, self.target, self.against, spec, device)
            if unrunnable is not None:
                return unrunnable
            check = against.against(check, self.against)
        result = run_check(
            check,
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
        )
        return replace(result, target_notes=tuple(self.target.notes()))

    def keep(self, result: Result) -> Result:
        """``result`` with each finding's case saved under ``findings`` (``finding.saved``: its file)."""
        if self.findings is None:
            return result
        from mmharness import report

        for finding in result.findings:
            if finding.example is not None:
                finding.saved = report.save(result, finding, self.spec, self.findings)
        return result
