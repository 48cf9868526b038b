"""Input classes of the engines' calling conventions: every path flag, modalities embedded apart,
per-request lists shorter than the batch.

Offline: the rule of short lists and its case fields, the classes the CI profile
must reach, the seeded bugs of ``EngineModel`` each class exposes. With the
``network`` marker: real SGLang releases, each path flag really switching the
engine's path, and a single-line change in a copy of 0.5.23 per class that
the harness finds only through that class.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

import pytest
from mmharness import boundaries, payload
from mmharness.checks import all_checks
from mmharness.checks.outcome import COULD_NOT_TEST, DIVERGENCE, HAZARD
from mmharness.engines.sglang.adapter import SGLangTarget, from_release
from mmharness.engines.sglang.forms import Found
from mmharness.model import Case, CaseError, Item, Request, listed_windows, validate
from mmharness.runner import PASSED, run_check
from mmharness.targets import base
from mmharness.targets.base import Encoder, HarnessGap
from mmharness.targets.engine_model import EngineModel
from mmharness.targets.reference import ReferenceTarget
from mmharness.targets.specs import resolve
from test_evs import EVS_SKIP  # 0.5.23's known EVS skip, shared with its tests

CHECKS = all_checks()

# Per-request lists shorter than the batch -------------------------------------------

TWO = Case(
    (
        Request(4, 0, 4, (Item(((0, 1),), hash=1),)),
        Request(4, 1, 3, (Item(((1, 2),), hash=2), Item(((3, 3),), hash=3, modality="audio"))),
    )
)


def test_a_request_past_either_list_is_prefilled_nowhere():
    short = replace(TWO, prefix_listed=2, extend_listed=1)
    assert short.listed == 1
    served = listed_windows(short)
    assert served.requests[0] == TWO.requests[0]
    assert served.requests[1] == replace(TWO.requests[1], extend_len=0)
    assert (served.prefix_listed, served.extend_listed) == (None, None)
    assert listed_windows(TWO) is TWO
    assert replace(TWO, prefix_listed=0).listed == 0


def test_the_lists_cover_at_most_the_batch():
    with pytest.raises(CaseError, match="prefix_listed: must be in \\[0, 2\\]"):
        validate(replace(TWO, prefix_listed=3))
    with pytest.raises(CaseError, match="extend_listed"):
        validate(replace(TWO, extend_listed=-1))


def test_short_lists_round_trip_and_old_files_still_load():
    short = replace(TWO, prefix_listed=1, extend_listed=0)
    text = payload.dumps(short)
    assert payload.loads(text) == short
    old = payload.dumps(TWO)
    assert "listed" not in old, "a case without short lists is written as before"
    assert payload.loads(old).prefix_listed is None
    with pytest.raises(payload.PayloadError, match="extend_listed"):
        payload.loads(text.replace('"extend_listed": 0', '"extend_listed": 3'))


def test_the_engine_model_serves_only_the_listed_requests():
    short = replace(TWO, extend_listed=1)
    encoder = Encoder(short)
    rows = EngineModel().chunked_prefill_embedding(short, encoder, cache=None)
    assert rows.shape[0] == 2 and encoder.encoded == [(1, 2)]
    assert EngineModel().count_mm_tokens(short) == 2


# Boundary classes the CI profile must reach ----------------------------------------


@pytest.mark.parametrize(
    ("name", "check_id"),
    [(name, check_id) for name, ids in boundaries.CONVENTION_CLASSES.items() for check_id in ids],
)
def test_the_ci_profile_reaches_each_convention_class(name, check_id):
    target = EngineModel() if base.SHORT_LISTS in CHECKS[check_id].needs else ReferenceTarget()
    first = boundaries.first_seen(CHECKS[check_id], target)
    assert first.get(name, 10**9) <= 50, (name, first)


def test_convention_classes_of_hand_made_cases():
    assert boundaries.convention_classes(TWO) == {"a request mixing modalities"}
    short = replace(TWO, prefix_listed=1)
    assert boundaries.convention_classes(short) >= {
        "per-request lists shorter than the batch",
        "a request with items past the lists' end",
    }


# Seeded bugs each class exposes -------------------------------------------------------


@pytest.mark.parametrize(
    ("mutant", "check_id"),
    [
        ("short_extend_list_indexed", "prefill.short_lists"),
        ("modality_of_first_item", "embed_mask.matches_reference"),
    ],
)
def test_each_class_has_a_seeded_bug_only_it_exposes(mutant, check_id):
    result = run_check(CHECKS[check_id], resolve(f"mutant:{mutant}"), stop_at=(DIVERGENCE,))
    assert result.status == DIVERGENCE and result.first_failure_at <= 50, result
    if mutant == "short_extend_list_indexed":  # the ordinary strategies never shorten the lists
        others = [c for c in CHECKS.values() if c.id != check_id and c.rule == "R3"]
        assert all(run_check(c, resolve(f"mutant:{mutant}")).status == PASSED for c in others)


def test_a_modality_encoder_refuses_items_of_another_modality():
    case = Case((Request(2, 0, 2, (Item(((0, 0),), hash=1, modality="audio"), Item(((1, 1),), hash=2))),))
    with pytest.raises(RuntimeError, match="audio encoder was handed image items"):
        EngineModel(bug="modality_of_first_item").embedding_and_mask(case, Encoder(case), cache=None)
    rows, mask = EngineModel().embedding_and_mask(case, Encoder(case), cache=None)
    assert rows.shape[0] == 2 and mask.tolist() == [True, True]


# Real releases (network) ---------------------------------------------------------------

PATHS = {
    "0.5.10": ("batched",),
    "0.5.17": ("batched", "per_request_hip", "per_request_npu"),
    "0.5.23": ("batched", "per_request_hip", "per_request_npu", "per_request_xpu"),
}
TWO_IMAGES = Case(
    (Request(3, 0, 3, (Item(((0, 1),), hash=1),)), Request(3, 0, 3, (Item(((1, 2),), hash=2),)))
)


def _copy(
    sglang_release, version: str, seeded_copy, file: str, old: str, new: str, *, evs_fixed: bool = False
) -> SGLangTarget:
    """A copy of a release with one line of ``srt/managers/file`` changed (the line must occur once);
    ``evs_fixed``: 0.5.23 without its known EVS skip too (tests/test_evs.py), so that a check drawing
    EVS-pruned videos passes unless the changed line fails it."""
    root = Path(sglang_release(version).describe()["source"])
    edits = [(f"sglang/srt/managers/{file}", old, new)]
    if evs_fixed:
        edits.append(("sglang/srt/managers/mm_schedule.py", EVS_SKIP, ""))
    return resolve(str(seeded_copy(root, edits)))


@pytest.mark.network
@pytest.mark.parametrize("version", sorted(PATHS))
def test_every_path_flag_is_a_path_of_its_own(sglang_release, version):
    target = sglang_release(version)
    assert target.paths == PATHS[version]
    assert base.paths_of(target) == PATHS[version]


@pytest.mark.network
@pytest.mark.parametrize(("version", "path"), [(v, p) for v, ps in PATHS.items() for p in ps[1:]])
def test_each_flag_really_switches_the_engine_to_its_per_request_path(sglang_release, version, path):
    """Batched, one encoder call holds both requests' images; under each flag, one call per request."""
    target = sglang_release(version)
    batched = Encoder(TWO_IMAGES)
    target.chunked_prefill_embedding(TWO_IMAGES, batched, cache=target.new_cache(1 << 30))
    assert batched.calls == [[(1, 2), (2, 2)]]
    flagged = Encoder(TWO_IMAGES)
    target.chunked_prefill_embedding(TWO_IMAGES, flagged, cache=target.new_cache(1 << 30), path=path)
    assert flagged.calls == [[(1, 2)], [(2, 2)]]
    assert target._switch is not None and target._switch.reads, "the engine read the flag"


