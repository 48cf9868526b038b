"""vLLM behind the seam: spans as placeholder ranges, the stand-ins, and a release driven step by step.

The offline tests need no vLLM code. The ``network`` ones download vLLM 0.33.0
once (a 336 MB wheel; only the driver's files are kept in the cache) and pin
what the release atlas says of it, then seed bugs into copies of its files to
show that each check the target runs can fail on it; and 0.34.0 (about 240 MB),
whose only runner is model runner V2, where its drafter check runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from mmharness import reference
from mmharness import strategies as mst
from mmharness.checks import all_checks
from mmharness.checks.outcome import DIVERGENCE, HAZARD, Hazard
from mmharness.engines.vllm import driver
from mmharness.runner import PASSED, run_check
from mmharness.targets.base import (
    DRAFT_LOOKAHEAD,
    EMBED_AND_MASK,
    PREFILL,
    SCHEDULER_OPTIONS,
    SPLIT,
    WHOLE_ITEMS,
    HarnessGap,
    Target,
    paths_of,
)

CHECKS = all_checks()
RELEASE = "0.33.0"


@dataclass(frozen=True)
class Range:
    """The fields of vLLM's ``PlaceholderRange`` the mapping fills (half-open offset and length)."""

    offset: int
    length: int
    is_embed: Any = None


MODULES = driver.Modules(Range, object, object, object, object, None, None, None, has_is_embed=True)


@given(mst.cases(max_spans_per_item=4))
def test_spans_map_to_placeholder_ranges_and_back(case):
    for _, _, item in case.items():
        position = driver.placeholder(MODULES, item)
        assert position.offset == item.spans[0][0]
        assert position.offset + position.length == item.spans[-1][1] + 1  # half-open end
        marked = [p for s, e in driver.spans_of(position) for p in range(s, e + 1)]
        assert marked == list(item.positions())
        assert (position.is_embed is None) == (len(item.spans) == 1)


def test_an_item_of_several_spans_without_is_embed_is_a_harness_gap():
    from mmharness.model import Item

    item = Item(spans=((0, 1), (3, 3)), hash=1)
    old = driver.Modules(Range, object, object, object, object, None, None, None, has_is_embed=False)
    with pytest.raises(HarnessGap, match="is_embed"):
        driver.placeholder(old, item)


def test_a_stand_in_runs_the_engine_class_methods_and_names_state_it_lacks():
    class Engine:
        def doubled(self):
            return 2 * self.value

        def needs_more(self):
            return self.missing

    stand_in = driver.StandIn(Engine, "Engine", value=21)
    assert stand_in.doubled() == 42
    with pytest.raises(HarnessGap) as raised:
        stand_in.needs_more()
    assert raised.value.what == "Engine.missing"


# The step loop on stand-ins of vLLM's classes (offline) ----------------------------------

STUCK = reference.LIVELOCK
AT_CAP = "the windows are still unfinished at the cap on scheduler steps"


@dataclass(frozen=True)
class Feature:
    """The fields of vLLM's ``MultiModalFeatureSpec`` the driver fills."""

    data: Any
    modality: str
    identifier: str
    mm_position: Any
    mm_hash: str


class Manager:
    """An encoder cache manager that holds nothing: every step's inputs are encoded afresh."""

    def __init__(self, cache_size: int) -> None:
        self.cache_size = self.num_free_slots = self.num_freeable_slots = cache_size

    def free(self, request: Any) -> None:
        pass

    def get_freed_mm_hashes(self) -> list[str]:
        return []


class Runner:
    """A V1 gather that serves no rows (the step loop is under test, not the rows)."""

    def _gather_mm_embeddings(self, output: Any, shift_computed_tokens: int = 0) -> tuple[list, Any]:
        import torch

        return [], torch.zeros(output.total_num_scheduled_tokens, dtype=torch.bool)


def two_requests():
    from mmharness.model import Case, Item, Request

    def one(hash_: int) -> Request:
        return Request(seq_len=8, prefix_len=0, extend_len=8, items=(Item(spans=((2, 4),), hash=hash_),))

    return Case(requests=(one(1), one(2)))


