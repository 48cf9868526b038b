"""Runs checks against a target with Hypothesis, and turns each run into a ``Result``.

The runner owns the Hypothesis settings (profiles), counts examples, keeps one
shrunk example per distinct way of failing, and never lets one check's crash
end the run.

How a check keeps looking after its first failure: each failure has a
*signature* (``Failure.signature``: the exception's class and place, or the
kind of row difference). Hypothesis sees each signature as its own exception
type, so it shrinks every one separately and never slips from one to another.
When a search round ends with findings, the next round starts from a fresh
seed with the rest of the example budget, and the signatures already found
count as passing, so the budget goes to finding the next one. Every check
draws its own sequence of cases (its seed is derived from its id), so checks
that share a strategy do not test the same cases.

Every case runs under a deadline (``mmharness.deadline``; the profile's, 10 s
on CPU, or ``--deadline``): one still running then is the divergence "did not
finish in N s", shrunk like any other. Each run that hits the deadline costs
the whole deadline, so a check stops searching (and shrinking) once such runs
add up to ``HUNG_SECONDS``, keeping the smallest case that hit it.
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

if sys.version_info >= (3, 11):
    from builtins import BaseExceptionGroup
else:  # Hypothesis's own dependency on 3.10
    from exceptiongroup import BaseExceptionGroup

from mmharness import hypothesis_compat
from mmharness.checks.outcome import (
    COULD_NOT_TEST,
    DIVERGENCE,
    HAZARD,
    CouldNotTest,
    Failure,
    could_not_test,
    raised,
    template,
    unfinished,
)
from mmharness.checks.registry import Check, Example
from mmharness.deadline import SIGNATURE as DID_NOT_FINISH
from mmharness.deadline import Unfinished, limit
from mmharness.model import Case
from mmharness.targets.base import HarnessGap, Target, gap_in

PASSED, SKIPPED = "passed", "skipped"
SEVERITY = (DIVERGENCE, COULD_NOT_TEST, HAZARD)
"""Finding kinds, worst first: a check's status is its worst finding's kind."""

PROFILES: dict[str, dict[str, Any]] = {
    "ci": {"max_examples": 100, "derandomize": True, "deadline": 10.0},
    "dev": {"max_examples": 300, "derandomize": False, "deadline": 10.0},
    "deep": {"max_examples": 3000, "derandomize": False, "deadline": 10.0},
}
"""``derandomize``: the same cases on every run (the seed comes from the check id alone). ``deadline``:
seconds one case may run on CPU (cases take milliseconds; the margin is for a loaded machine)."""
CUDA_DEADLINE = 60.0
"""The least deadline on CUDA: a process's first CUDA call initialises the device."""
DEADLINE_ENV = "MMHARNESS_DEADLINE"
"""Seconds, overriding the profile's deadline where no ``--deadline`` is given (0: none)."""
HUNG_SECONDS = 30.0
"""A check stops searching once its runs that hit the deadline add up to this (at least two runs)."""
MAX_FINDINGS = 8
"""Distinct signatures one check reports at most (each costs a shrink)."""
STOPPED = "case as found (the search stopped at its first failure)"
"""What the report says of the case a search asked to stop at its first failure kept (``stop_at``)."""
AS_FOUND = "case as found (the search did not shrink it)"
"""What the report says of a case a search that does not shrink kept (``run_check(shrink=False)``:
``check --no-shrink``, or a matrix's search, which shrinks each class's case once afterwards)."""


@dataclass
class Finding:
    """One way a check failed: its kind, signature, the shrunk example and how soon it was found."""

    kind: str
    signature: str
    failure: Failure
    example: Example | None
    first_failure_at: int | None
    """How many examples ran until the first one failing this way (before shrinking)."""
    saved: str | None = None
    shrunk: bool = True
    """False for a finding kept as first seen: the run was interrupted while shrinking, or asked not to
    shrink (``stop_at``)."""
    unshrunk: str = ""
    """With ``shrunk`` False, what the report says of the case instead of "interrupted" (the search
    stopped because runs kept hitting the deadline)."""
    choices: bytes | None = None
    """Of a finding kept as found by a search that does not shrink (``run_check(shrink=False)``): the
    Hypothesis choice sequence that drew it, which ``shrink_found`` shrinks later, maybe in another
    process (``None``: not drawn by the search, e.g. a regression case, or one that did not finish)."""


