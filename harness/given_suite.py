"""The checks as plain Hypothesis tests, for Hypothesis-based fuzzers and ``pytest --pyargs``.

::

    MMHARNESS_TARGET=sglang==0.5.23 hypothesis fuzz -- --pyargs mmharness.given_suite
    MMHARNESS_TARGET=~/src/my-fork/python pytest --pyargs mmharness.given_suite -n auto

One ``@given`` test per check (``test_prefill_stateful`` for ``prefill.stateful``),
drawing the check's own examples. A test fails on a divergence; with
``MMHARNESS_STRICT=1`` also on a hazard or a could-not-test. Unlike ``mmharness
check`` the Hypothesis settings are the caller's (profile, example database,
phases), which is what a continuous fuzzer such as HypoFuzz needs: it runs these
tests across processes, shares their database and shows them on its dashboard.
``MMHARNESS_DEVICE`` picks the device (default ``cpu``).
"""

from __future__ import annotations

import os
from functools import cache

from hypothesis import HealthCheck, given, settings
from mmharness.checks import all_checks
from mmharness.checks.outcome import Failure
from mmharness.checks.registry import Check
from mmharness.runner import fails_run, run_swept, skip_reason
from mmharness.targets.base import Target

DEVICE = os.environ.get("MMHARNESS_DEVICE", "cpu")


@cache
def target() -> Target:
    """The target of ``MMHARNESS_TARGET`` (the reference by default), resolved once per process."""
    from mmharness.targets.specs import resolve

    return resolve(os.environ.get("MMHARNESS_TARGET", "reference"))


def run(check: Check, example) -> None:
    """One example of one check: skipped where the target cannot run it, failed by what fails a run."""
    reason = skip_reason(check, target(), DEVICE)
    if reason:
        import pytest

        pytest.skip(reason)
    try:
        run_swept(check, target(), example)
    except Failure as failure:
        if fails_run(failure.kind, strict=os.environ.get("MMHARNESS_STRICT") == "1"):
            raise


def _test(check: Check):
    """The check's test, defined under its own name: Hypothesis keys its database by the function,
    and tests written from one source would share a key (a function made by ``exec`` has no source,
    so Hypothesis keys it by its name)."""
    name = f"test_{check.id.replace('.', '_')}"
    namespace = {"run": run, "check": check}
    exec(f"def {name}(example):\n    run(check, example)\n", namespace)
    test = namespace[name]
    test.__doc__ = check.doc
    return settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])(
        given(check.examples(DEVICE))(test)
    )


for _check in all_checks().values():
    globals()[f"test_{_check.id.replace('.', '_')}"] = _test(_check)
