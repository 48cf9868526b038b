"""``SGLangTarget``: the Target protocol over one SGLang release, fork or installed package.

The adapter finds what a release has rather than assuming it: which module holds
the rules, which form each function takes (``_get_precomputed_embedding`` took one
argument and ignored the window in 0.4.x; ``_adjust_embedding_length`` took a mask
before it took a count; ``_get_chunked_prefill_embedding`` gained ``input_ids``),
whether a per-request path switch, the splitter and Kimi-K3 exist. What a release
lacks is absent from ``capabilities`` and the runner skips the checks needing it.

A ``Case`` becomes the engine's own arguments: one engine item per case item
(offsets as ``(start, end)`` pairs, placeholder id as ``pad_value``), cumulative
``items_size``, per-request prefix and extend lengths and ``items_offset_list``.
Adapter-level problems are left for the engine to raise, so the checks compare
the engine's own errors.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import accumulate
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING, Any

from harness import tensors
from harness.model import Case, Item
from harness.targets import base, loader, shims
from harness.targets.base import Encoder, FeatureItem, Path, TargetError

if TYPE_CHECKING:
    import torch

UNLIMITED_CACHE = 1 << 40
PATH_SWITCHES = ("_is_hip", "_is_npu", "_is_xpu")
"""Module flags under which SGLang's chunked prefill takes its per-request path."""
CACHE_INITS = ("init_mm_embedding_cache", "init_embedding_cache")


@dataclass
class Functions:
    """The rule functions one release has, and the form each takes."""

    found: dict[str, str] = field(default_factory=dict)
    """Function name -> its signature, for ``describe()``."""
    chunk: Callable | None = None
    precomputed: Callable | None = None
    precomputed_windowed: bool = True
    prefill: Callable | None = None
    prefill_takes_input_ids: bool = True
    embed_and_mask: Callable | None = None
    embed_and_mask_chunked: bool = True
    count: Callable | None = None
    adjust: Callable | None = None
    adjust_takes_mask: bool = False
    split: Callable | None = None
    image_feature: Callable | None = None
    cache_init: Callable | None = None
    path_switch: str | None = None
    list_encoder: bool = False
    notes: list[str] = field(default_factory=list)


def _params(fn: Callable) -> list[str]:
    return list(inspect.signature(fn).parameters)


def detect(engine: loader.Engine) -> Functions:
    """Find the rule functions in the loaded modules; decide their call forms from signatures."""
    found = Functions()
    rules = engine.rules
    if rules is not None:
        _detect_rules(rules, found)
    splitter = engine.module(loader.SPLITTER_MODULE)
    split = getattr(splitter, "get_new_expanded_mm_items", None)
    if callable(split):
        found.split = split
        found.found["get_new_expanded_mm_items"] = f"get_new_expanded_mm_items{inspect.signature(split)}"
    kimi = engine.module(loader.KIMI_MODULE)
    model = getattr(kimi, "KimiK3ForConditionalGeneration", None)
    feature = getattr(model, "get_image_feature", None)
    if callable(feature):
        found.image_feature = feature
        found.found["KimiK3ForConditionalGeneration.get_image_feature"] = (
            f"get_image_feature{inspect.signature(feature)}"
        )
        if "materialize_multimodal_features" not in vars(kimi):
            found.notes.append("kimi_k3.py has no materialize_multimodal_features to replace")
    return found


def _detect_rules(rules: ModuleType, found: Functions) -> None:
    def take(name: str) -> Callable | None:
        fn = getattr(rules, name, None)
        if not callable(fn):
            return None
        found.found[name] = f"{name}{inspect.signature(fn)}"
        return fn

    chunk = take("get_embedding_chunk")
    if chunk is not None and len(_params(chunk)) == 4:
        found.chunk = chunk
    precomputed = take("_get_precomputed_embedding")
    if precomputed is not None and len(_params(precomputed)) in (1, 5):
        found.precomputed = precomputed
        found.precomputed_windowed = len(_params(precomputed)) == 5
        if not found.precomputed_windowed:
            found.notes.append("_get_precomputed_embedding(items) ignores the prefill window")
    for init in CACHE_INITS:
        if callable(getattr(rules, init, None)):
            found.cache_init = getattr(rules, init)
            break
    prefill = take("_get_chunked_prefill_embedding")
    if prefill is not None and len(_params(prefill)) in (6, 7) and found.cache_init is not None:
        found.prefill = prefill
        found.prefill_takes_input_ids = len(_params(prefill)) == 7
        names = prefill.__code__.co_names
        found.path_switch = next(
            (flag for flag in PATH_SWITCHES if flag in names and hasattr(rules, flag)), None
        )
    found.list_encoder = hasattr(rules, "_flatten_embedding_result")
    if found.prefill is not None and not found.list_encoder:
        found.notes.append("encoder must return one tensor: list outputs are concatenated by the adapter")
    embed = take("get_embedding_and_mask")
    if embed is not None and len(_params(embed)) in (4, 8) and found.cache_init is not None:
        found.embed_and_mask = embed
        found.embed_and_mask_chunked = len(_params(embed)) == 8
    count = take("_count_mm_tokens_in_extend")
    if count is not None and len(_params(count)) == 3:
        found.count = count
    adjust = take("_adjust_embedding_length")
    if adjust is not None and len(_params(adjust)) == 3:
        found.adjust = adjust
        found.adjust_takes_mask = _params(adjust)[1] == "mask"


