"""``VLLMTarget``: a vLLM release (by path or installed) behind the ``Target`` protocol.

vLLM has no function per rule the way SGLang has: its rules are carried out
by a scheduler step, an encoder cache and a gather, so the target declares the
capabilities a step driver can answer (R3 chunked prefill on either gather,
R3e rows and mask, the options R3w and R3d) and R5's split through the models'
field configs, and says why the others do not apply.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any

from mmharness import item_data, reach, reference
from mmharness.engines.vllm import excluded, layout, shims
from mmharness.engines.vllm.driver import Driver, EncoderCache, Modules, Served, StandIn, rows_of
from mmharness.model import VIDEO_GRID_KEY, Case, Item, interleaves
from mmharness.targets import base, loader
from mmharness.targets.base import (
    DRAFT_LOOKAHEAD,
    EMBED_AND_MASK,
    PREFILL,
    SCHEDULER_OPTIONS,
    SPLIT,
    WHOLE_ITEMS,
    Encoder,
    FeatureItem,
    HarnessGap,
    TargetError,
)
from mmharness.targets.loaded import Factory, LoadedTarget
from mmharness.targets.settings import Declarations

NOT_APPLICABLE = {
    base.CHUNK: "vLLM has no per-request chunk function: the gather serves a window's rows (R3, R3e)",
    base.PRECOMPUTED: (
        "vLLM has no batch-level precomputed concat: a request's embeddings (image_embeds) are chosen"
        " per request and modality by the model's input parser and take the encoder output's place"
    ),
    base.PER_REQUEST_PATH: "vLLM's alternative path is model runner V2's gather (the path v2)",
    base.COUNT: "vLLM counts scheduled tokens, not placeholder tokens, in its scheduler",
    base.ADJUST: "vLLM has no embedding length adjustment: a count mismatch is refused by the merge",
    base.ONE_GRID: "vLLM's models take every grid row an item carries: it has no one-grid rule",
}
REJECTS_MISMATCH = "_reject_on_encoder_cache_embed_mismatch"
"""The scheduler method that rejects an identifier cached with another embedding count (0.31 on)."""
NO_FIELD_CONFIG = "no Qwen2-VL or Kimi-K2.5 field config loaded (their model files are missing)"


def _cls(module: Any, name: str) -> Any:
    value = getattr(module, name, None) if module is not None else None
    return value if isinstance(value, type) else None


def _defining(engine: loader.Engine, preferred: str, name: str, method: str) -> tuple[Any, Any]:
    """The class ``name`` with ``method`` and the module holding it: the layout's file for it first, then
    any other loaded file (engines move code between files), else ``(None, None)``."""
    for module_name in (preferred, *(m for m in engine.modules if m != preferred)):
        module = engine.module(module_name)
        found = _cls(module, name)
        if found is not None and hasattr(found, method):
            return found, module
    return None, None


FieldConfig = Callable[[dict[str, Any]], Any]
"""``hf_inputs -> {key: MultiModalFieldConfig}``: how a model's processor output splits into items."""


MERGE = 2
"""The spatial merge size precomputed embeddings are split with (Qwen2-VL's, and most models')."""


def field_configs(engine: loader.Engine) -> dict[str, FieldConfig]:
    """Grid key -> the field config of a model reading it (R5's split), where the release has it.

    Qwen2-VL's factory takes the spatial merge size, which divides only the
    embedding sizes; 1 keeps the patch counts R5 states (``t*h*w`` per grid row).
    """
    found: dict[str, FieldConfig] = {}
    qwen = engine.module(layout.QWEN2_VL)
    factory = getattr(qwen, "_create_qwen2vl_field_factory", None)
    if callable(factory):
        found["image_grid_thw"] = factory(1)
    elif callable(getattr(qwen, "_qwen2vl_field_config", None)):
        found["image_grid_thw"] = qwen._qwen2vl_field_config
    kimi = _cls(engine.module(layout.KIMI_K25), "KimiK25MultiModalProcessor")
    if kimi is not None and hasattr(kimi, "_get_mm_fields_config"):
        found["grid_thws"] = lambda hf_inputs: kimi._get_mm_fields_config(
            StandIn(kimi, "KimiK25MultiModalProcessor"), hf_inputs, {}
        )
    return found