@pytest.mark.network
def test_a_flag_the_engine_never_reads_is_could_not_test_not_a_pass(harness_cache, monkeypatch):
    """The chunked prefill behind a wrapper with names of its own: the flags the harness sets where the
    function it calls reads them never reach the engine's code."""
    monkeypatch.setenv("MMHARNESS_CACHE", str(harness_cache))
    target = from_release("0.5.23")  # a load of its own: its function is replaced below
    found = target.functions.found["_get_chunked_prefill_embedding"]
    namespace: dict = {}
    exec("def wrapper(*args, **kwargs):\n    return inner(*args, **kwargs)", {"inner": found.fn}, namespace)
    wrapper = functools.wraps(found.fn)(namespace["wrapper"])
    target.functions.found[found.name] = Found(found.name, wrapper, found.signature, found.form)
    never_read = "per_request_npu path did not switch: the engine never read _is_npu"
    with pytest.raises(HarnessGap, match=never_read):
        target.chunked_prefill_embedding(TWO_IMAGES, Encoder(TWO_IMAGES), path="per_request_npu")
    # up to the first failure, unshrunk: a pass would run the whole budget and fail the test
    result = run_check(CHECKS["prefill.path_independent"], target, stop_at=(DIVERGENCE, COULD_NOT_TEST))
    assert result.status == COULD_NOT_TEST, result.reason


