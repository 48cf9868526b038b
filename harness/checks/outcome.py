"""How a check observes and compares what a target did: a value or an error, never a crash.

Every call into a target goes through ``observe`` so that an exception is data
the check can compare (class and message prefix), not a traceback that ends the run.
"""

from __future__ import annotations

import os
import re
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mmharness import tensors
from mmharness.deadline import Unfinished
from mmharness.model import Case
from mmharness.targets import faults
from mmharness.targets.base import HarnessGap, gap_in

DIVERGENCE, HAZARD, COULD_NOT_TEST = "divergence", "hazard", "could-not-test"
"""The kinds of finding (see docs/rules.md, "Verdicts")."""


class Failure(AssertionError):
    """A property does not hold; ``expected`` and ``actual`` say how, ``signature`` names the way.

    Two failures with the same signature are the same way of failing (the
    runner keeps one shrunk case for each); the default is the message with its
    numbers abstracted, so ``window (3, 4) start`` and ``window (1, 2) start``
    are one signature.
    """

    kind = DIVERGENCE

    def __init__(self, message: str, *, expected: str = "", actual: str = "", signature: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.expected = expected
        self.actual = actual
        self.signature = signature or template(message)
        self.example: Any = None
        """The example that failed, when the runner checked several per draw (``runner.run_swept``)."""
        self.cases = 1
        """How many cases that draw had checked when this one failed."""
        self.compared: Compared | None = None
        """How a comparison (``--against``) judged the case, for a failure that is a change."""

    def __reduce__(self) -> tuple:
        """Pickled whole (a worker process sends it back): an exception pickles only its message."""
        fields = (self.message, self.expected, self.actual, self.signature)
        return _rebuilt, (type(self), *fields, self.example, self.cases, self.compared)


def _rebuilt(kind: type[Failure], message, expected, actual, signature, example, cases, compared):
    failure = kind(message, expected=expected, actual=actual, signature=signature)
    failure.example, failure.cases, failure.compared = example, cases, compared
    return failure


@dataclass(frozen=True)
class Compared:
    """A change a comparison found: ``change`` (``records.CHANGES``), the ``observable`` that
    differs, and its ``basis``: the failing side's own signature, or the call that differs."""

    change: str
    observable: str = ""
    basis: str = ""


class Hazard(Failure):
    """The target follows the rules, but the rules let a user's data be silently lost or misused."""

    kind = HAZARD


class CouldNotTest(Failure):
    """The harness could not drive the target here (a stub reached, an adapter error): no verdict."""

    kind = COULD_NOT_TEST


_NUMBER_LIST = re.compile(r"\[[\d, ]*\]")
_NUMBER = re.compile(r"\d+")


def template(text: str) -> str:
    """The text with numbers (and lists of them) abstracted: what stays the same across cases."""
    return _NUMBER.sub("N", _NUMBER_LIST.sub("[...]", text))[:200]


def raised(error: BaseException) -> str:
    """How a raise reads in a signature: the class and the function (files move between releases)."""
    frame = _innermost(error)
    return f"raised {type(error).__name__}" + ("" if frame is None else f" in {frame.name}")


def _innermost(error: BaseException) -> traceback.FrameSummary | None:
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return None
    torch_dir = _torch_dir()
    inside = [f for f in frames if torch_dir is None or not f.filename.startswith(torch_dir)]
    return (inside or frames)[-1]


def _torch_dir() -> str | None:
    torch = sys.modules.get("torch")
    return os.path.dirname(torch.__file__) + os.sep if torch is not None and torch.__file__ else None


def could_not_test(gap: HarnessGap, error: BaseException | None = None) -> CouldNotTest:
    shown = "" if error is None or error is gap else f" (surfacing as {show_error(error)})"
    return CouldNotTest(
        f"could not test: {gap}",
        expected="the harness drives the engine code",
        actual=f"{gap.what}{shown}",
        signature=f"could not test: {gap.what}",
    )


def unfinished(error: Unfinished) -> Failure:
    """A case that did not finish (past its deadline, or its engine stuck): a divergence of its own."""
    return Failure(error.message, expected=error.expected, actual=error.actual, signature=error.signature)


@dataclass(frozen=True)
class Outcome:
    value: Any = None
    error: BaseException | None = None

    @property
    def raised(self) -> bool:
        return self.error is not None


def observe(call: Callable[[], Any]) -> Outcome:
    """The call's value or error; a harness gap behind the error ends the check as *could not test*:
    one raised as such, or a fault of the harness's own supply code (``targets.faults``), never the
    engine's outcome.

    A case that does not finish (``mmharness.deadline.Unfinished``, a
    ``BaseException``) is no outcome to compare: it passes through to the runner.
    """
    try:
        return Outcome(value=call())
    except (Exception, SystemExit) as error:  # the target's errors are what we compare; an exit is one
        gap = gap_in(error) or faults.gap(error)
        if gap is not None:
            raise could_not_test(gap, error) from error
        return Outcome(error=error)


def value_of(outcome: Outcome, what: str, expected: str) -> Any:
    """The outcome's value, or a ``Failure`` where the target raised on input it must accept."""
    if outcome.raised:
        raise Failure(
            f"{what} raised",
            expected=expected,
            actual=show_error(outcome.error),
            signature=f"{template(what)}: {raised(outcome.error)}",
        )
    return outcome.value


def show_error(error: BaseException) -> str:
    return f"{type(error).__name__}({str(error)!r})"


def message_prefix(error: BaseException) -> str:
    """The stable part of an error message: up to the first colon (details vary by engine)."""
    return str(error).split(":", 1)[0]


def same_error(expected: BaseException, actual: BaseException) -> bool:
    """Same class, and the message starts with the expected message's stable part."""
    return isinstance(actual, type(expected)) and str(actual).startswith(message_prefix(expected))


CLEAR_ERRORS = (ValueError, RuntimeError, AssertionError)
"""What counts as a clear refusal of bad input (NotImplementedError is a RuntimeError)."""


def is_clear_error(error: BaseException) -> bool:
    return isinstance(error, CLEAR_ERRORS) and bool(str(error).strip())


def describe(value: Any) -> str:
    if value is None:
        return "None"
    if hasattr(value, "shape"):
        return f"tensor{list(value.shape)} {str(value.dtype).removeprefix('torch.')} on {value.device}"
    return repr(value)


def expect_same(
    case: Case, what: str, expected: Outcome, actual: Outcome, *, none_is_empty: bool = False
) -> None:
    """Fail unless both raised the same error, or both returned equal values (tensors bit-exact).

    ``none_is_empty``: ``None`` and a tensor of no rows are one answer (where
    callers treat them alike, see docs/rules.md).
    """
    if expected.raised or actual.raised:
        if expected.raised and actual.raised and same_error(expected.error, actual.error):
            return
        raise Failure(
            f"{what}: outcomes differ",
            expected=show_error(expected.error) if expected.raised else describe(expected.value),
            actual=show_error(actual.error) if actual.raised else describe(actual.value),
            signature=f"{template(what)}: {_error_difference(expected, actual)}",
        )
    expected_value, actual_value = expected.value, actual.value
    if none_is_empty:
        expected_value, actual_value = _none_if_empty(expected_value), _none_if_empty(actual_value)
    expect_equal(case, what, expected_value, actual_value)


def _none_if_empty(value: Any) -> Any:
    return None if hasattr(value, "shape") and value.numel() == 0 and value.dim() >= 1 else value


def _error_difference(expected: Outcome, actual: Outcome) -> str:
    """The way two outcomes differ when one raised: what the target raised and where, or what it returned."""
    if actual.raised:
        return raised(actual.error)
    return f"returned {_kind_of(actual.value)} instead of raising {type(expected.error).__name__}"


def _kind_of(value: Any) -> str:
    return "None" if value is None else "a tensor" if hasattr(value, "shape") else type(value).__name__


def expect_equal(case: Case, what: str, expected: Any, actual: Any) -> None:
    """Structural equality where tensors must match exactly: shape, dtype, device type, bits."""
    if isinstance(expected, (tuple, list)) and isinstance(actual, (tuple, list)):
        if len(expected) != len(actual):
            raise Failure(
                f"{what}: lengths differ",
                expected=str(len(expected)),
                actual=str(len(actual)),
                signature=f"{template(what)}: {'fewer' if len(actual) < len(expected) else 'more'} entries",
            )
        for k, (e, a) in enumerate(zip(expected, actual, strict=True)):
            expect_equal(case, f"{what}[{k}]", e, a)
        return
    if hasattr(expected, "shape") or hasattr(actual, "shape"):
        _expect_same_tensor(case, what, expected, actual)
    elif expected != actual:
        raise Failure(f"{what}: values differ", expected=repr(expected), actual=repr(actual))


def _expect_same_tensor(case: Case, what: str, expected: Any, actual: Any) -> None:
    if not (hasattr(expected, "shape") and hasattr(actual, "shape")):
        raise Failure(
            f"{what}: one side is not a tensor",
            expected=describe(expected),
            actual=describe(actual),
            signature=f"{template(what)}: {_kind_of(actual)} instead of {_kind_of(expected)}",
        )
    kind = _tensor_difference(case, expected, actual)
    if kind is None:
        return
    raise Failure(
        f"{what}: {kind}",
        expected=describe(expected) + tensors.explain_rows(case, expected),
        actual=describe(actual) + tensors.explain_rows(case, actual),
        signature=f"{template(what)}: {kind}",
    )


def _tensor_difference(case: Case, expected: Any, actual: Any) -> str | None:
    """How two tensors differ, as a kind (``fewer rows``, ``another request's rows``, ...); None if equal."""
    if expected.dtype != actual.dtype:
        return "wrong dtype"
    if expected.device.type != actual.device.type:
        return "wrong device"
    if tuple(expected.shape) != tuple(actual.shape):
        if expected.dim() != actual.dim():
            return f"{actual.dim()}-D instead of {expected.dim()}-D"
        if expected.shape[-1] != actual.shape[-1]:
            return "wrong width"
        return "fewer rows" if actual.shape[0] < expected.shape[0] else "more rows"
    import torch

    if torch.equal(expected.cpu(), actual.cpu()):
        return None
    return tensors.row_difference(case, expected, actual)
