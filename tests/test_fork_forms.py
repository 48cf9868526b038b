"""Forks' call forms, distributed calls and helpers: called by parameter name, served one rank, ruled.

A fork of 0.5.23 is built at test time (``network``: the cached release): its
chunked prefill takes the embedding cache and ``get_embedding_chunk`` as
parameters (a form no release has), all-reduces a cache-miss flag through
``get_tp_group()`` and ``torch.distributed``, compares the world size, and
materialises the encoder's output with a helper from a module the harness
does not load. The prefill checks must run on it and pass (its semantics are
the release's), a bug seeded into it must still be found (the call is not
skipped), and the notes must name the collectives reached and the path for
more ranks left untested. The offline tests pin the vocabulary, the rules and
that a helper defined in a loaded file runs from that file.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from mmharness.checks import all_checks
from mmharness.checks.outcome import COULD_NOT_TEST, DIVERGENCE, HAZARD
from mmharness.engines.sglang import forms, shims
from mmharness.engines.sglang.adapter import from_path
from mmharness.model import Case, Item, Request
from mmharness.runner import PASSED, SKIPPED, run_check
from mmharness.targets import base
from mmharness.targets.base import Encoder
from mmharness.targets.stubs import Record

CHECKS = all_checks()
MANAGERS = "sglang/srt/managers/mm_schedule.py"
TWO_IMAGES = Case(
    (Request(3, 0, 3, (Item(((0, 1),), hash=1),)), Request(3, 0, 3, (Item(((1, 2),), hash=2),)))
)


# The vocabulary (offline) ----------------------------------------------------------------------


def _function(signature: str, body: str = "return dict(locals())"):
    namespace: dict = {}
    exec(f"def f({signature}):\n    {body}\n", namespace)
    return namespace["f"]


def test_every_known_form_is_nameable_from_what_the_harness_supplies():
    for name, known in forms.FORMS.items():
        for form in known:
            assert set(form.params) <= forms.SUPPLIED[name], (name, form)
    assert set().union(*forms.SUPPLIED.values()) <= set(forms.VOCABULARY)


def test_a_form_outside_the_table_but_nameable_is_called_and_noted():
    fn = _function(
        "data_embedding_func, embedding_items, items_size, prefix_length, extend_length,"
        " items_offset_list, input_ids, embedding_cache, get_embedding_chunk, *, device"
    )
    found = forms.find("_get_chunked_prefill_embedding", fn)
    assert found.form is None and found.callable and found.problem is None
    assert "not a known release form: called by parameter names" in found.describe()
    assert (
        found.note.startswith("_get_chunked_prefill_embedding(") and "called by parameter names" in found.note
    )
    values = {p: p.upper() for p in forms.SUPPLIED["_get_chunked_prefill_embedding"]}
    assert found.call(values)["get_embedding_chunk"] == "GET_EMBEDDING_CHUNK"
    assert found.call(values)["device"] == "DEVICE"  # keyword-only: named too


def test_each_parameter_the_harness_cannot_supply_is_named():
    fn = _function("data_embedding_func, embedding_items, tp_rank_hint, chunk_budget, extend_length")
    found = forms.find("_get_chunked_prefill_embedding", fn)
    assert not found.callable and found.unsupplied == ("tp_rank_hint", "chunk_budget")
    assert "cannot supply tp_rank_hint, chunk_budget" in found.problem
    assert found.note == found.problem
    assert "UNKNOWN FORM: not called (cannot supply tp_rank_hint, chunk_budget)" in found.describe()


def test_a_name_the_load_lacks_is_not_supplied():
    fn = _function("items, embedding_cache")
    found = forms.find(
        "_get_precomputed_embedding", fn, forms.SUPPLIED["_get_precomputed_embedding"] - {"embedding_cache"}
    )
    assert found.unsupplied == ("embedding_cache",)


# Rules (offline) ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("materialize_features_on_device", shims.MOVES),
        ("materialise_feature", shims.MOVES),
        ("features_to_device", shims.MOVES),
        ("move_items", shims.MOVES),
        ("start_async_transfer", shims.MOVES),
        ("log_cache_miss", shims.LOGGING),
        ("update_encoder_metrics", shims.LOGGING),
        ("record_hit", shims.LOGGING),
        ("trace_slice", shims.LOGGING),
        ("print_info_once", shims.LOGGING),
        ("get_transfer_engine", None),  # a query: what it returns matters
        ("is_materialized", None),
        ("MooncakeTransferEngine", None),  # a class, never a function's stand-in
        ("sum_grid_patches", None),  # a computation: a stub, could not test where reached
    ],
)
def test_rules_serve_moves_and_logging_by_name_only(name, rule):
    assert shims.rule_for(name) is rule


def test_a_move_is_the_identity_and_a_log_a_no_op():
    served = shims.SGLangShims(Record(), None)
    marker = object()
    assert served.shim_for("materialize_features_on_device")(marker, "cuda:0") is marker
    assert served.shim_for("log_cache_miss")(marker) is None
    assert served.ruled == {
        "materialize_features_on_device": "moves on this host",
        "log_cache_miss": "logging and metrics",
    }


LOADED_HELPER = """
import torch

