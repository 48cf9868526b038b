"""``--against SPEC``: every case on two targets, each difference a *change* judged by the rules.

A check run ``against`` a known-good target runs its property on each case on
both (``Recorded`` keeps a transcript of every target call: its path, its
outcome normalised so two targets' compare exactly, the encoder calls, the
cache events), on the paths both have (``shared_paths``: a changed default is
one note, ``path_note``, and the comparison goes on). What the two did is one of:

- a **regression**: the target diverges where the other does not: it fails the run;
- **inherited**: both diverge on the case, differently (the other fails here too);
- **permitted**: the target's worst is a hazard, which the rules permit;
- a **fix**: the other fails worse;
- a **neutral change**: both follow the rules (or fail the same way) but an
  observable differs (rows, a refusal or its message, a mask, the steps, the
  encoder calls, the cache events where both observe them, the calls made).

All but a regression are hazards (shown; fatal under ``--strict``). Each is the
runner's ``Failure`` marked with its change (``Failure.compared``, read by the
records and reports) and signed ``KIND: ...``, so the search shrinks each class
apart and a baseline names it. What both do alike is no change. A
could-not-test on either side passes through as could-not-test; a case past its
deadline (the two runs share one) is the runner's "did not finish".
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mmharness.checks.common import unreceived
from mmharness.checks.outcome import (
    DIVERGENCE,
    HAZARD,
    Compared,
    CouldNotTest,
    Failure,
    Hazard,
    template,
    unfinished,
)
from mmharness.deadline import DidNotFinish, Unfinished
from mmharness.model import Case
from mmharness.records import CHANGES, FIX, INHERITED, NEUTRAL, PERMITTED, REGRESSION
from mmharness.targets.base import Encoder

if TYPE_CHECKING:
    from mmharness.checks.registry import Check
    from mmharness.runner import Result
    from mmharness.targets.base import Target

UNRECORDED = frozenset({"describe", "notes", "new_cache", "cache_events", "unreceived"})
"""Public methods whose answers are not observables: a cache is handed back to the target untouched;
what a target receives decides whether a case is compared at all (``compare``)."""

_FIELDS: dict[str, tuple[str, ...]] = {
    "embedding_chunk": ("rows", "start", "end"),
    "embedding_and_mask": ("rows", "mask"),
    "whole_item_prefill": ("rows", "steps"),
    "draft_prefill": ("rows", "steps", "drafts"),
}
"""What each part of a method's tuple answer is, to name the observable that differs."""
_WHOLE: dict[str, str] = {"count_mm_tokens": "count", "split_item": "parts", "split_unreceived": "parts"}
"""The observable a method's whole answer is (any other method's: ``rows``)."""
_LOGS = frozenset({"log"})
"""Answer fields that are a step driver's own account of its encoder and cache work: a difference there
is named by the encoder calls or cache events that differ with it, where they do."""
_SHOWN = 300
"""Characters of an observable shown in a change's expected/actual."""


@dataclass(frozen=True)
class Call:
    """One call of a target method as seen from outside: what can be compared between two targets."""

    method: str
    path: str | None
    outcome: tuple
    """``("value", normalised)`` or ``("error", exception type name, first line of its message)``."""
    encoded: tuple
    """The encoder calls it made: each a tuple of ``(hash, token count)``."""
    cached: tuple | None = None
    """What the cache it was handed did meanwhile (``(event, key)`` each); ``None``: not observed."""


