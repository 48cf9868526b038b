"""The call forms of SGLang's rule functions, matched by parameter names, with the release of each.

A function is called by keyword, every parameter named from the vocabulary of
values the harness can supply to that function (``SUPPLIED``; the adapter's
``SGLangTarget._call`` gives each of them), so no form needs code of its own.
A function is callable when every parameter it requires is nameable there;
parameters with defaults are left to them unless the harness has a value of
that name (``max_size``, a fork's ``embedding_cache=None``).

The table of known forms (``FORMS``) says which release introduced each form
and what it means for the checks (its return convention, what it ignores):
``mmharness targets`` shows it. A form outside the table but fully nameable
(a fork handing ``_get_chunked_prefill_embedding`` its ``embedding_cache`` and
``get_embedding_chunk``) is called all the same, and shown as not a known
release form; a form with a parameter the harness cannot name is reported,
never called, naming each such parameter, and the checks needing it are
skipped with that reason. Names are never guessed: a parameter is supplied
only under a name some release gave it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection
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
"""Every form a release used, per function, oldest first: what ``mmharness targets`` names."""

VOCABULARY: dict[str, str] = {
    "items": "the call's engine items (one modality's, as the engine's caller hands them)",
    "embedding_items": "the same items, under the name the chunked prefill gives them",
    "items_size": "the cumulative item count per request",
    "prefix_length": "each listed request's prefix length",
    "extend_length": "each listed request's extend length",
    "items_offset_list": "each request's (start, end) placeholder runs",
    "input_ids": "the batch's token ids (placeholders at their runs)",
    "placeholder_tensor": "the placeholder ids of the call's items",
    "data_embedding_func": "the encoder (the harness's recording encoder) for the call's items",
    "embedding_cache": "the embedding cache the call uses (the one the target installs as the module's)",
    "get_embedding_chunk": "the release's own get_embedding_chunk, from the loaded rules module",
    "device": "the device of the call's tensors",
    "logger": "the engine's logger (quiet)",
    "embedding": "the embedding handed to the chunk or length rule",
    "extend_prefix_len": "the request's prefix length",
    "extend_seq_len": "the request's extend length",
    "items_offset": "the request's (start, end) placeholder runs",
    "mask": "a placeholder mask of the wanted length",
    "num_mm_tokens_in_input_ids": "the wanted row count",
    "max_size": "the cache's byte budget",
    "original_mm_items": "the one item to split",
    "self": "a stand-in model (an identity vision tower)",
    "mm_inputs_list": "per request, an object whose mm_items are its items",
    "extend_prefix_lens": "each request's prefix length",
    "extend_seq_lens": "each request's extend length",
    "input_embedding": "the language model's token embedding (zeros)",
    "multimodal_model": "no model (None)",
    "data_embedding_func_mapping": "the encoder per modality",
    "use_deepstack": "no deepstack ({})",
}
"""Every name the harness can supply to some rule function, with what it supplies under it."""

_BATCH = frozenset(
    (
        *("items", "embedding_items", "items_size", "prefix_length", "extend_length", "items_offset_list"),
        *("input_ids", "placeholder_tensor", "embedding_cache", "get_embedding_chunk", "device", "logger"),
    )
)
"""What every batch-level rule function can be handed: the case in the engine's calling convention."""
_ENCODING = _BATCH | {"data_embedding_func"}

SUPPLIED: dict[str, frozenset[str]] = {
    "get_embedding_chunk": frozenset(
        ("embedding", "extend_prefix_len", "extend_seq_len", "items_offset", "device", "logger")
    ),
    "_get_precomputed_embedding": _BATCH,
    "_get_chunked_prefill_embedding": _ENCODING,
    "get_embedding_and_mask": _ENCODING,
    "_count_mm_tokens_in_extend": _BATCH,
    "_adjust_embedding_length": frozenset(
        ("embedding", "mask", "num_mm_tokens_in_input_ids", "logger", "device")
    ),
    "init_embedding_cache": frozenset(("max_size",)),
    "init_mm_embedding_cache": frozenset(("max_size",)),
    "get_new_expanded_mm_items": frozenset(("original_mm_items",)),
    "embed_mm_inputs": frozenset(
        (
            *("mm_inputs_list", "extend_prefix_lens", "extend_seq_lens", "input_ids", "input_embedding"),
            *("multimodal_model", "data_embedding_func_mapping", "use_deepstack", "device", "logger"),
        )
    ),
    "KimiK3ForConditionalGeneration.get_image_feature": frozenset(("self", "items")),
}
"""Per rule function, the names of ``VOCABULARY`` the adapter hands it (its calls give every one).

Only names some release used for the same value: the engine's own cache and
chunk function under the names a fork passes them by, never an alias guessed.
"""