@dataclass
class Result:
    check: Check
    status: str
    device: str = "cpu"
    reason: str = ""
    """Why it was skipped, or the first finding's message."""
    findings: list[Finding] = field(default_factory=list)
    examples_run: int = 0
    interrupted: bool = False
    cases_run: int = 0
    """Cases checked: the examples drawn, and for a check that sweeps, their other windows."""
    deadline: float | None = None
    """Seconds each case could run (``None``: no limit): a replay of a did-not-finish case uses it too."""
    target_notes: tuple[str, ...] = ()
    """The target's notes once the check had run, in the process that ran it (``Session.run``): what
    its code reached meanwhile (collectives, paths for more ranks, settings) that a load alone cannot
    say; ``mmharness.untested`` reports them."""

    @property
    def failure(self) -> Failure | None:
        return self.findings[0].failure if self.findings else None

    @property
    def example(self) -> Example | None:
        return self.findings[0].example if self.findings else None

    @property
    def first_failure_at(self) -> int | None:
        found_at = [f.first_failure_at for f in self.findings if f.first_failure_at is not None]
        return min(found_at, default=None)


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def cases_of(check: Check, example: Example) -> Iterator[Example]:
    """The drawn example, then (for a check that sweeps) the same layout under other windows."""
    yield example
    if check.sweeps:
        from mmharness.windows import windows_of

        case, params = example
        for moved in windows_of(case):
            yield moved, params


def deadline_for(profile: str = "ci", device: str = "cpu", deadline: float | None = None) -> float | None:
    """Seconds a case may run: ``deadline`` if given, else ``$MMHARNESS_DEADLINE``, else the profile's
    (at least ``CUDA_DEADLINE`` on CUDA); ``None`` when that is 0 (no limit)."""
    if deadline is None:
        deadline = _deadline_from_env()
    if deadline is None:
        deadline = PROFILES[profile]["deadline"]
        if device == "cuda":
            deadline = max(deadline, CUDA_DEADLINE)
    return deadline if deadline > 0 and math.isfinite(deadline) else None


