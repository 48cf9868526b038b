"""Every regression case in ``corpus/regressions`` replays cleanly on the selected target.

Committing a saved finding here is how it becomes a regression test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mmharness import payload
from mmharness.checks import all_checks
from mmharness.checks.outcome import DIVERGENCE
from mmharness.runner import replay
from mmharness.views.console import result_details

REGRESSIONS = sorted((Path(__file__).parent.parent / "corpus" / "regressions").glob("*.json"))


def test_there_are_regression_cases():
    assert len(REGRESSIONS) >= 2


@pytest.mark.parametrize("path", REGRESSIONS, ids=[p.name for p in REGRESSIONS])
def test_regression_case_replays(path, mm_target, request):
    document = payload.load_document(path)
    check_id = document.provenance.get("check")
    checks = all_checks()
    assert check_id in checks, f"{path.name} names no known check: {check_id!r}"
    result = replay(checks[check_id], mm_target, (document.case, document.params))
    spec = request.config.getoption("--mm-target")
    assert result.status != DIVERGENCE, result_details(result, spec)
