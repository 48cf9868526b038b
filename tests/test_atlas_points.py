"""A few points of the release atlas (docs/atlas.md), pinned: each real bug found for its reason.

Each row names a release, a check and the signature the CI profile must find
there, and the release after the fix where it must not; the EVS points, a bug
0.5.23 brought in, the release before it where it is not. The whole atlas is a
benchmark (``docs/atlas.md`` says how to make it); these points keep it honest
in CI. They download releases from the package index (``network``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mmharness import payload
from mmharness.checks import all_checks
from mmharness.checks.outcome import COULD_NOT_TEST, DIVERGENCE, HAZARD
from mmharness.runner import PASSED, SKIPPED, replay, run_check
from test_evs import leave_out_the_known_evs_divergence

pytestmark = pytest.mark.network
CHECKS = all_checks()
ROOT = Path(__file__).parent.parent

# (release, check, a substring of a signature the CI profile finds, the release where it is gone)
PRECOMPUTED = "precomputed.matches_reference"
POINTS = [
    ("0.4.6", "embed_mask.matches_reference", "rows in mask order", None),
    ("0.4.7", PRECOMPUTED, "precomputed embedding: more rows", "0.5.10"),  # 0.5.7-0.5.9: per-item index
    ("0.5.8", PRECOMPUTED, "raised IndexError in _get_precomputed_embedding", "0.5.10"),
    ("0.5.21", PRECOMPUTED, "raised RuntimeError in _get_precomputed_embedding", "0.5.22"),
    ("0.5.22", "grid.split_matches_reference", "split items: fewer entries", "0.5.23"),
]


@pytest.fixture(autouse=True)
def _cache_env(harness_cache, monkeypatch):
    monkeypatch.setenv("MMHARNESS_CACHE", str(harness_cache))


@pytest.fixture(scope="module")
def release():
    from mmharness.targets.specs import resolve

    loaded = {}

    def get(version: str):
        if version not in loaded:
            loaded[version] = resolve(f"sglang=={version}")
        return loaded[version]

    return get


@pytest.mark.parametrize(("version", "check_id", "signature", "fixed_in"), POINTS)
def test_a_real_bug_is_found_for_its_reason(release, version, check_id, signature, fixed_in):
    # Up to the first divergence, unshrunk: the CI profile's cases are fixed, so its full search meets
    # the same first divergence at the same case (and its shrink keeps that signature). Where it is gone,
    # the full search (shrinking included) must not meet it anywhere.
    found = run_check(CHECKS[check_id], release(version), stop_at=(DIVERGENCE,))
    assert found.status == DIVERGENCE, found.reason
    assert any(signature in f.signature for f in found.findings), [f.signature for f in found.findings]
    if fixed_in:
        after = run_check(CHECKS[check_id], release(fixed_in))
        assert not any(signature in f.signature for f in after.findings)


# A bug a release brought in (the table above is of bugs a later release fixed): (check, signature),
# found in 0.5.23 and not in 0.5.22. 0.5.23's chunked prefill skips a request whose window meets none of
# its items' offsets, the processor's (mm_schedule.py, "Do not encode them for chunks ... between their
# spans"), which EVS has made stale: a window holding a row EVS moved there is served as text.
EVS_POINTS = [
    ("embed_mask.matches_reference", "mask over input_ids[...]: values differ"),
    ("prefill.matches_reference", "chunked prefill embedding: None instead of a tensor"),
]


@pytest.mark.parametrize(("check_id", "signature"), EVS_POINTS)
def test_the_evs_skip_0_5_23_brought_in_is_found(release, check_id, signature):
    found = run_check(CHECKS[check_id], release("0.5.23"), stop_at=(DIVERGENCE,))
    assert found.status == DIVERGENCE, found.reason
    assert [f.signature for f in found.findings] == [signature]
    assert any(item.frame_rows for _, _, item in found.findings[0].example[0].items()), "an EVS case"
    before = run_check(CHECKS[check_id], release("0.5.22"))
    assert not any(signature in f.signature for f in before.findings)


@pytest.mark.parametrize("check_id", sorted(CHECKS))
def test_the_newest_release_has_no_divergence_and_nothing_untested(release, check_id, monkeypatch):
    target = release("0.5.23")
    leave_out_the_known_evs_divergence(target, monkeypatch)  # EVS_POINTS pins it
    # The CI profile's whole budget, its hazards left unshrunk (shrinking them is most of the time, and
    # a hazard passes here): the search ends early only at what fails the test.
    result = run_check(CHECKS[check_id], target, stop_at=(DIVERGENCE, COULD_NOT_TEST))
    assert result.status in (PASSED, HAZARD, SKIPPED), (check_id, result.reason)


def test_kimi_k3_in_0_5_18_runs_on_a_single_rank_shim(release):
    for check_id in ("grid.one_grid_rule", "grid.split_then_encode"):
        result = run_check(CHECKS[check_id], release("0.5.18"), max_examples=30)
        assert result.status != COULD_NOT_TEST, result.reason
        assert all("configured_tp_size" not in f.signature for f in result.findings)


def test_0_4_6_drives_its_unchunked_entry_point_and_says_why_the_rest_is_skipped(release):
    target = release("0.4.6")
    assert target.capabilities == {"embed_and_mask"}
    result = run_check(CHECKS["chunk.matches_reference"], target)
    assert result.status == SKIPPED and "first appears in 0.4.6.post5" in result.reason


def test_the_whole_request_collision_of_0_5_23_stays_a_hazard(release):
    document = payload.load_document(ROOT / "corpus" / "regressions" / "collision-whole-request-path.json")
    check = CHECKS[document.provenance["check"]]
    result = replay(check, release("0.5.23"), (document.case, document.params))
    assert result.status == HAZARD
    assert result.findings[0].signature.startswith("hash collision")
