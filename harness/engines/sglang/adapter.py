"""``SGLangTarget``: the Target protocol over one SGLang release, fork or installed package.

The adapter finds what a release has rather than assuming it: which module holds
the rules, which form each function takes (``mmharness.engines.sglang.forms``:
``_get_precomputed_embedding`` took one argument and ignored the window in
0.4.x; ``_adjust_embedding_length`` took a mask before it took a count;
``_get_chunked_prefill_embedding`` gained ``input_ids``), which per-request
path flags it reads (each one a path: ``per_request_hip``, ``per_request_npu``,
...), the splitter and Kimi-K3. What a release lacks is absent
from ``capabilities`` and explained in ``missing``, which the runner's skip
reasons quote. Every function is called by parameter name from what the harness
can supply (``forms.SUPPLIED``; ``SGLangTarget._call``): a fork's form outside
the table of release forms is called too, and noted; one with a parameter the
harness cannot name is never called, and noted with that parameter.

A ``Case`` becomes the engine's own arguments, as the engine's caller
(``embed_mm_inputs``) makes them (``inputs``: the harness's supply, whose
faults are never the engine's): one call per modality; end to end goes through
``embed_mm_inputs`` itself. Adapter-level problems are left for the engine to
raise, so the checks compare the engine's own errors, and this module's code
reads the engine's answers back (a raise here is the engine's outcome). Every
call into the engine is watched: a stub or item attribute the harness cannot
answer, reached during the call, turns the call's outcome into a ``HarnessGap``
(a *could not test* verdict), even where engine code caught the error. Each
function of the forms table the harness never calls on a release is noted with
why (``Functions.undriven``), and the fork report lists it.
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING, Any

from mmharness import item_data, reach, tensors
from mmharness.engines.sglang import cache_watch, excluded, forms, inputs, items, layout, shims
from mmharness.engines.sglang.forms import Found
from mmharness.model import Case, Item, Request, interleaves, is_well_formed, listed_windows, pruned
from mmharness.targets import base, distributed, loader
from mmharness.targets.base import UNLIMITED_CACHE, Encoder, FeatureItem, HarnessGap, PathName, TargetError
from mmharness.targets.loaded import Factory, LoadedTarget
from mmharness.targets.settings import Declarations
from mmharness.targets.stubs import Stub

if TYPE_CHECKING:
    import torch

PATH_SWITCHES = ("_is_hip", "_is_npu", "_is_xpu")
"""Module flags under which SGLang's chunked prefill takes its per-request path (each one a path)."""
PER_REQUEST = "per_request"
CACHE_INITS = ("init_mm_embedding_cache", "init_embedding_cache")
KIMI_FEATURE = "KimiK3ForConditionalGeneration.get_image_feature"
BRANCH_REASONS = {"CUDA": r"\bhost_offload_event\b"}
"""SGLang's own names that explain an unreached branch (``reach``): host offload waits on a
``torch.cuda.Event``."""
MAPPED = ("image",)
"""The modalities whose encoder R3e hands ``embed_mm_inputs`` in its mapping; it finds the others as the
model's ``get_<modality>_feature`` (models do either: both lookups are the engine's)."""


def switch_path(flag: str) -> str:
    """The path a flag selects: ``_is_npu`` -> ``per_request_npu``."""
    return f"{PER_REQUEST}_{flag.removeprefix('_is_')}"


@dataclass
class Functions:
    """The rule functions one release has, each with its form, and why a capability is absent."""

    found: dict[str, Found] = field(default_factory=dict)
    cache_init: Found | None = None
    path_switches: tuple[str, ...] = ()
    """Every flag of ``PATH_SWITCHES`` the chunked prefill reads: each selects its per-request path."""
    list_encoder: bool = False
    short_lists: bool = False
    """Whether the chunked prefill walks only as many requests as ``prefix_length`` lists (EAGLE's
    shorter lists, the "workaround for eagle3"), rather than every request of ``items_size``."""
    notes: list[str] = field(default_factory=list)
    undriven: dict[str, str] = field(default_factory=dict)
    """Each function of ``forms.FORMS`` the harness never calls on this release -> why (``_undriven``)."""
    missing: dict[str, str] = field(default_factory=dict)
    """Capability -> why the release does not have it (shown in skip reasons)."""

    @property
    def path_switch(self) -> str | None:
        """The first flag (what ``describe`` showed before every flag was a path)."""
        return self.path_switches[0] if self.path_switches else None

    def callable(self, name: str) -> Found | None:
        """The function if the release has it in a form whose every required parameter the harness names."""
        found = self.found.get(name)
        return found if found is not None and found.callable else None

    def why_not(self, name: str, since: str, where: str) -> str:
        found = self.found.get(name)
        if found is not None and found.problem:
            return found.problem
        return f"no {name} in {where} (it first appears in {since})"


def rules_module(engine: loader.Engine) -> ModuleType | None:
    """The module holding the rules: ``mm_schedule`` where it exists, else ``mm_utils``."""
    loaded = [engine.modules[n] for n in layout.RULES_MODULES if n in engine.modules]
    with_entry = [m for m in loaded if "get_embedding_and_mask" in vars(m)]
    return (with_entry or loaded or [None])[0]


