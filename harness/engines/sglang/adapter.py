"""``SGLangTarget``: the Target protocol over one SGLang release, fork or installed package.

The adapter finds what a release has rather than assuming it: which module holds
the rules, which form each function takes (``mmharness.engines.sglang.forms``:
``_get_precomputed_embedding`` took one argument and ignored the window in
0.4.x; ``_adjust_embedding_length`` took a mask before it took a count;
``_get_chunked_prefill_embedding`` gained ``input_ids``), whether a per-request
path switch, the splitter and Kimi-K3 exist. What a release lacks is absent
from ``capabilities`` and explained in ``missing``, which the runner's skip
reasons quote; a function of an unknown form is never called.

A ``Case`` becomes the engine's own arguments: one engine item per case item
(offsets as ``(start, end)`` pairs, placeholder id as ``pad_value``), cumulative
``items_size``, per-request prefix and extend lengths and ``items_offset_list``.
Adapter-level problems are left for the engine to raise, so the checks compare
the engine's own errors. Every call into the engine is watched: a stub or item
attribute the harness cannot answer, reached during the call, turns the call's
outcome into a ``HarnessGap`` (a *could not test* verdict), even where engine
code caught the error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import accumulate
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING, Any

from mmharness import tensors
from mmharness.engines.sglang import forms, items, layout, shims
from mmharness.engines.sglang.forms import Found
from mmharness.model import Case, Item
from mmharness.targets import base, loader
from mmharness.targets.base import Encoder, FeatureItem, HarnessGap, Path, TargetError

if TYPE_CHECKING:
    import torch

UNLIMITED_CACHE = 1 << 40
PATH_SWITCHES = ("_is_hip", "_is_npu", "_is_xpu")
"""Module flags under which SGLang's chunked prefill takes its per-request path."""
CACHE_INITS = ("init_mm_embedding_cache", "init_embedding_cache")
KIMI_FEATURE = "KimiK3ForConditionalGeneration.get_image_feature"


@dataclass
class Functions:
    """The rule functions one release has, each with its form, and why a capability is absent."""

    found: dict[str, Found] = field(default_factory=dict)
    cache_init: Found | None = None
    path_switch: str | None = None
    list_encoder: bool = False
    notes: list[str] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)
    """Capability -> why the release does not have it (shown in skip reasons)."""

    def callable(self, name: str) -> Found | None:
        """The function if the release has it in a known form."""
        found = self.found.get(name)
        return found if found is not None and found.form is not None else None

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
    for name in forms.FORMS:
        owner: Any = rules
        if name == "get_new_expanded_mm_items":
            owner = engine.module(layout.SPLITTER_MODULE)
        elif name == KIMI_FEATURE:
            owner = getattr(engine.module(layout.KIMI_MODULE), name.split(".")[0], None)
        found = forms.find(name, getattr(owner, name.rsplit(".", 1)[-1], None))
        if found is not None:
            functions.found[name] = found
    functions.cache_init = next(
        (functions.callable(n) for n in CACHE_INITS if functions.callable(n)), None
    )
    prefill = functions.callable("_get_chunked_prefill_embedding")
    if prefill is not None and rules is not None:
        names = prefill.fn.__code__.co_names
        functions.path_switch = next(
            (flag for flag in PATH_SWITCHES if flag in names and hasattr(rules, flag)), None
        )
        functions.list_encoder = hasattr(rules, "_flatten_embedding_result")
    _explain_missing(functions, where)
    kimi = engine.module(layout.KIMI_MODULE)
    if functions.callable(KIMI_FEATURE) and "materialize_multimodal_features" not in vars(kimi):
        functions.notes.append("kimi_k3.py has no materialize_multimodal_features to replace")
    for found in functions.found.values():
        if found.form is not None and found.form.note:
            functions.notes.append(f"{found.name}: {found.form.note}")
    return functions


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


def _explain_missing(functions: Functions, where: str) -> None:
    for capability, (name, since) in _NEEDS.items():
        if functions.callable(name) is None:
            functions.missing[capability] = functions.why_not(name, since, where)
    needs_cache = [base.PREFILL]
    embed = functions.callable("get_embedding_and_mask")
    if embed is not None and "items_offset_list" in embed.form.params:
        needs_cache.append(base.EMBED_AND_MASK)
    if functions.cache_init is None:
        for capability in needs_cache:
            functions.missing.setdefault(
                capability, f"no embedding cache init ({' or '.join(CACHE_INITS)}) in {where}"
            )
    if base.PREFILL in functions.missing:
        functions.missing[base.PER_REQUEST_PATH] = functions.missing[base.PREFILL]
    elif functions.path_switch is None:
        functions.missing[base.PER_REQUEST_PATH] = (
            f"_get_chunked_prefill_embedding has no per-request path switch ({', '.join(PATH_SWITCHES)})"
        )


