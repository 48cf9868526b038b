"""The call forms of SGLang's rule functions, matched by parameter names, with the release of each.

A function's form is its required positional parameters, by name; parameters
with defaults after them are allowed (a fork's ``device=None``) and left to
their defaults unless the harness has a value of that name (``max_size``).
The adapter calls every function by keyword, from one table of the values
the harness can give (``SGLangTarget._values``), so a known form needs no
code of its own. A function whose form is not in the table is reported, never
called: ``mmharness targets`` shows it, and the checks needing it are skipped
with a reason that names it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True)
class Form:
    params: tuple[str, ...]
    since: str
    """The first release with this form."""
    note: str = ""
    """What the form means for the checks (shown by ``mmharness targets``)."""


_PREFILL = ("data_embedding_func", "embedding_items", "items_size", "prefix_length", "extend_length")

FORMS: dict[str, tuple[Form, ...]] = {
    "get_embedding_chunk": (
        Form(("embedding", "extend_prefix_len", "extend_seq_len", "items_offset"), "0.4.6.post5"),
    ),
    "_get_precomputed_embedding": (
        Form(("items",), "0.4.7", "takes no window: every precomputed row, whatever the chunk"),
        Form(
            ("items", "prefix_length", "extend_length", "items_offset_list"),
            "0.5.7",
            "windows indexed by item, not by request",
        ),
        Form(("items", "items_size", "prefix_length", "extend_length", "items_offset_list"), "0.5.10"),
    ),
    "_get_chunked_prefill_embedding": (
        Form((*_PREFILL, "items_offset_list"), "0.4.7"),
        Form((*_PREFILL, "items_offset_list", "input_ids"), "0.5.8", "returns (embedding, input_ids)"),
    ),
    "get_embedding_and_mask": (
        Form(
            ("data_embedding_func", "embedding_items", "placeholder_tensor", "input_ids"),
            "0.4.6",
            "no chunking: encodes every item and keeps the last rows",
        ),
        Form(
            (
                *("data_embedding_func", "embedding_items", "placeholder_tensor", "input_ids"),
                *("items_size", "prefix_length", "extend_length", "items_offset_list"),
            ),
            "0.4.6.post5",
        ),
    ),
    "_count_mm_tokens_in_extend": (Form(("prefix_length", "extend_length", "items_offset_list"), "0.5.18"),),
    "_adjust_embedding_length": (
        Form(("embedding", "mask", "logger"), "0.4.7", "counts the mask's placeholders"),
        Form(("embedding", "num_mm_tokens_in_input_ids", "logger"), "0.5.18"),
    ),
    "init_embedding_cache": (Form((), "0.4.6.post5"), Form(("max_size",), "0.4.6.post5")),
    "init_mm_embedding_cache": (Form((), "0.5.5.post1"), Form(("max_size",), "0.5.5.post1")),
    "get_new_expanded_mm_items": (Form(("original_mm_items",), "0.5.7"),),
    # R3e's caller: one get_embedding_and_mask call per modality. Called only with its
    # ``data_embedding_func_mapping`` (0.5.7 has it; 0.4.x took image_/audio_data_embedding_func).
    "embed_mm_inputs": (
        Form(
            ("mm_inputs_list", "extend_prefix_lens", "extend_seq_lens", "input_ids", "input_embedding"),
            "0.4.7",
        ),
    ),
    "KimiK3ForConditionalGeneration.get_image_feature": (Form(("self", "items"), "0.5.17"),),
}
"""Every form the harness can call, per function, oldest first."""


@dataclass(frozen=True)
class Found:
    """One rule function of a loaded release: its form if known, else why it cannot be called."""

    name: str
    fn: Callable
    signature: str
    form: Form | None

    @property
    def problem(self) -> str | None:
        if self.form is not None:
            return None
        known = "; ".join(f"({', '.join(f.params)}) since {f.since}" for f in FORMS[self.name])
        return f"unknown form {self.name}{self.signature} (known: {known})"

    @cached_property
    def parameters(self) -> tuple[str, ...]:
        return tuple(inspect.signature(self.fn).parameters)

    def describe(self) -> str:
        if self.form is None:
            return f"{self.signature}  UNKNOWN FORM: not called"
        note = f"; {self.form.note}" if self.form.note else ""
        return f"{self.signature}  (form of {self.form.since}{note})"

    def call(self, values: dict[str, object], *, unbound_self: object = None):
        """Call by keyword: the form's parameters, and any optional one ``values`` names, from ``values``."""
        assert self.form is not None, self.problem
        wanted = [p for p in self.parameters if p in values or p in self.form.params]
        kwargs = {p: values[p] for p in wanted if p != "self"}
        if self.form.params[:1] == ("self",):
            return self.fn(unbound_self, **kwargs)
        return self.fn(**kwargs)


def required(fn: Callable) -> tuple[str, ...] | None:
    """The parameters a call must fill, in order; ``None`` if one is keyword-only or variadic."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    names = []
    for p in parameters:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.default is not p.empty:
            continue
        if p.kind == p.KEYWORD_ONLY:
            return None
        names.append(p.name)
    return tuple(names)


def find(name: str, fn: object) -> Found | None:
    """The rule function ``name`` with its matched form, or ``None`` if ``fn`` is not a function."""
    if not callable(fn):
        return None
    try:
        signature = str(inspect.signature(fn))
    except (TypeError, ValueError):
        signature = "(...)"
    params = required(fn)
    form = next((f for f in FORMS[name] if f.params == params), None)
    return Found(name, fn, signature, form)