def drive(answer: Any, *, manager: type = Manager, **options: Any) -> Any:
    """One call of the step driver (with ``options``), vLLM's scheduler scheduling ``answer(scheduler,
    request, tokens)`` tokens of a request; a hang fails the test instead of stopping it."""
    from mmharness.deadline import limit
    from mmharness.targets.base import Encoder

    class Scheduler:
        def _try_schedule_encoder_inputs(self, request, computed, tokens, budget, shift_computed_tokens=0):
            return [], answer(self, request, tokens), budget, [], []

        def _free_encoder_inputs(self, request: Any) -> None:
            pass

    modules = driver.Modules(Range, Feature, object, manager, Scheduler, Runner, None, None, True)
    case = two_requests()
    with limit(20):
        return driver.Driver(modules).run(case, Encoder(case), driver.EncoderCache(1 << 20), "v1", **options)


def test_a_step_after_a_rejection_that_advances_nothing_is_no_progress_not_a_hang():
    from mmharness.deadline import NoProgress

    def answer(scheduler, request, new_tokens):  # request 0 rejected; request 1 never scheduled
        if request.request_id.endswith("-0"):
            scheduler.encoder_cache_mismatch_reqs.add(request.request_id)
        return 0

    with pytest.raises(NoProgress) as stuck:
        drive(answer)
    assert stuck.value.signature == f"no progress: {STUCK}"
    assert "in step 2 for 1 unfinished request" in stuck.value.message
    assert stuck.value.actual == "request 1 at position 0 of its window's end 8"


def test_a_rejected_request_leaves_the_batch_and_the_others_finish():
    """Rejected with nothing scheduled: a plain refusal (a ``ValueError``, the clear refusal the checks
    accept), with no tokens of it run."""

    def answer(scheduler, request, new_tokens):
        if request.request_id.endswith("-0"):
            scheduler.encoder_cache_mismatch_reqs.add(request.request_id)
            return 0
        return min(new_tokens, 3)

    with pytest.raises(driver.Rejected, match="vLLM rejected request 0") as raised:
        drive(answer)
    assert isinstance(raised.value, ValueError)
    assert raised.value.scheduled == []
    assert raised.value.log[0].rejected == [0]


def test_a_request_scheduled_in_the_step_that_rejects_it_stops_the_call_there():
    """Its tokens must not run: the rejection carries the step, for the checks to hold to the rules."""

    def answer(scheduler, request, new_tokens):  # request 0 rejected, yet given two tokens
        if request.request_id.endswith("-0"):
            scheduler.encoder_cache_mismatch_reqs.add(request.request_id)
        return min(new_tokens, 2)

    with pytest.raises(driver.Rejected, match="vLLM rejected request 0") as raised:
        drive(answer)
    assert raised.value.scheduled == [(0, 0, 2)]  # (step, request, tokens)
    assert len(raised.value.log) == 1  # no step after it: the call stopped before its encode and gather
    assert raised.value.log[0].rejected == [0]


def test_a_stall_ends_the_call_with_the_waiting_request_unfinished_and_what_it_asked_for():
    """Items whole, nothing scheduled for request 0 ever: the driver stops at the first step that moves
    nothing (every later one would be the same) and reports it, for the checks to judge (R3l); it never
    passes the request off as done."""
    served = drive(lambda s, request, tokens: 0 if request.request_id.endswith("-0") else tokens,
                   whole_items=True, report_stalls=True)  # fmt: skip
    assert served.steps == [(1, 0, 8)]
    stall = served.log[-1]
    assert (stall.live, stall.scheduled, stall.asked) == ({0: 0}, {}, {0: 8})


def test_a_request_waiting_for_one_that_ends_goes_on_once_it_has_left():
    """Request 0 gets nothing while request 1 is in the batch; request 1 ends its window in the first
    step. The step after schedules nothing, so request 1 leaves (its window is done) and request 0 goes
    on: with items whole too, no request still waiting is ended with it."""
    left: list[str] = []

    def answer(scheduler, request, tokens):
        return tokens if request.request_id.endswith("-1") or left else 0

    class Leaving(Manager):
        def free(self, request: Any) -> None:
            left.append(request.request_id)

    served = drive(answer, whole_items=True, report_stalls=True, manager=Leaving)
    assert served.steps == [(1, 0, 8), (0, 0, 8)]


