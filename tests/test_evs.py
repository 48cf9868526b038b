"""EVS (efficient video sampling) with the release's own code (issue 17).

Offline: the files a release keeps and the order they load in, the shim of the
processor helper the EVS code calls (``get_mm_items_offset``), held to its contract,
the checks EVS touches drawing pruned videos by default, and a target that does
not say it receives them given none. With the ``network`` marker: 0.5.23's own
``EVSEmbeddingResult`` reaches the rules; its divergence on a window between a
pruned video's processor spans, found with the real module and gone in a copy
without the skip (so the skip is all of it); and a seeded bug in the real EVS
code that only EVS cases expose.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from hypothesis import Phase, given, seed, settings
from mmharness.checks import all_checks
from mmharness.checks.common import unreceived
from mmharness.checks.outcome import DIVERGENCE
from mmharness.engines.sglang import layout, shims
from mmharness.model import Case, Item, Request
from mmharness.runner import PASSED, SKIPPED, replay, run_check
from mmharness.targets.base import UNDECLARED_EVS, Encoder
from mmharness.targets.engine_model import EngineModel
from mmharness.targets.reference import ReferenceTarget
from mmharness.targets.specs import resolve

CHECKS = all_checks()
CLASS_CHECKS = ("embed_mask.matches_reference", "prefill.matches_reference")

# The processor's estimate one row per frame; the first frame really keeps both (EVS keeps the first
# frame whole), so the text between the frames moves right and position 1 becomes a placeholder.
PRUNED = Item(((0, 0), (3, 3)), hash=3, modality="video", frame_rows=(2, 0))
BETWEEN = Case((Request(4, 1, 1, (PRUNED,)),), hidden=4)
"""The minimal case: a window of one token, the text between the frames as processed."""

EVS_SKIP = """        if not any(
            end >= extend_prefix_len and start < extend_prefix_len + extend_seq_len
            for start, end in items_offset
        ):
            continue
"""
"""0.5.23's skip of a request whose window reaches none of its items' (pre-EVS) offsets."""


def test_the_evs_modules_are_kept_and_load_before_the_rules():
    files = list(layout.RULES.files)
    core, module = f"{layout.EVS_PACKAGE}.evs_core", layout.EVS_MODULE
    assert files.index(layout.CACHE_MODULE) < files.index(core) < files.index(module)
    assert files.index(module) < files.index("sglang.srt.managers.mm_schedule")
    for rel in ("srt/multimodal/evs/evs_core.py", "srt/multimodal/evs/evs_module.py"):
        assert f"sglang/{rel}" in layout.RELEASE_MEMBERS


@pytest.mark.parametrize(
    ("ids", "runs"),
    [
        ([1, 2, 3, 3, 3, 4, 3, 3], [(2, 4), (6, 7)]),  # the helper's own example
        ([3, 1, 3], [(0, 0), (2, 2)]),  # runs at both ends stay apart
        ([3, 3, 3], [(0, 2)]),
        ([1, 2], []),
        ([], []),
    ],
)
def test_the_offset_helper_shim_gives_the_runs_of_a_token(ids, runs):
    assert shims.get_mm_items_offset(torch.tensor(ids, dtype=torch.int64), 3) == runs
    assert (
        shims.SGLangShims(shims.Record(), None).shim_for("get_mm_items_offset") is shims.get_mm_items_offset
    )


def without_evs(check_id: str):
    """The check with its EVS-pruned videos filtered out: what it drew before it drew them by default."""
    check = CHECKS[check_id]

    def examples(device: str):
        return check.examples(device).filter(lambda example: not has_evs(example[0]))

    return dataclasses.replace(check, examples=examples)


def has_evs(case: Case) -> bool:
    return any(item.frame_rows for _, _, item in case.items())


def leave_out_the_known_evs_divergence(target, monkeypatch) -> None:
    """0.5.23 leaving EVS-pruned videos out, as a release without EVS does: a test that every other case
    passes on it then still fails at any other divergence (its EVS one is pinned in the atlas points)."""
    received = target.unreceived
    monkeypatch.setattr(
        target, "unreceived", lambda case: "0.5.23's known EVS skip" if has_evs(case) else received(case)
    )


@pytest.mark.parametrize("check_id", CLASS_CHECKS)
@pytest.mark.parametrize("seed_value", range(5))
def test_the_checks_draw_pruned_videos_by_default(check_id, seed_value):
    """Both checks EVS touches draw an EVS case among their first 50 examples, for seeds other than the
    CI profile's too (tests/test_input_classes.py holds those to the boundary classes)."""
    seen = []

    @seed(seed_value)
    @settings(max_examples=50, database=None, phases=[Phase.generate])
    @given(CHECKS[check_id].examples("cpu"))
    def run(example):
        seen.append(has_evs(example[0]))

    run()
    assert any(seen)


