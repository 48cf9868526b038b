"""The table of SGLang call forms: every known form is recognised and called with its own arguments.

Each form gets a small synthetic function of exactly that signature (plus, for
half of them, a defaulted parameter of a fork's kind); the adapter must match
it by parameter names and call it with those names. A function of a form not
in the table is reported with the forms that are known, never called.
"""

from __future__ import annotations

import textwrap

import pytest
from mmharness.engines.sglang import forms
from mmharness.engines.sglang.adapter import from_path
from mmharness.targets import base

CASES = [(name, form) for name, known in forms.FORMS.items() for form in known]


def _function(params: tuple[str, ...], extra: str = ""):
    """A function with these parameters that returns the arguments it got."""
    signature = ", ".join([*params, *([extra] if extra else [])])
    namespace: dict = {}
    exec(f"def f({signature}):\n    return dict(locals())\n", namespace)
    return namespace["f"]


@pytest.mark.parametrize(("name", "form"), CASES, ids=[f"{n}{f.params}" for n, f in CASES])
def test_each_known_form_is_matched_and_called_by_its_names(name, form):
    fn = _function(form.params, "device=None" if len(form.params) % 2 else "")
    found = forms.find(name, fn)
    assert found.form == form and found.problem is None
    values = {p: f"value of {p}" for p in (*form.params, "max_size", "unrelated")}
    got = found.call(values, unbound_self="the model")
    wanted = {p: values[p] for p in form.params if p != "self"}
    if "self" in form.params:
        wanted["self"] = "the model"
    extra = {"device": None} if len(form.params) % 2 else {}
    assert got == {**wanted, **extra}


def test_a_defaulted_size_is_passed_when_the_harness_has_one():
    found = forms.find("init_mm_embedding_cache", _function((), "max_size=0"))
    assert found.call({"max_size": 123}) == {"max_size": 123}


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("_get_precomputed_embedding", ("mm_items", "items_size", "prefix_length")),
        ("get_embedding_chunk", ("embedding", "prefix", "extend", "offsets")),
        ("_adjust_embedding_length", ("embedding", "n", "logger", "strict")),
    ],
)
def test_an_unknown_form_is_named_with_the_known_ones(name, params):
    found = forms.find(name, _function(params))
    assert found.form is None
    assert found.problem.startswith(f"unknown form {name}({', '.join(params)})")
    for known in forms.FORMS[name]:
        assert f"since {known.since}" in found.problem
    assert "UNKNOWN FORM" in found.describe()


RULES_OF_ONE_FORM = """
import torch

from sglang.srt.managers.schedule_batch import MultimodalDataItem


def _get_precomputed_embedding(items, prefix_length, extend_length, items_offset_list):
    return None


def _get_chunked_prefill_embedding(data_embedding_func, embedding_items, items_size, mystery):
    raise AssertionError("never called: an unknown form")


def get_embedding_and_mask(data_embedding_func, embedding_items, placeholder_tensor, input_ids):
    return data_embedding_func(embedding_items), torch.isin(input_ids, placeholder_tensor)
"""


def test_a_release_file_is_driven_through_its_forms_and_explains_the_rest(tmp_path):
    rules = tmp_path / "sglang" / "srt" / "managers" / "mm_utils.py"
    rules.parent.mkdir(parents=True)
    rules.write_text(textwrap.dedent(RULES_OF_ONE_FORM))
    target = from_path(str(tmp_path))
    assert target.capabilities == {base.PRECOMPUTED, base.EMBED_AND_MASK}
    assert target.missing[base.PREFILL].startswith("unknown form _get_chunked_prefill_embedding(")
    assert target.missing[base.CHUNK] == (
        "no get_embedding_chunk in sglang.srt.managers.mm_utils (it first appears in 0.4.6.post5)"
    )
    notes = target.notes()
    assert "_get_precomputed_embedding: windows indexed by item, not by request" in notes
    assert "get_embedding_and_mask: no chunking: encodes every item and keeps the last rows" in notes