def detect(engine: loader.Engine) -> Functions:
    """Find the rule functions in the loaded modules and match each to a known form."""
    functions = Functions()
    rules = rules_module(engine)
    where = "the rules module" if rules is None else rules.__dict__.get("__mm_engine_name__", rules.__name__)
    # The cache inits and the chunk function first: whether the harness can hand a function the
    # release's embedding cache or its get_embedding_chunk depends on whether the release has them.
    first = (*CACHE_INITS, "get_embedding_chunk")
    for name in (*first, *(n for n in forms.FORMS if n not in first)):
        owner: Any = rules
        if name in ("get_new_expanded_mm_items", "embed_mm_inputs"):
            owner = engine.module(layout.SPLITTER_MODULE)
        elif name == KIMI_FEATURE:
            owner = getattr(engine.module(layout.KIMI_MODULE), name.split(".")[0], None)
        supplied = forms.SUPPLIED[name] - _unavailable(functions)
        fn = getattr(owner, name.rsplit(".", 1)[-1], None)
        # a name a loaded file imports from a file the load lacks is a stub, not the release's function
        found = None if isinstance(fn, Stub) else forms.find(name, fn, supplied)
        if found is not None:
            functions.found[name] = found
    functions.found = {name: functions.found[name] for name in forms.FORMS if name in functions.found}
    functions.cache_init = next((functions.callable(n) for n in CACHE_INITS if functions.callable(n)), None)
    prefill = functions.callable("_get_chunked_prefill_embedding")
    if prefill is not None and rules is not None:
        names = prefill.fn.__code__.co_names
        read_from = _globals_of(prefill)
        functions.path_switches = tuple(flag for flag in PATH_SWITCHES if flag in names and flag in read_from)
        functions.list_encoder = hasattr(rules, "_flatten_embedding_result")
        functions.short_lists = "len(prefix_length)" in _source(prefill)
    _explain_missing(functions, where)
    kimi = engine.module(layout.KIMI_MODULE)
    if functions.callable(KIMI_FEATURE) and "materialize_multimodal_features" not in vars(kimi):
        functions.notes.append("kimi_k3.py has no materialize_multimodal_features to replace")
    for found in functions.found.values():
        if found.callable and found.note:
            functions.notes.append(found.note)
        elif found.form is not None and found.form.note:
            functions.notes.append(f"{found.name}: {found.form.note}")
    functions.undriven = _undriven(functions)
    functions.notes += [
        f"engine function not driven: {name}: {why}" for name, why in functions.undriven.items()
    ]
    return functions


def _undriven(functions: Functions) -> dict[str, str]:
    """Each function the harness knows by name (``forms.FORMS``) that it never calls on this release, with
    why: absent (the cache init counts once, under either name), of a form it cannot call (each parameter
    it cannot supply), or called by no capability the release has (that capability's reason)."""
    undriven = {}
    for name, known in forms.FORMS.items():
        found = functions.found.get(name)
        if found is None:
            if name not in CACHE_INITS or functions.cache_init is None:
                undriven[name] = f"absent (it first appears in {known[0].since})"
        elif not found.callable:
            undriven[name] = found.problem or ""
        elif name == "embed_mm_inputs" and "data_embedding_func_mapping" not in found.parameters:
            undriven[name] = (
                f"{name}({', '.join(found.parameters)}) takes no data_embedding_func_mapping, the only"
                " form the harness calls (0.5.7 on): end to end calls get_embedding_and_mask itself instead"
            )
        elif all(c in functions.missing for c in _DRIVEN_BY[name]):
            undriven[name] = "; ".join(dict.fromkeys(functions.missing[c] for c in _DRIVEN_BY[name]))
    return undriven


def _unavailable(functions: Functions) -> set[str]:
    """Names of the vocabulary this load cannot supply: its own cache or chunk function, where it has none."""
    missing = set()
    if not any(functions.callable(n) for n in CACHE_INITS):
        missing.add("embedding_cache")
    if functions.callable("get_embedding_chunk") is None:
        missing.add("get_embedding_chunk")
    return missing


_NEEDS: dict[str, tuple[str, str]] = {
    base.CHUNK: ("get_embedding_chunk", "0.4.6.post5"),
    base.PRECOMPUTED: ("_get_precomputed_embedding", "0.4.7"),
    base.PREFILL: ("_get_chunked_prefill_embedding", "0.4.7"),
    base.EMBED_AND_MASK: ("get_embedding_and_mask", "0.4.6"),
    base.COUNT: ("_count_mm_tokens_in_extend", "0.5.18"),
    base.ADJUST: ("_adjust_embedding_length", "0.4.7"),
    base.SPLIT: ("get_new_expanded_mm_items", "0.5.7"),
    base.ONE_GRID: (KIMI_FEATURE, "0.5.17"),
}
"""Capability -> the function it calls and the release that introduced it."""
_DRIVEN_BY: dict[str, tuple[str, ...]] = {
    **{name: (capability,) for capability, (name, _) in _NEEDS.items()},
    "embed_mm_inputs": (base.EMBED_AND_MASK,),
    **{name: (base.PREFILL, base.EMBED_AND_MASK) for name in CACHE_INITS},
}
"""Function -> the capabilities whose checks call it: one the release has none of is never called."""
_OWNERS = {
    capability: {
        KIMI_FEATURE: (layout.KIMI_MODULE,),
        "get_new_expanded_mm_items": (layout.SPLITTER_MODULE,),
    }.get(name, (*layout.RULES_MODULES, layout.CACHE_MODULE))
    for capability, (name, _) in _NEEDS.items()
} | {base.PER_REQUEST_PATH: layout.RULES_MODULES}
"""Capability -> the files that would hold it: where a load error makes it *could not test*."""


def _source(found: Found) -> str:
    try:
        return inspect.getsource(found.fn)
    except (OSError, TypeError):
        return ""


def _globals_of(found: Found) -> dict[str, Any]:
    """The names a rule function reads at module level: where a path flag must be set to reach it."""
    return getattr(found.fn, "__globals__", {})


