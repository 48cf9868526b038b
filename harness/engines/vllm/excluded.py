"""The branches of vLLM's rule functions no run of the rules can take, each verified by reading the code.

``check --coverage`` leaves them out of the CPU-reachable figure and lists them
with why (``mmharness.reach.Excluded``). vLLM's rules are spread over several
files (scheduler, encoder cache manager, gathers), so a claim often rests on a
caller in another file than the branch: ``needs`` pins the source in the
branch's own file (``reach`` checks it), ``elsewhere`` the source in the
caller's, and ``verify`` a claim about every call the loaded files make. A
release whose files lack either keeps the branch counted
(``VLLMTarget.excluded_branches``). Read in 0.33.0.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from mmharness.engines.vllm import layout
from mmharness.reach import DEAD, FALSE, GUARDED, OUTSIDE, TRUE, Excluded, flat

COLLECTION_UTILS = "vllm.utils.collection_utils"
"""The module of ``is_list_of`` (a helper the field configs' split calls)."""


@dataclass(frozen=True)
class Claim:
    """An excluded branch and what its claim rests on outside the branch's own file."""

    branch: Excluded
    elsewhere: tuple[tuple[str, str], ...] = ()
    """``(module, source)``: source (whitespace aside) that module's loaded file must hold (a caller's,
    or a second pin in the branch's own file)."""
    verify: Callable[[Mapping[str, str]], bool] | None = None
    """A claim about every loaded file (module -> source), such as what each call passes."""

    def holds(self, sources: Mapping[str, str]) -> bool:
        """Whether the loaded files still hold what the claim rests on outside the branch's file."""
        pinned = all(flat(text) in flat(sources.get(module, "")) for module, text in self.elsewhere)
        return pinned and (self.verify is None or self.verify(sources))


_CALL = re.compile(r"(?<![\w.])is_list_of\(")
_CHECKS_ALL = re.compile(r"(?<![\w.])is_list_of\([^()]*check=\"all\"\)")


def every_is_list_of_call_checks_all(sources: Mapping[str, str]) -> bool:
    """Whether each call of ``is_list_of`` in the loaded files (its definition aside) passes
    ``check="all"`` with no nested call (a call the pattern cannot read counts as one that does not)."""
    calls = checked = 0
    for module, source in sources.items():
        if module == COLLECTION_UTILS:
            continue
        calls += len(_CALL.findall(source))
        checked += len(_CHECKS_ALL.findall(source))
    return calls == checked


_ENCODER_DECODER = (
    "encoder-decoder models (Whisper-style: the encoder output feeds cross-attention from position 0,"
    " not placeholder rows of the prompt): outside the rules; the driver schedules decoder-only prompts"
)
_EC_CONNECTOR = (
    "the encoder-cache connector (ECConnector: encoder outputs shared between instances in"
    " disaggregated encoding), which the harness does not model (the driver's scheduler has none)"
)
_NO_MISS = (
    "the encoder-cache miss error: the scheduler encodes, or finds cached, every item a step's window"
    " reaches before it schedules the window, and else cuts the window before the item"
    " (_try_schedule_encoder_inputs); only an engine's scheduling bug takes it, which the checks"
    " report as a divergence"
)
_CUTS_BEFORE = "num_new_tokens = min(\n    num_new_tokens, start_pos - num_computed_tokens\n)"
"""The scheduler cuts a window before an item it can neither encode nor find cached."""
_CUT = ((layout.SCHEDULER, _CUTS_BEFORE),)
_MISS_RAISED = 'raise RuntimeError(f"Encoder cache miss for {mm_hash}.")'
"""Both gathers' (V1, V2) error for an item the cache lacks."""

CLAIMS: tuple[Claim, ...] = (
    # Encoder-decoder models (scheduler) -----------------------------------------------------
    Claim(
        Excluded(
            "Scheduler._try_schedule_encoder_inputs",
            "self.is_encoder_decoder",
            TRUE,
            OUTSIDE,
            _ENCODER_DECODER,
            needs="if self.is_encoder_decoder:\n    lo = 0",
        )
    ),
    Claim(
        Excluded(
            "Scheduler._try_schedule_encoder_inputs",
            "self.is_encoder_decoder and num_computed_tokens > 0",
            TRUE,
            OUTSIDE,
            _ENCODER_DECODER,
            needs='"the sequence when encoder-decoder models are used."',
            block=True,
        )
    ),
    Claim(
        Excluded(
            "Scheduler._try_schedule_encoder_inputs",
            "not self.is_encoder_decoder",
            FALSE,
            OUTSIDE,
            _ENCODER_DECODER + " (they skip the encoder cache)",
            needs="# We are not using the encoder cache for encoder-decoder models,",
        )
    ),
    Claim(
        Excluded(
            "Scheduler._free_encoder_inputs",
            "self.is_encoder_decoder and request.num_computed_tokens > 0",
            TRUE,
            OUTSIDE,
            _ENCODER_DECODER,
            needs="# With Whisper, as soon as we've generated a single token,",
        )
    ),
    Claim(
        Excluded(
            "EncoderCacheManager.allocate",
            "mm_hash not in self.cached",
            FALSE,
            OUTSIDE,
            "an item already cached is a hit (check_and_update_cache), which the scheduler asks before it"
            " allocates, except for encoder-decoder models, which skip the lookup",
            needs="if mm_hash not in self.cached:\n    return False",
        ),
        elsewhere=(
            (layout.SCHEDULER, "if self.encoder_cache_manager.check_and_update_cache(request, i):"),
            (layout.SCHEDULER, "if not self.is_encoder_decoder:"),
            # an identifier met twice in one step is looked up after the first is allocated
            (layout.SCHEDULER, "duplicate_encoder_inputs.append(i)"),
        ),
    ),
    # The encoder-cache connector (scheduler) --------------------------------------------------
    Claim(
        Excluded(
            "Scheduler._allocate_encoder_inputs",
            "self.ec_connector is not None",
            TRUE,
            OUTSIDE,
            _EC_CONNECTOR,
            needs="self.ec_connector.update_state_after_alloc(request, input_id)",
        )
    ),
    Claim(
        Excluded(
            "Scheduler._try_schedule_encoder_inputs",
            "self.ec_connector is not None and self.ec_connector.has_cache_item(item_identifier)",
            TRUE,
            OUTSIDE,
            _EC_CONNECTOR,
            needs="external_load_encoder_input.append(i)",
            block=True,
        )
    ),
    Claim(
        Excluded(
            "Scheduler._free_encoder_input",
            "self.ec_connector is not None",
            TRUE,
            OUTSIDE,
            _EC_CONNECTOR,
            needs="self.ec_connector.update_state_after_free(request, input_id)",
        )
    ),
    # The gathers ------------------------------------------------------------------------------
    Claim(
        Excluded(
            "EncoderRunner.gather_mm_embeddings",
            "not self.is_realtime",
            FALSE,
            OUTSIDE,
            "realtime (streaming) models, whose media embeddings go on past the prompt: the rules and the"
            " harness's cases hold every item in the prompt",
            needs=(
                "if not self.is_realtime:\n"
                "    # Non-realtime models only have media embeddings within the prompt."
            ),
        )
    ),
    *(
        Claim(Excluded(gather, past_window, FALSE, GUARDED, _NO_MISS, needs=_MISS_RAISED), elsewhere=_CUT)
        for gather, past_window in (
            ("EncoderRunner.gather_mm_embeddings", "start_pos + draft_lookahead >= cur_query_end"),
            (
                "GPUModelRunner._gather_mm_embeddings",
                "start_pos >= req_state.num_computed_tokens + num_scheduled_tokens",
            ),
        )
    ),
    Claim(
        Excluded(
            "GPUModelRunner._gather_mm_embeddings",
            "self.is_multimodal_pruning_enabled and self.uses_mrope",
            TRUE,
            OUTSIDE,
            "multimodal pruning (EVS) re-places a pruned video's embeddings and M-RoPE positions in the"
            " model (recompute_mrope_positions), which the harness does not load; pruned videos are"
            " left out for vLLM (VLLMTarget.unreceived)",
            needs="self.model.recompute_mrope_positions(",
            block=True,
        )
    ),
    Claim(
        Excluded(
            "GPUModelRunner._gather_mm_embeddings",
            "should_sync_mrope_positions",
            TRUE,
            OUTSIDE,
            "set only by the multimodal-pruning block above (EVS with M-RoPE)",
            needs=(
                "if self.is_multimodal_pruning_enabled and self.uses_mrope:\n"
                "    assert req_state.mrope_positions is not None\n"
                "    should_sync_mrope_positions = True"
            ),
        )
    ),
    # The encoder cache manager ----------------------------------------------------------------
    Claim(
        Excluded(
            "EncoderCacheManager.free_encoder_input",
            "cached_ids is not None and input_id in cached_ids",
            FALSE,
            OUTSIDE,
            "its callers free only the ids get_cached_input_ids holds (free, and the scheduler's"
            " _free_encoder_inputs), which leave it only here; only reset() (weights reloaded:"
            " reset_encoder_cache) clears them under a live request",
            needs="for input_id in list(self.get_cached_input_ids(request)):\n"
            "    self.free_encoder_input(request, input_id)",
        ),
        elsewhere=(
            (
                layout.SCHEDULER,
                "cached_encoder_input_ids = self.encoder_cache_manager.get_cached_input_ids(\n    request\n)",
            ),
        ),
    ),
    Claim(
        Excluded(
            "EncoderCacheManager.free_encoder_input",
            "not self.cached.get(mm_hash, None)",
            TRUE,
            OUTSIDE,
            "an entry a request still references holds that request until its last id of the item is"
            " freed here, and can_allocate evicts only unreferenced (freeable) entries; only reset()"
            " (weights reloaded: reset_encoder_cache) empties it under a live request",
            needs="if mm_hash in self.request_hash_refs.get(req_id, ()):\n    return",
        ),
        # ... and can_allocate evicts only freeable entries. A release that frees the entry at a request's
        # first id of a repeated item (0.20 does) reaches the branch: without the pin above it stays counted
        elsewhere=(
            (
                layout.CACHE_MANAGER,
                "mm_hash, num_free_embeds = self.freeable.popitem(last=False)\ndel self.cached[mm_hash]",
            ),
        ),
    ),
    # is_list_of: a helper the split calls -------------------------------------------------------
    Claim(
        Excluded(
            "is_list_of",
            'check == "first"',
            TRUE,
            GUARDED,
            'every call in the loaded files passes check="all"',
            needs='elif check == "all":',
        ),
        verify=every_is_list_of_call_checks_all,
    ),
    Claim(
        Excluded(
            "is_list_of",
            "not isinstance(value, list)",
            TRUE,
            GUARDED,
            "its one caller the rules reach (MultiModalFlatField.build_elems) hands it the field's slices,"
            " which the loaded models' configs build with flat_from_sizes, as a list",
        ),
        elsewhere=(
            (layout.INPUTS, 'if not is_list_of(self.slices, slice, check="all"):'),
            (layout.INPUTS, "slices = [\n    (slice(None, None, None),) * dim"),
            (layout.QWEN2_VL, 'pixel_values=MultiModalFieldConfig.flat_from_sizes(\n    "image"'),
        ),
        verify=every_is_list_of_call_checks_all,
    ),
    Claim(
        Excluded(
            "is_list_of",
            'check == "all"',
            FALSE,
            DEAD,
            'check is "first" or "all" (its Literal type), and "first" returns above',
            needs="assert_never(check)",
        )
    ),
)
"""Every excluded branch of vLLM's rule functions, with what it rests on in other files."""


def holding(sources: Mapping[str, str]) -> tuple[Excluded, ...]:
    """The excluded branches whose claims the loaded files (module -> source) still support."""
    return tuple(claim.branch for claim in CLAIMS if claim.holds(sources))