def _deadline_from_env() -> float | None:
    text = os.environ.get(DEADLINE_ENV, "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"${DEADLINE_ENV} must be a number of seconds, got {text!r}") from None


def run_swept(
    check: Check,
    target: Target,
    example: Example,
    known: Collection[str] = (),
    deadline: float | None = None,
) -> int:
    """Run every case of a drawn example; how many ran. A ``Failure`` carries the case that failed
    as ``failure.example``, so the layout is shrunk but one window is saved and replayed.

    A failure whose signature is ``known`` (found already) does not stop the
    sweep: the other windows may fail in a new way. A case that did not finish
    does, known or not: each costs the whole deadline.
    """
    ran = 0
    for one in cases_of(check, example):
        ran += 1
        try:
            run_example(check, target, one, deadline)
        except Failure as failure:
            if failure.signature in known and failure.signature != DID_NOT_FINISH:
                continue
            failure.example = one
            failure.cases = ran
            raise
    return ran


def run_example(check: Check, target: Target, example: Example, deadline: float | None = None) -> None:
    """Run one example; anything other than a ``Failure`` escaping the property becomes one.

    An error escaping the property itself (not the target's, which ``observe``
    captures) is the harness's or the adapter's: *could not test*. A case still
    running after ``deadline`` seconds, or whose engine a target found stuck,
    did not finish: a divergence.
    """
    case, params = example
    try:
        with limit(deadline):
            check.property(target, case, params)
    except Unfinished as error:
        raise unfinished(error) from None
    except Failure:
        raise
    except Exception as error:
        gap = gap_in(error)
        if gap is not None:
            raise could_not_test(gap, error) from error
        raise CouldNotTest(
            f"the check itself raised {type(error).__name__}: {error}",
            expected="a comparable outcome",
            actual=f"{type(error).__name__}: {error}",
            signature=f"the check {raised(error)}",
        ) from error


def status_of(findings: list[Finding]) -> str:
    kinds = {f.kind for f in findings}
    return next((kind for kind in SEVERITY if kind in kinds), PASSED)


def check_seed(check: Check, seed: int | None) -> int:
    """The seed of a check's first round: from its id (and ``--seed``), so every check draws its own cases."""
    text = check.id if seed is None else f"{check.id}/{seed}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def run_check(
    check: Check,
    target: Target,
    *,
    profile: str = "ci",
    device: str = "cpu",
    max_examples: int | None = None,
    seed: int | None = None,
    database: Any = None,
    on_example: Callable[[int], None] | None = None,
    deadline: float | None = None,
    stop_at: Collection[str] = (),
    explicit: Sequence[Example] = (),
    shrink: bool = True,
    on_found: Callable[[Failure], None] | None = None,
    shrink_seconds: float | None = None,
    tolerated: Collection[str] = (),
) -> Result:
    """Run one check until its example budget is spent, keeping every distinct failure (shrunk).

    ``database`` (an ``ExampleDatabase``) keeps failing examples between runs; the
    check, target and device key them (``mmharness.database``). ``on_example`` is
    told how many examples have run so far (a progress display). ``deadline``:
    seconds each case may run (default: ``deadline_for`` the profile; 0: no limit). ``stop_at``:
    finding kinds (``DIVERGENCE``, ``HAZARD``) that end the search at once, unshrunk: for asking
    only *whether* a target fails (the self-tests), where shrinking and the rest of the budget,
    spent on a report nobody reads, cost most of the time. A failure the full search first meets
    while shrinking another is then not met: not for a check whose hazards precede its
    divergences. ``explicit``: cases run before any is drawn (``check --regressions``), as
    Hypothesis runs ``@example``s: not shrunk, not counted in the budget. ``shrink=False``: each
    finding is kept as found, with its choice sequence (``Finding.choices``) for ``shrink_found``; a
    round then ends at its first new failure, so the same budget draws other cases than a shrinking
    search's. ``matrix`` searches so, then shrinks each class once, on the first target that found it.
    ``on_found``: told each way of failing as first met (the ledger's ``Found``). With ``stop_at``:
    ``shrink_seconds`` shrinks the failure it stopped at for that long at most (``--fail-fast``), and
    ``tolerated`` signatures (a baseline's) pass, so only a new failure ends the search.
    """
    seconds = deadline_for(profile, device, deadline)
    unrunnable = not_run(check, target, device)
    if unrunnable is not None:
        return unrunnable
    options = PROFILES[profile]
    budget = max_examples if max_examples is not None else options["max_examples"]
    fixed = seed is not None or options["derandomize"]
    database = _keyed(database, check, target, device) if not fixed else None  # fixed: no history
    search = _Search(
        check,
        target,
        device,
        budget,
        database,
        on_example,
        seconds,
        shrink=shrink and not stop_at,
        explicit=tuple(explicit),
        on_found=on_found,
    )
    bounded = bool(stop_at) and shrink_seconds is not None
    search.keep_choices = (not shrink and not stop_at) or bounded
    search.passing = frozenset(tolerated) if stop_at else frozenset()
    round_seed = check_seed(check, seed) if fixed else None
    try:
        while search.spent < budget and len(search.findings) < MAX_FINDINGS:
            if not search.round(round_seed) or any(f.kind in stop_at for f in search.findings.values()):
                break
            round_seed = check_seed(check, round_seed) if fixed else None
        if bounded:
            _shrink_first(search, stop_at, shrink_seconds)
    except KeyboardInterrupt as stop:
        raise Interrupted(search.result(interrupted=True)) from stop
    return search.result()


