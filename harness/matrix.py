"""``mmharness matrix``: checks against several targets; where each way of failing starts and ends.

Targets are taken in the order given (list releases oldest first, and "first"
and "last" read as releases). Each cell keeps the signatures of its findings,
so the matrix says, per check and per distinct way of failing, the first and
the last target that shows it: the release atlas. A target that cannot be
loaded gets an ``error`` cell in every row, with its one-line reason, and never
stops the others. With ``workers > 1`` targets run in that many processes;
the cells are the same as a serial run's.

Interrupted (``mmharness.interrupts``), a matrix keeps every target: for those
in progress, the cells of the checks that finished, the partial cell of the
check that was running (``interrupted``, its findings unshrunk if need be) and
``NOT_RUN`` cells for the checks that never began; a target never begun has
only ``NOT_RUN`` cells (listed as not run, never left out); the findings saved
so far are in its cells, serially or with workers.

Replay: a search finds a way of failing on a target when its draws happen to
meet it, so the targets whose own search found a class are a seed's luck, not
the class's range. After the search over every target, each class (a check and
a signature, of kind divergence or hazard) has its shrunk case (the one of the
first target whose search found it) run once on every other target
(``replay``): one case per class and target, no search. Where it fails the same
way (same check, kind and signature) the target shows the class, its finding
marked as found by replay (``Seen.by``) and its cell's status the worst of the
search's and the replay's (``Cell.searched`` keeps the search's). A replay that
passes, fails otherwise, is could-not-test or skips leaves the cell as its
search said: replay only adds. Could-not-test classes are not replayed (they
are the harness's gaps, not the engine's); so are findings with no case (the
check could not finish). A shard cannot replay (it lacks the other shards'
classes): ``mmharness merge`` does, on the merged matrix.

Shrinking once: shrinking is most of a search's time, and a class found on many
targets needs one shrunk case for its replay, not one per target. So when the
matrix replays, the searches shrink nothing (``run_check(shrink=False)``: each
finding kept as found, with its Hypothesis choice sequence, ``Seen.choices``);
``shrink_classes`` then shrinks each class's case once, on the first target
whose search found it (``runner.shrink_found``: the choice sequence replayed and
shrunk under a fixed seed), and the replay runs that case on the other targets
that found the class too, each taking it where it fails the same way. A target's
case is then the same whether it was searched itself or has an earlier target's
cells, and in whichever shard; a case that stays as found says so
(``Seen.shrunk``). A round of a search that does not shrink ends at its first
new failure, so its draws differ from a shrinking search's (the classes it finds
may too); ``--no-replay`` searches as ``check`` does.

One search per engine code (``dedup``, on unless ``--no-dedup``): consecutive releases often load
byte-identical rule files, and a search with a fixed seed (the ``ci`` profile, or ``--seed``) is
deterministic, so two targets running the same code on the same inputs get the same cells. Before the
search each target is loaded once for its behaviour key (``baseline.behaviour_key``: the loaded files'
digests and everything else that decides what it does, never its name); only the first target (in the
order given) of each key is searched and replayed, and every other target of that key gets its cells,
each cell and finding marked ``same_as`` that target. A target the harness cannot key (the reference,
a mutant, one that does not load) is searched on its own, and so is every target of a search that is not
deterministic (``dev``, ``deep`` without ``--seed``: each draws its own cases). A saved finding's file is
the searched target's, its case the same.

Against a known-good target (``against``, ``matrix --against SPEC``): every
column runs each check on both (``Session``'s ``against``, ``mmharness.against``),
so a cell's findings are changes from it (regression, inherited, permitted, fix, neutral) and a check
it cannot run is skipped, naming it. A change exists only relative to that
target, so the replay runs each class's case on both as well; the JSON names it
(``"against"``), and ``merge`` replays a merged matrix against it too.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmharness.checks.outcome import COULD_NOT_TEST, DIVERGENCE, HAZARD
from mmharness.checks.registry import Check
from mmharness.runner import PASSED, SEVERITY, SKIPPED, Interrupted, Result, fails_run
from mmharness.workers import ordered

if TYPE_CHECKING:
    from mmharness.targets.base import Target

FORMAT = "mmharness.matrix/2"
ERROR = "error"
NOT_RUN = "not run"
"""A check an interruption stopped before it began on a target in progress."""
SYMBOLS = {
    PASSED: "pass",
    DIVERGENCE: "DIVERGE",
    HAZARD: "hazard",
    COULD_NOT_TEST: "no-test",
    SKIPPED: "skip",
    ERROR: "error",
    NOT_RUN: "-",
}
PARTIAL = "*"
"""Marks the symbol of a cell whose check an interruption stopped part-way."""
REPLAYED = "r"
"""Marks the symbol of a cell where a replayed case showed a class its search missed."""
SAME = "="
"""Marks the symbol of a cell that is an earlier target's, of the same code (``same_as``): not searched."""
SEARCH, REPLAY = "search", "replay"
"""How a finding was found on its target: by the target's own search, or by replaying another's case."""
NOT_REPLAYED, REPLAY_DONE, REPLAY_INTERRUPTED = "none", "done", "interrupted"
"""A matrix's ``replay``: not replayed (a shard, ``--no-replay``), every class on every target, or stopped."""
_COLORS = {
    PASSED: "32",
    DIVERGENCE: "31",
    HAZARD: "33",
    COULD_NOT_TEST: "35",
    SKIPPED: "2",
    ERROR: "35",
    NOT_RUN: "2",
}


@dataclass(frozen=True)
class Seen:
    """One finding in one cell: its kind, signature, message and the example that first showed it."""

    kind: str
    signature: str
    message: str
    first_failure_at: int | None
    saved: str | None = None
    """The shrunk case's file, when the matrix was asked to save findings (by replay: the replayed one's)."""
    case: str | None = None
    """The shrunk case (``mmharness.case/1`` text), what a replay runs; ``None`` for replay's findings."""
    by: str = SEARCH
    """``SEARCH``, or ``REPLAY``: the target's search missed it, another target's case showed it here."""
    source: str | None = None
    """By replay: the target whose case was replayed."""
    same_as: str | None = None
    """The target whose search (or replay) found it, which runs the same code (``dedup``)."""
    shrunk: bool = True
    """False: ``case`` is as the search found it (its class was shrunk on another target, or not yet)."""
    choices: bytes | None = field(default=None, repr=False)
    """Of a case kept as found (``shrunk`` False): its choice sequence, which ``shrink_classes`` shrinks.
    Only a shard's report carries it (base64: ``as_json(choices=True)``), for ``merge`` to shrink."""


