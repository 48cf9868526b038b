"""Seeded-bug targets: ``EngineModel`` with one engine-style mistake switched on.

The harness's self-test runs its checks against every mutant and expects each to be
caught ("killed"); a mutant that survives is a blind spot of the checks or strategies.
Each bug sits where a serving engine would plausibly get the rule wrong, and each is
reachable by a small well-formed case (the robustness ones by a malformed one).
"""

from __future__ import annotations

from dataclasses import dataclass

from mmharness.targets.base import Target, TargetError
from mmharness.targets.engine_model import EngineModel


@dataclass(frozen=True)
class Mutant:
    """One seeded bug: its ``EngineModel.bug`` switch, the rule it breaks, what goes wrong.

    A ``hazard`` mutant reproduces an engine behaviour the rules call a hazard
    (it follows the rules but can hurt a user: lost data, wasted encoder work,
    malformed input served); only hazard findings show it, so it fails a run
    under ``--strict`` only.
    """

    name: str
    rule: str
    description: str
    hazard: bool = False
    needs_cuda: bool = False
    """Only a batch mixing CPU and CUDA tensors shows it: killed on a GPU machine only."""


_MUTANTS = (
    # R1 chunk, and the validation every rule relies on
    Mutant("chunk_start_off_by_one", "R1", "start counts the placeholder at prefix_len as prefilled"),
    Mutant("chunk_end_inclusive", "R1", "the window end prefix_len + extend_len counts as inside"),
    Mutant("chunk_no_flatten", "R1", "a [1, n, H] embedding is sliced without flattening to 2-D"),
    Mutant("chunk_first_span_only", "R1", "offsets use only the first span of a multi-span item"),
    Mutant("chunk_nonempty_at_zero_extend", "R1", "extend_len 0 reads as 'to the end': rows returned"),
    Mutant(
        "skip_span_validation",
        "R1",
        "unsorted, overlapping or out-of-range spans are served",
        hazard=True,
    ),
    Mutant(
        "skip_row_validation",
        "R1",
        "rows != span tokens are served (R1 and R2), shifting rows",
        hazard=True,
    ),
    # R2 precomputed concat
    Mutant("precomputed_request_order", "R2", "request chunks are concatenated in reverse order"),
    Mutant("precomputed_empty_request_not_skipped", "R2", "an item-less request crashes the concat"),
    Mutant("precomputed_fallback_inverted", "R2", "partial coverage: raise and None fallback swapped"),
    Mutant("precomputed_wrong_error_class", "R2", "partial coverage raises ValueError"),
    Mutant("precomputed_wrong_message", "R2", "partial coverage raises with another message"),
    Mutant("precomputed_ignores_window", "R2", "whole embeddings, ignoring the window (0.4.x)"),
    Mutant("precomputed_no_flatten", "R2", "a 3-D [1, n, H] result is not flattened to 2-D"),
    Mutant(
        "precomputed_no_device_move",
        "R6",
        "mixed-device chunks are concatenated where they lie (a CUDA run crashes)",
        needs_cuda=True,
    ),
    Mutant(
        "precomputed_first_chunk_device",
        "R6",
        "the concatenation lands on the first chunk's device, not the first CUDA chunk's",
        needs_cuda=True,
    ),
    # R3 chunked prefill and the embedding cache
    Mutant("prefill_cache_warmth", "R3", "a warm hit serves the item's chunk of an earlier window"),
    Mutant(
        "prefill_cache_ignores_row_count",
        "R3",
        "a cached entry of another row count is a hit",
        hazard=True,
    ),
    Mutant(
        "prefill_dedup_ignores_count",
        "R3",
        "dedup by hash alone: a collision gets the other rows",
        hazard=True,
    ),
    Mutant(
        "prefill_encodes_outside_window",
        "R3",
        "items wholly before the window are encoded again",
        hazard=True,
    ),
    Mutant("prefill_duplicate_encode", "R3", "one (hash, count) encoded once per occurrence", hazard=True),
    Mutant("prefill_request_order", "R3", "request chunks are concatenated in reverse order"),
    Mutant("prefill_list_output_unflattened", "R3", "list-form [1, n, H] blocks are not flattened"),
    Mutant("prefill_per_request_skips_cached", "R3", "per-request path: an all-hit request is skipped"),
    Mutant("prefill_per_request_off_by_one", "R3", "per-request path: the window starts one late"),
    Mutant(
        "prefill_per_request_encodes_straddling",
        "R3",
        "per-request path: an item whose extent holds the window start is encoded, even for an empty window",
        hazard=True,
    ),
    Mutant("prefill_reads_back_from_cache", "R3", "rows read back from the cache: a refused item drops"),
    Mutant(
        "short_extend_list_indexed",
        "R3",
        "extend_length is indexed past its end: per-request lists shorter than the batch (EAGLE) crash",
    ),
    Mutant(
        "prefill_overlap_by_extent",
        "R3",
        "a window between a video's spans counts as overlap",
        hazard=True,
    ),
    # R3 across steps (seen only by a multi-step program on one cache)
    Mutant(
        "cache_keeps_encoder_view",
        "R3",
        "cached entries are views of the encoder's output: a reused buffer corrupts later hits",
        hazard=True,
    ),
    Mutant(
        "warm_hit_always_misses", "R3", "a warm cache hit is never used: re-encoded each step", hazard=True
    ),
    Mutant(
        "evicted_entry_served_empty",
        "R3",
        "an item served in part before is taken to be cached still: evicted, its next chunk is empty",
    ),
    Mutant(
        "resume_from_last_chunk",
        "R3",
        "an unfinished item resumes where its last chunk ended, not at the window",
    ),
    # R3w and R3d: engine options (the model's whole_item_prefill and draft_prefill)
    Mutant(
        "whole_items_cuts_at_first_token",
        "R3w",
        "items whole: an item starting at the step's first token counts as started before it, and is cut",
    ),
    Mutant(
        "whole_items_end_inclusive",
        "R3w",
        "items whole: an item whose last position is the window's end is taken to fit, and is cut one short",
    ),
    Mutant(
        "whole_items_finish_past_window",
        "R3w",
        "items whole: a step runs past the window's end to finish the item it reached",
    ),
    Mutant(
        "whole_items_stops_at_first_token",
        "R3w",
        "items whole: a step that cannot finish an item schedules nothing, not the text before it (R3l)",
    ),
    Mutant(
        "whole_items_rows_of_window",
        "R3w",
        "items whole: the whole window's rows are served, past where the step stopped",
    ),
    Mutant(
        "draft_clipped_at_step_end",
        "R3d",
        "the drafter's gather stops at the step's end: its window's last position goes unmarked",
    ),
    Mutant(
        "draft_reads_unreached_item",
        "R3d",
        "the drafter reads an item starting at the step's end, never encoded: an encoder cache miss",
    ),
    Mutant(
        "draft_gather_unshifted",
        "R3d",
        "the drafter's gather reads the step's own window, not the window moved one on",
    ),
    # R3e end to end
    Mutant("mask_first_placeholder_only", "R3e", "the mask uses only the first placeholder id"),
    Mutant("mask_marks_text", "R3e", "the mask marks the text tokens instead of the placeholders"),
    Mutant("embed_mask_skips_precomputed", "R3e", "precomputed rows are never tried (encoder only)"),
    Mutant(
        "mask_row_shaped",
        "R3e",
        "each modality's mask is [1, N], not [N, 1]: its caller flattens it, a model calling it cannot",
    ),
    Mutant(
        "modality_of_first_item",
        "R3e",
        "the per-modality split reads a request's first item's modality for all its items",
    ),
    # R4 count and adjust
    Mutant("count_inclusive_end", "R4", "the count includes the position at the window end"),
    Mutant("adjust_keeps_first", "R4", "surplus rows are cut from the end, keeping the first"),
    Mutant("adjust_wrong_error_class", "R4", "too few rows raise ValueError, not RuntimeError"),
    Mutant("adjust_wrong_message", "R4", "too few rows raise with another message"),
    Mutant("adjust_no_raise_on_short", "R4", "too few rows are returned as they are"),
    Mutant(
        "adjust_zero_keeps_all",
        "R4",
        "embedding[-wanted:] keeps every row when wanted is 0",
        hazard=True,
    ),
    # R5 one grid per item, and the split
    Mutant("grid_check_at_least_one", "R5", "the check is len(grid) >= 1 instead of == 1"),
    Mutant("grid_check_wrong_message", "R5", "the one-grid ValueError has another message"),
    Mutant("grid_check_ignores_grid_thws", "R5", "only image_grid_thw grids are checked"),
    Mutant("grid_check_first_item_only", "R5", "only the first item's grid is checked"),
    Mutant("split_drops_last_patch_rows", "R5", "the last split item loses its last feature row"),
    Mutant("split_keeps_aggregated_grid", "R5", "split items keep the whole aggregated grid"),
    Mutant("split_spans_relative", "R5", "split spans become offsets from the item's first position"),
    # R5 on each form processors hand the splitter: each bug shows on its form only
    Mutant("split_video_as_images", "R5", "a video is cut like images: a span per frame is refused"),
    Mutant("split_numpy_features_whole", "R5", "numpy features are not cut: every part keeps them all"),
    Mutant("split_sequence_features_by_part", "R5", "list or tuple features are cut an entry per part"),
    Mutant("split_list_data_copied", "R5", "list or tuple model data is copied to every part, not cut"),
    Mutant("split_patch_data_copied", "R5", "patch-aligned model data is copied to every part, not cut"),
    Mutant("split_scalar_data_dropped", "R5", "scalar model data is dropped from the parts"),
    Mutant("split_ignores_num_patches", "R5", "no grid: patch-aligned data is copied, num_patches ignored"),
    Mutant("split_precomputed_kept_whole", "R5", "precomputed embeddings are not cut: every part keeps all"),
    Mutant(
        "split_mismatched_grid_per_span",
        "R5",
        "an image whose grid rows differ from its spans is cut a span per part, keeping the whole grid",
        hazard=True,
    ),
    Mutant("split_flat_grid_crashes", "R5", "a rank-1 grid is indexed as rows: IndexError", hazard=True),
    Mutant(
        "split_ignores_feature_total",
        "R5",
        "feature rows are cut by t*h*w without checking the total: the last part takes the rest",
        hazard=True,
    ),
)

MUTANTS: dict[str, Mutant] = {m.name: m for m in _MUTANTS}


def mutant(name: str) -> Target:
    """The ``EngineModel`` with bug ``name`` switched on, as target ``mutant:NAME``."""
    if name not in MUTANTS:
        raise TargetError(f"unknown mutant {name!r}; known: {', '.join(sorted(MUTANTS))}")
    return EngineModel(bug=name, name=f"mutant:{name}")