def _keyed(database: Any, check: Check, target: Target, device: str) -> Any:
    """The example database keyed to one check, target and device (``None`` stays ``None``)."""
    if database is None:
        return None
    from mmharness.database import KeyedDatabase

    return KeyedDatabase(database, check.id, target.name, device)


def _shrink_first(search: _Search, stop_at: Collection[str], seconds: float | None) -> None:
    """The first failure of a ``stop_at`` kind shrunk within ``seconds``, in its finding's place."""
    first = next((f for f in search.findings.values() if f.kind in stop_at and f.choices), None)
    if first is None:
        return
    others = set(search.findings) - {first.signature}
    kw = {"known": others, "device": search.device, "deadline": search.deadline, "seconds": seconds}
    shrunk = shrink_found(search.check, search.target, first.signature, first.choices, **kw)
    if shrunk and shrunk[0].signature == first.signature:
        search.findings[first.signature] = replace(shrunk[0], first_failure_at=first.first_failure_at)


def fuzz_target(
    check: Check,
    target: Target,
    *,
    device: str = "cpu",
    deadline: float | None = None,
    database: Any = None,
    known: set[str] | None = None,
) -> Callable[[bytes], Failure | None]:
    """The check's test as ``run_check`` builds it, driven by a fuzzer's bytes (Hypothesis's
    ``fuzz_one_input``): each call draws one example from the bytes and runs it (swept) on the target;
    ``None`` when it passed or the bytes drew no example, else the ``Failure`` (unshrunk; its case is
    ``failure.example``). A failing example is saved to ``database`` under the key ``run_check`` reads
    (the check, target and device), so ``run_check(..., database=database)`` with a profile that is not
    derandomized replays and shrinks it into an ordinary ``Result``. ``known``: signatures that pass (a
    baseline's); the caller may add to the set between calls. ``deadline`` as in ``run_check``."""
    database = _keyed(database, check, target, device)
    search = _Search(check, target, device, 1, database, deadline=deadline_for("ci", device, deadline))
    known = set() if known is None else known
    test = search.test(known, {}, {}, database=database)
    one_input = test.hypothesis.fuzz_one_input

    def run(data: bytes) -> Failure | None:
        search.hung = 0  # each input on its own: a fuzzer's long run never adds up to giving up
        try:
            one_input(data)
        except _Found as found:
            return found.failure
        return None

    return run


def shrink_found(
    check: Check,
    target: Target,
    signature: str,
    choices: bytes,
    *,
    known: Collection[str] = (),
    device: str = "cpu",
    deadline: float | None = None,
    seconds: float | None = None,
) -> list[Finding]:
    """A failure a search that did not shrink found (its ``signature`` and ``Finding.choices``), shrunk.

    Hypothesis replays the choice sequence and shrinks it while it fails with that signature, under a
    fixed seed: the same shrunk case every time, in any process. ``known``: the other signatures the
    search found, which pass (a case may fail several ways; the search met this one with some of them
    passing). A failure of a signature not known that shrinking meets is shrunk too and comes back
    after the first, as a shrinking search keeps those (its ``first_failure_at`` is ``None``); the
    first is ``signature``'s, absent where it does not fail that way again. Nothing where Hypothesis
    gave up (flaky) or shrinking kept hitting the deadline. Ctrl-C propagates. ``deadline`` as in
    ``run_check``. ``seconds``: how long shrinking may take; then the smallest failing case met so far
    is kept, as partly shrunk (``--fail-fast``: a first verdict within a CI job's limit).
    """
    from mmharness.database import Choices

    given = Choices([choices])
    limit = deadline_for("ci", device, deadline)
    search = _Search(check, target, device, 1, given, deadline=limit, reuse_only=True)
    search.shrink_until = None if seconds is None else time.monotonic() + seconds
    prop = search.test(set(known) - {signature}, {}, {}, database=given)
    found: list[_Found] = []
    try:
        try:
            _seeded(prop, check_seed(check, None), given)()
        except BaseExceptionGroup as group:
            raise _controlling(group) from None
    except _Found as one:
        found = [one]
    except _ShrinkTime:
        return search.partly_shrunk(signature, f"case partly shrunk (shrinking stopped after {seconds:g} s)")
    except _Hung:
        pass
    except Exception as error:  # several failures (a group), or Hypothesis gave up
        found = [e for e in getattr(error, "exceptions", ()) if isinstance(e, _Found)]
    findings = [Finding(f.failure.kind, f.failure.signature, f.failure, f.example, None) for f in found]
    return sorted(findings, key=lambda f: f.signature != signature)


