"""The validator names the offending field of every malformed case."""

from __future__ import annotations

import subprocess
import sys

import pytest
from mmharness import tensors
from mmharness.model import Case, CaseError, Item, Request, validate


def one(*items: Item, seq_len: int = 10, prefix: int = 0, extend: int = 10) -> Case:
    return Case(requests=(Request(seq_len, prefix, extend, items),))


@pytest.mark.parametrize(
    ("case", "path", "words"),
    [
        (one(Item(((3, 2),), 1)), "requests[0].items[0].spans[0]", "end 2 < start 3"),
        (one(Item(((5, 10),), 1)), "requests[0].items[0].spans[0]", "outside [0, 10)"),
        (one(Item(((-1, 2),), 1)), "requests[0].items[0].spans[0]", "outside"),
        (
            one(Item(((4, 5),), 1), Item(((1, 2),), 2)),
            "requests[0].items[1].spans[0]",
            "increasing",
        ),
        (one(Item(((1, 5),), 1), Item(((5, 6),), 2)), "requests[0].items[1].spans[0]", "disjoint"),
        (one(prefix=-1, extend=3), "requests[0].prefix_len", "negative"),
        (one(prefix=0, extend=-2), "requests[0].extend_len", "negative"),
        (one(prefix=4, extend=7), "requests[0].extend_len", "past seq_len 10"),
        (one(Item(((1, 2),), 1, rows=3)), "requests[0].items[0].rows", "3 embedding rows for 2"),
        (one(Item((), 1)), "requests[0].items[0].spans", "at least one span"),
        (one(Item(((1, 2),), 1, grid=((1, 0, 2),))), "requests[0].items[0].grid[0]", "positive"),
        (Case(requests=(), dtype="float64"), "dtype", "float64"),
        (Case(requests=(), ndim=4), "ndim", "2 or 3"),
    ],
)
def test_validator_names_the_field(case, path, words):
    with pytest.raises(CaseError) as raised:
        validate(case)
    assert raised.value.path == path
    assert str(raised.value).startswith(f"{path}: ")
    assert words in str(raised.value)


def test_well_formed_case_passes():
    validate(one(Item(((0, 1),), 1), Item(((2, 2), (5, 9)), 2, modality="video"), prefix=3, extend=7))


def test_rows_are_deterministic_and_exact_in_every_dtype():
    import torch

    for dtype in ("float32", "float16", "bfloat16"):
        case = Case(requests=(), hidden=6, dtype=dtype)
        a = tensors.block(42, 5, case)
        assert torch.equal(a, tensors.block(42, 5, case))
        assert torch.equal(a.float(), tensors.block(42, 5, Case(requests=(), hidden=6)))
        assert not torch.equal(a, tensors.block(43, 5, case))


def test_importing_the_package_does_not_import_torch(tmp_path):
    code = (
        "import sys, mmharness, mmharness.model, mmharness.reference, mmharness.checks, mmharness.cli,"
        " mmharness.payload, mmharness.targets.specs, mmharness.strategies, mmharness.api;"
        "mmharness.checks.all_checks();"
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path)


@pytest.mark.parametrize("name", ["harness", "strategies"])
def test_only_mmharness_is_installed_at_top_level(tmp_path, name):
    """The repository's directories are not importable names of their own (outside the checkout)."""
    code = f"import importlib.util; assert importlib.util.find_spec({name!r}) is None"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path)


def test_an_item_on_an_unknown_device_is_named():
    case = Case((Request(2, 0, 2, (Item(((0, 0),), 1, device="tpu"),)),))
    with pytest.raises(CaseError, match=r"requests\[0\].items\[0\].device: must be one of cpu, cuda"):
        validate(case)


def test_a_cases_verdict_is_its_own_whatever_was_asked_before():
    """``validate`` answers once per case object: a copy with a field replaced, a pickled copy and a
    copy under another name each get the answer for their own fields."""
    import pickle
    from dataclasses import replace

    from mmharness.model import is_well_formed

    bad = Case(requests=(Request(seq_len=2, prefix_len=0, extend_len=3, items=()),))
    with pytest.raises(CaseError, match=r"requests\[0\]\.extend_len"):
        validate(bad)
    with pytest.raises(CaseError, match=r"requests\[0\]\.extend_len"):
        validate(bad)  # asked again: the same answer
    good = replace(bad, requests=(Request(seq_len=2, prefix_len=0, extend_len=2, items=()),))
    validate(good)
    assert is_well_formed(good) and not is_well_formed(bad)
    assert not is_well_formed(pickle.loads(pickle.dumps(bad))) and is_well_formed(
        pickle.loads(pickle.dumps(good))
    )
    assert bad == Case(requests=bad.requests) and hash(bad) == hash(Case(requests=bad.requests))
