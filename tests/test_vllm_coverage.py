"""vLLM's excluded branches (``harness/engines/vllm/excluded.py``): each one is a branch of its function
in the release it was read in, and each is dropped where a release no longer holds what it rests on.

The offline tests hold the claims' checks to small sources; the ``network`` ones
load vLLM 0.33.0 (the release every claim was read in) and seeded copies of it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mmharness import reach
from mmharness.engines.vllm import excluded, layout

RELEASE = "0.33.0"


def test_is_list_of_calls_must_all_check_all():
    """The claim that no loaded caller asks for ``check="first"`` reads every call, and a call it
    cannot read (a nested call) counts against it."""
    checks_all = {layout.INPUTS: 'if is_list_of(batch, torch.Tensor, check="all"):\n    pass'}
    assert excluded.every_is_list_of_call_checks_all(checks_all)
    default = checks_all | {layout.UTILS: "ok = is_list_of(items, int)"}
    assert not excluded.every_is_list_of_call_checks_all(default)
    nested = {layout.INPUTS: 'is_list_of(list(batch), int, check="all")'}
    assert not excluded.every_is_list_of_call_checks_all(nested)
    own = {excluded.COLLECTION_UTILS: "def is_list_of(value, typ, *, check='first'):\n    ..."}
    assert excluded.every_is_list_of_call_checks_all(own)


def test_a_claim_holds_only_where_its_callers_source_is():
    claim = next(c for c in excluded.CLAIMS if c.elsewhere and c.verify is None)
    sources: dict[str, str] = {}
    for module, text in claim.elsewhere:
        sources[module] = sources.get(module, "") + "\n" + text
    assert claim.holds(sources)
    module, text = claim.elsewhere[0]
    assert not claim.holds(sources | {module: sources[module].replace(text, "pass")})
    assert claim.branch not in excluded.holding({})


# vLLM 0.33.0 (network) ------------------------------------------------------------------------


def _target(root: Path):
    from mmharness.engines.vllm import adapter

    return adapter.from_path(str(root), name=f"vllm=={RELEASE}", release=RELEASE)


@pytest.mark.network
def test_every_claim_holds_in_the_release_it_was_read_in(vllm_release_dir):
    """Each excluded branch is a condition of its function whose ``needs`` is in that file, and the
    target offers every one (a typo would exclude nothing, silently)."""
    target = _target(vllm_release_dir)
    assert set(target.excluded_branches()) == {claim.branch for claim in excluded.CLAIMS}
    sources = [Path(f).read_text() for f in reach.engine_files(target)]
    unmatched = []
    for claim in excluded.CLAIMS:
        branch, wanted = claim.branch, "".join(claim.branch.condition.split())
        if not any(
            branch.holds_in("".join(source.split()))
            and (function := reach.functions_of(source).get(branch.function)) is not None
            and any(
                "".join(text.split()) == wanted
                for line, (text, _) in reach.conditions_of(source).items()
                if line in function.own
            )
            for source in sources
        ):
            unmatched.append(f"{branch.function}: {branch.condition}")
    assert unmatched == []


@pytest.mark.network
def test_a_release_without_the_callers_guard_keeps_the_branches_counted(vllm_release_dir, seeded_copy):
    """A copy whose scheduler no longer cuts a window before an item it cannot encode, and whose
    inputs.py asks ``is_list_of`` for its first element only, loses the claims resting on them."""
    copy = seeded_copy(
        vllm_release_dir,
        [
            (
                "vllm/v1/core/sched/scheduler.py",
                "num_new_tokens = min(\n" + " " * 24 + "num_new_tokens, start_pos - num_computed_tokens\n",
                "num_new_tokens = max(\n" + " " * 24 + "num_new_tokens, start_pos - num_computed_tokens\n",
            ),
            (
                "vllm/multimodal/inputs.py",
                'if not is_list_of(self.slices, slice, check="all"):',
                "if not is_list_of(self.slices, slice):",
            ),
        ],
    )
    kept = set(_target(copy).excluded_branches())
    dropped = sorted(
        f"{claim.branch.function}: {claim.branch.condition}"
        for claim in excluded.CLAIMS
        if claim.branch not in kept
    )
    assert dropped == [
        "EncoderRunner.gather_mm_embeddings: start_pos + draft_lookahead >= cur_query_end",
        "GPUModelRunner._gather_mm_embeddings:"
        " start_pos >= req_state.num_computed_tokens + num_scheduled_tokens",
        'is_list_of: check == "first"',
        "is_list_of: not isinstance(value, list)",
    ]


@pytest.mark.network
def test_no_excluded_branch_is_taken_and_each_is_listed_with_why(harness_cache, tmp_path, monkeypatch):
    """A short coverage run on the release: every exclusion applies to a branch the run did not take
    (a taken one would be a false claim, and would not be listed), each listed with its why."""
    from mmharness.cli import main

    monkeypatch.setenv("MMHARNESS_CACHE", str(harness_cache))
    monkeypatch.chdir(tmp_path)
    report = tmp_path / "report.json"
    checks = "prefill.path_independent,prefill.draft_lookahead,grid.split_matches_reference,prefill.stateful"
    argv = ["check", "--target", f"vllm=={RELEASE}", "--checks", checks, "--max-examples", "8"]
    main([*argv, "--coverage", "--json", str(report)])
    files = json.loads(report.read_text())["coverage"]["files"]
    listed = {
        (name, entry["source"])
        for per_file in files.values()
        for name, function in per_file["functions"].items()
        for entry in function["unreached_branches"]
        if entry["reason"] in reach.EXCLUSIONS and entry.get("why")
    }
    assert {(c.branch.function, c.branch.condition) for c in excluded.CLAIMS} <= listed
