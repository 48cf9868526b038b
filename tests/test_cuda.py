"""R6 on a real GPU: CPU and CUDA agree bit for bit (skipped where no CUDA device is visible).

Run with ``tox -e gpu`` or ``pytest -m mm_cuda tests/test_cuda.py`` on a machine with a GPU.
"""

from __future__ import annotations

import pytest
from mmharness.checks import all_checks
from mmharness.checks.outcome import DIVERGENCE
from mmharness.runner import PASSED, run_check
from mmharness.targets.engine_model import EngineModel
from mmharness.targets.reference import ReferenceTarget
from mmharness.targets.specs import resolve

pytestmark = pytest.mark.mm_cuda

CHECKS = all_checks()


@pytest.mark.parametrize("target", [ReferenceTarget(), EngineModel()], ids=["reference", "engine_model"])
def test_cpu_equals_cuda(target):
    result = run_check(CHECKS["device.cpu_equals_cuda"], target, profile="ci")
    assert result.status == PASSED, result.reason


@pytest.mark.parametrize("check_id", sorted(c for c in CHECKS if not CHECKS[c].needs_cuda))
def test_every_check_holds_on_cuda(check_id):
    result = run_check(CHECKS[check_id], ReferenceTarget(), profile="ci", device="cuda")
    assert result.status != DIVERGENCE, result.reason


@pytest.mark.parametrize("target", [ReferenceTarget(), EngineModel()], ids=["reference", "engine_model"])
def test_a_mixed_device_batch_lands_on_the_first_cuda_items_device(target):
    result = run_check(CHECKS["device.mixed_precomputed"], target, profile="ci")
    assert result.status == PASSED, result.reason


@pytest.mark.parametrize("name", ["precomputed_no_device_move", "precomputed_first_chunk_device"])
def test_the_mixed_device_check_kills_its_witnesses(name):
    result = run_check(CHECKS["device.mixed_precomputed"], resolve(f"mutant:{name}"), profile="ci")
    assert result.status == DIVERGENCE, result.reason