def test_steps_past_the_cap_are_no_progress():
    from mmharness.deadline import NoProgress

    def answer(scheduler, request, new_tokens):  # each step undoes the last: always moving, never done
        request.num_computed_tokens = 0
        return 1

    with pytest.raises(NoProgress) as stuck:
        drive(answer)
    assert stuck.value.signature == f"no progress: {AT_CAP}"
    assert "after 136 scheduler steps, the cap for this case (4 x (16 window tokens + 2 requests) + 64)" in (
        stuck.value.message
    )


def test_paths_default_first():
    class Plain(Target):
        capabilities = frozenset({PREFILL})

    class Named(Plain):
        paths = ("v1", "v2")

    assert paths_of(Plain()) == ("batched",)
    assert paths_of(Named()) == ("v1", "v2")


# A release, driven step by step (network) -----------------------------------------------


@pytest.fixture(scope="module")
def release_dir(harness_cache_module) -> Path:
    from mmharness.engines.vllm import adapter

    return Path(adapter.fetch(RELEASE))


@pytest.fixture(scope="module")
def harness_cache_module(harness_cache):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MMHARNESS_CACHE", str(harness_cache))
        yield harness_cache


def seeded(release_dir: Path, seeded_copy, edits):
    """vLLM 0.33.0 with single-line bugs seeded (``(file under vllm/, original, bug)``), as a target."""
    from mmharness.engines.vllm import adapter

    copy = seeded_copy(release_dir, [(f"vllm/{file}", original, bug) for file, original, bug in edits])
    return adapter.from_path(str(copy), name="seeded", release=RELEASE)


@pytest.fixture(scope="module")
def target(release_dir):
    from mmharness.engines.vllm import adapter

    return adapter.from_path(str(release_dir), name=f"vllm=={RELEASE}", release=RELEASE)


PASSING = [
    "prefill.matches_reference",
    "prefill.path_independent",
    "prefill.cache_independent",
    "prefill.encoder_calls",
    "prefill.schedule_concat",
    "prefill.permutation",
    "embed_mask.matches_reference",
    "grid.split_matches_reference",
]


@pytest.mark.network
def test_the_release_loads_with_both_gathers_and_no_stub_reached(target, release_dir):
    from mmharness.targets.specs import resolve

    assert target.paths == ("v1", "v2")
    options = {WHOLE_ITEMS, DRAFT_LOOKAHEAD, SCHEDULER_OPTIONS}
    assert target.capabilities == {PREFILL, EMBED_AND_MASK, SPLIT, *options}
    assert target.describe()["field_configs"] == ["grid_thws", "image_grid_thw"]
    assert target.describe()["load_errors"] == {}
    assert type(resolve(str(release_dir))) is type(target)  # a path spec finds vLLM behind the seam


@pytest.mark.network
@pytest.mark.parametrize("check_id", PASSING)
def test_the_release_follows_the_rules(target, check_id):
    result = run_check(CHECKS[check_id], target)
    assert result.status == PASSED, [f.signature for f in result.findings]
    assert target.engine.record.reached == []


@pytest.mark.network
def test_what_it_never_receives_is_left_out_and_noted(target):
    """EVS-pruned videos and interleaved modalities (SGLang's conventions) are drawn and left out, never a
    verdict, and the notes (the fork report) say so, so a pass is not read as covering them."""
    result = run_check(CHECKS["embed_mask.matches_reference"], target, max_examples=30)
    assert result.status == PASSED
    left = [note for note in target.notes() if "drawn and left out, so untested" in note]
    assert any(note.startswith("EVS-pruned videos") for note in left), target.notes()
    assert any(note.startswith("items of two modalities interleaved") for note in left), target.notes()


