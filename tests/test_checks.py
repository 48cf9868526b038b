"""Every registered check holds on the selected target (``--mm-target``, default: reference)."""

from __future__ import annotations

import pytest
from mmharness.checks import all_checks
from mmharness.checks.outcome import DIVERGENCE
from mmharness.report import failure_details
from mmharness.runner import SKIPPED, run_check

CHECKS = all_checks()


@pytest.mark.parametrize("check_id", sorted(CHECKS))
def test_check_holds(check_id, mm_target, mm_device, mm_profile, request):
    result = run_check(CHECKS[check_id], mm_target, profile=mm_profile, device=mm_device)
    if result.status == SKIPPED:
        pytest.skip(result.reason)
    spec = request.config.getoption("--mm-target")
    assert result.status != DIVERGENCE, failure_details(result, spec)