def detect(engine: loader.Engine) -> tuple[Modules | None, list[str]]:
    """The release's pieces, or ``None`` with what is missing."""
    get = engine.module
    pieces = {
        "PlaceholderRange": _cls(get(layout.INPUTS), "PlaceholderRange"),
        "MultiModalFeatureSpec": _cls(get(layout.INPUTS), "MultiModalFeatureSpec"),
        "Request": _cls(get(layout.REQUEST), "Request"),
        "EncoderCacheManager": _cls(get(layout.CACHE_MANAGER), "EncoderCacheManager"),
        "Scheduler": _cls(get(layout.SCHEDULER), "Scheduler"),
    }
    lacking = [name for name, found in pieces.items() if found is None]
    scheduler = pieces["Scheduler"]
    if scheduler is not None and not hasattr(scheduler, "_try_schedule_encoder_inputs"):
        lacking.append("Scheduler._try_schedule_encoder_inputs")
    runner_v1, v1_module = _defining(engine, layout.RUNNER_V1, "GPUModelRunner", "_gather_mm_embeddings")
    runner_v2, _ = _defining(engine, layout.RUNNER_V2, "EncoderRunner", "gather_mm_embeddings")
    if runner_v1 is None and runner_v2 is None:
        lacking.append("a gather (GPUModelRunner._gather_mm_embeddings, EncoderRunner.gather_mm_embeddings)")
    if lacking:
        return None, lacking
    scatter = v1_module.__dict__.get("scatter_mm_placeholders") if v1_module is not None else None
    params = inspect.signature(pieces["PlaceholderRange"]).parameters
    return (
        Modules(
            placeholder_range=pieces["PlaceholderRange"],
            feature_spec=pieces["MultiModalFeatureSpec"],
            request=pieces["Request"],
            cache_manager=pieces["EncoderCacheManager"],
            scheduler=scheduler,
            runner_v1=runner_v1,
            runner_v2=runner_v2,
            scatter=scatter if callable(scatter) else None,
            has_is_embed="is_embed" in params,
        ),
        [],
    )


_OWNERS = {
    SPLIT: (layout.INPUTS, layout.QWEN2_VL, layout.KIMI_K25),
    DRAFT_LOOKAHEAD: (layout.RUNNER_V1, layout.RUNNER_V2),
}
"""Capability -> the files that would hold it: where a load error makes it *could not test*."""
NO_DRAFTER = (
    "no gather of this release reads ahead for a drafter (GPUModelRunner._gather_mm_embeddings taking"
    " shift_computed_tokens, EncoderRunner.gather_mm_embeddings taking draft_lookahead)"
)


V1_GATHER, V2_GATHER = "GPUModelRunner._gather_mm_embeddings", "EncoderRunner.gather_mm_embeddings"
NO_V1_DRAFT = "its V1 gather takes no shift_computed_tokens: no drafter reads ahead on V1"
NO_V2_DRAFT = "its V2 gather takes no draft_lookahead: no drafter reads ahead on V2"