LOOKAHEAD_CUT = "a step cut an item to keep a drafter's look-ahead off the next item"


@pytest.mark.network
@pytest.mark.parametrize("check_id", ["prefill.whole_items", "prefill.draft_lookahead"])
def test_with_items_whole_and_a_drafter_it_cuts_the_item_before_the_next(target, check_id):
    """Its only finding under the drawn scheduler options: a hazard (docs/rules.md, "A second engine")."""
    result = run_check(CHECKS[check_id], target)
    assert result.status == HAZARD
    assert [f.signature for f in result.findings] == [LOOKAHEAD_CUT]


@pytest.mark.network
def test_its_cache_keeps_the_model_output_it_was_handed(target):
    result = run_check(CHECKS["prefill.stateful"], target)
    assert result.status == HAZARD
    assert any("kept a view of the encoder's output" in f.signature for f in result.findings)


# vLLM 0.34.0: the V1 runner gone, model runner V2 alone (network) ---------------------------

NEWEST = "0.34.0"


@pytest.fixture(scope="module")
def newest(vllm_release_dirs):
    from mmharness.engines.vllm import adapter

    return adapter.from_path(str(vllm_release_dirs(NEWEST)), name=f"vllm=={NEWEST}", release=NEWEST)


@pytest.mark.network
def test_without_the_v1_runner_the_drafter_runs_on_model_runner_v2(newest):
    """What the files define decides the capabilities: 0.34.0 has no GPU model runner file, and model
    runner V2's gather takes draft_lookahead, so R3d runs there, with 0.33.0's verdict."""
    assert (newest.paths, newest.draft_paths) == (("v2",), ("v2",))
    options = {WHOLE_ITEMS, DRAFT_LOOKAHEAD, SCHEDULER_OPTIONS}
    assert newest.capabilities == {PREFILL, EMBED_AND_MASK, SPLIT, *options}
    assert any("model runner V2's is the only path" in note for note in newest.notes())
    result = run_check(CHECKS["prefill.draft_lookahead"], newest)
    assert result.status == HAZARD
    assert [f.signature for f in result.findings] == [LOOKAHEAD_CUT]
    assert newest.engine.record.reached == []


@pytest.mark.network
def test_check_runs_the_drafter_check_on_0_34(harness_cache, tmp_path, capsys, monkeypatch):
    from mmharness.cli import main

    monkeypatch.setenv("MMHARNESS_CACHE", str(harness_cache))
    argv = ["check", "--target", f"vllm=={NEWEST}", "--checks", "prefill.draft_lookahead", "--no-shrink"]
    code = main(
        [*argv, "--max-examples", "10", "--json", str(tmp_path / "r.json"), "--findings", str(tmp_path)]
    )
    assert code == 0, capsys.readouterr().out
    import json

    (result,) = json.loads((tmp_path / "r.json").read_text())["results"]
    assert result["status"] in (PASSED, HAZARD), result


@pytest.mark.network
def test_against_0_33_the_comparison_goes_past_the_default_path_and_names_the_lost_v1_runner(
    harness_cache, tmp_path, capsys, monkeypatch, vllm_release_dirs
):
    """0.33.0 runs V1 by default, 0.34.0 has only V2: both run on V2, the changed default is one note,
    the V1 gather is lost coverage (exit 3 unless allowed), and the comparison finds changes behind the
    default, never a lone "calls" difference. A copy of 0.34.0 against 0.34.0 has nothing to say."""
    import json

    from mmharness.cli import main

    monkeypatch.setenv("MMHARNESS_CACHE", str(harness_cache))
    argv = [
        "check",
        "--target",
        f"vllm=={NEWEST}",
        "--checks",
        "prefill.draft_lookahead,prefill.matches_reference",
    ]
    argv += ["--max-examples", "20", "--no-shrink", "--findings", str(tmp_path / "f")]
    report = tmp_path / "r.json"
    assert main([*argv, "--against", "vllm==0.33.0", "--json", str(report)]) == 3
    out = capsys.readouterr().out
    assert "the default path changed (v1 on vllm==0.33.0, v2 here)" in out
    document = json.loads(report.read_text())
    lost = {entry["what"] for entry in document["lost"]}
    assert "GPUModelRunner._gather_mm_embeddings" in lost and all(
        e["of"] == "function" for e in document["lost"]
    )
    changes = [f for r in document["results"] for f in r["findings"]]
    assert changes and not any(f["signature"].startswith("neutral change (calls)") for f in changes)
    assert main([*argv, "--against", "vllm==0.33.0", "--allow-lost", "GPUModelRunner.*"]) == 0
    capsys.readouterr()
    tree = str(vllm_release_dirs(NEWEST))
    assert main([*argv, "--target", tree, "--against", f"vllm=={NEWEST}", "--json", str(report)]) == 0
    document = json.loads(report.read_text())
    assert document["lost"] == [] and not [f for r in document["results"] for f in r["findings"]]