def capabilities_of(found: Functions) -> frozenset[str]:
    pairs = (
        (base.CHUNK, found.chunk),
        (base.PRECOMPUTED, found.precomputed),
        (base.PREFILL, found.prefill),
        (base.PER_REQUEST_PATH, found.prefill if found.path_switch else None),
        (base.EMBED_AND_MASK, found.embed_and_mask),
        (base.COUNT, found.count),
        (base.ADJUST, found.adjust),
        (base.ONE_GRID, found.image_feature),
        (base.SPLIT, found.split),
    )
    return frozenset(name for name, fn in pairs if fn is not None)


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
        self.capabilities = capabilities_of(self.functions)
        self._logger = logging.getLogger(shims.ENGINE_LOGGER)
        rules = engine.rules
        self._rules = rules
        if not self.capabilities:
            errors = "; ".join(f"{n}: {e}" for n, e in engine.errors.items())
            raise TargetError(
                f"{engine.source.origin} holds no SGLang rules the harness can call"
                + (f" ({errors})" if errors else "")
                + "; point at an SGLang release 0.4.6 or later"
            )

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
            "functions": self.functions.found,
            "cache": self._cache_origin(),
            "path_switch": self.functions.path_switch,
            "notes": self.functions.notes,
            "load_errors": engine.errors,
            "load_ms": round(engine.load_seconds * 1000, 1),
            "shims": sorted(record.shimmed),
            "stubbed": sorted(record.stubbed),
            "item_shim_misses": sorted(record.item_misses),
        }

    def _cache_origin(self) -> str | None:
        if self.functions.cache_init is None:
            return None
        cls = type(self.new_cache(0))
        if cls.__module__ == shims.__name__:
            return f"{cls.__name__} (harness shim: no multimodal_cache.py loaded)"
        return f"{cls.__name__} (the engine's own)"

    # building the engine's arguments ----------------------------------------------

    def _modality(self, item: Item) -> Any:
        return self.engine.modality[item.modality.upper()]

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
        return self.engine.item_type(
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
        offsets = [tuple(span) for item in req.items for span in item.spans]
        chunk, start, end = self.functions.chunk(embedding, req.prefix_len, req.extend_len, offsets)
        return chunk, start, end

    def precomputed_embedding(self, case: Case) -> torch.Tensor | None:
        batch = self._batch(case, precomputed=True)
        fn = self.functions.precomputed
        if not self.functions.precomputed_windowed:
            return fn(batch.items)
        return fn(
            batch.items,
            batch.items_size,
            batch.prefix_length,
            batch.extend_length,
            batch.items_offset_list,
        )

    def new_cache(self, max_size: int) -> Any:
        """A fresh instance of the release's own embedding cache, made by its own init function."""
        rules = self._rules
        had = "embedding_cache" in rules.__dict__
        saved = rules.__dict__.get("embedding_cache")
        try:
            self.functions.cache_init(max_size)
            return rules.embedding_cache
        finally:
            if had:
                rules.embedding_cache = saved

    def chunked_prefill_embedding(
        self, case: Case, encoder: Encoder, *, cache: Any = None, path: Path = "batched"
    ) -> torch.Tensor | None:
        batch = self._batch(case, precomputed=False)
        args = [
            self._embedder(batch, encoder),
            batch.items,
            batch.items_size,
            batch.prefix_length,
            batch.extend_length,
            batch.items_offset_list,
        ]
        with self._installed(cache, path):
            if not self.functions.prefill_takes_input_ids:
                return self.functions.prefill(*args)
            input_ids, _ = tensors.input_ids(case)
            embedding, _ = self.functions.prefill(*args, input_ids)
            return embedding

    def embedding_and_mask(
        self, case: Case, encoder: Encoder, *, cache: Any = None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        batch = self._batch(case, precomputed=True)
        input_ids, placeholders = tensors.input_ids(case)
        args = [self._embedder(batch, encoder), batch.items, placeholders, input_ids]
        if self.functions.embed_and_mask_chunked:
            args += [
                batch.items_size,
                batch.prefix_length,
                batch.extend_length,
                batch.items_offset_list,
            ]
        with self._installed(cache, "batched"):
            result = self.functions.embed_and_mask(*args)
        return result[0], result[1]

    def count_mm_tokens(self, case: Case) -> int:
        batch = self._batch(case, precomputed=False)
        return self.functions.count(batch.prefix_length, batch.extend_length, batch.items_offset_list)

    def adjust_embedding_length(self, embedding: torch.Tensor, wanted: int) -> torch.Tensor:
        if self.functions.adjust_takes_mask:
            import torch

            mask = torch.ones(max(wanted, 0), 1, dtype=torch.bool, device=embedding.device)
            return self.functions.adjust(embedding, mask, self._logger)
        return self.functions.adjust(embedding, wanted, self._logger)

    def image_feature(self, case: Case, items: Sequence[FeatureItem]) -> torch.Tensor:
        """Kimi-K3's ``get_image_feature``, unbound, on a stand-in model with an identity tower."""
        engine_items = [self._item(case, fi.item, feature=fi.features, grid=True) for fi in items]
        return self.functions.image_feature(_kimi_stand_in(case), engine_items)

    def split_item(self, case: Case, item: FeatureItem) -> list[FeatureItem]:
        engine_item = self._item(case, item.item, feature=item.features, grid=True)
        parts = self.functions.split([engine_item])
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


def from_path(path: str, *, name: str | None = None, release: str | None = None) -> SGLangTarget:
    source = loader.locate(path, release=release)
    return SGLangTarget(loader.load(source), name or path)


def from_release(version: str) -> SGLangTarget:
    from harness.targets import releases

    root = releases.fetch(version)
    try:
        source = loader.locate(root, release=version)
    except TargetError:
        raise TargetError(
            f"sglang=={version} has no multimodal scheduling rules (they first appear in 0.4.6);"
            " pick a later release"
        ) from None
    return SGLangTarget(loader.load(source), f"sglang=={version}")


def installed() -> SGLangTarget:
    return SGLangTarget(loader.load_installed(), "sglang")