def normalised(value: Any) -> Any:
    """``value`` as plain data that two targets' answers compare by: tensors and arrays as ``(shape,
    dtype, device, values)``, sequences, mappings, dataclasses and records recursively."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if hasattr(value, "shape") and hasattr(value, "dtype") and hasattr(value, "tolist"):
        device = getattr(getattr(value, "device", None), "type", "cpu")
        dtype = str(value.dtype).removeprefix("torch.")
        return ("tensor", tuple(value.shape), dtype, device, value.tolist())
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(normalised(v) for v in value))
    if isinstance(value, dict):
        items = sorted(((repr(k), normalised(v)) for k, v in value.items()), key=lambda kv: kv[0])
        return ("dict", tuple(items))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = ((f.name, normalised(getattr(value, f.name))) for f in dataclasses.fields(value))
        return (type(value).__name__, tuple(fields))
    if hasattr(value, "__dict__"):
        own = ((k, normalised(v)) for k, v in sorted(vars(value).items()) if not k.startswith("_"))
        return (type(value).__name__, tuple(own))
    return (type(value).__name__, repr(value))


def answer(method: str, value: Any) -> Any:
    """A method's answer with docs/rules.md's representation-only differences made one answer, since
    every caller treats them alike and the checks compare them so: R3's ``None`` and rows of no element
    (``chunked_prefill_embedding``; ``embedding_and_mask``'s rows), and R3e's ``None`` and an all-false
    mask, and a mask shaped ``[N, 1]`` and ``[N]``. Nothing else: R2's ``None`` ("run the encoder") and
    zero rows ("precomputed, nothing in this window") differ, and so do they here."""
    if method == "chunked_prefill_embedding":
        return _no_rows(value)
    if method == "embedding_and_mask" and isinstance(value, tuple) and len(value) == 2:
        rows, mask = value
        return _no_rows(rows), _one_mask(mask)
    return value


def _no_rows(value: Any) -> Any:
    """``None`` for a tensor with no elements (of at least one dimension), else ``value``."""
    if hasattr(value, "numel") and hasattr(value, "shape") and len(value.shape) >= 1 and value.numel() == 0:
        return None
    return value


def _one_mask(mask: Any) -> Any:
    """``None`` for a mask selecting nothing, a column ``[N, 1]`` as ``[N]``, else ``mask``."""
    if not (hasattr(mask, "any") and hasattr(mask, "shape")):
        return mask
    if not bool(mask.any()):
        return None
    return mask.reshape(-1) if len(mask.shape) == 2 and mask.shape[1] == 1 else mask


def _error(error: BaseException) -> tuple:
    text = str(error).strip()
    return ("error", type(error).__name__, text.splitlines()[0] if text else "")


class Recorded:
    """A target whose every method call is kept in ``calls`` (a ``Call`` each); the rest passes through.

    A call raising an error is recorded and re-raised (the check's ``observe`` sees it as before); one
    interrupted by a ``BaseException`` (a deadline) is not recorded.
    """

    def __init__(self, target: Target, paths: Sequence[str] = ()) -> None:
        self._target = target
        self._paths = tuple(paths)
        self.calls: list[Call] = []

    name = property(lambda self: self._target.name)
    capabilities = property(lambda self: self._target.capabilities)
    missing = property(lambda self: getattr(self._target, "missing", {}))
    unloaded = property(lambda self: getattr(self._target, "unloaded", {}))
    paths = property(lambda self: self._paths or self._target.paths)
    """The paths a comparison runs both targets on (``shared_paths``), else the target's own."""

    def describe(self) -> dict[str, Any]:
        return self._target.describe()

    def notes(self) -> list[str]:
        return self._target.notes()

    def __getattr__(self, name: str) -> Any:  # reached for what the class does not define
        value = getattr(self._target, name)
        if name.startswith("_") or name in UNRECORDED or not callable(value):
            return value
        return self._recording(name, value)

    def _recording(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            encoders = [a for a in (*args, *kwargs.values()) if isinstance(a, Encoder)]
            before = [len(e.calls) for e in encoders]
            cache = kwargs.get("cache")
            events = self._cache_events(cache)
            path = kwargs.get("path")
            try:
                value = method(*args, **kwargs)
            except Exception as error:
                self._keep(name, path, _error(error), encoders, before, self._since(cache, events))
                raise
            outcome = ("value", normalised(answer(name, value)))
            self._keep(name, path, outcome, encoders, before, self._since(cache, events))
            return value

        return call

    def _cache_events(self, cache: Any) -> list | None:
        """The events of the cache a call is handed, so far; ``None`` where the target cannot see them."""
        if cache is None:
            return None
        read = getattr(self._target, "cache_events", None)
        events = read(cache) if read is not None else None
        return None if events is None else list(events)

    def _since(self, cache: Any, before: list | None) -> tuple | None:
        """What the cache did since ``before`` (its events when the call began)."""
        after = None if before is None else self._cache_events(cache)
        return None if after is None else tuple(tuple(e) for e in after[len(before) :])

    def _keep(
        self,
        name: str,
        path: Any,
        outcome: tuple,
        encoders: list[Encoder],
        before: list[int],
        cached: tuple | None,
    ) -> None:
        made = [
            tuple(tuple(map(tuple, c)) for c in e.calls[n:]) for e, n in zip(encoders, before, strict=True)
        ]
        encoded = tuple(c for calls in made for c in calls)
        self.calls.append(Call(name, None if path is None else str(path), outcome, encoded, cached))


@dataclass
class Side:
    """One target's run of a check on a case: its transcript and the failure it raised (if any)."""

    target: Recorded
    failure: Failure | None = None

    @property
    def signature(self) -> str | None:
        return None if self.failure is None else self.failure.signature

    def shown(self) -> str:
        """This side's verdict, for a change's expected/actual."""
        if self.failure is None:
            return f"{self.target.name}: follows the rule"
        f = self.failure
        return f"{self.target.name}: {f.kind} {f.message} (expected {f.expected}; actual {f.actual})"


@dataclass(frozen=True)
class Difference:
    """The first observable in which two transcripts differ."""

    observable: str
    where: str
    """The call it is in (method, and path when one was named)."""
    mine: str
    theirs: str


def first_difference(mine: Sequence[Call], theirs: Sequence[Call]) -> Difference | None:
    """Where two transcripts first differ, naming the observable; ``None`` when they are the same."""
    for k, (a, b) in enumerate(zip(mine, theirs, strict=False)):
        where = f"call {k + 1}, {a.method}" + (f" on {a.path}" if a.path else "")
        if (a.method, a.path) != (b.method, b.path):
            return Difference("calls", f"call {k + 1}", _call_name(a), _call_name(b))
        if a.outcome != b.outcome:
            observable = _outcome_observable(a, b)
            work = _work_difference(a, b, where) if observable in _LOGS else None
            if work is not None:
                return work
            at, x, y = _first_leaf(a.outcome, b.outcome)
            where += f", {at}" if at else ""
            return Difference(observable, where, _shown(x), _shown(y))
        work = _work_difference(a, b, where)
        if work is not None:
            return work
    if len(mine) != len(theirs):
        k = min(len(mine), len(theirs))

        def rest(calls: Sequence[Call]) -> str:
            return ", ".join(map(_call_name, calls[k:])) or "no more calls"

        return Difference("calls", f"after call {k}", rest(mine), rest(theirs))
    return None


def _work_difference(a: Call, b: Call, where: str) -> Difference | None:
    """How two calls' encoder calls differ, else their cache events (where both were observed)."""
    if a.encoded != b.encoded:
        return Difference("encoder calls", where, _calls(a.encoded), _calls(b.encoded))
    if a.cached is not None and b.cached is not None and a.cached != b.cached:
        return Difference("cache events", where, _events(a.cached, b.cached), _events(b.cached, a.cached))
    return None


def _events(mine: tuple, theirs: tuple) -> str:
    """Cache events from the first that differs from the other side's (and how many came before)."""
    k = next((n for n, (x, y) in enumerate(zip(mine, theirs, strict=False)) if x != y), None)
    k = min(len(mine), len(theirs)) if k is None else k
    shown = _shown([f"{event} {key}" for event, key in mine[k:]])
    return f"after {k} alike: {shown}" if k else shown


def _calls(encoded: tuple) -> str:
    """Encoder calls as ``Encoder.calls`` shows them: a list per call of ``(hash, tokens)``."""
    return _shown([list(call) for call in encoded])


def _first_leaf(mine: tuple, theirs: tuple) -> tuple[str, Any, Any]:
    """Where two different outcomes first differ: the path into the answer (``[0].model_data['x']``,
    empty for the whole answer) and each side's value there (a tensor is one value)."""
    if mine[0] != "value" or theirs[0] != "value":
        return "", mine, theirs
    path, x, y = "", mine[1], theirs[1]
    while True:
        step = _step(x, y)
        if step is None:
            return path.removeprefix("."), x, y
        at, x, y = step
        path += at


def _step(x: Any, y: Any) -> tuple[str, Any, Any] | None:
    """One level into two different normalised values, to the first part that differs; ``None`` where
    they differ as wholes (other types, lengths or fields; a tensor; a plain value)."""
    if not (isinstance(x, tuple) and isinstance(y, tuple) and len(x) == len(y) == 2 and x[0] == y[0]):
        return None
    if _is_sequence(x) and len(x[1]) == len(y[1]):
        return next(
            ((f"[{k}]", p, q) for k, (p, q) in enumerate(zip(x[1], y[1], strict=True)) if p != q), None
        )
    if (_is_record(x) or x[0] == "dict") and _same_keys(x, y):
        shown = "[{}]" if x[0] == "dict" else ".{}"
        return next(
            ((shown.format(n), p, q) for (n, p), (_, q) in zip(x[1], y[1], strict=True) if p != q), None
        )
    return None


def _same_keys(x: tuple, y: tuple) -> bool:
    return (
        isinstance(x[1], tuple) and isinstance(y[1], tuple) and [n for n, _ in x[1]] == [n for n, _ in y[1]]
    )


def _call_name(call: Call) -> str:
    return call.method + (f" on {call.path}" if call.path else "")


def _outcome_observable(a: Call, b: Call) -> str:
    """Which observable two different outcomes of one call differ in."""
    if a.outcome[0] == "error" or b.outcome[0] == "error":
        both = a.outcome[0] == b.outcome[0] == "error"
        return "message" if both and a.outcome[1] == b.outcome[1] else "refusal"
    mine, theirs = a.outcome[1], b.outcome[1]
    names = _FIELDS.get(a.method)
    if names and _is_sequence(mine) and _is_sequence(theirs) and len(mine[1]) == len(theirs[1]):
        for name, x, y in zip(names, mine[1], theirs[1], strict=False):
            if x != y:
                return name
    if _is_record(mine) and _is_record(theirs) and mine[0] == theirs[0]:
        for (name, x), (_, y) in zip(mine[1], theirs[1], strict=False):
            if x != y:
                return name
    return _WHOLE.get(a.method, "rows")


def _is_sequence(value: Any) -> bool:
    return isinstance(value, tuple) and len(value) == 2 and value[0] in ("tuple", "list")


def _is_record(value: Any) -> bool:
    """A normalised dataclass or object: ``(type name, ((field, value), ...))``."""
    return (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[1], tuple)
        and all(isinstance(f, tuple) and len(f) == 2 and isinstance(f[0], str) for f in value[1])
        and value[0] not in ("tuple", "list", "dict")
    )


def _shown(value: Any) -> str:
    text = repr(_readable(value))
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _readable(value: Any) -> Any:
    """A normalised outcome made shorter to read: a tensor as ``tensor[shape] dtype [values]``."""
    if isinstance(value, tuple) and value and value[0] == "tensor" and len(value) == 5:
        _, shape, dtype, device, values = value
        return _Text(f"tensor{list(shape)} {dtype} on {device} {values}")
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "value":
        return _readable(value[1])
    if isinstance(value, tuple) and len(value) == 3 and value[0] == "error":
        return _Text(f"{value[1]}({value[2]!r})")
    if _is_sequence(value):
        parts = [_readable(v) for v in value[1]]
        return parts if value[0] == "list" else tuple(parts)
    if isinstance(value, tuple):
        return tuple(_readable(v) for v in value)
    return value


class _Text(str):
    def __repr__(self) -> str:
        return str(self)


def _severity(kind: str) -> int:
    """Higher is worse: a divergence breaks a rule, a hazard is the rules letting a user be hurt."""
    return {DIVERGENCE: 2, HAZARD: 1}.get(kind, 0)


def compare(check: Check, target: Target, other: Target, case: Any, params: dict) -> None:
    """Run the check's property on both targets with the same case and params; raise the change. A case
    one of them never receives (``checks.common.unreceived``: an EVS-pruned video for a release
    without EVS) compares nothing: one side's run against the other's leaving it out is a change of
    input, not of behaviour."""
    if isinstance(case, Case) and any(unreceived(t, case) is not None for t in (target, other)):
        return
    paths = shared_paths(target, other)
    mine, theirs = _run(check, target, case, params, paths), _run(check, other, case, params, paths)
    if isinstance(mine.failure, CouldNotTest):
        raise mine.failure
    if isinstance(theirs.failure, CouldNotTest):
        f = theirs.failure
        raise CouldNotTest(
            f"against {other.name}: {f.message}",
            expected=f.expected,
            actual=f.actual,
            signature=f"{OTHER_GAP}{f.signature}",
        )
    if mine.signature != theirs.signature:
        _judge(mine, theirs)
    difference = first_difference(mine.target.calls, theirs.target.calls)
    if difference is not None:
        _neutral(difference, mine, theirs)


def shared_paths(target: Target, other: Target) -> tuple[str, ...]:
    """The paths both targets have, in the target's order: a comparison runs both on these, so a
    changed default (vLLM 0.33's v1, 0.34's v2) does not stop it at the first call. Empty where they
    share none: each then runs its own, compared call by call."""
    theirs = set(other.paths)
    return tuple(path for path in target.paths if path in theirs)


def path_note(target: Target, other: Target, spec: str) -> str | None:
    """The one note a comparison gives a changed default path, or paths only one side has."""
    mine, theirs = tuple(target.paths), tuple(other.paths)
    if mine == theirs:
        return None
    shared = shared_paths(target, other)
    if not shared:
        return f"no path in common ({', '.join(mine)} here, {', '.join(theirs)} on {spec}): each runs its own"
    note = f"paths {', '.join(mine)} here, {', '.join(theirs)} on {spec}: both run on {', '.join(shared)}"
    if mine[0] != theirs[0]:
        note = f"the default path changed ({theirs[0]} on {spec}, {mine[0]} here); " + note
    return note


def _run(check: Check, target: Target, case: Any, params: dict, paths: Sequence[str] = ()) -> Side:
    side = Side(Recorded(target, paths))
    try:
        check.property(side.target, case, copy.deepcopy(params))
    except DidNotFinish:
        raise  # the deadline the two runs share: the runner's "did not finish", counted as such
    except Unfinished as stuck:  # a step driver found its engine stuck: this side's divergence
        side.failure = unfinished(stuck)
    except Failure as failure:
        side.failure = failure
    return side


def _judge(mine: Side, theirs: Side) -> None:
    """Two sides that fail differently on one case, judged by the rules: a *regression* only where the
    target diverges and the other does not; where both diverge the failure is *inherited* (the other
    fails on this case too); where the target's worst is a hazard the rules permit it (*permitted*);
    a *fix* where the other fails worse."""
    a = _severity(mine.failure.kind) if mine.failure else 0
    b = _severity(theirs.failure.kind) if theirs.failure else 0
    me, them = mine.target.name, theirs.target.name
    if a < b:
        how = (
            f"{me} passes where {them} fails"
            if mine.failure is None
            else f"{me} fails less badly than {them}"
        )
        _judged(Hazard, FIX, how, theirs.failure, mine, theirs)
    if a == _severity(DIVERGENCE) and b == a:
        _judged(
            Hazard, INHERITED, f"{me} and {them} both diverge here, differently", mine.failure, mine, theirs
        )
    if a == _severity(DIVERGENCE):
        how = (
            f"{me} fails where {them} passes"
            if theirs.failure is None
            else f"{me} diverges where {them} only warns"
        )
        _judged(Failure, REGRESSION, how, mine.failure, mine, theirs)
    _judged(
        Hazard,
        PERMITTED,
        f"{me} shows a hazard the rules permit, {them} another or none",
        mine.failure,
        mine,
        theirs,
    )


def _judged(kind: type[Failure], change: str, how: str, failed: Failure, mine: Side, theirs: Side) -> None:
    """Raise the change as ``kind``: its class the change and the failing side's signature."""
    raise _change(
        kind(
            f"{change}: {how}: {failed.kind} {failed.message}",
            expected=theirs.shown(),
            actual=mine.shown(),
            signature=f"{change}: {failed.signature}",
        ),
        Compared(change, basis=failed.signature),
    )


def _neutral(difference: Difference, mine: Side, theirs: Side) -> None:
    both = "both follow the rule" if mine.failure is None else "both fail the same way"
    where = template(_no_position(difference.where))
    raise _change(
        Hazard(
            f"neutral change ({difference.observable}): {both}; {difference.where} differs",
            expected=f"{theirs.target.name}: {difference.theirs}",
            actual=f"{mine.target.name}: {difference.mine}",
            signature=f"neutral change ({difference.observable}): {where}",
        ),
        Compared(NEUTRAL, difference.observable, where),
    )


def _change(failure: Failure, compared: Compared) -> Failure:
    """``failure`` marked as the change ``compared`` (records and reports read the change from there;
    the signature keeps each class apart for the search and names it in baselines)."""
    failure.compared = compared
    return failure


def _no_position(where: str) -> str:
    """The call's method and path without its position in the transcript (kept apart by method)."""
    return where.split(", ", 1)[1] if ", " in where else where


def against(check: Check, other: Target) -> Check:
    """The check whose property compares the target with ``other`` case by case (``compare``)."""

    def prop(target: Target, case: Any, params: dict) -> None:
        compare(check, target, other, case, params)

    prop.__doc__ = check.property.__doc__
    return dataclasses.replace(check, property=prop)


def not_run(check: Check, target: Target, other: Target, spec: str, device: str) -> Result | None:
    """The result of a check that cannot run on both: the target's reason first, then the other's
    (``runner.not_run``), which names it: ``--against SPEC: ...``."""
    from mmharness.runner import not_run as unrunnable

    mine = unrunnable(check, target, device)
    if mine is not None:
        return mine
    theirs = unrunnable(check, other, device)
    if theirs is None:
        return None
    theirs.reason = f"--against {spec}: {theirs.reason}"
    for finding in theirs.findings:
        finding.failure.message = f"--against {spec}: {finding.failure.message}"
    return theirs


def replay_case(
    check: Check,
    target: Target,
    example: Any,
    *,
    other: Target | None = None,
    other_spec: str = "",
    deadline: float | None = None,
) -> Result:
    """One saved case run once (``runner.replay``), on ``target`` alone or, with ``other``, against it as
    ``check --against`` ran it: what ``replay`` and a baseline's known cases (``baseline.recheck``) do."""
    from mmharness.runner import replay

    if other is not None:
        device = "cuda" if "cuda" in example[0].devices else "cpu"  # as ``runner.replay`` picks it
        unrunnable = not_run(check, target, other, other_spec, device)
        if unrunnable is not None:
            return unrunnable
        check = against(check, other)
    return replay(check, target, example, deadline=deadline)


OTHER_GAP = "against: "
"""How a comparison signs the other target's could-not-test."""


def compared(signature: str) -> bool:
    """Whether a baseline entry's signature is one a run with ``--against`` gives (a change, or the other's
    gap): how a baseline written before it recorded its mode is read."""
    return (
        signature.startswith(OTHER_GAP)
        or any(signature.startswith(f"{kind}: ") for kind in CHANGES)
        or (signature.startswith("neutral change ("))
    )


def change_of(finding: Any) -> str | None:
    """The kind of change a finding (``runner.Finding``) is (``None``: not a change)."""
    compared = finding.failure.compared
    return None if compared is None else compared.change