def _seeded(prop: Callable[..., None], seed: int, database: Any) -> Callable[..., None]:
    """``prop`` under a fixed seed, keeping its ``database``. Hypothesis's ``@seed`` turns the database
    off (a seed reproduces a run; it is not meant to save one), but a search that does not shrink keeps
    each failure's choice sequence there (``Choices``), and ``shrink_found`` replays them from it."""
    return hypothesis_compat.seeded(prop, seed, database)


class Interrupted(KeyboardInterrupt):
    """The run was stopped during a check; ``result`` holds what it had found (some maybe unshrunk)."""

    def __init__(self, result: Result) -> None:
        super().__init__(result.check.id)
        self.result = result


class _Found(Exception):
    """Raised to Hypothesis for a failure; one subclass per signature keeps them apart."""

    def __init__(self, failure: Failure, example: Example) -> None:
        super().__init__(failure.message)
        self.failure = failure
        self.example = example


_FOUND_TYPES: dict[str, type[_Found]] = {}


class _Hung(BaseException):
    """Raised through Hypothesis when a check's runs that hit the deadline add up to ``HUNG_SECONDS``."""


class _ShrinkTime(BaseException):
    """Raised through Hypothesis when shrinking has taken the time it was given (``shrink_found``)."""


def _controlling(group: BaseExceptionGroup) -> BaseException:
    """What decides how a round ends when Hypothesis reports several exceptions together: a stop
    (a signal, Ctrl-C) first, then the deadline's limit (``_Hung``), else the group itself (findings).
    A group holding a stop must never leave the round: its findings' classes (one per signature)
    cannot cross a worker's process boundary, and the stop would be lost inside it."""
    for kind in (KeyboardInterrupt, _Hung, _ShrinkTime):
        matched = group.subgroup(kind)
        if matched is not None:
            leaf: BaseException = matched
            while isinstance(leaf, BaseExceptionGroup):
                leaf = leaf.exceptions[0]
            return leaf
    return group


def _found_type(signature: str) -> type[_Found]:
    if signature not in _FOUND_TYPES:
        _FOUND_TYPES[signature] = type("Found", (_Found,), {"signature": signature})
    return _FOUND_TYPES[signature]


