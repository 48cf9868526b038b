"""LMDeploy behind the seam: R3p and chunk progress, by the rule and on the release.

The offline tests hold the reference of the two rules to hand-worked cases. The ``network`` ones
fetch LMDeploy 0.18.0 once (a 107 MB wheel; four files kept in the cache), pass its two checks and
the contract kit, and seed a single-line bug into a copy of each rule's file to show each check can
fail on the release's own code (through ``mmharness check --target COPY``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from mmharness import reference, testing
from mmharness.checks import all_checks
from mmharness.checks.outcome import DIVERGENCE
from mmharness.cli import main
from mmharness.exits import DIVERGED, PASSED_EXIT
from mmharness.model import Case, Item, Request
from mmharness.runner import PASSED, SKIPPED, run_check
from mmharness.targets import specs
from mmharness.targets.base import BLOCK_KEYS, CHUNK_PLAN, PREFIX_RESUME, Target

RELEASE = "0.18.0"
CHECKS = ("prefix.resume_on_boundary", "prefix.blocks_keyed_by_content", "chunks.progress")


def _request(*spans: tuple[int, int], seq_len: int = 12) -> Request:
    items = tuple(Item(spans=(span,), hash=k) for k, span in enumerate(spans))
    return Request(seq_len=seq_len, prefix_len=0, extend_len=seq_len, items=items)


# The rules, by hand ---------------------------------------------------------------------


def test_a_hit_resumes_on_a_block_boundary_outside_every_item():
    request = _request((2, 5), (6, 9))  # items at [2, 6) and [6, 10)
    assert reference.inside_items(request) == {3, 4, 5, 7, 8, 9}
    assert reference.prefix_resume_steps(request, 8, 2) == [0, 2, 6]
    assert reference.prefix_resume_steps(request, 11, 4) == [0]  # 4 and 8 lie inside items
    assert reference.prefix_resume_steps(request, 0, 4) == [0]


def test_chunk_progress_names_an_empty_chunk_a_cut_item_a_gap_and_a_short_tiling():
    request = _request((2, 5))
    assert reference.chunk_progress(request, 0, [(0, 2), (2, 6), (6, 12)]) is None
    assert "empty" in reference.chunk_progress(request, 0, [(0, 2), (2, 2)])
    assert "inside an item" in reference.chunk_progress(request, 0, [(0, 4), (4, 12)])
    assert "not where the previous one ended" in reference.chunk_progress(request, 0, [(0, 2), (3, 12)])
    assert "not at the prompt's end" in reference.chunk_progress(request, 0, [(0, 2), (2, 6)])
    assert reference.chunk_progress(request, 12, []) is None


def test_a_block_holds_each_position_s_row_or_text():
    request = _request((2, 5), seq_len=8)
    assert reference.block_rows(request, 0, 4) == (None, None, *(request.items[0].row(k) for k in (0, 1)))
    assert reference.block_rows(request, 1, 4)[2:] == (None, None)


def test_the_checks_are_registered_for_the_capabilities_an_engine_declares():
    checks = all_checks()
    assert checks["prefix.resume_on_boundary"].needs == {PREFIX_RESUME}
    assert checks["prefix.blocks_keyed_by_content"].needs == {BLOCK_KEYS}
    assert checks["chunks.progress"].needs == {CHUNK_PLAN}


class Careless(Target):
    """Resumes at the hit itself, keys blocks by their placeholder positions and cuts chunks of the
    budget, items or not: every rule broken."""

    name = "careless"
    capabilities = frozenset({PREFIX_RESUME, BLOCK_KEYS, CHUNK_PLAN})

    def describe(self) -> dict:
        return {"target": self.name}

    def prefix_resume_step(self, case, request, *, hit, block_size):
        return hit

    def prefix_block_key(self, case, request, *, block, block_size):
        """By placeholder positions alone, as before content hashes (#2789's class)."""
        positions = {p for item in case.requests[request].items for p in item.positions()}
        return tuple(p in positions for p in range(block * block_size, (block + 1) * block_size))

    def prefill_chunks(self, case, request, *, start, budget):
        seq_len = case.requests[request].seq_len
        return [(p, min(p + budget, seq_len)) for p in range(start, seq_len, budget)]


@pytest.mark.parametrize("check_id", CHECKS)
def test_each_check_fails_on_a_target_that_breaks_its_rule(check_id):
    result = run_check(all_checks()[check_id], Careless(), profile="ci")
    assert result.status == DIVERGENCE, result.status


# The release (network) --------------------------------------------------------------------


@pytest.fixture(scope="module")
def release_dir(harness_cache):
    from mmharness.engines.lmdeploy import adapter

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MMHARNESS_CACHE", str(harness_cache))
        yield Path(adapter.fetch(RELEASE))


def _check(capsys, target: str, check_id: str, findings: Path) -> tuple[int, str]:
    argv = ["check", "--target", target, "--checks", check_id, "--profile", "ci", "--findings", str(findings)]
    return main(argv), capsys.readouterr().out


@pytest.mark.network
def test_the_release_loads_its_four_files_and_declares_both_rules(release_dir):
    from mmharness.engines.lmdeploy import adapter

    target = adapter.from_path(str(release_dir), name=f"lmdeploy=={RELEASE}")
    described = target.describe()
    assert described["release"] == RELEASE and len(described["files"]) == 4
    assert target.capabilities == {PREFIX_RESUME, BLOCK_KEYS, CHUNK_PLAN}
    assert described["load_errors"] == {} and described["stubs_reached"] == []
    assert "SchedulerSequence.clamp_prefix_cache_match_step" in described["functions"]
    assert "plan_long_context_chunk(seq" in described["functions"]["plan_long_context_chunk"]


@pytest.mark.network
@pytest.mark.parametrize("check_id", CHECKS)
def test_the_release_passes_each_check(release_dir, check_id, capsys, tmp_path):
    code, out = _check(capsys, str(release_dir), check_id, tmp_path)
    assert code == PASSED_EXIT, out


SEEDED = {
    "prefix.resume_on_boundary": (
        "lmdeploy/pytorch/messages.py",
        "if start < next_step < end:",
        "if start < next_step < end - 1:",  # a hit on an item's last position is kept: inside the item
    ),
    "prefix.blocks_keyed_by_content": (
        "lmdeploy/pytorch/messages.py",
        "if len(prefix_cache.multimodal_spans) == 0:",
        "if True:",  # no block carries its items' identity: keys by tokens alone, as before PR #4618
    ),
    "chunks.progress": (
        "lmdeploy/pytorch/long_context.py",
        "if data.end > end:",
        "if data.end > end + 1:",  # an item ending one past the chunk is cut, not deferred
    ),
}


@pytest.mark.network
@pytest.mark.parametrize("check_id", CHECKS)
def test_a_seeded_single_line_bug_fails_its_check(release_dir, seeded_copy, check_id, capsys, tmp_path):
    copy = seeded_copy(release_dir, [SEEDED[check_id]])
    code, out = _check(capsys, str(copy), check_id, tmp_path / "findings")
    assert code == DIVERGED, out
    others = ",".join(c for c in CHECKS if c != check_id)
    assert _check(capsys, str(copy), others, tmp_path / "findings")[0] == PASSED_EXIT  # its rule's alone


@pytest.mark.network
def test_an_item_of_several_spans_is_left_out_as_never_received(release_dir):
    from mmharness.checks.resume import resume_on_boundary
    from mmharness.engines.lmdeploy import adapter

    target = adapter.from_path(str(release_dir))
    item = Item(spans=((1, 2), (4, 5)), hash=1)
    case = Case(requests=(Request(seq_len=8, prefix_len=0, extend_len=8, items=(item,)),))
    resume_on_boundary(target, case, {"hit": 5, "block_size": 1})  # would resume inside the item: not asked
    assert any("several spans" in note for note in target.notes())


@pytest.mark.network
def test_a_release_without_the_planner_skips_chunk_progress_saying_why(release_dir, tmp_path):
    from mmharness.engines.lmdeploy import adapter

    copy = tmp_path / "older"
    shutil.copytree(release_dir, copy)
    (copy / "lmdeploy/pytorch/long_context.py").unlink()
    target = adapter.from_path(str(copy))
    assert target.capabilities == {PREFIX_RESUME, BLOCK_KEYS}
    assert "long_context.py planner" in target.missing[CHUNK_PLAN]
    result = run_check(all_checks()["chunks.progress"], target, profile="ci")
    assert result.status == SKIPPED and "long_context.py planner" in result.reason


@pytest.mark.network
def test_the_engine_keeps_the_contract_on_a_path_spec(release_dir):
    """(``lmdeploy==X`` is held to the kit with the other shipped engines, tests/test_engine_contract.py.)"""
    engine = next(engine for engine in specs.engines() if engine.name == "lmdeploy")
    assert testing.check_engine(engine, str(release_dir), max_examples=10).status == PASSED