def test_a_release_without_a_drafting_gather_says_so():
    class NoShift:
        def _gather_mm_embeddings(self, output: Any) -> tuple[list, Any]:
            raise AssertionError("not called")

    modules = driver.Modules(Range, Feature, object, Manager, object, NoShift, None, None, True)
    assert not driver.Driver(modules).drafts_on("v1")
    assert driver.Driver(
        driver.Modules(Range, Feature, object, Manager, object, Runner, None, None, True)
    ).drafts_on("v1")


V2_DRAFTER_UNSHIFTED = (
    "v1/worker/gpu/mm/encoder_runner.py",
    "num_computed_tokens = num_computed_tokens + draft_lookahead",
    "num_computed_tokens = num_computed_tokens + 0",
)
"""Model runner V2's drafter gather reads the step's own window, not the one moved one on."""
ROLLED_BACK_TO_NOTHING = (
    "v1/core/sched/scheduler.py",
    "0, start_pos - (num_computed_tokens + shift_computed_tokens)",
    "0, 0",
)
"""Items whole: a step that cannot finish the next item schedules nothing, not the text before it."""


@pytest.mark.network
def test_the_drafter_check_drives_model_runner_v2s_gather(vllm_release_dirs, seeded_copy):
    from mmharness.engines.vllm import adapter

    copy = seeded_copy(
        vllm_release_dirs(NEWEST), [(f"vllm/{file}", a, b) for file, a, b in [V2_DRAFTER_UNSHIFTED]]
    )
    mutant = adapter.from_path(str(copy), name="seeded", release=NEWEST)
    result = run_check(CHECKS["prefill.draft_lookahead"], mutant, stop_at=(DIVERGENCE,))
    assert result.status == DIVERGENCE, [f.signature for f in result.findings]


@pytest.mark.network
@pytest.mark.parametrize("version", [RELEASE, NEWEST])
def test_a_scheduler_rolling_a_request_back_to_nothing_fails_the_run_for_liveness(
    vllm_release_dirs, seeded_copy, tmp_path, capsys, version
):
    """A request whose next image does not fit is rolled back to no token, not to the text before the
    image, step after step: a livelock (R3l), which ending every request at the first empty step hid."""
    from mmharness.cli import main

    file, original, bug = ROLLED_BACK_TO_NOTHING
    copy = seeded_copy(vllm_release_dirs(version), [(f"vllm/{file}", original, bug)])
    argv = ["check", "--target", str(copy), "--checks", "prefill.whole_items", "--first-failure"]
    assert main([*argv, "--findings", str(tmp_path / "found")]) == 1
    out = capsys.readouterr().out
    assert f"no progress: {reference.LIVELOCK}" in out
    assert "though neither the token budget nor the encoder cache blocked it" in out