from sglang.srt.managers.mm_schedule import materialize_twice
from sglang.srt.multimodal.transport import materialize_on_host


def materialize_local(embedding):
    return embedding * 3


def get_embedding_and_mask(data_embedding_func, embedding_items, placeholder_tensor, input_ids):
    rows = data_embedding_func(embedding_items)
    rows = materialize_on_host(materialize_twice(materialize_local(rows)))
    return rows, torch.isin(input_ids, placeholder_tensor)
"""
LOADED_SCHEDULE = """
def materialize_twice(embedding):
    return embedding * 2
"""
PLAIN = """
import torch


def get_embedding_and_mask(data_embedding_func, embedding_items, placeholder_tensor, input_ids):
    return data_embedding_func(embedding_items), torch.isin(input_ids, placeholder_tensor)
"""


def _tree(root: Path, utils: str, schedule: str | None = None) -> Path:
    managers = root / "sglang" / "srt" / "managers"
    managers.mkdir(parents=True)
    (managers / "mm_utils.py").write_text(textwrap.dedent(utils))
    if schedule is not None:
        (managers / "mm_schedule.py").write_text(textwrap.dedent(schedule))
    return root


def test_a_helper_in_a_loaded_file_runs_from_it_never_from_a_rule(tmp_path):
    """Only names read from stub modules are ruled: a ``materialize_*`` defined in a loaded file, or
    imported from one, runs as the engine wrote it (x3, x2); one from an unloaded module is the identity."""
    import torch

    case = Case((Request(3, 0, 3, (Item(((0, 1),), hash=1),)),))
    target = from_path(str(_tree(tmp_path / "fork", LOADED_HELPER, LOADED_SCHEDULE)))
    rows, _ = target.embedding_and_mask(case, Encoder(case))
    plain, _ = from_path(str(_tree(tmp_path / "plain", PLAIN))).embedding_and_mask(case, Encoder(case))
    assert torch.equal(rows, plain * 6)
    described = target.describe()
    assert described["shims"] == ["sglang.srt.multimodal.transport.materialize_on_host"]
    assert not any("materialize_twice" in n or "materialize_local" in n for n in described["stubbed"])
    served = "served by a rule, not by the engine's code: materialize_on_host (moves on this host)"
    assert served in target.notes()


# A fork of 0.5.23 (network) -------------------------------------------------------------------

FORK_EDITS = [
    (
        MANAGERS,
        "from sglang.srt.runtime_context import get_schedule\n",
        "from sglang.srt.runtime_context import get_schedule\n"
        "from sglang.srt.distributed import get_tensor_model_parallel_world_size, get_tp_group\n"
        "from sglang.srt.multimodal.transport.device import materialize_features_on_device\n",
    ),
    (  # the prefill takes the cache and the chunk function ...
        MANAGERS,
        "    input_ids: torch.Tensor,\n) -> tuple[torch.Tensor | None, torch.Tensor]:\n",
        "    input_ids: torch.Tensor,\n    embedding_cache: MultiModalStaticCache,\n"
        "    get_embedding_chunk: Callable,\n) -> tuple[torch.Tensor | None, torch.Tensor]:\n",
    ),
    (  # ... and hands them to its full path, which uses them in place of the module's
        MANAGERS,
        "    input_ids: torch.Tensor,\n    device: torch.device,\n"
        ") -> Tuple[Optional[torch.Tensor], torch.Tensor]:\n",
        "    input_ids: torch.Tensor,\n    device: torch.device,\n"
        "    embedding_cache: MultiModalStaticCache,\n    get_embedding_chunk: Callable,\n"
        ") -> Tuple[Optional[torch.Tensor], torch.Tensor]:\n",
    ),
    (
        MANAGERS,
        "            input_ids,\n            device,\n        )\n        if chunk_embedding is not None:\n",
        "            input_ids,\n            device,\n"
        "            embedding_cache,\n            get_embedding_chunk,\n"
        "        )\n        if chunk_embedding is not None:\n",
    ),
    (  # cache-miss flags all-reduced across tensor-parallel ranks before encoding
        MANAGERS,
        "    # Phase 1b: single ViT call for all unique cache misses\n",
        "    miss_flag = torch.tensor([1 if unique_misses else 0], device=device)\n"
        "    miss_flag = get_tp_group().all_reduce(miss_flag)\n"
        "    torch.distributed.all_reduce(miss_flag, group=get_tp_group().cpu_group)\n"
        "    if get_tensor_model_parallel_world_size() > 1 and int(miss_flag.item()) == 0:\n"
        "        unique_misses = {}\n"
        "    # Phase 1b: single ViT call for all unique cache misses\n",
    ),
    (
        MANAGERS,
        "        all_miss_embedding = data_embedding_func(miss_items)\n",
        "        all_miss_embedding = materialize_features_on_device(\n"
        "            data_embedding_func(miss_items), device\n        )\n",
    ),
]
SEEDED_BUG = (
    MANAGERS,
    "        return emb[local_start : min(end + 1, chunk_start + chunk_len) - start]\n",
    "        return emb[: min(end + 1, chunk_start + chunk_len) - start - local_start]\n",
)
"""A window's slice of a partly prefilled image taken from the image's first rows."""


@pytest.fixture
def fork(sglang_release, seeded_copy):
    def make(*more):
        root = Path(sglang_release("0.5.23").describe()["source"])
        return from_path(str(seeded_copy(root, [*FORK_EDITS, *more])), name="fork", release="0.5.23-fork")

    return make


@pytest.mark.network
def test_a_fork_form_is_called_and_its_checks_pass(fork):
    target = fork()
    found = target.functions.found["_get_chunked_prefill_embedding"]
    assert found.form is None and found.callable
    assert base.PREFILL in target.capabilities
    notes = target.notes()
    assert any("not a known release form: called by parameter names" in n for n in notes), notes
    for check_id in ("prefill.matches_reference", "prefill.cache_independent"):
        # hazards unshrunk (the search ends early only at a divergence or a could-not-test, which fail here)
        result = run_check(CHECKS[check_id], target, max_examples=30, stop_at=(DIVERGENCE, COULD_NOT_TEST))
        # As the release: no divergence, nothing it could not test (a hash collision is its hazard).
        assert result.status in (PASSED, HAZARD), (check_id, result.reason)
        assert all(f.kind == HAZARD for f in result.findings), (check_id, result.reason)
    notes = target.notes()
    assert any("get_tp_group().all_reduce" in n and "torch.distributed.all_reduce" in n for n in notes), notes
    assert any(
        "a path for more than one rank is untested: _batch_encode_per_image_misses" in n
        and "get_tensor_model_parallel_world_size()" in n
        for n in notes
    ), notes
    assert (
        "sglang.srt.multimodal.transport.device.materialize_features_on_device" in target.describe()["shims"]
    )


@pytest.mark.network
def test_a_bug_seeded_into_the_fork_is_found(fork):
    target = fork(SEEDED_BUG)
    result = run_check(CHECKS["prefill.matches_reference"], target, stop_at=(DIVERGENCE,))
    assert result.status == DIVERGENCE, result.reason


@pytest.mark.network
def test_a_parameter_the_harness_cannot_name_is_a_note_and_a_skip(fork):
    unnameable = (
        MANAGERS,
        "    get_embedding_chunk: Callable,\n) -> tuple[torch.Tensor | None, torch.Tensor]:\n",
        "    get_embedding_chunk: Callable,\n    vit_token_budget: int,\n"
        ") -> tuple[torch.Tensor | None, torch.Tensor]:\n",
    )
    target = fork(unnameable)
    assert base.PREFILL not in target.capabilities
    assert "cannot supply vit_token_budget" in target.missing[base.PREFILL]
    assert any("cannot supply vit_token_budget" in n for n in target.notes())
    result = run_check(CHECKS["prefill.matches_reference"], target)
    assert result.status == SKIPPED and "vit_token_budget" in result.reason


@pytest.mark.network
def test_the_release_itself_reaches_no_collective(sglang_release):
    target = sglang_release("0.5.23")
    target.chunked_prefill_embedding(TWO_IMAGES, Encoder(TWO_IMAGES))
    assert not any("collectives reached" in n for n in target.notes())


@pytest.mark.network
def test_check_ends_with_what_the_fork_left_untested_from_every_worker(fork, tmp_path, capsys):
    """The fork report: collectives the code reached in the worker processes, and the checks skipped,
    each with its reason, after the results and in the JSON report."""
    from mmharness.cli import main

    path = fork().describe()["source"]
    report = tmp_path / "report.json"
    code = main(
        [
            *("check", "--target", path, "-n", "2", "--max-examples", "5"),
            *("--checks", "prefill.matches_reference,prefill.whole_items"),
            *("--findings", str(tmp_path / "findings"), "--json", str(report)),
        ]
    )
    out = capsys.readouterr().out
    assert code in (0, 1), out
    untested = out.split("untested in ", 1)[1]
    assert (
        "reached during the run: collectives reached" in untested and "get_tp_group().all_reduce" in untested
    )
    assert "skipped (prefill.whole_items)" in untested
    listed = json.loads(report.read_text())["untested"]
    assert any("collectives reached" in line for line in listed) and any("skipped" in line for line in listed)