_BY_ITEM_CALL = (
    "                    {prefix},\n"
    "                    extend_seq_len,\n"
    "                    device,\n"
    "                )\n"
    "                all_chunks.extend"
)
"""The tail of 0.5.23's call of its per-request function, under ``if _is_hip or _is_npu or _is_xpu``."""


@pytest.mark.network
def test_a_per_request_path_wrong_off_hip_only_is_found(sglang_release, seeded_copy):
    """0.5.23 with its per-request path one token late unless on HIP: the first flag alone passes."""
    target = _copy(
        sglang_release,
        "0.5.23",
        seeded_copy,
        "mm_schedule.py",
        _BY_ITEM_CALL.format(prefix="extend_prefix_len"),
        _BY_ITEM_CALL.format(prefix="extend_prefix_len + (not _is_hip)"),
    )
    result = run_check(CHECKS["prefill.path_independent"], target, stop_at=(DIVERGENCE,))
    assert result.status == DIVERGENCE
    assert "per-request-npu path" in result.findings[0].failure.message, result.findings[0].failure.message
    target.paths = target.paths[:2]  # what the harness exercised before: the first flag only
    assert run_check(CHECKS["prefill.path_independent"], target).status == PASSED


@pytest.mark.network
def test_offsets_of_another_modality_in_a_modality_call_are_found(sglang_release, seeded_copy):
    """0.5.23 whose embed_mm_inputs gives each modality's call every item's offsets: only seen when
    R3e goes through the engine's own per-modality caller, on requests mixing modalities."""
    target = _copy(
        sglang_release,
        "0.5.23",
        seeded_copy,
        "mm_utils.py",
        "flatten_nested_list([item.offsets for item in mm_items])",
        "flatten_nested_list([item.offsets for item in mm_inputs.mm_items])",
        evs_fixed=True,
    )
    result = run_check(CHECKS["embed_mask.matches_reference"], target, stop_at=(DIVERGENCE,))
    assert result.status == DIVERGENCE, result.reason
    case = result.findings[0].example[0]
    assert "a request mixing modalities" in boundaries.classes(case)
    target.embedding_and_mask = target._embedding_and_mask_direct  # one call over every item, as before
    assert run_check(CHECKS["embed_mask.matches_reference"], target).status == PASSED


@pytest.mark.network
def test_an_unguarded_extend_length_is_found_only_with_short_lists(sglang_release, seeded_copy):
    """0.5.23 indexing extend_length without its guard: every ordinary check passes."""
    target = _copy(
        sglang_release,
        "0.5.23",
        seeded_copy,
        "mm_schedule.py",
        "extend_seq_len = extend_length[i] if i < len(extend_length) else 0",
        "extend_seq_len = extend_length[i]",
        evs_fixed=True,
    )
    assert run_check(CHECKS["prefill.short_lists"], target, stop_at=(DIVERGENCE,)).status == DIVERGENCE
    # the whole budget, hazards unshrunk: the search ends early only at what fails the test
    ordinary = run_check(CHECKS["prefill.matches_reference"], target, stop_at=(DIVERGENCE, COULD_NOT_TEST))
    assert ordinary.status in (PASSED, HAZARD), ordinary.reason


ENCODED_PAST_THE_LISTS = "an item of a request past the per-request lists' end was encoded"
COLLISION = "hash collision: not each item's own rows, nor a clear error"


@pytest.mark.network
@pytest.mark.parametrize("version", ["0.5.10", "0.5.17", "0.5.23"])
def test_releases_follow_the_short_list_convention(sglang_release, version):
    """Every release serves the right rows. 0.5.10 still encodes a video of a request its
    extend_length leaves out (a missing length reads as 0, and it encodes a multi-span item's
    request whatever its window: the same as for an empty window), a hazard 0.5.17 fixed."""
    result = run_check(CHECKS["prefill.short_lists"], sglang_release(version))
    assert result.status in (PASSED, HAZARD), result.reason
    signatures = {f.signature for f in result.findings} - {COLLISION}
    assert signatures == ({ENCODED_PAST_THE_LISTS} if version == "0.5.10" else set()), signatures