@pytest.mark.network
@pytest.mark.parametrize("version", [RELEASE, NEWEST])
def test_a_request_the_cache_cannot_take_while_another_holds_it_is_blocked_not_livelocked(
    vllm_release_dirs, version
):
    """Request 0 stops inside its first image for the drafter (the cut hazard) and holds it, its window
    too short for the next; request 1's image needs the cache's only room, which request 0 holds: both
    wait for good, each held back (the budget, the cache), so the step that schedules nothing is no
    livelock, and the check gives the cut hazard alone."""
    from mmharness.engines.vllm import adapter
    from mmharness.model import Case, Item, Request

    target = adapter.from_path(str(vllm_release_dirs(version)), name="vllm", release=version)
    first, second, other = Item(((1, 2),), hash=1), Item(((3, 3),), hash=3), Item(((0, 1),), hash=2)
    case = Case((Request(4, 0, 3, (first, second)), Request(2, 0, 2, (other,))), hidden=4)
    drawn = {
        "cache_size": 2,
        "encoder_budget": 0,
        "token_budget": 0,
        "other_path": 0,
        "whole": 1,
        "drafter": 1,
    }
    with pytest.raises(Hazard) as cut:
        CHECKS["prefill.whole_items"].property(target, case, drawn)
    assert cut.value.signature == LOOKAHEAD_CUT


# (what, file, original text, seeded bug, check that must fail, how)
SEEDED = [
    (
        "V1 gather: the window ends one token early",
        "v1/worker/gpu_model_runner.py",
        "num_computed_tokens - start_pos + num_scheduled_tokens,\n",
        "num_computed_tokens - start_pos + num_scheduled_tokens - 1,\n",
        "prefill.matches_reference",
        DIVERGENCE,
    ),
    (
        "V2 gather: an item's last placeholder is never served",
        "v1/worker/gpu/mm/encoder_runner.py",
        "end_idx = min(cur_query_end - start_pos, num_encoder_tokens)",
        "end_idx = min(cur_query_end - start_pos, num_encoder_tokens - 1)",
        "prefill.path_independent",
        DIVERGENCE,
    ),
    (
        "V1 gather: the mask ignores is_embed (a video's gaps marked)",
        "v1/worker/gpu_model_runner.py",
        "] |= is_embed",
        "] |= True",
        "embed_mask.matches_reference",
        DIVERGENCE,
    ),
    (
        "field config: each item's features start one patch late",
        "multimodal/inputs.py",
        "+ (slice(slice_idxs[i], slice_idxs[i + 1]),)",
        "+ (slice(slice_idxs[i] + 1, slice_idxs[i + 1]),)",
        "grid.split_matches_reference",
        DIVERGENCE,
    ),
    (
        "scheduler: a chunk starting at an item cuts it (the comparison before 0.33)",
        "v1/core/sched/scheduler.py",
        "and num_computed_tokens <= start_pos",
        "and num_computed_tokens < start_pos",
        "prefill.whole_items",
        DIVERGENCE,
    ),
    (
        "Qwen2-VL field config: image_embeds sized by patches times the merge, not divided by it twice",
        "model_executor/models/qwen2_vl.py",
        "image_pixel_grid_sizes // spatial_merge_size // spatial_merge_size",
        "image_pixel_grid_sizes // spatial_merge_size * spatial_merge_size",
        "grid.split_matches_reference",
        DIVERGENCE,
    ),
    (
        "scheduler: a request rejected for an identifier cached with another count still gets a token",
        "v1/core/sched/scheduler.py",
        "                ):\n                    return [], 0, encoder_compute_budget, [], []",
        "                ):\n                    return [], 1, encoder_compute_budget, [], []",
        "prefill.whole_items",
        DIVERGENCE,
    ),
    (
        "cache manager: a cached entry is never hit",
        "v1/core/encoder_cache_manager.py",
        "        if mm_hash not in self.cached:\n            return False",
        "        if True:\n            return False",
        "prefill.encoder_calls",
        HAZARD,
    ),
    (
        "scheduler: an item is encoded for a window that holds none of its embeddings",
        "v1/core/sched/scheduler.py",
        "            if curr_embeds_end - curr_embeds_start == 0:\n                continue",
        "            if False:\n                continue",
        "prefill.encoder_calls",
        HAZARD,
    ),
    (
        "scheduler: an identifier's other embedding count is not rejected",
        "v1/core/sched/scheduler.py",
        "        if cached_num_encoder_embeds == requested_num_encoder_embeds:\n            return False",
        "        if True:\n            return False",
        "prefill.matches_reference",
        HAZARD,
    ),
]


