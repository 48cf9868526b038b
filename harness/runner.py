"""Runs checks against a target with Hypothesis, and turns each run into a ``Result``.

The runner owns the Hypothesis settings (profiles), counts examples, keeps the
shrunk failing example, and never lets one check's crash end the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.checks.outcome import Failure, Hazard
from harness.checks.registry import Check, Example
from harness.targets.base import Target

PASSED, FAILED, HAZARD, SKIPPED = "passed", "failed", "hazard", "skipped"

PROFILES: dict[str, dict[str, Any]] = {
    "ci": {"max_examples": 100, "derandomize": True},
    "dev": {"max_examples": 300, "derandomize": False},
    "deep": {"max_examples": 3000, "derandomize": False},
}


@dataclass
class Result:
    check: Check
    status: str
    device: str = "cpu"
    reason: str = ""
    example: Example | None = None
    failure: Failure | None = None
    examples_run: int = 0
    first_failure_at: int | None = None
    """How many examples ran until the first failing one (before shrinking)."""
    saved: str | None = None


@dataclass
class _Tally:
    count: int = 0
    first_failure_at: int | None = None
    last: tuple[Example, Failure] | None = field(default=None)

    def fail(self, example: Example, failure: Failure) -> None:
        if self.first_failure_at is None:
            self.first_failure_at = self.count
        self.last = (example, failure)


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def run_example(check: Check, target: Target, example: Example) -> None:
    """Run one example; anything other than a ``Failure`` escaping the property becomes one."""
    case, params = example
    try:
        check.property(target, case, params)
    except Failure:
        raise
    except Exception as error:
        raise Failure(
            f"{type(error).__name__} escaped the check: {error}",
            expected="a comparable outcome",
            actual=f"{type(error).__name__}: {error}",
        ) from error


def run_check(
    check: Check,
    target: Target,
    *,
    profile: str = "ci",
    device: str = "cpu",
    max_examples: int | None = None,
    seed: int | None = None,
) -> Result:
    """Run one check to its first (shrunk) failure or its example budget."""
    missing = check.needs - target.capabilities
    if missing:
        reason = f"{target.name} lacks {', '.join(sorted(missing))}"
        return Result(check, SKIPPED, device, reason=reason)
    if (check.needs_cuda or device == "cuda") and not cuda_available():
        return Result(check, SKIPPED, device, reason="no CUDA device")

    from hypothesis import HealthCheck, Verbosity, given, settings
    from hypothesis import seed as fixed_seed

    options = dict(PROFILES[profile])
    if max_examples is not None:
        options["max_examples"] = max_examples
    if seed is not None:
        options["derandomize"] = False
    tally = _Tally()

    @settings(
        **options,
        database=None,
        deadline=None,
        report_multiple_bugs=False,
        verbosity=Verbosity.quiet,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(check.examples(device))
    def prop(example: Example) -> None:
        tally.count += 1
        try:
            run_example(check, target, example)
        except Failure as failure:
            tally.fail(example, failure)
            raise

    if seed is not None:
        prop = fixed_seed(seed)(prop)
    try:
        prop()
    except Failure:
        example, failure = tally.last
        return Result(
            check,
            HAZARD if isinstance(failure, Hazard) else FAILED,
            device,
            reason=failure.message,
            example=example,
            failure=failure,
            examples_run=tally.count,
            first_failure_at=tally.first_failure_at,
        )
    return Result(check, PASSED, device, examples_run=tally.count)


def replay(check: Check, target: Target, example: Example) -> Result:
    """Run one saved example once, as ``mmharness replay`` does."""
    try:
        run_example(check, target, example)
    except Failure as failure:
        status = HAZARD if isinstance(failure, Hazard) else FAILED
        return Result(check, status, example[0].device, failure.message, example, failure, 1, 1)
    return Result(check, PASSED, example[0].device, example=example, examples_run=1)


def is_divergence(result: Result, *, strict: bool = False) -> bool:
    """Whether the result fails the run (hazards only under ``--strict``)."""
    return result.status == FAILED or (strict and result.status == HAZARD)
