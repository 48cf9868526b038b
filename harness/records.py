"""The run as data: one typed record per thing a run learns, in the order it learns it.

A check's search, the passes after it (a baseline's tolerance, the replay of
known cases, what a comparison lost) and the end of the run each append records
(``mmharness.ledger`` writes them as they come); every output is a view of them
(``mmharness.views``). The class key of a finding is its fields (check, device,
kind, signature, and for a comparison the change), never a formatted string a
reader parses back.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from mmharness.checks.outcome import COULD_NOT_TEST, DIVERGENCE, HAZARD

if TYPE_CHECKING:
    from mmharness.runner import Finding as RunnerFinding
    from mmharness.runner import Result

FORMAT = "mmharness.ledger/1"

REGRESSION, FIX, NEUTRAL, INHERITED, PERMITTED = "regression", "fix", "neutral", "inherited", "permitted"
CHANGES = (REGRESSION, FIX, NEUTRAL, INHERITED, PERMITTED)
"""The kinds of change a comparison (``--against``) finds, in the order a report names them: only a
regression fails the run (``mmharness.against`` says what each means)."""

UNFINISHED, NOT_STARTED = "unfinished", "not started"
"""A check a run stopped part-way, and one it never began."""


@dataclass(frozen=True)
class Record:
    """What every record has: the kind it is written under (``KIND``) and a JSON form."""

    KIND: ClassVar[str] = ""

    def as_json(self) -> dict[str, Any]:
        return {"record": self.KIND, **dataclasses.asdict(self)}


@dataclass(frozen=True)
class Started(Record):
    """The run's plan: its target, what it compares with, the checks x devices it will run, how."""

    KIND: ClassVar[str] = "started"
    target: str
    against: str | None
    units: tuple[tuple[str, str], ...]
    """``(check id, device)`` in run order."""
    settings: dict[str, Any] = field(default_factory=dict)
    identity: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    """The engine settings given (``--env``), which a replay of its findings sets again."""
    engine: str | None = None
    """The engine a path target was loaded as (``--engine``), where given."""
    format: str = FORMAT


@dataclass(frozen=True)
class Unit(Record):
    """Where a record belongs: one check on one device."""

    check: str
    device: str

    @property
    def unit(self) -> tuple[str, str]:
        return self.check, self.device


@dataclass(frozen=True)
class Finding(Unit):
    """One way a check failed. ``case``: the case document (``payload.dump``; ``None``: no case, as for
    a check that could not start); ``shrunk``: False for a case kept as found (``note`` says why);
    ``found_at``: examples run until it was first met; ``saved``: its case file, for ``replay``."""

    signature: str
    message: str
    expected: str = ""
    actual: str = ""
    case: dict[str, Any] | None = None
    shrunk: bool = True
    note: str = ""
    found_at: int | None = None
    saved: str | None = None

    kind: ClassVar[str] = ""
    """The verdict it counts as (docs/rules.md, "Verdicts")."""


@dataclass(frozen=True)
class Divergence(Finding):
    KIND: ClassVar[str] = DIVERGENCE
    kind: ClassVar[str] = DIVERGENCE


@dataclass(frozen=True)
class Hazard(Finding):
    KIND: ClassVar[str] = HAZARD
    kind: ClassVar[str] = HAZARD


@dataclass(frozen=True)
class CouldNotTest(Finding):
    KIND: ClassVar[str] = COULD_NOT_TEST
    kind: ClassVar[str] = COULD_NOT_TEST


@dataclass(frozen=True)
class Comparison(Finding):
    """A difference between the target and the one it is compared with (``--against``), judged by the
    rules: a regression counts as a divergence, any other change as a hazard. ``basis``: the failing
    side's own signature, or the differing call (a neutral change's); ``observable``: what differs
    (rows, refusal, calls, ...), for a neutral change."""

    KIND: ClassVar[str] = "comparison"
    change: str = NEUTRAL
    observable: str = ""
    basis: str = ""

    @property
    def kind(self) -> str:  # type: ignore[override]
        return DIVERGENCE if self.change == REGRESSION else HAZARD


@dataclass(frozen=True)
class Found(Unit):
    """A way of failing as first met, before shrinking: on disk before the search goes on, so a run
    killed while shrinking keeps it. A ``Finding`` of the same unit and signature supersedes it."""

    KIND: ClassVar[str] = "found"
    verdict: str
    signature: str
    message: str
    case: dict[str, Any] | None = None


@dataclass(frozen=True)
class Ended(Unit):
    """A check that ran to its end (or was stopped part-way: ``interrupted``)."""

    KIND: ClassVar[str] = "ended"
    rule: str = ""
    status: str = ""
    reason: str = ""
    examples: int = 0
    cases: int = 0
    interrupted: bool = False
    deadline: float | None = None
    notes: tuple[str, ...] = ()
    """The target's notes once the check had run (``Result.target_notes``)."""


@dataclass(frozen=True)
class Skipped(Unit):
    """A check the target cannot run: it lacks the function (``reason``)."""

    KIND: ClassVar[str] = "skipped"
    rule: str = ""
    reason: str = ""


@dataclass(frozen=True)
class Unfinished(Unit):
    """A planned check the run stopped part-way (``UNFINISHED``) or never began (``NOT_STARTED``)."""

    KIND: ClassVar[str] = "unfinished"
    state: str = NOT_STARTED
    rule: str = ""
    examples: int = 0