# A bug seeded in two places at once: (what, [(file, original, bug), ...], check, how).
SEEDED_TWICE = [
    (
        "scheduler and gather: the drafter's look-ahead neither encoded for nor fallen back from",
        [
            (
                "v1/core/sched/scheduler.py",
                "end_idx_rel = min(num_encoder_tokens, encoder_window_end - start_pos)",
                "end_idx_rel = min(num_encoder_tokens, num_computed_tokens + num_new_tokens - start_pos)",
            ),
            (
                "v1/worker/gpu_model_runner.py",
                "                        >= req_state.num_computed_tokens + num_scheduled_tokens\n",
                "                        >= req_state.num_computed_tokens + num_scheduled_tokens + 1\n",
            ),
        ],
        "prefill.draft_lookahead",
        DIVERGENCE,
    ),
]


@pytest.mark.network
@pytest.mark.parametrize(
    ("edits", "check_id", "status"),
    [pytest.param([row[1:4]], *row[4:], id=row[0]) for row in SEEDED]
    + [pytest.param(*row[1:], id=row[0]) for row in SEEDED_TWICE],
)
def test_each_check_fails_on_a_seeded_bug(release_dir, seeded_copy, edits, check_id, status):
    mutant = seeded(release_dir, seeded_copy, edits)
    # A divergence is what it is however early the search stops; a hazard only if none follows.
    result = run_check(CHECKS[check_id], mutant, stop_at=(DIVERGENCE,) if status == DIVERGENCE else ())
    assert result.status == status, [f.signature for f in result.findings]


# Bugs that stop a release from finishing: (what, file, original text, seeded bug, signature).
SEEDED_STUCK = [
    (
        "scheduler: no token of a request with an item is ever scheduled",
        "v1/core/sched/scheduler.py",
        "        return (\n            encoder_inputs_to_schedule,\n            num_new_tokens,\n",
        "        return (\n            encoder_inputs_to_schedule,\n            0,\n",
        f"no progress: {STUCK}",
    ),
    (
        "cache manager: a lookup of an item not cached never returns",
        "v1/core/encoder_cache_manager.py",
        "        # Not cached at all\n        if mm_hash not in self.cached:\n",
        "        # Not cached at all\n        while mm_hash not in self.cached:\n            pass\n"
        "        if mm_hash not in self.cached:\n",
        "did not finish in N s",
    ),
]


@pytest.mark.network
@pytest.mark.parametrize(
    ("file", "original", "bug", "signature"), [pytest.param(*row[1:], id=row[0]) for row in SEEDED_STUCK]
)
def test_a_release_that_cannot_finish_gives_its_verdict_not_a_hang(
    release_dir, seeded_copy, monkeypatch, file, original, bug, signature
):
    import time

    from mmharness import runner

    mutant = seeded(release_dir, seeded_copy, [(file, original, bug)])
    monkeypatch.setattr(runner, "HUNG_SECONDS", 3.0)  # runs that hit the deadline: 6 of 0.5 s
    start = time.monotonic()
    result = run_check(CHECKS["prefill.matches_reference"], mutant, deadline=0.5, max_examples=30)
    assert time.monotonic() - start < 60
    assert result.status == DIVERGENCE
    assert [f.signature for f in result.findings if f.kind == DIVERGENCE] == [signature]  # collisions: hazard


@pytest.mark.fuzz
@pytest.mark.network
def test_the_split_fuzz_target_refuses_with_value_errors_only(target, tmp_path, monkeypatch):
    import random

    from mmharness.engines.vllm import fuzz

    monkeypatch.setenv("MMHARNESS_FINDINGS", str(tmp_path))
    test_one_input = fuzz.entry(target)
    rng = random.Random(0)
    for _ in range(300):
        test_one_input(bytes(rng.randrange(256) for _ in range(rng.randrange(64))))
    assert list(tmp_path.iterdir()) == []  # nothing unexpected escaped, so nothing was saved