@dataclass
class _Search:
    """One check's search: rounds of Hypothesis, the signatures found so far, the budget spent."""

    check: Check
    target: Target
    device: str
    budget: int
    database: Any = None
    on_example: Callable[[int], None] | None = None
    deadline: float | None = None
    shrink: bool = True
    explicit: tuple = ()
    """Examples run first, in the first round only."""
    keep_choices: bool = False
    """Keep each failure's choice sequence (``Finding.choices``), in a database of the search's own, to
    shrink later: the search does not shrink, but it searches on (not ``stop_at``)."""
    reuse_only: bool = False
    """Draw nothing: replay the database's choice sequences and shrink those that fail (``shrink_found``)."""
    on_found: Callable[[Failure], None] | None = None
    """Told each way of failing as first met (``run_check``)."""
    passing: frozenset[str] = frozenset()
    """Signatures that count as passing from the start: a baseline's, for a search that stops at its
    first failure (``run_check``'s ``tolerated``), which a known finding must not end."""
    shrink_until: float | None = None
    """When shrinking must stop (``time.monotonic``), keeping the smallest failure met (``shrink_found``)."""
    smallest: dict[str, tuple[int, Failure]] = field(default_factory=dict)
    """The smallest failing case met so far (its size, the failure) of each signature kept so: every
    one while shrinking is bounded in time, else the cases that did not finish."""
    spent: int = 0
    cases: int = 0
    findings: dict[str, Finding] = field(default_factory=dict)
    hung: int = 0
    """Runs that hit the deadline, in every round."""

    @property
    def most_hung(self) -> int:
        """How many runs may hit the deadline before the check stops searching."""
        return max(2, math.ceil(HUNG_SECONDS / self.deadline)) if self.deadline else 0

    def result(self, *, interrupted: bool = False) -> Result:
        findings = sorted(
            self.findings.values(), key=lambda f: (SEVERITY.index(f.kind), f.first_failure_at or 0)
        )
        return Result(
            self.check,
            status_of(findings),
            self.device,
            reason=findings[0].failure.message if findings else "",
            findings=findings,
            examples_run=min(self.spent, self.budget),
            interrupted=interrupted,
            cases_run=self.cases,
            deadline=self.deadline,
        )

    def phases(self) -> list[Any]:
        """No explain phase: it replays each shrunk example many times for a comment nobody reads here."""
        from hypothesis import Phase

        if self.reuse_only:
            return [Phase.reuse, Phase.shrink]
        return [p for p in Phase if p is not Phase.explain and (self.shrink or p is not Phase.shrink)]

    def test(
        self,
        known: Collection[str],
        first_seen: dict[str, int],
        first_example: dict[str, tuple[Failure, Example]],
        *,
        database: Any,
    ) -> Callable[..., None]:
        """The round's Hypothesis test: each drawn example run (swept) on the target; a failure of a
        signature not ``known`` raised as its own exception type, first seen (``first_seen``: after how
        many calls; ``first_example``: the failure and its case) noted. ``round`` runs it;
        ``fuzz_target`` hands it to a fuzzer through Hypothesis's ``fuzz_one_input``."""
        from hypothesis import HealthCheck, Verbosity, given, settings
        from mmharness import interrupts

        calls = 0

        @settings(
            max_examples=self.budget - self.spent,
            derandomize=False,
            database=database,
            deadline=None,
            report_multiple_bugs=True,
            print_blob=False,
            verbosity=Verbosity.quiet,
            suppress_health_check=[HealthCheck.too_slow],
            phases=self.phases(),
        )
        @given(self.check.examples(self.device))
        def prop(example: Example) -> None:
            nonlocal calls
            interrupts.stop_if_asked()
            if self.shrink_until is not None and time.monotonic() > self.shrink_until:
                raise _ShrinkTime
            calls += 1
            if self.on_example is not None:
                self.on_example(self.spent + calls)
            failure = None
            try:
                self.cases += run_swept(self.check, self.target, example, known, self.deadline)
            except Failure as caught:
                failure = caught
                self.cases += caught.cases
            if failure is None:
                return
            if failure.signature in known:  # only a case that did not finish comes back known
                self._hung(failure)
                return
            if failure.signature not in first_example and self.on_found is not None:
                self.on_found(failure)
            first_seen.setdefault(failure.signature, calls)
            first_example.setdefault(failure.signature, (failure, failure.example))
            if self.shrink_until is not None:
                self._keep_smaller(failure)
            if failure.signature == DID_NOT_FINISH:
                self._hung(failure)
            # raised outside the except: no context
            raise _found_type(failure.signature)(failure, failure.example)

        return prop

    def round(self, round_seed: int | None) -> bool:
        """One Hypothesis run over the rest of the budget; whether it found a new signature."""
        from hypothesis import example

        known = set(self.findings) | set(self.passing)
        first_seen: dict[str, int] = {}
        first_example: dict[str, tuple[Failure, Example]] = {}
        # Later rounds pass the signatures found: Hypothesis would drop their saved examples.
        database = self.database if not known else None
        if self.keep_choices:  # each failure's choice sequence, to shrink later (``shrink_found``)
            from mmharness.database import Choices

            database = Choices()
        prop = self.test(known, first_seen, first_example, database=database)
        if not known:
            for case in self.explicit:
                prop = example(case)(prop)
        try:
            try:
                (prop if round_seed is None else _seeded(prop, round_seed, database))()
            except BaseExceptionGroup as group:  # findings reported together with a stop or the limit
                raise _controlling(group) from None
        except KeyboardInterrupt:  # keep what this round saw, as first seen
            self._keep_first_seen(first_example, first_seen)
            raise
        except _Hung:  # the runs that hit the deadline cost too much: keep what this round saw
            self._keep_first_seen(first_example, first_seen, hung=True)
            self.spent = self.budget
            return False
        except _Found as found:
            # the failure Hypothesis saved last (none for a regression case, which it never draws)
            drawn = database.saved[-1] if self.keep_choices and database.saved else None
            self._keep([found], first_seen, drawn)
        except Exception as error:  # several findings (a group), or Hypothesis gave up
            from hypothesis.errors import Flaky

            found = [e for e in getattr(error, "exceptions", ()) if isinstance(e, _Found)]
            if isinstance(error, Flaky) or not found:
                self._unfinished(error, first_seen)
                return False
            self._keep(found, first_seen)
        else:
            self.spent = self.budget
            return False
        return True

    def _keep_smaller(self, failure: Failure) -> None:
        """Keep ``failure`` if its case is the smallest of its signature met so far."""
        from mmharness import payload

        case, params = failure.example
        size = len(payload.dumps(case, params=params))
        kept = self.smallest.get(failure.signature)
        if kept is None or size < kept[0]:
            self.smallest[failure.signature] = (size, failure)

    def partly_shrunk(self, signature: str, note: str) -> list[Finding]:
        """The smallest failing case of ``signature`` shrinking met before it was stopped (none met: [])."""
        if signature not in self.smallest:
            return []
        _, failure = self.smallest[signature]
        return [Finding(failure.kind, signature, failure, failure.example, None, shrunk=False, unshrunk=note)]

    def _hung(self, failure: Failure) -> None:
        """Count a run that hit the deadline, keep the smallest case, and stop the search at the limit."""
        if failure.signature != DID_NOT_FINISH:
            return
        self.hung += 1
        if self.shrink_until is None:  # else every failure is kept so already
            self._keep_smaller(failure)
        if self.hung >= self.most_hung:
            raise _Hung

    def _keep_first_seen(
        self,
        first_example: dict[str, tuple[Failure, Example]],
        first_seen: dict[str, int],
        *,
        hung: bool = False,
    ) -> None:
        """Keep the round's findings as first seen (unshrunk): it was interrupted, or, with ``hung``,
        stopped by the runs that hit the deadline (the smallest of those is kept for its signature)."""
        stopped = f"after {self.hung} runs hit the {self.deadline:g} s deadline" if hung else ""
        for signature, (failure, example) in first_example.items():
            at = self.spent + min(first_seen[signature], self.budget - self.spent)
            note = f"case as first seen (the search stopped {stopped})" if hung else ""
            if hung and signature == DID_NOT_FINISH and DID_NOT_FINISH in self.smallest:
                _, failure = self.smallest[DID_NOT_FINISH]
                example = failure.example
                note = f"case partly shrunk (shrinking stopped {stopped})"
            finding = Finding(failure.kind, signature, failure, example, at, shrunk=False, unshrunk=note)
            self.findings.setdefault(signature, finding)

    def _keep(self, found: list[_Found], first_seen: dict[str, int], choices: bytes | None = None) -> None:
        """Record the round's findings; a signature first met while shrinking another counts as late
        in the round as its budget allows (calls made while shrinking are not generated examples).
        ``choices``: the choice sequence of the one failure a round that does not shrink ends at."""
        spent_before = self.spent
        round_budget = self.budget - spent_before
        for one in found:
            signature = one.failure.signature
            at = spent_before + min(first_seen.get(signature, 1), round_budget)
            note = "" if self.shrink else AS_FOUND if self.keep_choices else STOPPED
            kind, example = one.failure.kind, one.example
            finding = Finding(kind, signature, one.failure, example, at, shrunk=self.shrink, unshrunk=note)
            finding.choices = choices if len(found) == 1 else None
            self.findings.setdefault(signature, finding)
            self.spent = max(self.spent, at)

    def _unfinished(self, error: BaseException, first_seen: dict[str, int]) -> None:
        """Hypothesis gave up (a flaky target, a health check): a finding of its own."""
        from hypothesis.errors import Flaky

        summary = str(error).strip().splitlines()[0] if str(error).strip() else ""
        message = f"the check could not finish: {type(error).__name__}: {summary}"
        kind = Failure if isinstance(error, Flaky) else CouldNotTest
        failure = kind(
            message,
            expected="the same outcome every time an example runs",
            actual=f"{type(error).__name__} from Hypothesis",
            signature=template(f"could not finish: {type(error).__name__}"),
        )
        at = self.spent + (min(first_seen.values()) if first_seen else 1)
        finding = Finding(failure.kind, failure.signature, failure, None, at)
        self.findings.setdefault(failure.signature, finding)
        self.spent = self.budget