class VLLMTarget(LoadedTarget):
    """One vLLM release behind the ``Target`` protocol, driven step by step (``driver``)."""

    engine_label = "vLLM"

    def __init__(self, engine: loader.Engine, name: str) -> None:
        super().__init__(engine, name)
        modules, lacking = detect(engine)
        if modules is None:
            errors = "; ".join(f"{k}: {v}" for k, v in engine.errors.items())
            raise TargetError(
                f"{name}: no vLLM V1 multimodal scheduling found (missing {', '.join(lacking)})"
                + (f"; load errors: {errors}" if errors else "")
                + "; vLLM's V1 engine with an encoder cache manager exists from 0.8 on"
            )
        self.modules = modules
        self.driver = Driver(modules)
        self.paths = tuple(
            path for path, runner in (("v1", modules.runner_v1), ("v2", modules.runner_v2)) if runner
        )
        self.draft_paths = tuple(path for path in self.paths if self.driver.drafts_on(path))
        """The paths whose gather reads ahead for a drafter (R3d), the default first."""
        self.field_configs = field_configs(engine)
        self.merged_config = merged_config(engine)
        self._kwargs_items = getattr(engine.module(layout.INPUTS), "MultiModalKwargsItems", None)
        splits = bool(self.field_configs) and hasattr(self._kwargs_items, "from_hf_inputs")
        drafter = {DRAFT_LOOKAHEAD} if self.draft_paths else set()
        options = {WHOLE_ITEMS, SCHEDULER_OPTIONS, *drafter}
        self.capabilities = frozenset({PREFILL, EMBED_AND_MASK, *options} | ({SPLIT} if splits else set()))
        self.missing = (
            dict(NOT_APPLICABLE)
            | ({} if splits else {SPLIT: NO_FIELD_CONFIG})
            | ({} if self.draft_paths else {DRAFT_LOOKAHEAD: NO_DRAFTER})
        )
        absent = base.ALL_CAPABILITIES - self.capabilities
        self.unloaded = base.unloaded(absent, engine.errors, _OWNERS)

    def engine_fields(self) -> dict[str, Any]:
        return {
            **self.capability_fields(),
            "paths": list(self.paths),
            "placeholder_is_embed": self.modules.has_is_embed,
            "field_configs": sorted(self.field_configs),
            "cache_at_placeholder_length": self.modules.scatter is not None,
            "rejects_mismatched_identifiers": hasattr(self.modules.scheduler, REJECTS_MISMATCH),
        }

    def engine_functions(self) -> dict[str, str | None]:
        """The vLLM functions the step driver runs, each ``None`` where it drives it, else why not: what a
        comparison with another release calls lost coverage (0.34.0 has no V1 runner)."""
        m, driver = self.modules, self.driver
        v1 = None if m.runner_v1 is not None else "absent: no GPUModelRunner with _gather_mm_embeddings"
        v2 = None if m.runner_v2 is not None else "absent: no EncoderRunner with gather_mm_embeddings"
        return {
            "Scheduler._try_schedule_encoder_inputs": None,
            "EncoderCacheManager": None,
            V1_GATHER: v1,
            V2_GATHER: v2,
            f"{V1_GATHER} (shift_computed_tokens)": v1 or (None if driver.v1_drafts else NO_V1_DRAFT),
            f"{V2_GATHER} (draft_lookahead)": v2 or (None if driver.v2_drafts else NO_V2_DRAFT),
            "scatter_mm_placeholders": None
            if m.scatter is not None
            else "absent: the V1 runner's module lacks it",
        }

    def excluded_branches(self) -> tuple[reach.Excluded, ...]:
        """The branches of the rule functions no run of the rules takes, each verified by reading the
        engine's code (``excluded``), where the loaded files still hold what the claim rests on in its
        callers' files: ``check --coverage`` leaves them out of its CPU-reachable figure."""
        sources = {}
        for name, path in self.engine.source.files.items():
            try:
                sources[name] = Path(path).read_text(errors="replace")
            except OSError:  # a file gone since the load: no claim rests on it
                continue
        return excluded.holding(sources)

    def declared_settings(self) -> Declarations | None:
        """The settings its ``envs.py`` declares; ``None`` for the installed package (imported as is)."""
        own = self.engine.shims
        return own.settings.declarations if isinstance(own, shims.VLLMShims) else None

    def release_notes(self) -> list[str]:
        if "v2" not in self.paths:
            return ["no model runner V2 gather in this release: the V1 gather is the only path"]
        if "v1" not in self.paths:
            return ["no GPU model runner (V1) gather in this release: model runner V2's is the only path"]
        return []

    def new_cache(self, max_size: int) -> EncoderCache:
        return EncoderCache(max_size)

    def cache_events(self, cache: Any) -> list[tuple[str, int]] | None:
        """What the release's ``EncoderCacheManager`` did so far (``driver.watch``), keyed by item hash."""
        return list(cache.events) if isinstance(cache, EncoderCache) else None

    def _run(self, case: Case, encoder: Encoder, cache: EncoderCache, path: str, **options: Any) -> Served:
        if path not in self.paths:  # the harness asked for a path this release lacks: its own mistake
            raise HarnessGap(f"no path {path!r} in this target; its paths are {', '.join(self.paths)}")
        with self.watched():
            return self.driver.run(case, encoder, cache, path, **options)

    def chunked_prefill_embedding(
        self, case: Case, encoder: Encoder, *, cache: EncoderCache, path: str = "v1"
    ) -> Any:
        return rows_of(self._run(case, encoder, cache, path).rows)

    def embedding_and_mask(self, case: Case, encoder: Encoder, *, cache: EncoderCache) -> tuple[Any, Any]:
        import torch

        served = self._run(case, encoder, cache, self.paths[0])
        return rows_of(served.rows), torch.cat(served.masks)

    def whole_item_prefill(
        self, case: Case, encoder: Encoder, *, cache: EncoderCache
    ) -> tuple[Any, list[tuple[int, int, int]]]:
        """The windows prefilled with ``disable_chunked_mm_input`` on: the rows and the steps taken (a
        request left waiting stops short of its window: the caller judges why, R3l)."""
        served = self._run(case, encoder, cache, self.paths[0], whole_items=True, report_stalls=True)
        return rows_of(served.rows), served.steps

    def draft_prefill(
        self, case: Case, encoder: Encoder, *, cache: EncoderCache
    ) -> tuple[Any, list[tuple[int, int, int]], list[tuple[int, int, int, Any, Any]]]:
        """The windows prefilled for a drafter reading one token ahead: rows, steps, the drafter's gathers
        (on the first path whose gather reads ahead: V1's up to 0.33, V2's where it is the only one)."""
        served = self._run(case, encoder, cache, self.draft_paths[0], lookahead=1, report_stalls=True)
        return rows_of(served.rows), served.steps, served.drafts

    def scheduled_prefill(
        self,
        case: Case,
        encoder: Encoder,
        *,
        cache: EncoderCache,
        path: str = "v1",
        whole_items: bool = False,
        lookahead: int = 0,
        token_budget: int | None = None,
        encoder_budget: int | None = None,
    ) -> Served:
        """The windows prefilled under drawn scheduler options (``harness.checks.options``' run options).

        ``token_budget`` (``max_num_batched_tokens``, shared by the requests of
        a step), ``encoder_budget`` (``max_num_encoder_input_tokens``) and the
        cache's size (``cache``) as vLLM's config gives them, items whole
        (``disable_chunked_mm_input``) and a drafter ``lookahead`` tokens ahead,
        on either gather. The answer is the driver's ``Served``: rows, steps,
        the drafter's gathers and a log of each step (its encoder inputs, the
        tokens each request asked for), with the cache size and encoder
        budget in force (``unit``: what they count). A step that schedules
        nothing and ends nothing ends the call; the requests left waiting are
        the caller's to judge (R3l).
        """
        return self._run(
            case,
            encoder,
            cache,
            path,
            whole_items=whole_items,
            lookahead=lookahead,
            token_budget=token_budget,
            encoder_budget=encoder_budget,
            report_stalls=True,
        )

    def split_item(self, case: Case, item: FeatureItem) -> list[FeatureItem]:
        """The processor output of one aggregated item, split into items by its model's field config.

        The k-th item of a modality takes the k-th placeholder range of the
        prompt, so the k-th part gets the item's k-th span, or a video's frame
        spans (one range per video). R5 does not depend on the grid's key: a
        release without a model reading the item's key splits it with the
        model it has. Videos and precomputed embeddings (``image_embeds``,
        ``video_embeds``) go through Qwen2-VL's config: pixels made with merge size 1, embeddings
        with ``MERGE`` (a bug in the merge arithmetic shows only there).
        """
        original = item.item
        key, data_key, config = self._split_fields(original)
        carried = item.embedding if original.precomputed else item.features
        # Embeddings are split as a model merging MERGE x MERGE patches splits them: R5's rows per grid
        # row are the merged grid's t*h*w, so the grid handed over has h and w MERGE times larger.
        merged = original.precomputed and self.merged_config is not None
        scale = _merged(merged)
        hf_inputs = {key: item_data.grid(original) * scale, data_key: carried}
        if merged:
            config = self.merged_config
        with self.watched():
            by_modality = self._kwargs_items.from_hf_inputs(hf_inputs, config(hf_inputs))
            parts = [part for modality in by_modality for part in by_modality[modality]]
        groups = _part_spans(original, len(parts))
        return [
            self._feature_item(original, key, data_key, group, part, scale)
            for group, part in zip(groups, parts, strict=True)
        ]

    def unreceived(self, case: Case) -> str | None:
        """Why the driver never hands vLLM the case: items of two modalities interleaved are merged by the
        model (the gather assumes features sorted by offset and not overlapping), not by these files."""
        if any(interleaves(request) for request in case.requests):
            return "items of two modalities interleaved: vLLM leaves their merge to the model"
        if any(item.frame_rows for _, _, item in case.items()):
            return "EVS-pruned videos: vLLM's convention for them differs (not modelled)"
        return None

    def split_unreceived(self, item: Item) -> str | None:
        """Why vLLM's field configs never see this item form (the split checks then skip it), or ``None``."""
        if item.feature_form != "tensor" or item.model_data:
            return (
                "vLLM's processors hand tensors, and MultiModalKwargsItems.from_hf_inputs drops the fields"
                " its model's config does not name"
            )
        if item.grid_form != "rows" or not reference.split_from_processors(item):
            return "vLLM derives an item's placeholders and rows from its rank-2 grid: no such layout occurs"
        if item.precomputed and reference.split_rule(item).kind == reference.OUTSIDE:
            return "vLLM checks image_embeds against the (merged) grid: these rows never occur"
        try:
            self._split_fields(item)
        except HarnessGap as gap:
            return str(gap)
        return None

    def _split_fields(self, item: Item) -> tuple[str, str, FieldConfig]:
        """The grid key, the data key and the field config that split this item."""
        video = item.modality == "video"
        if not (video or item.precomputed):
            key = item.grid_key if item.grid_key in self.field_configs else next(iter(self.field_configs))
            return key, "pixel_values", self.field_configs[key]
        qwen = self.field_configs.get("image_grid_thw")
        if qwen is None or (item.precomputed and self.merged_config is None):
            what = "videos" if video else "precomputed embeddings"
            raise HarnessGap(f"no Qwen2-VL field factory to split {what}", what="Qwen2-VL field factory")
        if video:
            return VIDEO_GRID_KEY, "video_embeds" if item.precomputed else "pixel_values_videos", qwen
        return "image_grid_thw", "image_embeds", qwen

    @staticmethod
    def _feature_item(
        original: Item, key: str, data_key: str, spans: tuple, part: Any, scale: Any
    ) -> FeatureItem:
        row = part[key].data
        value = part[data_key].data
        grid = (tuple(int(n) for n in (row.reshape(-1) // scale).tolist()),)
        return FeatureItem(
            replace(original, spans=spans, grid=grid, grid_form="rows", feature_rows=None),
            None if original.precomputed else value,
            embedding=value if original.precomputed else None,
        )


def _part_spans(item: Item, parts: int) -> list[tuple]:
    """The spans of each part: the k-th placeholder range is the k-th span, or a video's frame spans."""
    frames = [t for t, _, _ in item.grid]
    if item.modality == "video" and len(item.spans) == sum(frames) and parts == len(frames):
        starts = [sum(frames[:k]) for k in range(parts + 1)]
        return [item.spans[a:b] for a, b in pairwise(starts)]
    return [(item.spans[k],) if k < len(item.spans) else () for k in range(parts)]


def merged_config(engine: loader.Engine) -> FieldConfig | None:
    """Qwen2-VL's field config made with merge size ``MERGE``, where its factory takes one."""
    factory = getattr(engine.module(layout.QWEN2_VL), "_create_qwen2vl_field_factory", None)
    return factory(MERGE) if callable(factory) else None


def _merged(embeddings: bool) -> Any:
    """What a grid row is multiplied by for the model to see it: [1, MERGE, MERGE] for embeddings."""
    import torch

    return torch.tensor([1, MERGE, MERGE] if embeddings else [1, 1, 1], dtype=torch.long)


FACTORY = Factory(
    VLLMTarget,
    layout.RULES,
    layout.RELEASE_MEMBERS,
    example="0.33.0",
    absent="has no V1 engine files (vllm/v1/); pick a release from 0.8 on",
    shims=shims.for_source,
)
"""vLLM's targets: its scheduling files loaded by path (everything else of vLLM, and missing
third-party packages, stubbed), a release downloaded once (only the driver's files kept), or the
installed ``vllm`` imported normally."""
load = FACTORY.load
from_path = FACTORY.from_path
fetch = FACTORY.fetch
from_release = FACTORY.from_release
installed = FACTORY.installed