def _explain_missing(functions: Functions, where: str) -> None:
    for capability, (name, since) in _NEEDS.items():
        if functions.callable(name) is None:
            functions.missing[capability] = functions.why_not(name, since, where)
    needs_cache = [base.PREFILL]
    embed = functions.callable("get_embedding_and_mask")
    if embed is not None and "items_offset_list" in embed.parameters:
        needs_cache.append(base.EMBED_AND_MASK)
    if functions.cache_init is None:
        for capability in needs_cache:
            functions.missing.setdefault(
                capability, f"no embedding cache init ({' or '.join(CACHE_INITS)}) in {where}"
            )
    if base.PREFILL in functions.missing:
        functions.missing[base.SHORT_LISTS] = functions.missing[base.PREFILL]
    elif not functions.short_lists:
        functions.missing[base.SHORT_LISTS] = (
            "_get_chunked_prefill_embedding walks every request of items_size: it has no convention for"
            " per-request lists shorter than the batch (EAGLE's; by 0.5.7 it has)"
        )
    if base.PREFILL in functions.missing:
        functions.missing[base.PER_REQUEST_PATH] = functions.missing[base.PREFILL]
    elif functions.path_switch is None:
        functions.missing[base.PER_REQUEST_PATH] = (
            f"_get_chunked_prefill_embedding has no per-request path switch ({', '.join(PATH_SWITCHES)})"
        )


class _Switch(int):
    """A path flag set on: true, and it counts how often the engine tested it.

    A per-request path is only exercised if the engine reads the flag the
    harness set; the count is the evidence (``SGLangTarget._check_switched``).
    """

    def __new__(cls, flag: str) -> _Switch:
        switch = super().__new__(cls, 1)
        switch.flag = flag
        switch.reads = 0
        return switch

    def __bool__(self) -> bool:
        self.reads += 1
        return True

    def __repr__(self) -> str:
        return "True"


