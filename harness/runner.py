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
    reason = skip_reason(check, target, device)
    if reason:
        return Result(check, SKIPPED, device, reason=reason)

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
    except Exception as error:  # Hypothesis gave up: a flaky target, a health check, no examples
        example = tally.last[0] if tally.last else None
        summary = str(error).strip().splitlines()[0] if str(error).strip() else ""
        failure = Failure(
            f"the check could not finish: {type(error).__name__}: {summary}",
            expected="the same outcome every time an example runs",
            actual=f"{type(error).__name__} from Hypothesis",
        )
    else:
        return Result(check, PASSED, device, examples_run=tally.count)
    return Result(
        check,
        HAZARD if isinstance(failure, Hazard) else FAILED,
        device,
        reason=failure.message,
        example=example,
        failure=failure,
        examples_run=tally.first_failure_at or tally.count,  # not the shrinker's replays
        first_failure_at=tally.first_failure_at,
    )


def skip_reason(check: Check, target: Target, device: str) -> str | None:
    """Why the check cannot run here (a missing capability, no CUDA), or ``None``."""
    missing = check.needs - target.capabilities
    if missing:
        return f"{target.name} lacks {', '.join(sorted(missing))}"
    if (check.needs_cuda or device == "cuda") and not cuda_available():
        return "no CUDA device"
    return None


def replay(check: Check, target: Target, example: Example) -> Result:
    """Run one saved example once, as ``mmharness replay`` does."""
    reason = skip_reason(check, target, example[0].device)
    if reason:
        return Result(check, SKIPPED, example[0].device, reason=reason, example=example)
    try:
        run_example(check, target, example)
    except Failure as failure:
        status = HAZARD if isinstance(failure, Hazard) else FAILED
        return Result(check, status, example[0].device, failure.message, example, failure, 1, 1)
    return Result(check, PASSED, example[0].device, example=example, examples_run=1)


def is_divergence(result: Result, *, strict: bool = False) -> bool:
    """Whether the result fails the run (hazards only under ``--strict``)."""
    return result.status == FAILED or (strict and result.status == HAZARD)