def not_run(check: Check, target: Target, device: str) -> Result | None:
    """The result of a check the target cannot run: *could not test* where a file holding what it
    needs did not load (``Target.unloaded``: a broken file is no missing feature), else a skip."""
    broken = target.unloaded
    unloaded = sorted(check.needs & broken.keys())
    if unloaded:
        gap = HarnessGap("; ".join(f"{name}: {broken[name]}" for name in unloaded), what=broken[unloaded[0]])
        failure = could_not_test(gap)
        finding = Finding(failure.kind, failure.signature, failure, None, None)
        return Result(check, COULD_NOT_TEST, device, reason=failure.message, findings=[finding])
    reason = skip_reason(check, target, device)
    return None if reason is None else Result(check, SKIPPED, device, reason=reason)


def skip_reason(check: Check, target: Target, device: str) -> str | None:
    """Why the check cannot run here (a missing capability, no CUDA), or ``None``."""
    missing = sorted(check.needs - target.capabilities)
    if missing:
        why = target.missing
        reasons = [f"{name}: {why[name]}" if name in why else name for name in missing]
        return f"{target.name} lacks {'; '.join(reasons)}"
    if (check.needs_cuda or device == "cuda") and not cuda_available():
        return "no CUDA device"
    return None


def replay(check: Check, target: Target, example: Example, *, deadline: float | None = None) -> Result:
    """Run one saved example once, as ``mmharness replay`` does (``deadline`` as in ``run_check``)."""
    device = "cuda" if "cuda" in example[0].devices else "cpu"
    seconds = deadline_for("ci", device, deadline)
    unrunnable = not_run(check, target, device) or _unreceived(check, target, example[0], device)
    if unrunnable is not None:
        return unrunnable
    try:
        run_example(check, target, example, seconds)
    except Failure as failure:
        finding = Finding(failure.kind, failure.signature, failure, example, 1)
        return Result(check, failure.kind, device, failure.message, [finding], 1, deadline=seconds)
    return Result(check, PASSED, device, examples_run=1, deadline=seconds)


def _unreceived(check: Check, target: Target, case: Any, device: str) -> Result | None:
    """A saved case the target never receives (``Target.unreceived``: an EVS-pruned video for a release
    without EVS) is skipped with why: its check would leave it out, and a pass would claim what no
    example tested."""
    why = target.unreceived(case) if isinstance(case, Case) else None
    reason = f"{target.name} never receives this case: {why}"
    return None if why is None else Result(check, SKIPPED, device, reason=reason)


def fails_run(status: str, *, strict: bool = False) -> bool:
    """Whether a status fails the run: a divergence, or under ``--strict`` a hazard or could-not-test."""
    return status == DIVERGENCE or (strict and status in (HAZARD, COULD_NOT_TEST))