@dataclass(frozen=True)
class Found:
    """One rule function of a loaded release: its known form if any, and what the harness cannot supply."""

    name: str
    fn: Callable
    signature: str
    form: Form | None
    unsupplied: tuple[str, ...] = ()
    """Required parameters the harness cannot name: the function is then never called."""

    @property
    def callable(self) -> bool:
        return not self.unsupplied

    @property
    def known(self) -> bool:
        """Whether its form is one a release used (``FORMS``)."""
        return self.form is not None

    @property
    def problem(self) -> str | None:
        """Why it is not called (``None`` if it is): each parameter the harness cannot supply."""
        if self.callable:
            return None
        known = "; ".join(f"({', '.join(f.params)}) since {f.since}" for f in FORMS[self.name])
        return (
            f"unknown form {self.name}{self.signature}: the harness cannot supply"
            f" {', '.join(self.unsupplied)} (known forms: {known})"
        )

    @property
    def note(self) -> str | None:
        """What a user should know before the results: an unknown form, called or not."""
        if not self.callable:
            return self.problem
        if self.form is None:
            return f"{self.name}{self.signature}: not a known release form: called by parameter names"
        return None

    @cached_property
    def parameters(self) -> tuple[str, ...]:
        return tuple(p.name for p in self._parameters)

    @cached_property
    def _parameters(self) -> tuple[inspect.Parameter, ...]:
        """Read once: ``call`` runs on every case (read per call: a tenth of a metamorphic check's time)."""
        return tuple(inspect.signature(self.fn).parameters.values())

    def describe(self) -> str:
        if not self.callable:
            return f"{self.signature}  UNKNOWN FORM: not called (cannot supply {', '.join(self.unsupplied)})"
        if self.form is None:
            return f"{self.signature}  (not a known release form: called by parameter names)"
        note = f"; {self.form.note}" if self.form.note else ""
        return f"{self.signature}  (form of {self.form.since}{note})"

    def call(self, values: dict[str, object], *, unbound_self: object = None):
        """Call by name: every required parameter and any optional one ``values`` names, from ``values``
        (``self`` is ``unbound_self``); a positional-only one by position, the rest by keyword."""
        assert self.callable, self.problem
        args: list[object] = []
        kwargs: dict[str, object] = {}
        for p in self._parameters:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            if p.name == "self" and not args and not kwargs:
                args.append(unbound_self)
            elif p.name in values:
                if p.kind == p.POSITIONAL_ONLY:
                    args.append(values[p.name])
                else:
                    kwargs[p.name] = values[p.name]
            elif p.default is p.empty:
                raise KeyError(f"mmharness: {self.name} needs {p.name}, which the call did not supply")
        return self.fn(*args, **kwargs)


def required(fn: Callable) -> tuple[str, ...] | None:
    """The parameters a call must fill, in order (keyword-only ones too); ``None`` without a signature."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    return tuple(
        p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.default is p.empty
    )


def find(name: str, fn: object, supplied: Collection[str] | None = None) -> Found | None:
    """The rule function ``name`` with its known form (if any) and the required parameters outside
    ``supplied`` (default: all ``SUPPLIED[name]``); ``None`` if ``fn`` is not a function."""
    if not callable(fn):
        return None
    try:
        signature = str(inspect.signature(fn))
    except (TypeError, ValueError):
        signature = "(...)"
    params = required(fn)
    form = next((f for f in FORMS[name] if f.params == params), None)
    if params is None:
        return Found(name, fn, signature, form, ("(no signature)",))
    names = SUPPLIED[name] if supplied is None else supplied
    return Found(name, fn, signature, form, tuple(p for p in params if p not in names))
