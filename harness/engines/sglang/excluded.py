"""The branches of SGLang's rule functions no run of the rules can take, each verified by reading the code.

``check --coverage`` leaves them out of the CPU-reachable figure and lists them
with why (``mmharness.reach.Excluded``). Each rests on source its claim needs
(``needs``: the caller's guard, the return that makes a test dead); a release
without that source keeps the branch counted. Read in 0.5.15 and 0.5.23.
"""

from __future__ import annotations

from mmharness.reach import DEAD, FALSE, GUARDED, OUTSIDE, TRUE, Excluded

_SKIPS_EMPTY_WINDOWS = "if extend_seq_len <= 0:\n    continue"
"""``_get_chunked_prefill_embedding`` skips a request with nothing to extend before it classifies it."""
_SKIPS_DISJOINT = (
    "if not any(\n    end >= extend_prefix_len and start < extend_prefix_len + extend_seq_len\n"
    "    for start, end in items_offset\n):\n    continue"
)
"""... and a request none of whose spans meets the chunk."""

EXCLUDED: tuple[Excluded, ...] = (
    Excluded(
        "_flatten_embedding_result",
        "isinstance(embedding, list)",
        FALSE,
        GUARDED,
        "its one caller (_get_chunked_embedding_full) flattens only a list",
        needs="if isinstance(embedding, list):",
    ),
    Excluded(
        "_batch_encode_per_image_misses",
        "req_info.extend_seq_len > 0",
        FALSE,
        GUARDED,
        "the chunked prefill queues only requests with extend_seq_len > 0",
        needs=_SKIPS_EMPTY_WINDOWS,
    ),
    Excluded(
        "_get_chunked_embedding_by_item",
        "extend_seq_len <= 0",
        TRUE,
        GUARDED,
        "the chunked prefill calls it only for requests with extend_seq_len > 0",
        needs=_SKIPS_EMPTY_WINDOWS,
    ),
    Excluded(
        "_get_chunked_embedding_by_item",
        "not overlapping",
        TRUE,
        GUARDED,
        "the chunked prefill calls it only where a span meets the chunk, and those spans are its"
        " items' offsets (embed_mm_inputs builds items_offset_list from them)",
        needs=_SKIPS_DISJOINT,
    ),
    Excluded(
        "_get_chunked_prefill_embedding",
        "chunk_embedding is not None",
        FALSE,
        DEAD,
        "_get_chunked_embedding_full returns get_embedding_chunk's slice, never None",
        needs="for req_info in full_path_requests:",
    ),
    Excluded(
        "_is_rank2_grid",
        "isinstance(value, (list, tuple))",
        FALSE,
        GUARDED,
        "its one caller tests a grid _get_length measured (a tensor, array, list or tuple), and"
        " tensors and arrays return above",
        needs="if image_grid_thw is None or grid_len != num_items:",
    ),
    Excluded(
        "embed_mm_inputs",
        "mm_inputs_list is None",
        TRUE,
        GUARDED,
        "its callers hand it a list (general_mm_embed_routine builds one from the batch)",
        needs="mm_inputs_list = [mm_input for mm_input in forward_batch.mm_inputs if mm_input is not None]",
    ),
    Excluded(
        "MultimodalCache.combine_hashes",
        "not mm_hashes",
        TRUE,
        GUARDED,
        "the rules look up a request's items only when it has some",
    ),
    Excluded(
        "MultiModalStaticCache.set",
        "not self.mm_cache",
        TRUE,
        DEAD,
        "current_size is the sum of the entries' sizes, so an empty cache has size 0, and an entry"
        " larger than max_size was refused above",
        needs="if data_size > self.max_size:\n    return False",
    ),
    Excluded(
        "MultiModalStaticCache.free",
        "mm_hash not in self.mm_cache",
        TRUE,
        GUARDED,
        "the rules free only an entry they have just found (one of the wrong row count)",
    ),
    Excluded(
        "KimiK3ForConditionalGeneration.get_image_feature.materialize_item_features",
        "any(config is not None for config in deferred)",
        TRUE,
        OUTSIDE,
        "deferred raw-image preprocessing (resize and normalise in the model, by modules the"
        " harness does not load), not the one-grid rule",
        needs="DEFERRED_PREPROCESSING_KEY",
        block=True,
    ),
)
"""Every excluded branch of SGLang's rule functions (``SGLangTarget.excluded_branches``)."""