@dataclass(frozen=True)
class Cell:
    """One check on one target: status, why, examples run, and its findings."""

    status: str
    reason: str = ""
    examples_run: int = 0
    findings: tuple[Seen, ...] = ()
    interrupted: bool = False
    """The check was stopped part-way: its status is what it had found by then."""
    searched: str = ""
    """The search's own status, where findings by replay made ``status`` worse ("": ``status``)."""
    same_as: str = ""
    """The target whose cell this is, which runs the same code (``dedup``); "": this target's own."""

    @property
    def search_status(self) -> str:
        return self.searched or self.status

    @property
    def replayed(self) -> bool:
        """A replay found a class here that the target's own search missed."""
        return any(seen.by == REPLAY for seen in self.findings)


@dataclass(frozen=True)
class ReleaseRange:
    """One way a check fails, across the targets (releases): its kind, the targets showing it, how soon."""

    kind: str
    signature: str
    message: str
    targets: tuple[str, ...]
    found_at: tuple[int | None, ...]
    """Examples to the first failure of this kind, per target in ``targets`` (``None``: found by replay)."""
    replayed: tuple[str, ...] = ()
    """Of ``targets``, those whose search missed it and where a replay of its case showed it."""

    @property
    def first(self) -> str:
        return self.targets[0]

    @property
    def last(self) -> str:
        return self.targets[-1]


@dataclass(frozen=True)
class Stopped:
    """A check that ran on ``last`` and is skipped on ``target``, the next target that loaded."""

    check: str
    last: str
    target: str
    reason: str


@dataclass
class Matrix:
    """Check x target cells, in the order checks and targets were given."""

    targets: list[str]
    checks: list[str]
    cells: dict[tuple[str, str], Cell] = field(default_factory=dict)
    target_errors: dict[str, str] = field(default_factory=dict)
    releases: dict[str, str] = field(default_factory=dict)
    command: str = ""
    """The command line that made it, kept in the JSON for the atlas."""
    interrupted: bool = False
    """Stopped by a signal: a target it never began has only ``NOT_RUN`` cells (``begun``)."""
    replay: str = NOT_REPLAYED
    """Whether each class's case was replayed on every target (``REPLAY_DONE``): ranges are exact."""
    against: str | None = None
    """The spec every case also ran on (``--against``): each finding is a change from it."""
    dedup: bool = False
    """Targets were searched once per behaviour key (``baseline.behaviour_key``): see ``same_as``."""
    same_as: dict[str, str] = field(default_factory=dict)
    """Target -> the earlier target with its behaviour key, whose cells it has (not searched itself)."""
    digests: dict[str, str] = field(default_factory=dict)
    """Target -> the digest of the engine files it loaded (``baseline.identity``), for those that load
    any: what its cells are of, which ``merge`` holds a path target to (changed since: refused)."""

    @property
    def searched(self) -> list[str]:
        """The targets searched (and replayed) themselves: every one but those ``same_as`` another."""
        return [t for t in self.targets if t not in self.same_as]

    def cell(self, check_id: str, target: str) -> Cell:
        return self.cells[(check_id, target)]

    def finished(self, target: str) -> bool:
        """Every check ran to its end on the target (or it did not load)."""
        cells = [self.cell(c, target) for c in self.checks]
        return not any(cell.interrupted or cell.status == NOT_RUN for cell in cells)

    def begun(self, target: str) -> bool:
        """Some check began on the target (or it did not load): false for one an interruption kept from
        starting, every cell ``NOT_RUN``."""
        return any(self.cell(c, target).status != NOT_RUN for c in self.checks) or not self.checks

    def first_failing(self, check_id: str, *, strict: bool = False) -> str | None:
        """The first target (in the order given) it fails on; hazards count when ``strict``."""
        failing = (t for t in self.targets if fails_run(self.cell(check_id, t).status, strict=strict))
        return next(failing, None)

    def stopped_running(self) -> list[Stopped]:
        """Each check that ran on a target and is skipped on the next one that loaded (in the order
        given): coverage a change of shape lost (vLLM 0.34 removed the V1 runner), never a silence."""
        stopped = []
        for check_id in self.checks:
            last_ran = None
            for target in self.targets:
                cell = self.cell(check_id, target)
                if cell.status in (ERROR, NOT_RUN):
                    continue
                if cell.status == SKIPPED and last_ran is not None:
                    stopped.append(Stopped(check_id, last_ran, target, cell.reason))
                last_ran = None if cell.status == SKIPPED else target
        return stopped

    def ranges(self, check_id: str) -> list[ReleaseRange]:
        """Each distinct way the check fails, with the targets that show it, in target order."""
        seen: dict[str, tuple[str, str, list[str], list[int | None], list[str]]] = {}
        for target in self.targets:
            for one in self.cell(check_id, target).findings:
                entry = seen.setdefault(one.signature, (one.kind, one.message, [], [], []))
                entry[2].append(target)
                entry[3].append(one.first_failure_at)
                if one.by == REPLAY:
                    entry[4].append(target)
        order = (DIVERGENCE, COULD_NOT_TEST, HAZARD)
        ranges = [
            ReleaseRange(k, sig, m, tuple(ts), tuple(at), tuple(by))
            for sig, (k, m, ts, at, by) in seen.items()
        ]
        return sorted(ranges, key=lambda s: (order.index(s.kind), self.targets.index(s.first), s.signature))

    def as_json(self, *, strict: bool = False, choices: bool = False) -> dict[str, Any]:
        """``choices``: with each unshrunk case's choice sequence (a shard's report: ``merge`` shrinks)."""
        return {
            "format": FORMAT,
            "command": self.command,
            "interrupted": self.interrupted,
            "replay": self.replay,
            "against": self.against,
            "dedup": self.dedup,
            "stopped_running": [dataclasses.asdict(one) for one in self.stopped_running()],
            "targets": [
                {
                    "spec": t,
                    "release": self.releases.get(t),
                    "error": self.target_errors.get(t),
                    **({"same_as": self.same_as[t]} if t in self.same_as else {}),
                    **({"digest": self.digests[t]} if t in self.digests else {}),
                }
                for t in self.targets
            ],
            "checks": [
                {
                    "id": c,
                    "first_failing": self.first_failing(c, strict=strict),
                    "findings": [
                        {
                            "kind": s.kind,
                            "signature": s.signature,
                            "message": s.message,
                            "first": s.first,
                            "last": s.last,
                            "targets": list(s.targets),
                            "first_failure_at": list(s.found_at),
                            "replayed": list(s.replayed),
                        }
                        for s in self.ranges(c)
                    ],
                    "results": {
                        t: {
                            "status": self.cell(c, t).status,
                            "search_status": self.cell(c, t).search_status,
                            "reason": self.cell(c, t).reason,
                            "examples": self.cell(c, t).examples_run,
                            "interrupted": self.cell(c, t).interrupted,
                            **({"same_as": self.cell(c, t).same_as} if self.cell(c, t).same_as else {}),
                            "findings": [
                                {
                                    "kind": one.kind,
                                    "signature": one.signature,
                                    "message": one.message,
                                    "first_failure_at": one.first_failure_at,
                                    **({"saved": one.saved} if one.saved else {}),
                                    "by": one.by,
                                    **({"source": one.source} if one.source else {}),
                                    **({"case": one.case} if one.case else {}),
                                    **({"same_as": one.same_as} if one.same_as else {}),
                                    **({} if one.shrunk else {"shrunk": False}),
                                    **({"choices": _text(one.choices)} if choices and one.choices else {}),
                                }
                                for one in self.cell(c, t).findings
                            ],
                        }
                        for t in self.targets
                    },
                }
                for c in self.checks
            ],
        }

    @classmethod
    def from_json(cls, data: Any) -> Matrix:
        """A matrix back from its ``as_json`` form; ``NotAMatrix`` says why ``data`` is not one."""
        if not isinstance(data, dict):
            raise NotAMatrix(f"it holds a JSON {_json_type(data)}, not an object")
        if data.get("format") != FORMAT:
            raise NotAMatrix(f"its format is {data.get('format')!r}, not {FORMAT!r}")
        try:
            return cls._from_json(data)
        except KeyError as error:
            raise NotAMatrix(f"it lacks {error}") from None
        except (TypeError, AttributeError, ValueError) as error:
            raise NotAMatrix(f"malformed: {error}") from None

    @classmethod
    def _from_json(cls, data: dict[str, Any]) -> Matrix:
        targets = [t["spec"] for t in data["targets"]]
        matrix = cls(targets, [c["id"] for c in data["checks"]], command=data.get("command", ""))
        matrix.interrupted = bool(data.get("interrupted", False))
        matrix.replay = str(data.get("replay", NOT_REPLAYED))  # older reports: not replayed
        against = data.get("against")  # older reports: none
        matrix.against = None if against is None else str(against)
        matrix.dedup = bool(data.get("dedup", False))  # older reports: every target searched
        for t in data["targets"]:
            if t.get("error"):
                matrix.target_errors[t["spec"]] = t["error"]
            if t.get("release"):
                matrix.releases[t["spec"]] = t["release"]
            if t.get("same_as"):
                matrix.same_as[t["spec"]] = str(t["same_as"])
            if t.get("digest"):
                matrix.digests[t["spec"]] = str(t["digest"])
        for c in data["checks"]:
            for spec, cell in c["results"].items():
                findings = tuple(
                    Seen(**{**one, "choices": _bytes(one.get("choices"))}) for one in cell["findings"]
                )
                interrupted = bool(cell.get("interrupted", False))
                searched = cell.get("search_status", cell["status"])
                searched = "" if searched == cell["status"] else str(searched)
                cell_of = Cell(
                    cell["status"],
                    cell["reason"],
                    cell["examples"],
                    findings,
                    interrupted,
                    searched,
                    str(cell.get("same_as", "")),
                )
                matrix.cells[(c["id"], spec)] = cell_of
        missing = [(c, t) for c in matrix.checks for t in targets if (c, t) not in matrix.cells]
        if missing:
            raise NotAMatrix(f"check {missing[0][0]!r} has no result for target {missing[0][1]!r}")
        return matrix


