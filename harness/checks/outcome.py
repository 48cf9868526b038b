"""How a check observes and compares what a target did: a value or an error, never a crash.

Every call into a target goes through ``observe`` so that an exception is data
the check can compare (class and message prefix), not a traceback that ends the run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness import tensors
from harness.model import Case


class Failure(AssertionError):
    """A property does not hold; ``expected`` and ``actual`` say how."""

    def __init__(self, message: str, *, expected: str = "", actual: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.expected = expected
        self.actual = actual


class Hazard(Failure):
    """The target follows the rules, but the rules let a user's data be silently lost or misused."""


@dataclass(frozen=True)
class Outcome:
    value: Any = None
    error: BaseException | None = None

    @property
    def raised(self) -> bool:
        return self.error is not None


def observe(call: Callable[[], Any]) -> Outcome:
    try:
        return Outcome(value=call())
    except Exception as error:  # the target's errors are what we compare
        return Outcome(error=error)


def value_of(outcome: Outcome, what: str, expected: str) -> Any:
    """The outcome's value, or a ``Failure`` where the target raised on input it must accept."""
    if outcome.raised:
        raise Failure(f"{what} raised", expected=expected, actual=show_error(outcome.error))
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


def expect_same(case: Case, what: str, expected: Outcome, actual: Outcome) -> None:
    """Fail unless both raised the same error, or both returned equal values (tensors bit-exact)."""
    if expected.raised or actual.raised:
        if expected.raised and actual.raised and same_error(expected.error, actual.error):
            return
        raise Failure(
            f"{what}: outcomes differ",
            expected=show_error(expected.error) if expected.raised else describe(expected.value),
            actual=show_error(actual.error) if actual.raised else describe(actual.value),
        )
    expect_equal(case, what, expected.value, actual.value)


def expect_equal(case: Case, what: str, expected: Any, actual: Any) -> None:
    """Structural equality where tensors must match exactly: shape, dtype, device type, bits."""
    if isinstance(expected, (tuple, list)) and isinstance(actual, (tuple, list)):
        if len(expected) != len(actual):
            raise Failure(f"{what}: lengths differ", expected=str(len(expected)), actual=str(len(actual)))
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
        )
    if (
        tuple(expected.shape) != tuple(actual.shape)
        or expected.dtype != actual.dtype
        or expected.device.type != actual.device.type
    ):
        raise Failure(
            f"{what}: tensors differ in shape, dtype or device",
            expected=describe(expected) + tensors.explain_rows(case, expected),
            actual=describe(actual) + tensors.explain_rows(case, actual),
        )
    import torch

    if not torch.equal(expected.cpu(), actual.cpu()):
        raise Failure(
            f"{what}: tensor values differ",
            expected=describe(expected) + tensors.explain_rows(case, expected),
            actual=describe(actual) + tensors.explain_rows(case, actual),
        )