class _ReceivesAll(EngineModel):
    """The engine model declaring it receives every case: it serves an EVS video unmoved."""

    def unreceived(self, case: Case) -> str | None:
        return None


def test_a_target_that_does_not_say_it_receives_pruned_videos_is_given_none():
    """EVS is one engine's convention: a target keeping the default ``unreceived`` (the engine model, its
    mutants) is left without EVS cases, so they are no divergence of it; the reference is given them."""
    assert unreceived(EngineModel(), BETWEEN) == UNDECLARED_EVS
    assert unreceived(EngineModel(), dataclasses.replace(BETWEEN, requests=())) is None
    assert unreceived(ReferenceTarget(), BETWEEN) is None
    for check_id in CLASS_CHECKS:
        assert replay(CHECKS[check_id], EngineModel(), (BETWEEN, {})).status == SKIPPED  # and says why
        assert replay(CHECKS[check_id], _ReceivesAll(), (BETWEEN, {})).status == DIVERGENCE


@pytest.mark.network
def test_0_5_23_hands_its_own_evs_result_to_the_rules(sglang_release):
    target = sglang_release("0.5.23")
    assert target.describe()["evs_result"] == "the release's own"
    own = target.engine.modules[layout.EVS_MODULE].EVSEmbeddingResult
    assert target._rules.EVSEmbeddingResult is own
    assert issubclass(own, target.engine.modules[layout.CACHE_MODULE].EmbeddingResult)
    assert f"{layout.EVS_PACKAGE}.EVSEmbeddingResult" not in target.engine.record.shimmed


@pytest.mark.network
def test_a_lone_rules_file_keeps_the_stand_in(sglang_release):
    root = Path(sglang_release("0.5.23").describe()["source"])
    target = resolve(str(root / "sglang/srt/managers/mm_schedule.py"))
    assert target.describe()["evs_result"] == "harness stand-in"


@pytest.mark.network
def test_0_5_23_serves_text_where_its_own_evs_moved_a_row(sglang_release, seeded_copy):
    """The engine's bug, with its own EVS code: the skip reads the processor's offsets, which EVS has
    made stale, so a window between them holding a moved row is served as text (R3e: every window
    is served as the moved sequence). A copy without the skip serves it, and every EVS case."""
    rows, mask = sglang_release("0.5.23").embedding_and_mask(BETWEEN, Encoder(BETWEEN))
    assert rows is None and mask is None
    root = Path(sglang_release("0.5.23").describe()["source"])
    fixed = resolve(str(seeded_copy(root, [("sglang/srt/managers/mm_schedule.py", EVS_SKIP, "")])))
    assert fixed.describe()["evs_result"] == "the release's own"
    rows, mask = fixed.embedding_and_mask(BETWEEN, Encoder(BETWEEN))
    assert mask.reshape(-1).tolist() == [True] and rows.shape[0] == 1
    for check_id in CLASS_CHECKS:
        result = run_check(CHECKS[check_id], fixed, max_examples=60)
        assert result.status == PASSED, (check_id, result.reason)


_RECOMPUTED = "        offsets = BaseMultimodalProcessor.get_mm_items_offset("
"""0.5.23's EVSEmbeddingResult: the offsets of the moved sequence, recomputed after the move."""


@pytest.mark.network
def test_stale_offsets_in_the_evs_code_are_found_only_by_evs_cases(sglang_release, seeded_copy):
    """A seeded bug in the real EVS module (the offsets kept as the processor gave them after the
    move), in a copy without the known skip, so nothing else diverges: the check with its EVS cases
    filtered out passes, the check as it draws by default fails."""
    root = Path(sglang_release("0.5.23").describe()["source"])
    edits = [
        ("sglang/srt/managers/mm_schedule.py", EVS_SKIP, ""),
        (
            "sglang/srt/multimodal/evs/evs_module.py",
            _RECOMPUTED,
            "        _ = BaseMultimodalProcessor.get_mm_items_offset(",
        ),
    ]
    target = resolve(str(seeded_copy(root, edits)))
    check_id = "embed_mask.matches_reference"
    assert run_check(without_evs(check_id), target).status == PASSED, "without EVS cases it is missed"
    assert run_check(CHECKS[check_id], target, stop_at=(DIVERGENCE,)).status == DIVERGENCE