@dataclass
class _Batch:
    """A case in the engine's calling convention."""

    items: list[Any]
    owners: dict[int, Item]
    items_size: list[int]
    prefix_length: list[int]
    extend_length: list[int]
    items_offset_list: list[list[tuple[int, int]]]


class SGLangTarget:
    """One SGLang release (by path or installed) behind the ``Target`` protocol."""

    def __init__(self, engine: loader.Engine, name: str) -> None:
        self.engine = engine
        self.name = name
        self.functions = detect(engine)
        self.missing = self.functions.missing
        self.capabilities = frozenset(base.ALL_CAPABILITIES - self.missing.keys())
        self._logger = logging.getLogger(shims.ENGINE_LOGGER)
        self._rules = rules_module(engine)
        self._item_type = engine.shims.item_type
        if not self.capabilities:
            raise TargetError(_why_nothing(engine, self.functions))

    # describe ---------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        engine = self.engine
        record = engine.record
        rules = self._rules
        return {
            "target": self.name,
            "release": engine.source.release or "unknown",
            "source": engine.source.origin,
            "loaded": "installed package (imported normally)" if engine.installed else "by path",
            "files": [str(engine.source.files[n]) for n in engine.source.files if n in engine.modules],
            "rules_module": rules.__dict__.get("__mm_engine_name__", rules.__name__) if rules else None,
            "capabilities": sorted(self.capabilities),
            "missing": dict(sorted(self.missing.items())),
            "functions": {name: found.describe() for name, found in self.functions.found.items()},
            "cache": self._cache_origin(),
            "item_type": self._item_origin(),
            "path_switch": self.functions.path_switch,
            "list_encoder": self.functions.list_encoder,
            "stubbed_packages": sorted(engine.record.packages),
            "notes": self.notes(),
            "load_errors": engine.errors,
            "load_ms": round(engine.load_seconds * 1000, 1),
            "shims": sorted(record.shimmed),
            "stubbed": sorted(record.stubbed),
            "stubs_reached": sorted(set(record.reached)),
            "item_shim_misses": sorted(record.item_misses),
        }

    def notes(self) -> list[str]:
        """What a user should know before reading this target's verdicts (``check`` prints them)."""
        notes = list(self.functions.notes)
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

    # watching calls ---------------------------------------------------------------------

    @contextmanager
    def _watched(self) -> Iterator[None]:
        """Turn a stub or item gap reached during the call into a ``HarnessGap``, caught or not."""
        record = self.engine.record
        reached, misses = len(record.reached), set(record.item_misses)
        try:
            yield
        except HarnessGap:
            raise
        except Exception as error:
            gap = self._gap(reached, misses)
            if gap is not None:
                raise gap from error
            raise
        gap = self._gap(reached, misses)
        if gap is not None:
            raise gap

    def _gap(self, reached: int, misses: set[str]) -> HarnessGap | None:
        record = self.engine.record
        new = record.reached[reached:] + sorted(record.item_misses - misses)
        if not new:
            return None
        return HarnessGap(
            f"the engine reached what the harness only stubs: {', '.join(dict.fromkeys(new))}",
            what=new[0],
        )

    def _call(self, name: str, values: dict[str, Any], **kwargs: Any) -> Any:
        with self._watched():
            return self.functions.found[name].call(values, **kwargs)

    # building the engine's arguments ----------------------------------------------

    def _modality(self, item: Item) -> Any:
        return self.engine.shims.modality[item.modality.upper()]

    def _item(
        self,
        case: Case,
        item: Item,
        *,
        embedding: Any = None,
        feature: Any = None,
        grid: bool = False,
    ) -> Any:
        data: dict[str, Any] = {}
        if grid:
            import torch

            data[item.grid_key] = torch.tensor(item.grid, dtype=torch.long).reshape(-1, 3)
        return self._item_type(
            modality=self._modality(item),
            hash=item.hash,
            pad_value=tensors.placeholder_id(item),
            offsets=[tuple(span) for span in item.spans],
            feature=feature,
            precomputed_embeddings=embedding,
            model_specific_data=data,
        )

    def _batch(self, case: Case, *, precomputed: bool) -> _Batch:
        items, owners = [], {}
        for request in case.requests:
            for item in request.items:
                embedding = tensors.item_embedding(case, item) if precomputed and item.precomputed else None
                engine_item = self._item(case, item, embedding=embedding)
                owners[id(engine_item)] = item
                items.append(engine_item)
        return _Batch(
            items=items,
            owners=owners,
            items_size=[0, *accumulate(len(r.items) for r in case.requests)],
            prefix_length=[r.prefix_len for r in case.requests],
            extend_length=[r.extend_len for r in case.requests],
            items_offset_list=[
                [tuple(span) for item in r.items for span in item.spans] for r in case.requests
            ],
        )

    def _values(self, batch: _Batch, **more: Any) -> dict[str, Any]:
        """Every argument the rule functions take, by the names of their forms."""
        return {
            "items": batch.items,
            "embedding_items": batch.items,
            "items_size": batch.items_size,
            "prefix_length": batch.prefix_length,
            "extend_length": batch.extend_length,
            "items_offset_list": batch.items_offset_list,
            "logger": self._logger,
            **more,
        }

    def _embedder(self, batch: _Batch, encoder: Encoder) -> Callable[[list[Any]], Any]:
        """The data-embedding function: engine items back to case items, then the encoder."""
        list_ok = self.functions.list_encoder

        def embed(engine_items: list[Any]) -> Any:
            try:
                items = [batch.owners[id(e)] for e in engine_items]
            except KeyError:
                raise RuntimeError("mmharness: the engine encoded an item it was not given") from None
            output = encoder(items)
            if isinstance(output, list) and not list_ok:
                import torch

                output = torch.cat([part.reshape(-1, part.shape[-1]) for part in output])
            return output

        return embed

    @contextmanager
    def _installed(self, cache: Any, path: Path) -> Iterator[None]:
        """The cache as the module's ``embedding_cache`` and the path flags, for one call only."""
        rules = self._rules
        saved = {
            name: rules.__dict__[name]
            for name in ("embedding_cache", *PATH_SWITCHES)
            if name in rules.__dict__
        }
        if self.functions.cache_init is not None:
            rules.embedding_cache = self.new_cache(UNLIMITED_CACHE) if cache is None else cache
        for flag in PATH_SWITCHES:
            if flag in saved:
                setattr(rules, flag, False)
        if path == "per_request" and self.functions.path_switch:
            setattr(rules, self.functions.path_switch, True)
        try:
            yield
        finally:
            rules.__dict__.update(saved)

    # the protocol ---------------------------------------------------------------------

    def embedding_chunk(
        self, embedding: torch.Tensor, case: Case, request: int
    ) -> tuple[torch.Tensor, int, int]:
        req = case.requests[request]
        values = {
            "embedding": embedding,
            "extend_prefix_len": req.prefix_len,
            "extend_seq_len": req.extend_len,
            "items_offset": [tuple(span) for item in req.items for span in item.spans],
        }
        chunk, start, end = self._call("get_embedding_chunk", values)
        return chunk, start, end

    def precomputed_embedding(self, case: Case) -> torch.Tensor | None:
        batch = self._batch(case, precomputed=True)
        return self._call("_get_precomputed_embedding", self._values(batch))

    def new_cache(self, max_size: int) -> Any:
        """A fresh instance of the release's own embedding cache, made by its own init function."""
        init = self.functions.cache_init
        if init is None:
            return None
        rules = self._rules
        had = "embedding_cache" in rules.__dict__
        saved = rules.__dict__.get("embedding_cache")
        try:
            with self._watched():
                init.call({"max_size": max_size})
            return rules.embedding_cache
        finally:
            if had:
                rules.embedding_cache = saved

    def chunked_prefill_embedding(
        self, case: Case, encoder: Encoder, *, cache: Any = None, path: Path = "batched"
    ) -> torch.Tensor | None:
        batch = self._batch(case, precomputed=False)
        input_ids, _ = tensors.input_ids(case)
        values = self._values(batch, data_embedding_func=self._embedder(batch, encoder), input_ids=input_ids)
        with self._installed(cache, path):
            result = self._call("_get_chunked_prefill_embedding", values)
        return result[0] if isinstance(result, tuple) else result

    def embedding_and_mask(
        self, case: Case, encoder: Encoder, *, cache: Any = None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        batch = self._batch(case, precomputed=True)
        input_ids, placeholders = tensors.input_ids(case)
        values = self._values(
            batch,
            data_embedding_func=self._embedder(batch, encoder),
            placeholder_tensor=placeholders,
            input_ids=input_ids,
        )
        with self._installed(cache, "batched"):
            result = self._call("get_embedding_and_mask", values)
        return result[0], result[1]

    def count_mm_tokens(self, case: Case) -> int:
        batch = self._batch(case, precomputed=False)
        return self._call("_count_mm_tokens_in_extend", self._values(batch))

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
        engine_items = [self._item(case, fi.item, feature=fi.features, grid=True) for fi in items]
        return self._call(KIMI_FEATURE, {"items": engine_items}, unbound_self=_kimi_stand_in(case))

    def split_item(self, case: Case, item: FeatureItem) -> list[FeatureItem]:
        engine_item = self._item(case, item.item, feature=item.features, grid=True)
        parts = self._call("get_new_expanded_mm_items", {"original_mm_items": [engine_item]})
        return [self._feature_item(item.item, part) for part in parts]

    def _feature_item(self, original: Item, part: Any) -> FeatureItem:
        grid = part.model_specific_data.get(original.grid_key)
        rows = () if grid is None else tuple(tuple(int(n) for n in row) for row in grid.tolist())
        spans = tuple(tuple(int(n) for n in span) for span in part.offsets)
        return FeatureItem(
            Item(
                spans=spans,
                hash=original.hash,
                modality=original.modality,
                grid=rows,
                grid_key=original.grid_key,
            ),
            part.feature,
        )


def _why_nothing(engine: loader.Engine, functions: Functions) -> str:
    """Why a load gave nothing to call: its files did not load, its forms are unknown, or it has no rules."""
    origin = engine.source.origin
    if engine.errors and not engine.modules:
        errors = "; ".join(f"{engine.source.files[n].name}: {e}" for n, e in engine.errors.items())
        return f"{origin}: could not load its rules files ({errors}); fix the file or point at another tree"
    unknown = [f.problem for f in functions.found.values() if f.problem]
    if unknown:
        return f"{origin}: its rule functions have call forms the harness does not know: {'; '.join(unknown)}"
    errors = "; ".join(f"{n}: {e}" for n, e in engine.errors.items())
    return (
        f"{origin} holds no SGLang rules the harness can call"
        + (f" ({errors})" if errors else "")
        + "; point at an SGLang release 0.4.6 or later"
    )


class _IdentityTower:
    """A vision tower whose output is its input: Kimi-K3's features pass straight through."""

    patch_size = 14

    def __init__(self, device: Any, dtype: Any) -> None:
        import torch

        self.device = torch.device(device)
        weight = torch.empty(0, dtype=dtype)
        self.patch_embed = SimpleNamespace(proj=SimpleNamespace(weight=weight))

    def __call__(self, pixel_values: Any, *args: Any, **kwargs: Any) -> Any:
        return pixel_values


def _kimi_stand_in(case: Case) -> SimpleNamespace:
    import torch

    return SimpleNamespace(
        vision_tower=_IdentityTower(case.device, getattr(torch, case.dtype)),
        mm_projector=lambda embeds: embeds,
        use_data_parallel=False,
        _encoder_image_processor=None,
    )


def shims_for(source: loader.Source) -> Callable[[Any], shims.SGLangShims]:
    """The shims of a load, with the item fields of the release's own ``schedule_batch.py`` if at hand."""
    schema = None
    if source.package_dir is not None:
        schema = items.read_schema(source.package_dir / layout.ITEM_FILE)
    return lambda record: shims.SGLangShims(record, schema)


def load(source: loader.Source) -> loader.Engine:
    """The rules files of ``source``; a third-party package a fork imports and this host lacks is a stub."""
    return loader.load(source, layout.RULES, shims=shims_for(source), stub_missing=True)


def from_path(path: str, *, name: str | None = None, release: str | None = None) -> SGLangTarget:
    source = loader.locate(path, layout.RULES, release=release)
    return SGLangTarget(load(source), name or path)


def fetch(version: str) -> Any:
    """The unpacked release ``version`` (downloaded once into the cache)."""
    from mmharness.targets import releases

    return releases.fetch(layout.PACKAGE, version, layout.RELEASE_MEMBERS, example="0.5.23")


def from_release(version: str) -> SGLangTarget:
    from mmharness.targets import releases

    source = releases.source(
        layout.RULES,
        version,
        layout.RELEASE_MEMBERS,
        example="0.5.23",
        absent="has no multimodal scheduling rules (they first appear in 0.4.6); pick a later release",
    )
    return SGLangTarget(load(source), f"sglang=={version}")


def installed() -> SGLangTarget:
    """The installed ``sglang``, imported normally (its own item type, cache and context)."""
    engine = loader.load_installed(layout.RULES, None, example="0.5.23")
    import importlib

    schedule_batch = importlib.import_module("sglang.srt.managers.schedule_batch")
    engine.shims = SimpleNamespace(
        item_type=schedule_batch.MultimodalDataItem, modality=schedule_batch.Modality
    )
    return SGLangTarget(engine, "sglang")