CHECK, FUNCTION = "check", "function"
"""What coverage a comparison lost: a check (on a device), or an engine function the harness knows."""


@dataclass(frozen=True)
class Lost(Record):
    """A check, or an engine function (``of``), that ran on the target compared with (``other``) and not
    on this one: coverage lost to a change of shape. Fails the run (exit 3) unless ``allowed`` by name
    (``--allow-lost``)."""

    KIND: ClassVar[str] = "lost"
    what: str
    of: str = CHECK
    device: str = ""
    other: str = ""
    reason: str = ""
    allowed: bool = False

    def shown(self) -> str:
        where = f"{self.what} [{self.device}]" if self.of == CHECK else f"engine function {self.what}"
        return f"{where} runs on {self.other} and not here: {self.reason}"


@dataclass(frozen=True)
class Tolerated(Unit):
    """A finding a baseline knows (by unit and signature): shown, not counted against the run."""

    KIND: ClassVar[str] = "tolerated"
    signature: str = ""
    baseline: str = ""


@dataclass(frozen=True)
class Changed(Unit):
    """A baseline's known finding whose own case no longer fails as recorded (``baseline.recheck``)."""

    KIND: ClassVar[str] = "changed"
    signature: str = ""
    verdict: str = ""
    now: tuple[tuple[str, str], ...] = ()
    """How the case fails now: ``(kind, signature)`` each; empty: it passes."""
    case: dict[str, Any] | None = None
    saved: str | None = None

    def shown(self) -> str:
        if not self.now:
            return "its case now passes"
        return "its case now fails otherwise: " + "; ".join(f"{k}: {s}" for k, s in self.now)


@dataclass(frozen=True)
class Untested(Record):
    """Something of the target the run did not exercise (``mmharness.untested``), with why."""

    KIND: ClassVar[str] = "untested"
    what: str


@dataclass(frozen=True)
class Finished(Record):
    """The run's end: how it ended and its exit code (absent from a ledger: the run did not finish)."""

    KIND: ClassVar[str] = "finished"
    exit_code: int
    interrupted: bool = False
    stopped: str = ""
    """Why the run stopped early, where it did (``--fail-fast``, a signal)."""


KINDS: dict[str, type[Record]] = {
    cls.KIND: cls
    for cls in (
        Started,
        Divergence,
        Hazard,
        CouldNotTest,
        Comparison,
        Found,
        Ended,
        Skipped,
        Unfinished,
        Lost,
        Tolerated,
        Changed,
        Untested,
        Finished,
    )
}


def case_document(example: Any) -> dict[str, Any] | None:
    """An example ``(case, params)`` as the case document a record keeps (``None``: no case)."""
    if example is None:
        return None
    from mmharness import payload

    case, params = example
    return payload.dump(case, params=params)


def of_result(result: Result) -> list[Record]:
    """A check's result as records: each finding, then how the check ended."""
    from mmharness.runner import SKIPPED

    check, device = result.check.id, result.device
    if result.status == SKIPPED:
        return [Skipped(check, device, result.check.rule, result.reason)]
    found: list[Record] = [of_finding(check, device, f) for f in result.findings]
    if result.interrupted:
        return [*found, Unfinished(check, device, UNFINISHED, result.check.rule, result.examples_run)]
    end = Ended(
        check,
        device,
        rule=result.check.rule,
        status=result.status,
        reason=result.reason,
        examples=result.examples_run,
        cases=result.cases_run,
        deadline=result.deadline,
        notes=tuple(result.target_notes),
    )
    return [*found, end]


_FINDINGS = {cls.kind: cls for cls in (Divergence, Hazard, CouldNotTest)}


def of_finding(check: str, device: str, finding: RunnerFinding) -> Finding:
    """One of a result's findings as its typed record (a change, where a comparison judged it)."""
    failure = finding.failure
    fields = {
        "signature": finding.signature,
        "message": failure.message,
        "expected": failure.expected,
        "actual": failure.actual,
        "case": case_document(finding.example),
        "shrunk": finding.shrunk,
        "note": finding.unshrunk,
        "found_at": finding.first_failure_at,
        "saved": finding.saved,
    }
    compared = failure.compared
    if compared is not None:
        return Comparison(
            check,
            device,
            **fields,
            change=compared.change,
            observable=compared.observable,
            basis=compared.basis,
        )
    return _FINDINGS[finding.kind](check, device, **fields)


class RecordError(ValueError):
    """A ledger line that is not a record of this format."""


def from_json(data: Any) -> Record:
    """A record from its JSON form; ``RecordError`` naming what is wrong."""
    if not isinstance(data, dict) or data.get("record") not in KINDS:
        shown = data.get("record") if isinstance(data, dict) else type(data).__name__
        raise RecordError(f"not a record ({shown!r})")
    cls = KINDS[data["record"]]
    names = {f.name for f in dataclasses.fields(cls)}
    given = {k: _tuples(v) for k, v in data.items() if k != "record"}
    unknown = sorted(set(given) - names)
    if unknown:
        raise RecordError(f"{data['record']}: unknown field(s) {', '.join(unknown)}")
    try:
        return cls(**given)
    except TypeError as error:
        raise RecordError(f"{data['record']}: {error}") from None


def _tuples(value: Any) -> Any:
    """JSON arrays back as the tuples records hold (case documents stay JSON: dicts keep their lists)."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value