class SGLangTarget(LoadedTarget):
    """One SGLang release (by path or installed) behind the ``Target`` protocol."""

    def __init__(self, engine: loader.Engine, name: str) -> None:
        super().__init__(engine, name)
        self.functions = detect(engine)
        self.missing = self.functions.missing
        self.unloaded = base.unloaded(self.missing, engine.errors, _OWNERS)
        self.capabilities = frozenset((base.ALL_CAPABILITIES | {base.SHORT_LISTS}) - self.missing.keys())
        self._logger = logging.getLogger(shims.ENGINE_LOGGER)
        self._rules = rules_module(engine)
        self._item_type = engine.shims.item_type
        self.paths = ("batched",)
        if base.PER_REQUEST_PATH in self.capabilities:
            self.paths += tuple(switch_path(flag) for flag in self.functions.path_switches)
        self._switches = {switch_path(flag): flag for flag in self.functions.path_switches}
        self._switch: _Switch | None = None
        self._evs_type = _evs_type(engine, self._rules)
        self._build = inputs.Builder(
            self._item_type, engine.shims.modality, self.functions.list_encoder, self._evs_type, self._logger
        )
        evs_module = engine.modules.get(layout.EVS_MODULE)
        self._evs_item = "VideoEVSDataItem" if hasattr(evs_module, "VideoEVSDataItem") else None
        """The item type of its own a release's EVS code asserts (early EVS releases), or ``None``."""
        self._collectives = getattr(engine.shims, "collectives", None)
        if self._collectives is not None and not engine.installed:
            # torch.distributed as a process group of one, in the loaded modules' torch and their
            # call-time imports. (A loader hook serving third-party names would do it at load time.)
            distributed.serve(engine.modules.values(), self._collectives)
        if not self.capabilities:
            raise TargetError(_why_nothing(engine, self.functions))

    # describe ---------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "item_shim_misses": sorted(self.engine.record.item_misses)}

    def engine_fields(self) -> dict[str, Any]:
        rules = self._rules
        return {
            "rules_module": rules.__dict__.get("__mm_engine_name__", rules.__name__) if rules else None,
            **self.capability_fields(),
            "functions": {name: found.describe() for name, found in self.functions.found.items()},
            "cache": self._cache_origin(),
            "item_type": self._item_origin(),
            "item_fields": self._item_fields(),
            "path_switch": self.functions.path_switch,
            "path_switches": list(self.functions.path_switches),
            "paths": list(self.paths),
            "list_encoder": self.functions.list_encoder,
            "evs_result": None
            if self._evs_type is None
            else "harness stand-in"
            if issubclass(self._evs_type, shims.EVSEmbeddingResult)
            else "the release's own",
            "stubbed_packages": sorted(self.engine.record.packages),
        }

    def release_notes(self) -> list[str]:
        """The forms' notes (an unknown form, called or not, with each parameter not supplied), then what
        the engine asked of its process group of one (collectives reached, multi-rank paths untested)."""
        reached = [] if self._collectives is None else self._collectives.notes()
        return [*self.functions.notes, *reached]

    def excluded_branches(self) -> tuple[reach.Excluded, ...]:
        """The branches of the rule functions no run of the rules takes, each verified by reading the
        engine's code (``excluded``): ``check --coverage`` leaves them out of its CPU-reachable figure."""
        return excluded.EXCLUDED

    def rule_functions(self) -> dict[str, Callable[..., Any]]:
        """The rule functions found in the release, each in the form it was matched to (``forms``)."""
        return {name: found.fn for name, found in self.functions.found.items()}

    def branch_reasons(self) -> dict[str, str]:
        return BRANCH_REASONS

    def engine_functions(self) -> dict[str, str | None]:
        """Each function of ``forms.FORMS`` found or wanted here (the cache init under one name)."""
        known = [*self.functions.found, *self.functions.undriven]
        return {name: self.functions.undriven.get(name) for name in dict.fromkeys(known)}

    def declared_settings(self) -> Declarations | None:
        """The settings its ``srt/environ.py`` declares; ``None`` for the installed package (its own)."""
        own = self.engine.shims
        return own.settings.declarations if isinstance(own, shims.SGLangShims) else None

    def stand_in_notes(self) -> list[str]:
        notes = []
        if self.engine.record.packages:
            packages = ", ".join(sorted(self.engine.record.packages))
            notes.append(
                f"not installed here, served from stubs: {packages} (used at run time: could not test)"
            )
        if self.functions.cache_init is not None and self._cache_is_shim():
            notes.append(
                "no mem_cache/multimodal_cache.py loaded: the cache checks exercise the harness's"
                " stand-in cache, not this engine's"
            )
        ruled = getattr(self.engine.shims, "ruled", {})
        if ruled:
            served = ", ".join(f"{name} ({rule})" for name, rule in sorted(ruled.items()))
            notes.append(f"served by a rule, not by the engine's code: {served}")
        if not self.engine.installed and getattr(self._item_type, "_mm_schema", None) is None:
            notes.append(
                f"no {layout.ITEM_FILE} at hand: the item type has only the common fields; an"
                " item attribute the engine needs beyond them is reported as could not test"
            )
        return notes

    def _cache_is_shim(self) -> bool:
        return type(self.new_cache(0)).__module__ == shims.__name__

    def _cache_origin(self) -> str | None:
        if self.functions.cache_init is None:
            return None
        cls = type(self.new_cache(0))
        if cls.__module__ == shims.__name__:
            return f"{cls.__name__} (harness shim: no multimodal_cache.py loaded)"
        return f"{cls.__name__} (the engine's own)"

    def _item_origin(self) -> str:
        if self.engine.installed:
            return "the installed package's own"
        schema = getattr(self._item_type, "_mm_schema", None)
        if schema is None:
            return "harness shim with the common fields"
        return f"harness shim with the fields of {schema.origin}"

    def _item_fields(self) -> dict[str, Any] | None:
        """The fields (with their defaults) and method names of the item type read from the release's
        ``schedule_batch.py``: what the engine's code meets on an item, so part of what decides its
        behaviour (``baseline.behaviour_key``), where ``item_type`` names only the file. ``None`` for
        the installed package's own type and the common fields (``item_type`` says which)."""
        schema = getattr(self._item_type, "_mm_schema", None)
        if self.engine.installed or schema is None:
            return None
        return {
            "fields": {name: repr(value) for name, value in schema.defaults().items()},
            "methods": sorted(schema.methods),
        }

    # calling the engine ---------------------------------------------------------------------

    def _call(self, name: str, values: dict[str, Any], **kwargs: Any) -> Any:
        """Call a rule function by its parameter names: from ``values``, then from what every call can
        be handed (the logger, the device of the call's tensors, the cache in use, the release's own
        ``get_embedding_chunk``); a value is built only if the function names it (``inputs.Lazy``)."""
        found = self.functions.found[name]
        given = {**self._shared(values), **values}
        wanted = set(found.parameters)
        resolved = {k: v.make() if isinstance(v, inputs.Lazy) else v for k, v in given.items() if k in wanted}
        with self.watched():
            return found.call(resolved, **kwargs)

    def _shared(self, values: dict[str, Any]) -> dict[str, Any]:
        """What the harness hands any rule function that names it (``forms.VOCABULARY``)."""
        shared: dict[str, Any] = {
            "logger": self._logger,
            "device": inputs.Lazy(lambda: inputs.device_of(values)),
        }
        rules = self._rules
        if rules is not None and self.functions.cache_init is not None:
            shared["embedding_cache"] = inputs.Lazy(self._cache_in_use)
        if rules is not None and self.functions.callable("get_embedding_chunk") is not None:
            # The module's own, read at call time: what its other functions call by that name.
            shared["get_embedding_chunk"] = inputs.Lazy(lambda: rules.__dict__["get_embedding_chunk"])
        return shared

    def _cache_in_use(self) -> Any:
        """The cache the call uses: the one installed as the module's ``embedding_cache`` for it
        (``_installed``), else a fresh one, as a call outside a prefill gets."""
        cache = self._rules.__dict__.get("embedding_cache")
        return self.new_cache(UNLIMITED_CACHE) if cache is None else cache

    # building the engine's arguments ----------------------------------------------

    def unreceived(self, case: Case) -> str | None:
        """Why this release never receives the case (a check then leaves it out), or ``None``.

        EVS-pruned videos reach only a release whose rules read ``EVSEmbeddingResult`` (0.5.8 on), and
        whose EVS code takes the harness's item: an early release's asserts its own item type, which
        only its EVS processor makes (the harness does not build it), so its refusal would be the
        harness's gap, not the engine's bug.
        """
        if not any(item.frame_rows for _, _, item in case.items()):
            return None
        return self._evs_unreceived

    @property
    def _evs_unreceived(self) -> str | None:
        """Why no EVS-pruned video reaches this release, or ``None`` where they do."""
        if self._evs_type is None:
            return "EVS-pruned videos: its rules have no EVSEmbeddingResult (it first appears in 0.5.8)"
        if self._evs_item is not None:
            return (
                "EVS-pruned videos: this release's EVSEmbeddingResult takes only its own"
                f" {self._evs_item} (made by its EVS processor, which the harness does not build)"
            )
        return None

    def _receivable(self, case: Case) -> None:
        why = self.unreceived(case)
        if why is not None:
            raise HarnessGap(why, what="EVSEmbeddingResult" if self._evs_type is None else self._evs_item)

    @contextmanager
    def _installed(self, cache: Any, path: PathName) -> Iterator[None]:
        """The cache as the module's ``embedding_cache`` and the path flags, for one call only.

        The flags are set where the chunked prefill reads them (its globals); on a
        per-request path its flag is a ``_Switch``, which counts the engine's reads.
        """
        rules = self._rules
        prefill = self.functions.callable("_get_chunked_prefill_embedding")
        flags = _globals_of(prefill) if prefill is not None else rules.__dict__
        saved = {name: rules.__dict__[name] for name in ("embedding_cache",) if name in rules.__dict__}
        saved_flags = {name: flags[name] for name in PATH_SWITCHES if name in flags}
        if self.functions.cache_init is not None:
            rules.embedding_cache = self.new_cache(UNLIMITED_CACHE) if cache is None else cache
        for flag in saved_flags:
            flags[flag] = False
        flag = self._switches.get(path)
        if path == PER_REQUEST and self.functions.path_switches:  # the generic name: the first flag's
            flag = self.functions.path_switches[0]
        if flag is None and path != "batched":
            raise ValueError(f"unknown path {path!r}; this target's paths: {', '.join(self.paths)}")
        self._switch = None if flag is None else _Switch(flag)
        if flag is not None:
            flags[flag] = self._switch
        try:
            yield
        finally:
            rules.__dict__.update(saved)
            if flag is not None and flag not in saved_flags:
                del flags[flag]
            flags.update(saved_flags)

    def _check_switched(self, path: PathName, batches: Sequence[inputs.Batch]) -> None:
        """A per-request path's flag must have switched the engine's path: never read while the
        engine still batched requests together means the harness did not reach that path."""
        switch = self._switch
        if switch is None or switch.reads:
            return
        mixed = [sorted(requests) for b in batches for requests in b.calls if len(requests) > 1]
        if mixed:
            raise HarnessGap(
                f"the {path} path did not switch: the engine never read {switch.flag} (set where"
                f" _get_chunked_prefill_embedding reads it), and one encoder call held the items of"
                f" requests {mixed[0]}",
                what=switch.flag,
            )

    # the protocol ---------------------------------------------------------------------

    def embedding_chunk(
        self, embedding: torch.Tensor, case: Case, request: int
    ) -> tuple[torch.Tensor, int, int]:
        req = case.requests[request]
        if is_well_formed(case) and interleaves(req):
            return self._interleaved_chunk(embedding, case, request)
        values = {
            "embedding": embedding,
            "extend_prefix_len": req.prefix_len,
            "extend_seq_len": req.extend_len,
            "items_offset": [tuple(span) for item in req.items for span in item.spans],
        }
        chunk, start, end = self._call("get_embedding_chunk", values)
        return chunk, start, end

    def _interleaved_chunk(
        self, embedding: torch.Tensor, case: Case, request: int
    ) -> tuple[torch.Tensor, int, int]:
        """R1 over a request whose items interleave, as its caller makes it: one call per modality (with
        that modality's rows and offsets), the calls' rows put back at their positions, starts and ends
        summed. Within one modality the offsets are in position order, as the engine receives them."""
        import torch

        req = case.requests[request]
        flat = embedding.reshape(-1, embedding.shape[-1])
        blocks = dict(zip(req.items, flat.split([item.token_count for item in req.items]), strict=True))
        parts, start, end = [], 0, 0
        for modality in self._build.modalities(case):
            chosen = [item for item in req.items if item.modality == modality]
            if not chosen:
                continue
            values = {
                "embedding": torch.cat([blocks[item] for item in chosen]),
                "extend_prefix_len": req.prefix_len,
                "extend_seq_len": req.extend_len,
                "items_offset": [tuple(span) for item in chosen for span in item.spans],
            }
            chunk, one_start, one_end = self._call("get_embedding_chunk", values)
            start, end = start + one_start, end + one_end
            positions = [p for item in chosen for p in item.positions() if p in req.window]
            parts.append((positions, chunk))
        return _by_position(parts, flat[:0]), start, end

    def precomputed_embedding(self, case: Case) -> torch.Tensor | None:
        if is_well_formed(case) and any(interleaves(r) for r in case.requests):
            return self._interleaved_precomputed(case)
        batch = self._build.batch(case, precomputed=True)
        return self._call("_get_precomputed_embedding", self._build.values(batch))

    def _interleaved_precomputed(self, case: Case) -> torch.Tensor | None:
        """R2 over a batch whose items interleave, as the engine's caller calls it: once per modality.
        Every call's rows put back at their positions; ``None`` (the encoder path) if any call gives it."""
        parts = []
        for modality in self._build.modalities(case):
            batch = self._build.batch(case, precomputed=True, modality=modality)
            result = self._call("_get_precomputed_embedding", self._build.values(batch))
            if result is None:
                return None
            parts.append((_window_positions(case, modality), result.reshape(-1, result.shape[-1])))
        return _by_position(parts, None)

    def new_cache(self, max_size: int) -> Any:
        """A fresh instance of the release's own embedding cache, made by its own init function (what it
        does recorded: ``cache_events``)."""
        init = self.functions.cache_init
        if init is None:
            return None
        rules = self._rules
        had = "embedding_cache" in rules.__dict__
        saved = rules.__dict__.get("embedding_cache")
        try:
            with self.watched():
                init.call({"max_size": max_size})
            return cache_watch.watch(rules.embedding_cache)
        finally:
            if had:
                rules.embedding_cache = saved

    def cache_events(self, cache: Any) -> list[tuple[str, Any]] | None:
        """What a cache ``new_cache`` made did so far (``cache_watch``); ``None`` for one it cannot see."""
        return None if cache is None else cache_watch.events(cache)

    def chunked_prefill_embedding(
        self, case: Case, encoder: Encoder, *, cache: Any = None, path: PathName = "batched"
    ) -> torch.Tensor | None:
        """R3 as the engine calls it: once per modality, each call with that modality's items and encoder
        (``embed_mm_inputs`` embeds each modality apart), the rows put back in position order as
        the caller's masks place them."""
        self._receivable(case)
        if cache is None and self.functions.cache_init is not None:
            cache = self.new_cache(UNLIMITED_CACHE)  # one cache for every modality's call, as the engine's
        parts = []
        for modality in self._build.modalities(case):
            batch = self._build.batch(case, precomputed=False, modality=modality)
            input_ids, _ = tensors.input_ids(case)
            embed = self._build.embedder(batch, encoder, modality)
            values = self._build.values(batch, data_embedding_func=embed, input_ids=input_ids)
            with self._installed(cache, path):
                try:
                    result = self._call("_get_chunked_prefill_embedding", values)
                except AttributeError as error:
                    gap = _device_gap(error, path)
                    if gap is None:
                        raise
                    raise gap from error
            self._check_switched(path, [batch])
            parts.append((modality, result[0] if isinstance(result, tuple) else result))
        return _in_position_order(case, parts)

    def embedding_and_mask(
        self, case: Case, encoder: Encoder, *, cache: Any = None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """R3e through the engine's own caller, ``embed_mm_inputs``, where the release has it: it reads
        each item's modality, calls ``get_embedding_and_mask`` once per modality and scatters the rows
        by each call's mask. The rows returned are those at the union of the masks, in order. Its model is a
        stand-in (``_model``): the image encoder comes in the mapping, the others as the model's own
        bound ``get_<modality>_feature``, the two ways models hand their encoders."""
        self._receivable(case)
        full = self.functions.callable("embed_mm_inputs")
        if full is None or "data_embedding_func_mapping" not in full.parameters:
            return self._embedding_and_mask_direct(case, encoder, cache=cache)
        import torch

        batch = self._build.batch(case, precomputed=True)
        input_ids, _ = tensors.input_ids(case)
        members = self.engine.shims.modality
        by_request: list[list[Any]] = [[] for _ in case.requests]
        for engine_item in batch.items:
            by_request[batch.requests[id(engine_item)]].append(engine_item)
        model = inputs.model(
            {m.name.lower(): self._build.embedder(batch, encoder, m.name.lower()) for m in members}
        )
        values = {
            "mm_inputs_list": [inputs.mm_inputs(items) for items in by_request],
            "extend_prefix_lens": batch.prefix_length,
            "extend_seq_lens": batch.extend_length,
            "input_ids": input_ids,
            "input_embedding": inputs.TextEmbedding(case),
            "multimodal_model": model,
            "data_embedding_func_mapping": {
                member: getattr(model, f"get_{member.name.lower()}_feature")
                for member in members
                if member.name.lower() in MAPPED
            },
            "use_deepstack": {},
        }
        masks: list[Any] = []
        with self._installed(cache, "batched"), self._masks_recorded(masks):
            result = self._call("embed_mm_inputs", values)
        masks = [m for m in masks if m is not None]
        if not masks:
            return None, None
        union = torch.stack([m.reshape(-1) for m in masks]).any(dim=0)
        embeds = result[0] if isinstance(result, tuple) else result
        # The union in the shape get_embedding_and_mask gave: a model calling it directly gets that
        # shape, even where embed_mm_inputs flattens it away.
        return embeds[union], union.reshape(masks[0].shape)

    @contextmanager
    def _masks_recorded(self, masks: list[Any]) -> Iterator[None]:
        """``get_embedding_and_mask`` as ``embed_mm_inputs`` calls it, recording each modality's mask."""
        names = _globals_of(self.functions.found["embed_mm_inputs"])
        inner = names.get("get_embedding_and_mask")
        if inner is None:
            raise HarnessGap(
                "embed_mm_inputs has no get_embedding_and_mask beside it to watch",
                what="get_embedding_and_mask",
            )

        def recorded(*args: Any, **kwargs: Any) -> Any:
            out = inner(*args, **kwargs)
            masks.append(out[1])
            return out

        names["get_embedding_and_mask"] = recorded
        try:
            yield
        finally:
            names["get_embedding_and_mask"] = inner

    def _embedding_and_mask_direct(
        self, case: Case, encoder: Encoder, *, cache: Any = None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """``get_embedding_and_mask`` called once over every item (a fork without ``embed_mm_inputs``);
        once per modality where items interleave, or where an EVS video shares its request with items of
        another modality (the model prunes its videos' output, one video per call: a mixed call is
        the harness's making), as the engine's caller calls it."""
        if is_well_formed(case) and any(interleaves(r) or _evs_among_others(r) for r in case.requests):
            return self._interleaved_embedding_and_mask(case, encoder, cache=cache)
        batch = self._build.batch(case, precomputed=True)
        input_ids, placeholders = tensors.input_ids(case)
        values = self._build.values(
            batch,
            data_embedding_func=self._build.embedder(batch, encoder),
            placeholder_tensor=placeholders,
            input_ids=input_ids,
        )
        with self._installed(cache, "batched"):
            result = self._call("get_embedding_and_mask", values)
        return result[0], result[1]

    def _interleaved_embedding_and_mask(
        self, case: Case, encoder: Encoder, *, cache: Any = None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """One ``get_embedding_and_mask`` call per modality (its items, its placeholder ids), each
        call's rows scattered under its mask as the caller does; the rows at the masks' union."""
        import torch

        input_ids, _ = tensors.input_ids(case)
        if cache is None and self.functions.cache_init is not None:
            cache = self.new_cache(UNLIMITED_CACHE)  # one cache for every modality's call, as the engine's
        union = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        calls, shape = [], None
        for modality in self._build.modalities(case):
            batch = self._build.batch(case, precomputed=True, modality=modality)
            ids = sorted({tensors.placeholder_id(i) for _, _, i in case.items() if i.modality == modality})
            values = self._build.values(
                batch,
                data_embedding_func=self._build.embedder(batch, encoder, modality),
                placeholder_tensor=torch.tensor(ids, dtype=input_ids.dtype, device=input_ids.device),
                input_ids=input_ids.clone(),
            )
            with self._installed(cache, "batched"):
                result = self._call("get_embedding_and_mask", values)
            embedding, mask = result[0], result[1]
            if embedding is None or mask is None:
                continue
            calls.append((mask.reshape(-1), embedding.reshape(-1, embedding.shape[-1])))
            union |= mask.reshape(-1)
            shape = mask.shape
        if not calls or shape is None:
            return None, None
        if any(int(mask.sum()) != rows.shape[0] for mask, rows in calls):
            return torch.cat([rows for _, rows in calls]), union.reshape(shape)  # a miscount, as it came
        embeds = torch.zeros(input_ids.shape[0], calls[0][1].shape[-1], dtype=calls[0][1].dtype)
        embeds = embeds.to(calls[0][1].device)
        for mask, rows in calls:
            embeds[mask] = rows.to(embeds.dtype)
        return embeds[union], union.reshape(shape)

    def count_mm_tokens(self, case: Case) -> int:
        batch = self._build.batch(case, precomputed=False)
        return self._call("_count_mm_tokens_in_extend", self._build.values(batch))

    def adjust_embedding_length(self, embedding: torch.Tensor, wanted: int) -> torch.Tensor:
        import torch

        mask = torch.ones(max(wanted, 0), 1, dtype=torch.bool, device=embedding.device)
        values = {
            "embedding": embedding,
            "mask": mask,
            "num_mm_tokens_in_input_ids": wanted,
            "logger": self._logger,
        }
        return self._call("_adjust_embedding_length", values)

    def image_feature(self, case: Case, items: Sequence[FeatureItem]) -> torch.Tensor:
        """Kimi-K3's ``get_image_feature``, unbound, on a stand-in model with an identity tower."""
        engine_items = [self._build.item(case, fi.item, feature=fi.features, grid=True) for fi in items]
        return self._call(KIMI_FEATURE, {"items": engine_items}, unbound_self=inputs.kimi_stand_in(case))

    def split_item(self, case: Case, item: FeatureItem) -> list[FeatureItem]:
        """The splitter on one engine item as a processor builds it (R5): features (or precomputed
        rows) and model data in their forms, the grid under its key in its form (or absent)."""
        original = item.item
        data = dict(item.model_data)
        grid = item_data.grid(original)
        if grid is not None:
            data[original.grid_key] = grid
        engine_item = self._build.item(
            case, original, embedding=item.embedding, feature=item.features, model_data=data
        )
        parts = self._call("get_new_expanded_mm_items", {"original_mm_items": [engine_item]})
        return [self._feature_item(original, part) for part in parts]

    def _feature_item(self, original: Item, part: Any) -> FeatureItem:
        """An engine part back as the case item it stands for, with its values as the engine left them."""
        data = dict(part.model_specific_data)
        rows, form = item_data.read_grid(data.pop(original.grid_key, None))
        spans = tuple(tuple(int(n) for n in span) for span in part.offsets)
        return FeatureItem(
            replace(original, spans=spans, grid=rows, grid_form=form, feature_rows=None),
            part.feature,
            embedding=part.precomputed_embeddings,
            model_data=data,
        )


def _in_position_order(case: Case, parts: list[tuple[str, Any]]) -> Any:
    """One modality's rows per call, merged as the engine's caller scatters them: by request, then position.

    Each call's rows go to its modality's placeholder positions inside the listed
    windows. A call whose row count does not match them cannot be placed: the
    calls' rows are then handed back as they came (the check sees the miscount).
    """
    import torch

    one = [t for _, t in parts if t is not None]
    if len(parts) <= 1:
        return one[0] if one else None
    served = listed_windows(case)
    served = replace(served, requests=tuple(pruned(r) for r in served.requests))
    slots: list[tuple[int, int, int, int]] = []
    blocks = []
    for j, (modality, result) in enumerate(parts):
        rows = None if result is None else result.reshape(-1, result.shape[-1])
        positions = [
            (r, p)
            for r, request in enumerate(served.requests)
            for item in request.items
            if item.modality == modality
            for p in item.positions()
            if p in request.window
        ]
        if (0 if rows is None else rows.shape[0]) != len(positions):
            return torch.cat([t.reshape(-1, t.shape[-1]) for t in one]) if one else None
        blocks.append(rows)
        slots.extend((r, p, j, k) for k, (r, p) in enumerate(positions))
    if not slots:
        return None
    return torch.stack([blocks[j][k] for _, _, j, k in sorted(slots)])


def _window_positions(case: Case, modality: str) -> list[tuple[int, int]]:
    """``(request, position)`` of each ``modality`` placeholder inside the listed windows, in batch order."""
    served = listed_windows(case)
    return [
        (r, p)
        for r, request in enumerate(map(pruned, served.requests))
        for item in request.items
        if item.modality == modality
        for p in item.positions()
        if p in request.window
    ]


def _by_position(parts: list[tuple[list[Any], Any]], empty: Any) -> Any:
    """Each call's rows put at its positions (any sortable keys), all in key order; the calls' rows
    as they came where a call's row count does not match its positions (the check sees the miscount)."""
    import torch

    blocks = [rows.reshape(-1, rows.shape[-1]) for _, rows in parts]
    if any(len(keys) != block.shape[0] for (keys, _), block in zip(parts, blocks, strict=True)):
        return torch.cat(blocks) if blocks else empty
    slots = sorted((key, j, k) for j, (keys, _) in enumerate(parts) for k, key in enumerate(keys))
    if not slots:
        return blocks[0][:0] if blocks else empty
    return torch.stack([blocks[j][k] for _, j, k in slots])


def _evs_among_others(request: Request) -> bool:
    """Whether the request holds an EVS-pruned video and an item of another modality."""
    return any(item.frame_rows for item in request.items) and len({i.modality for i in request.items}) > 1


def _evs_type(engine: loader.Engine, rules: ModuleType | None) -> type | None:
    """What an EVS video's encoder output is made as; ``None`` where the rules never read the name
    (releases before 0.5.8).

    The release's own ``EVSEmbeddingResult`` where its ``evs_module.py`` loaded (a release, a path
    copy) or the package is installed. The rules import it by the package's name
    (``sglang.srt.multimodal.evs``), whose ``__init__`` the harness does not run (``layout.RULES``), so
    the name reached them as the harness's stand-in: each loaded module holding the stand-in is
    handed the release's class instead, so that the rules' own ``isinstance`` tests see the type the
    model returns. Where the module is not at hand (a lone rules file, a release cached before the
    harness kept it), the stand-in, made an instance of the release's ``EmbeddingResult`` too (its
    cache refuses anything else)."""
    found = None if rules is None else rules.__dict__.get("EVSEmbeddingResult")
    if found is shims.EVSEmbeddingResult:
        own = getattr(engine.modules.get(layout.EVS_MODULE), "EVSEmbeddingResult", None)
        if isinstance(own, type):
            for module in engine.modules.values():
                if module.__dict__.get("EVSEmbeddingResult") is shims.EVSEmbeddingResult:
                    module.EVSEmbeddingResult = own
            engine.record.shimmed.discard(f"{layout.EVS_PACKAGE}.EVSEmbeddingResult")
            return own
        cache = engine.modules.get(layout.CACHE_MODULE)
        base_type = getattr(cache, "EmbeddingResult", None)
        if not isinstance(base_type, type):
            base_type = shims.EmbeddingResult
        return type("EVSEmbeddingResult", (shims.EVSEmbeddingResult, base_type), {})
    return found if isinstance(found, type) else None


def _device_gap(error: AttributeError, path: PathName) -> HarnessGap | None:
    """A per-request path that reaches a device module torch lacks here (``torch.npu``) is a gap."""
    match = re.search(r"module 'torch' has no attribute '(\w+)'", str(error))
    if path == "batched" or match is None:
        return None
    return HarnessGap(
        f"the {path} path reached torch.{match[1]}, which this machine lacks", what=f"torch.{match[1]}"
    )


def _why_nothing(engine: loader.Engine, functions: Functions) -> str:
    """Why a load gave nothing to call: its files did not load, its forms are unknown, or it has no rules."""
    origin = engine.source.origin
    broken = {n: e for n, e in engine.errors.items() if n in (*layout.RULES_MODULES, layout.KIMI_MODULE)}
    if broken:  # the files that hold the rules did not load: no release to suggest, the files to fix
        by_error: dict[str, list[str]] = {}
        for name, error in broken.items():
            by_error.setdefault(error, []).append(engine.source.files[name].name)
        errors = "; ".join(f"{', '.join(files)}: {error}" for error, files in by_error.items())
        return f"{origin}: could not load its rules files ({errors}); fix the files or point at another tree"
    unknown = [f.problem for f in functions.found.values() if f.problem]
    if unknown:
        return f"{origin}: its rule functions have call forms the harness does not know: {'; '.join(unknown)}"
    if engine.errors:
        errors = "; ".join(f"{engine.source.files[n].name}: {e}" for n, e in engine.errors.items())
        return f"{origin} holds no SGLang rules the harness can call; its other files did not load ({errors})"
    return f"{origin} holds no SGLang rules the harness can call; point at an SGLang release 0.4.6 or later"


def shims_for(source: loader.Source) -> Callable[[Any], shims.SGLangShims]:
    """The shims of a load, with the item fields of the release's own ``schedule_batch.py`` and the
    settings its ``srt/environ.py`` declares, where at hand."""
    from mmharness.engines.sglang import settings

    schema = None
    if source.package_dir is not None:
        schema = items.read_schema(source.package_dir / layout.ITEM_FILE)
    declared = settings.declarations(source)
    return lambda record: shims.SGLangShims(record, schema, declared)


def _installed_shims() -> SimpleNamespace:
    """The installed package's own item type and ``Modality``."""
    import importlib

    schedule_batch = importlib.import_module("sglang.srt.managers.schedule_batch")
    return SimpleNamespace(item_type=schedule_batch.MultimodalDataItem, modality=schedule_batch.Modality)


FACTORY = Factory(
    SGLangTarget,
    layout.RULES,
    layout.RELEASE_MEMBERS,
    example="0.5.23",
    absent="has no multimodal scheduling rules (they first appear in 0.4.6); pick a later release",
    shims=shims_for,
    installed_shims=_installed_shims,
)
"""SGLang's targets: the rules files of a release, fork or file loaded by path (a third-party package
a fork imports and this host lacks, a stub), a release downloaded once, or the installed ``sglang``
imported normally (its own item type, cache and context)."""
load = FACTORY.load
from_path = FACTORY.from_path
fetch = FACTORY.fetch
from_release = FACTORY.from_release
installed = FACTORY.installed