class NotAMatrix(ValueError):
    """A document that is not a matrix report (``mmharness matrix --json``); the message says why."""


def _text(choices: bytes) -> str:
    return base64.b64encode(choices).decode()


def _bytes(text: Any) -> bytes | None:
    return None if text is None else base64.b64decode(str(text), validate=True)


def _json_type(value: Any) -> str:
    names = {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _column(
    spec: str,
    check_ids: Sequence[str],
    profile: str,
    max_examples: int | None,
    seed: int | None,
    findings: str | None = None,
    deadline: float | None = None,
    against: str | None = None,
    shrink: bool = True,
) -> tuple[str, str | None, str | None, dict[str, Cell], str | None]:
    """One target's cells: ``(spec, release, load error, check id -> cell, digest of its files)``; runs
    in a worker process.

    ``against``: the spec each check also runs on (its findings are changes); one that does not load
    is this column's load error, naming it. ``shrink`` False: findings kept as found, with their
    choices (``shrink_classes``). Interrupted, the cells so far: the partial cell of the check that
    was running, and ``NOT_RUN`` for the checks after it.
    """
    from mmharness import interrupts
    from mmharness.baseline import identity
    from mmharness.checks import all_checks
    from mmharness.session import Session
    from mmharness.targets.base import TargetError
    from mmharness.targets.specs import resolve

    try:
        target = resolve(spec)
        other = None if against is None else _against_target(against)
    except TargetError as error:
        return spec, None, str(error), {c: Cell(ERROR, str(error)) for c in check_ids}, None
    release = target.describe().get("release")
    digest = identity(target, spec).get("digest")
    saved_under = Path(findings) / _slug(spec) if findings is not None else None
    options = {"profile": profile, "max_examples": max_examples, "seed": seed, "deadline": deadline}
    session = Session(
        target, spec, findings=saved_under, against=other, against_spec=against, shrink=shrink, **options
    )
    checks = all_checks()
    cells = {}
    for check_id in check_ids:
        if interrupts.requested() is not None:  # asked to stop between checks
            break
        try:
            result = session.run(checks[check_id])
        except Interrupted as stop:
            result = stop.result
        cells[check_id] = _cell(session.keep(result))
        if result.interrupted:
            break
    for check_id in check_ids[len(cells) :]:
        cells[check_id] = Cell(NOT_RUN, "interrupted before it began")
    return spec, (str(release) if release else None), None, cells, digest


def _against_target(spec: str) -> Any:
    """The ``--against`` target, loaded once per process (``specs.loaded``); a load error names the option."""
    from mmharness.targets.base import TargetError
    from mmharness.targets.specs import loaded

    try:
        return loaded(spec)
    except TargetError as error:
        raise TargetError(f"--against {spec}: {error}") from None


def _cell(result: Result) -> Cell:
    """A check's result (kept: its findings saved, if asked) as a cell, each finding with its case."""
    from mmharness import payload

    seen = []
    for f in result.findings:
        case = None if f.example is None else payload.dumps(f.example[0], params=f.example[1])
        message, at = f.failure.message, f.first_failure_at
        seen.append(Seen(f.kind, f.signature, message, at, f.saved, case, shrunk=f.shrunk, choices=f.choices))
    return Cell(result.status, result.reason, result.examples_run, tuple(seen), result.interrupted)


def run_matrix(
    specs: Sequence[str],
    checks: Sequence[Check],
    profile: str = "ci",
    *,
    max_examples: int | None = None,
    seed: int | None = None,
    workers: int = 1,
    progress: Callable[[str, int | None], None] | None = None,
    command: str = "",
    findings: str | None = None,
    deadline: float | None = None,
    replay: bool = True,
    replayed: Callable[[str, int, int], None] | None = None,
    against: str | None = None,
    dedup: bool = True,
    keyed: Callable[[dict[str, str]], None] | None = None,
    shrink: bool | None = None,
) -> Matrix:
    """Run each check on each target; a target that does not load gets errors in its column.

    ``progress`` is told each target as its column comes in, with the number of
    checks that ran on it (``None``: it did not load). Interrupted
    (``mmharness.interrupts``), it keeps what finished and what was in progress, the targets never
    begun as not run, and says so (``interrupted``); worker processes are stopped.
    With ``replay`` (unless interrupted), every class's case is then shrunk once (``shrink_classes``:
    the searches shrink nothing) and replayed on every target (``replay_classes``; ``replayed`` is its
    ``progress``). ``shrink``: whether each search shrinks what it finds (default: not when replaying;
    ``False`` without ``replay`` leaves ``shrink_classes`` to the caller). ``against``: the spec every
    check also runs on, each difference a change (the module's docstring). With ``dedup`` and a
    deterministic search, one search per behaviour key (the module's docstring); ``keyed`` is told
    which targets share an earlier one's code (``Matrix.same_as``) before the search begins, and
    ``progress`` each of them as its searched target's column comes in.
    """
    matrix = Matrix(targets=list(specs), checks=[c.id for c in checks], command=command, against=against)
    matrix.dedup = dedup and deterministic(profile, seed)
    if matrix.dedup and len(set(specs)) == len(specs) > 1:  # one target: nothing to share
        try:
            matrix.same_as, matrix.releases = same_code(specs, workers)
        except KeyboardInterrupt:  # stopped while loading the targets: nothing searched
            matrix.interrupted, matrix.releases = True, {}
            _not_begun(matrix)
            return matrix
    if matrix.dedup and keyed:
        keyed(dict(matrix.same_as))
    searched = matrix.searched
    shrink = not replay if shrink is None else shrink
    options = (profile, max_examples, seed, findings, deadline, against, shrink)
    args = [(spec, matrix.checks, *options) for spec in searched]
    columns = ordered(_column, args, min(workers, len(searched)))
    try:
        _collect(matrix, columns, progress)
    except KeyboardInterrupt:
        matrix.interrupted = True
        _not_begun(matrix)
    finally:
        columns.close()  # stops the workers
    if replay and not matrix.interrupted:
        shrink_classes(matrix, workers=workers, deadline=deadline, findings=findings)
        if not matrix.interrupted:
            replay_classes(matrix, workers=workers, deadline=deadline, progress=replayed)
    return matrix


def _not_begun(matrix: Matrix) -> None:
    """An interrupted matrix's targets whose columns never began: kept, every cell ``NOT_RUN``, so the
    report lists them as not run rather than leaving them out (a matrix of fewer targets)."""
    for target in matrix.targets:
        for check_id in matrix.checks:
            matrix.cells.setdefault((check_id, target), Cell(NOT_RUN, "interrupted before it began"))


@dataclass(frozen=True)
class _Class:
    """One class to replay: its check, kind, signature, and the case (and file) of the first target
    whose search found it."""

    check: str
    kind: str
    signature: str
    case: str
    source: str
    saved: str | None
    shrunk: bool = True
    """The case is shrunk (``False``: as found, where ``shrink_classes`` could not shrink it)."""


def classes(matrix: Matrix) -> list[_Class]:
    """The classes a replay runs: each (check, signature) of kind divergence or hazard that some
    target's search found with a case, with the case of the first such target (in the matrix's order)."""
    found: dict[tuple[str, str], _Class] = {}
    for check_id in matrix.checks:
        for target in matrix.targets:
            for one in matrix.cell(check_id, target).findings:
                if one.by != SEARCH or one.kind == COULD_NOT_TEST or one.case is None:
                    continue
                one_class = _Class(check_id, one.kind, one.signature, one.case, target, one.saved, one.shrunk)
                found.setdefault((check_id, one.signature), one_class)
    return list(found.values())


def _to_replay(matrix: Matrix, target: str, every: Sequence[_Class]) -> list[_Class]:
    """The classes worth replaying on a target, on a check it ran: those its search did not find, and
    those it found whose case it kept as found (``shrink_classes`` shrank the class's case elsewhere)."""
    if target in matrix.target_errors:
        return []
    work = []
    for one in every:
        cell = matrix.cell(one.check, target)
        if cell.status in (SKIPPED, ERROR, NOT_RUN) or cell.interrupted:
            continue
        found = [seen for seen in cell.findings if seen.signature == one.signature]
        if found and (found[0].shrunk or not one.shrunk or one.source == target):
            continue  # its search found it, and the class has no shrunk case to give it
        work.append(one)
    return work


def shrink_classes(
    matrix: Matrix,
    *,
    workers: int = 1,
    deadline: float | None = None,
    findings: str | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> None:
    """Shrink each class's case once, on the first target whose search found it (the case its replay
    runs), where the searches kept their findings as found (``run_matrix``'s ``shrink``).

    Shrinking is most of a search's time, and a class found on many targets needs one shrunk case,
    not one per target. Each is shrunk with its choice sequence (``Seen.choices``, ``runner.shrink_found``),
    in ``workers`` processes (a class at a time); its finding there, and on the targets ``same_as`` it,
    gets the shrunk case (saved under ``findings`` in place of the case as found). A case that no longer
    fails that way stays as found. The other targets that found the class keep their cases as found
    (``Seen.shrunk`` False) until ``replay_classes`` gives them the shrunk case. ``progress`` is told
    each target with the cases it shrank and how many it could. Interrupted, the rest stay as found,
    and the matrix says ``interrupted`` (and its replay ``REPLAY_INTERRUPTED``: it never began).
    """
    from mmharness import interrupts
    from mmharness.targets.specs import forget_loaded

    units = []  # one per class, grouped by target: the workers share a target's many classes
    for one in classes(matrix):
        cell = matrix.cell(one.check, one.source)
        searched = _searched(cell, one.signature)
        choices = None if searched is None else searched.choices
        if choices is not None:
            known = tuple(s.signature for s in cell.findings if s.by == SEARCH)
            units.append(
                (one.source, one.check, one.signature, choices, known, deadline, matrix.against, findings)
            )
    units.sort(key=lambda unit: matrix.targets.index(unit[0]))
    answers = ordered(
        _shrink_case, units, min(workers, len(units)) if units else 1, initializer=forget_loaded
    )
    others = copies(matrix)
    tally: dict[str, list[bool]] = {}
    try:
        for k, ((target, check_id, signature, *_), shrunk) in enumerate(zip(units, answers, strict=False)):
            tally.setdefault(target, []).append(bool(shrunk) and shrunk[0].signature == signature)
            for one in (target, *others.get(target, ())):
                for found in shrunk:
                    _found_shrinking(matrix, check_id, one, found, source=target)
            if progress and (k + 1 == len(units) or units[k + 1][0] != target):
                progress(target, len(tally[target]), sum(tally[target]))
        interrupts.stop_if_asked()  # asked during the last class: it may have stopped part-way
    except KeyboardInterrupt:
        matrix.replay = REPLAY_INTERRUPTED
        matrix.interrupted = True
    finally:
        answers.close()


def _searched(cell: Cell, signature: str) -> Seen | None:
    """The cell's finding of that signature by its target's own search (or its code's), if any."""
    return next((s for s in cell.findings if s.signature == signature and s.by == SEARCH), None)


def save_found(matrix: Matrix, findings: str) -> None:
    """Write each finding's case (as its shard found it) under ``findings/TARGET/``, its ``saved`` the file:
    ``merge`` does so before it shrinks, so an interrupted merge keeps every case, and ``shrink_classes``
    then puts each shrunk case in place of its class's. A target of the same code as an earlier one
    shares that one's file, as the unsharded run's does."""
    from mmharness import payload, report
    from mmharness.checks import all_checks

    checks, written = all_checks(), {}
    for target in [*matrix.searched, *matrix.same_as]:
        if target not in matrix.targets:
            continue
        for check_id in matrix.checks:
            cell = matrix.cell(check_id, target)
            saved = []
            for seen in cell.findings:
                key = (check_id, matrix.same_as.get(target, target), seen.signature)
                if seen.by == SEARCH and seen.case is not None and key not in written:
                    try:
                        document, check = payload.loads_document(seen.case), checks[check_id]
                    except (payload.PayloadError, KeyError) as error:
                        raise NotAMatrix(f"{check_id} on {target}: its case does not load: {error}") from None
                    example = (document.case, document.params)
                    note = f"{seen.kind}: {seen.message}"
                    directory = Path(findings) / _slug(target)
                    written[key] = report.save_case(check, example, target, directory, note)
                saved.append(replace(seen, saved=written.get(key, seen.saved)) if seen.by == SEARCH else seen)
            matrix.cells[(check_id, target)] = replace(cell, findings=tuple(saved))


def _worse(status: str, kind: str) -> str:
    """A cell's status once a finding of ``kind`` joins it: the worse of the two."""
    return next(k for k in (*SEVERITY, PASSED) if k in (status, kind))


def _take(matrix: Matrix, check_id: str, target: str, old: Seen, shrunk: tuple[str, str, str | None]) -> None:
    """A target's finding (``old``, as its search found it) given its class's shrunk case (``shrunk``:
    message, case, saved file); the case as found is no longer saved (a copy's file is its source's)."""
    message, case, saved = shrunk
    cell = matrix.cell(check_id, target)
    if old.saved and old.saved != saved and not old.same_as:
        Path(old.saved).unlink(missing_ok=True)
    new = replace(old, message=message, case=case, saved=saved, shrunk=True, choices=None)
    findings = tuple(new if s is old else s for s in cell.findings)
    matrix.cells[(check_id, target)] = replace(cell, findings=findings)


@dataclass(frozen=True)
class _Shrunk:
    """A case ``shrink_classes`` shrank on a target: the class's, or another way of failing it met."""

    kind: str
    signature: str
    message: str
    case: str
    saved: str | None


def _found_shrinking(matrix: Matrix, check_id: str, target: str, found: _Shrunk, source: str) -> None:
    """``found`` (shrunk on ``source``: the target itself, or the one whose code it runs) in the target's
    cell: the shrunk case of a finding its search kept as found, or a finding of its own that shrinking
    met (counted, as a shrinking search counts it, as late as the budget spent; the status the worse)."""
    cell = matrix.cell(check_id, target)
    message = found.message.replace(source, target)
    searched = _searched(cell, found.signature)
    if searched is not None and not searched.shrunk:
        _take(matrix, check_id, target, searched, (message, found.case, found.saved))
    if searched is not None:  # else met while shrinking, already by another class's shrinking: the first kept
        return
    seen = Seen(found.kind, found.signature, message, cell.examples_run, found.saved, found.case)
    seen = replace(seen, same_as=None if target == source else source)
    status = _worse(cell.status, found.kind)
    matrix.cells[(check_id, target)] = replace(cell, status=status, findings=(*cell.findings, seen))


def _shrink_case(
    spec: str,
    check_id: str,
    signature: str,
    choices: bytes,
    known: Sequence[str],
    deadline: float | None,
    against: str | None,
    findings: str | None,
) -> list[_Shrunk]:
    """Shrink one class's case on a target (in a worker process, which loads each target once), the
    target's other signatures (``known``) passing: the shrunk case (first, if it failed the same way
    again), then any other way of failing shrinking met, each saved under ``findings``."""
    from mmharness import payload
    from mmharness.checks import all_checks
    from mmharness.session import Session

    loaded = _load(spec, against, once=True)
    if loaded is None:
        return []
    target, other = loaded
    saved_under = Path(findings) / _slug(spec) if findings is not None else None
    session = Session(
        target, spec, deadline=deadline, findings=saved_under, against=other, against_spec=against
    )
    result = session.shrink_found(all_checks()[check_id], signature, choices, known)
    shrunk = []
    for found in [] if result is None else result.findings:
        if found.example is not None:
            case = payload.dumps(found.example[0], params=found.example[1])
            shrunk.append(_Shrunk(found.kind, found.signature, found.failure.message, case, found.saved))
    return shrunk


def _load(spec: str, against: str | None, *, once: bool = False) -> tuple[Target, Target | None] | None:
    """A worker's target and ``--against`` target; ``None`` where either does not load. ``once``: the
    target loaded once per process (``specs.loaded``), for units of work that each run a little on it."""
    from mmharness.targets.base import TargetError
    from mmharness.targets.specs import loaded, resolve

    try:
        return (loaded if once else resolve)(spec), (None if against is None else _against_target(against))
    except TargetError:
        return None


def replay_classes(
    matrix: Matrix,
    *,
    workers: int = 1,
    deadline: float | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> None:
    """Replay each class's case on every target whose search missed it, adding what reproduces, and on
    those whose search found it but kept the case as found (``shrink_classes`` shrank it elsewhere),
    which take the shrunk case where it fails the same way (so a target's case does not depend on
    whether it was searched itself, ``dedup``, or in which shard).

    One run per class and target (``runner.replay``), in ``workers`` processes
    (one per target). ``deadline`` as the search's. ``progress`` is told each
    target with the cases replayed on it and how many showed their class.
    Against a target (``matrix.against``), each case runs on both, as the search did: a
    class is a change from it. A target ``same_as`` another is not replayed: it gets what the replay
    on that one showed (same code, same case), marked so. Interrupted, the targets replayed so far
    keep their findings and the matrix says ``REPLAY_INTERRUPTED``.
    """
    from mmharness import interrupts

    every = classes(matrix)
    others = copies(matrix)
    copied = {t for same in others.values() for t in same}
    work = [(t, _to_replay(matrix, t, every)) for t in matrix.targets if t not in copied]
    work = [(t, todo) for t, todo in work if todo]
    args = [
        (t, [(c.check, c.kind, c.signature, c.case) for c in todo], deadline, matrix.against)
        for t, todo in work
    ]
    answers = ordered(_replay_column, args, min(workers, len(args)) if args else 1)
    try:
        for (target, todo), (_, messages) in zip(work, answers, strict=False):
            shown = 0
            for one, message in zip(todo, messages, strict=False):
                if message is not None:
                    for other in (target, *others.get(target, ())):
                        _add(matrix, other, one, message, same_as=None if other == target else target)
                    shown += 1
            if progress:
                progress(target, len(messages), shown)
        interrupts.stop_if_asked()  # asked during the last target: it may have stopped part-way
        matrix.replay = REPLAY_DONE
    except KeyboardInterrupt:
        matrix.replay = REPLAY_INTERRUPTED
        matrix.interrupted = True
    finally:
        answers.close()


def _add(matrix: Matrix, target: str, one: _Class, message: str, same_as: str | None = None) -> None:
    """A class shown on a target by replaying its case: a finding by replay, the status the worse; or,
    where the target's search found it and kept the case as found, the shrunk case in its place.
    ``same_as``: shown by the replay on that target, which runs the same code."""
    cell = matrix.cell(one.check, target)
    message = message if same_as is None else message.replace(same_as, target)
    searched = _searched(cell, one.signature)
    if searched is not None:
        _take(matrix, one.check, target, searched, (message, one.case, one.saved))
        return
    by = {"by": REPLAY, "source": one.source, "same_as": same_as}
    seen = Seen(one.kind, one.signature, message, None, one.saved, **by)
    worst = _worse(cell.status, one.kind)
    searched = cell.searched or (cell.status if worst != cell.status else "")
    matrix.cells[(one.check, target)] = replace(
        cell, status=worst, findings=(*cell.findings, seen), searched=searched
    )


def _replay_column(
    spec: str, work: Sequence[tuple[str, str, str, str]], deadline: float | None, against: str | None = None
) -> tuple[str, list[str | None]]:
    """Replay ``(check id, kind, signature, case)``s on one target (in a worker process): per case,
    the message of a failure of that kind and signature, else ``None``. Stopped, those so far.
    ``against``: each case runs on both targets (``mmharness.against``); a check that cannot run on
    the other shows nothing."""
    from mmharness import against as changes
    from mmharness import interrupts, payload
    from mmharness.checks import all_checks
    from mmharness.runner import replay

    loaded = _load(spec, against)
    if loaded is None:
        return spec, [None] * len(work)
    target, other = loaded
    checks = all_checks()
    messages: list[str | None] = []
    for check_id, kind, signature, text in work:
        if interrupts.requested() is not None:
            break
        try:  # a report's case and check, which merge reads from files
            document, check = payload.loads_document(text), checks[check_id]
        except (payload.PayloadError, KeyError):
            messages.append(None)
            continue
        if other is not None:
            device = "cuda" if "cuda" in document.case.devices else "cpu"  # as ``replay`` picks it
            if changes.not_run(check, target, other, str(against), device) is not None:
                messages.append(None)
                continue
            check = changes.against(check, other)
        try:
            result = replay(check, target, (document.case, document.params), deadline=deadline)
        except KeyboardInterrupt:  # stopped inside the case
            break
        same = [f for f in result.findings if f.kind == kind and f.signature == signature]
        messages.append(same[0].failure.message if same else None)
    return spec, messages


def _slug(spec: str) -> str:
    """A directory name for a target's saved findings."""
    return "".join(c if c.isalnum() or c in ".=-" else "_" for c in spec).strip("_") or "target"


def deterministic(profile: str, seed: int | None) -> bool:
    """Whether a search draws the same cases on every run (a fixed seed): then one per code is enough."""
    from mmharness.runner import PROFILES

    return seed is not None or bool(PROFILES[profile]["derandomize"])


def _behaviour(spec: str) -> tuple[str | None, str | None]:
    """A target's behaviour key and release, loaded in a worker process; ``(None, None)``: it does not
    load (its column says why)."""
    from mmharness.baseline import behaviour_key
    from mmharness.targets.base import TargetError
    from mmharness.targets.specs import resolve

    try:
        target = resolve(spec)
    except TargetError:
        return None, None
    release = target.describe().get("release")
    return behaviour_key(target), (str(release) if release else None)


def same_code(specs: Sequence[str], workers: int = 1) -> tuple[dict[str, str], dict[str, str]]:
    """Which targets run the same code as an earlier one (target -> the first of its behaviour key, in
    the order given), and each target's release; every target loaded once, in ``workers`` processes."""
    answers = ordered(_behaviour, [(spec,) for spec in specs], min(workers, len(specs)))
    try:
        found = list(answers)
    finally:
        answers.close()
    first: dict[str, str] = {}
    same_as, releases = {}, {}
    for spec, (key, release) in zip(specs, found, strict=True):
        if release:
            releases[spec] = release
        if key is not None:
            earlier = first.setdefault(key, spec)
            if earlier != spec:
                same_as[spec] = earlier
    return same_as, releases


def copies(matrix: Matrix) -> dict[str, list[str]]:
    """Searched target -> the targets ``same_as`` it, in the matrix's order (those in the matrix only)."""
    found: dict[str, list[str]] = {}
    for target, source in matrix.same_as.items():
        if target in matrix.targets and source in matrix.targets:
            found.setdefault(source, []).append(target)
    return found


def _copied(cell: Cell, source: str, target: str) -> Cell:
    """``source``'s cell for ``target``, of the same code: marked, each finding too, and named as the
    target's own search names it (a skip reason or message spells the target's spec)."""
    findings = tuple(
        replace(seen, message=seen.message.replace(source, target), same_as=source) for seen in cell.findings
    )
    return replace(cell, reason=cell.reason.replace(source, target), findings=findings, same_as=source)


def _collect(matrix: Matrix, columns, progress) -> None:
    """Each column as it comes (in the order of the targets), and the same cells for each target of the
    same code; an interruption ends it after the last."""
    others = copies(matrix)
    for spec, release, error, cells, digest in columns:
        if error is not None:
            matrix.target_errors[spec] = error
        if release:
            matrix.releases[spec] = release
        if digest:  # a target of the same code loads the same files: the same digest
            matrix.digests.update({target: digest for target in (spec, *others.get(spec, ()))})
        for check_id, cell in cells.items():
            matrix.cells[(check_id, spec)] = cell
            for other in others.get(spec, ()):
                matrix.cells[(check_id, other)] = _copied(cell, spec, other)
        for target in (spec, *others.get(spec, ())):
            if error is not None and target != spec:
                matrix.target_errors[target] = error
            if progress:
                progress(target, None if error else sum(cell.status != NOT_RUN for cell in cells.values()))


def render(matrix: Matrix, *, color: bool = False, strict: bool = False, grid: bool = False) -> str:
    """A fixed-width table (a row per check, a column per target), then each way of failing, its targets.

    With ``grid``, the table is the compact grid instead (``grid_lines``: a character per cell, a row per
    class), for a terminal, where a table of many targets does not fit.
    """
    headers = ["check", *matrix.targets, "first failing"]
    rows = []
    for check_id in matrix.checks:
        cells = [matrix.cell(check_id, t) for t in matrix.targets]
        rows.append((check_id, cells, matrix.first_failing(check_id, strict=strict) or "-"))
    partial = any(cell.interrupted for _, cells, _ in rows for cell in cells)
    replayed = any(cell.replayed for _, cells, _ in rows for cell in cells)
    same = any(cell.same_as for _, cells, _ in rows for cell in cells)
    marks = (len(PARTIAL) if partial else 0) + (len(REPLAYED) if replayed else 0) + (len(SAME) if same else 0)
    symbol = max(len(s) for s in SYMBOLS.values()) + marks
    widths = [max(len(headers[0]), *(len(r[0]) for r in rows))] if rows else [len(headers[0])]
    widths += [max(len(t), symbol) for t in matrix.targets]
    widths.append(max(len(headers[-1]), *(len(r[2]) for r in rows)) if rows else len(headers[-1]))

    def paint(cell: Cell, width: int) -> str:
        marked = PARTIAL if cell.interrupted else ""
        marked += REPLAYED if cell.replayed else ""
        marked += SAME if cell.same_as else ""
        text = (SYMBOLS[cell.status] + marked).ljust(width)
        return f"\033[{_COLORS[cell.status]}m{text}\033[0m" if color else text

    lines = []
    if matrix.against:  # what every finding below is relative to
        lines.append(f"against: {matrix.against} (each finding a change from it: a regression fails the run)")
    for one in matrix.stopped_running():  # what the later targets no longer test, before any verdict
        lines.append(f"stopped running: {one.check} ran on {one.last}, skipped on {one.target}: {one.reason}")
    if grid:
        lines += grid_lines(matrix, color=color)
    else:
        lines.append("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
        lines.append("  ".join("-" * w for w in widths))
        for check_id, cells, first in rows:
            painted = [paint(c, w) for c, w in zip(cells, widths[1:-1], strict=True)]
            lines.append("  ".join([check_id.ljust(widths[0]), *painted, first]).rstrip())
    for check_id in matrix.checks:
        for one in matrix.ranges(check_id):
            where = one.first if one.first == one.last else f"{one.first} .. {one.last}"
            count = f"{len(one.targets)}" + (f", {len(one.replayed)} by replay" if one.replayed else "")
            lines.append(f"{check_id} [{one.kind}] {where} ({count}): {one.signature}")
    replay = _replay_line(matrix)
    lines.append(replay.replace(f" ({REPLAYED}: a cell", " (d, h in the grid: a cell") if grid else replay)
    lines += same_code_lines(matrix, mark=not grid)
    for spec, error in matrix.target_errors.items():
        lines.append(f"{spec}: {error}")
    if matrix.interrupted:
        lines.append(_interrupted_line(matrix))
    return "\n".join(lines)


def _interrupted_line(matrix: Matrix) -> str:
    """How far an interrupted matrix got: targets finished, in progress, and never begun (not run)."""
    finished = sum(matrix.finished(t) for t in matrix.targets)
    unbegun = [t for t in matrix.targets if not matrix.begun(t)]
    line = f"interrupted: {finished} target(s) finished"
    in_progress = len(matrix.targets) - finished - len(unbegun)
    if in_progress:
        line += (
            f", {in_progress} in progress ({PARTIAL}: a check stopped part-way,"
            f" {SYMBOLS[NOT_RUN]}: one not begun)"
        )
    if unbegun:
        line += f", {len(unbegun)} not run, never begun: {', '.join(unbegun)}"
    return line


@dataclass(frozen=True)
class GridRow:
    """One row of a matrix's grid: a class (a check and a way of failing), or a check that shows none."""

    check: str
    signature: str | None
    """The class's signature; ``None``: the row of a check no target showed a class of."""
    kind: str | None
    states: tuple[str, ...]
    """Per target: the class's kind where it shows; elsewhere its check's state there: ``PASSED`` (ran,
    the class not shown), ``COULD_NOT_TEST``, ``SKIPPED``, ``ERROR`` or ``NOT_RUN``. A check's own row:
    its status."""
    replayed: tuple[bool, ...] = ()
    """Per target: the class shows there by replay only (the target's search missed it)."""

    @property
    def label(self) -> str:
        return self.check if self.signature is None else f"{self.check}: {self.signature}"


def grid(matrix: Matrix, order: Sequence[tuple[str, str]] = ()) -> list[GridRow]:
    """Classes x targets: a row per class (``ranges``), those named in ``order`` (``(check id,
    signature)``s) first in that order, the rest by kind (divergence, could not test, hazard) and check;
    then a row per check with no class (its status on each target)."""
    kinds = (DIVERGENCE, COULD_NOT_TEST, HAZARD)

    def elsewhere(cell: Cell) -> str:
        if cell.status in (ERROR, NOT_RUN, SKIPPED):
            return cell.status
        untested = cell.status == COULD_NOT_TEST or any(s.kind == COULD_NOT_TEST for s in cell.findings)
        return COULD_NOT_TEST if untested else PASSED

    rows, quiet = [], []
    for check_id in matrix.checks:
        cells = [matrix.cell(check_id, t) for t in matrix.targets]
        found = matrix.ranges(check_id)
        if not found:
            quiet.append(GridRow(check_id, None, None, tuple(c.status for c in cells), (False,) * len(cells)))
        for one in found:
            shows = [t in one.targets for t in matrix.targets]
            states = tuple(one.kind if s else elsewhere(c) for s, c in zip(shows, cells, strict=True))
            replayed = tuple(t in one.replayed for t in matrix.targets)
            rows.append(GridRow(check_id, one.signature, one.kind, states, replayed))
    place = {key: k for k, key in enumerate(order)}
    rows.sort(key=lambda r: (place.get((r.check, r.signature), len(place)), kinds.index(r.kind)))
    return rows + quiet


GRID_SYMBOLS = {
    DIVERGENCE: "D",
    HAZARD: "H",
    COULD_NOT_TEST: "?",
    PASSED: ".",
    SKIPPED: "s",
    ERROR: "E",
    NOT_RUN: "-",
}
"""A grid cell's character; a class shown by replay only is in lower case (``d``, ``h``)."""


def grid_lines(matrix: Matrix, *, color: bool = False, width: int = 60) -> list[str]:
    """``grid`` as text: the targets' names (releases) written downwards over their columns, a
    character per cell, row labels cut to ``width``, and a legend."""
    rows = grid(matrix)
    labels = [r.label if len(r.label) <= width else r.label[: width - 1] + "\u2026" for r in rows]
    left = max([len("class (check: signature)"), *map(len, labels)])
    names = [matrix.releases.get(t, t) for t in matrix.targets]
    names = [n if len(n) <= 16 else "\u2026" + n[-15:] for n in names]
    height = max(map(len, names), default=0)
    lines = []
    for k in range(height):
        column = "".join(n.rjust(height)[k] for n in names)  # bottom-aligned, read downwards
        lines.append(
            (("class (check: signature)" if k == height - 1 else "").ljust(left) + "  " + column).rstrip()
        )

    def paint(state: str, replayed: bool) -> str:
        mark = GRID_SYMBOLS[state].lower() if replayed else GRID_SYMBOLS[state]
        return f"\033[{_COLORS[state]}m{mark}\033[0m" if color else mark

    for label, row in zip(labels, rows, strict=True):
        cells = "".join(paint(s, r) for s, r in zip(row.states, row.replayed, strict=True))
        lines.append(f"{label.ljust(left)}  {cells}")
    lines.append(
        "D divergence, H hazard, ? could not test, . pass (or ran without this class), s skip, E error,"
        " - not run; d, h: by replay (the target's search missed it)"
    )
    return lines


def same_code_lines(matrix: Matrix, *, mark: bool = True) -> list[str]:
    """How many targets were searched, and which have an earlier target's cells (same engine code); none
    where each target was searched. ``mark``: name the table's mark for such a cell."""
    others = copies(matrix)
    if not matrix.dedup or not others:
        return []
    searched = len(matrix.targets) - sum(map(len, others.values()))
    lines = [
        f"searched {searched} of {len(matrix.targets)} target(s), one per engine code (--no-dedup: each);"
        f" the others run the same code as an earlier one and have its cells"
        + (f" ({SAME}: such a cell)" if mark else "")
    ]
    lines += [f"  same code as {source}: {', '.join(same)}" for source, same in others.items()]
    return lines


def _replay_line(matrix: Matrix) -> str:
    """What the ranges above are: exact (every class replayed on every target), or each search's luck."""
    if matrix.replay == REPLAY_DONE:
        added = sum(seen.by == REPLAY for cell in matrix.cells.values() for seen in cell.findings)
        return (
            f"replayed: each class's case on every target; {added} finding(s) by replay"
            f" ({REPLAYED}: a cell with a class its search missed)"
        )
    if matrix.replay == REPLAY_INTERRUPTED:
        return "replay interrupted: a class's range may miss targets whose search missed it"
    return "not replayed: a class's range is the targets whose own search found it"
