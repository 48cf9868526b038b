"""EngineModel: a second, independent implementation of every rule, written as an engine writes it.

The reference walks materialised positions; this model does what a serving engine
does instead: cumulative offsets over spans, per-item row slices, a byte-bounded LRU
embedding cache and one batched encoder call for the cache misses. Agreeing with the
reference on every well-formed case is what makes it trustworthy; its ``bug`` switch
seeds one engine-style mistake at the place an engine makes it, which is how the
harness's own tests prove that its checks catch real divergences
(see ``mmharness.targets.mutants``). It has the engine options too (R3w items
whole, R3d a drafter reading ahead), each window prefilled in one step.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import replace
from itertools import accumulate, pairwise
from typing import TYPE_CHECKING, Any

from mmharness import tensors
from mmharness.model import MODALITIES, MODEL_DATA_KEYS, Case, CaseError, Item, Request, Span, problems
from mmharness.reference import INSUFFICIENT_PREFIX, ONE_GRID_MESSAGE, PARTIAL_PRECOMPUTED_MESSAGE
from mmharness.targets.base import (
    ALL_CAPABILITIES,
    DRAFT_LOOKAHEAD,
    SHORT_LISTS,
    WHOLE_ITEMS,
    Encoder,
    FeatureItem,
    PathName,
    Target,
)

if TYPE_CHECKING:
    import torch


def _torch() -> Any:
    import torch

    return torch


def _straddles(item: Item, req: Request) -> bool:
    """The seeded bug's test: the item's extent holds the window's start (an empty window included)."""
    return item.spans[0][0] <= req.prefix_len <= item.spans[-1][1]


def _before(spans: Sequence[Span], position: int) -> int:
    """How many placeholder positions of ``spans`` lie before ``position``: interval arithmetic."""
    return sum(min(max(position - start, 0), end - start + 1) for start, end in spans)


def _rows(embedding: torch.Tensor, start: int, end: int) -> torch.Tensor:
    """Rows ``[start, end)`` along the row axis, of an ``[n, H]`` or a ``[1, n, H]`` tensor."""
    return embedding[..., start:end, :]


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.element_size() * tensor.nelement()


def _target_device(chunks: Sequence[torch.Tensor], *, cuda_first: bool = True) -> torch.device:
    """Where R2's concatenation lands: the first CUDA chunk's device, else the first chunk's."""
    cuda = (c.device for c in chunks if c.device.type == "cuda") if cuda_first else iter(())
    return next(cuda, chunks[0].device)


class EmbeddingCache:
    """An LRU map from key (an item's hash) to a tensor, bounded in bytes like an engine's.

    Entries larger than the whole budget are refused; a budget of 0 stores nothing.
    Whether a hit fits the item asking for it is the caller's business (hashes collide).
    ``events``: what it did, in order (``Target.cache_events``).
    """

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self.size = 0
        self._entries: OrderedDict[Hashable, torch.Tensor] = OrderedDict()
        self._notes: dict[Hashable, int] = {}
        self.events: list[tuple[str, Hashable]] = []

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> torch.Tensor | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        self.events.append(("miss" if entry is None else "hit", key))
        return entry

    def note(self, key: Hashable) -> int | None:
        """Engine bookkeeping kept beside the entries (no bytes counted)."""
        return self._notes.get(key)

    def remember(self, key: Hashable, value: int | None) -> None:
        if value is None:
            self._notes.pop(key, None)
        else:
            self._notes[key] = value

    def put(self, key: Hashable, tensor: torch.Tensor) -> bool:
        """Store ``tensor``, evicting least-recently-used entries; False if it cannot fit."""
        nbytes = _nbytes(tensor)
        if self.max_size <= 0 or nbytes > self.max_size:
            return False
        old = self._entries.pop(key, None)
        if old is not None:
            self.size -= _nbytes(old)
        while self.size + nbytes > self.max_size:
            gone, evicted = self._entries.popitem(last=False)
            self.size -= _nbytes(evicted)
            self.events.append(("evict", gone))
        self._entries[key] = tensor
        self.size += nbytes
        self.events.append(("insert", key))
        return True


def _modality_order(modality: str) -> int:
    return MODALITIES.index(modality) if modality in MODALITIES else len(MODALITIES)


class _ModalityEncoder:
    """One modality's encoder: an item of another modality handed to it is the engine's mistake."""

    def __init__(self, encoder: Encoder, modality: str) -> None:
        self.encoder = encoder
        self.modality = modality

    def __call__(self, items: Sequence[Item]) -> Any:
        strays = sorted({item.modality for item in items} - {self.modality})
        if strays:
            raise RuntimeError(f"the {self.modality} encoder was handed {' and '.join(strays)} items")
        return self.encoder(items)


class EngineModel(Target):
    """Every rule by index arithmetic; ``bug`` names the one seeded mistake (``None``: correct)."""

    capabilities = ALL_CAPABILITIES | {SHORT_LISTS, WHOLE_ITEMS, DRAFT_LOOKAHEAD}

    def __init__(self, bug: str | None = None, name: str = "engine_model") -> None:
        self.bug = bug
        self.name = name

    def describe(self) -> dict[str, Any]:
        return {"target": self.name, "source": __file__, "stubbed": [], "bug": self.bug}

    # validation ---------------------------------------------------------------

    def _validate(self, case: Case) -> None:
        """Refuse a malformed case with the first ``CaseError`` this engine checks for."""
        for problem in problems(case):
            if not self._skips_check(problem):
                raise problem

    def _listed(self, case: Case) -> Case:
        """The windows an engine reads off per-request lists shorter than the batch (EAGLE's).

        Requests are walked while ``prefix_length`` lasts; an item-less request is
        skipped before its ``extend_length`` is read, and a missing one reads as 0.
        """
        if case.prefix_listed is None and case.extend_listed is None:
            return case
        prefix_length = [r.prefix_len for r in case.requests][: case.prefix_listed]
        extend_length = [r.extend_len for r in case.requests][: case.extend_listed]
        requests = []
        for i, req in enumerate(case.requests):
            if i >= len(prefix_length) or not req.items:
                extend = 0 if i >= len(prefix_length) else req.extend_len
            elif i < len(extend_length) or self.bug == "short_extend_list_indexed":
                extend = extend_length[i]
            else:
                extend = 0
            requests.append(replace(req, extend_len=extend))
        return replace(case, requests=tuple(requests), prefix_listed=None, extend_listed=None)

    def _skips_check(self, problem: CaseError) -> bool:
        """The validation an engine forgot (the robustness mutants)."""
        if self.bug == "skip_span_validation":
            return ".spans" in problem.path
        if self.bug == "skip_row_validation":
            return problem.path.endswith(".rows")
        return False

    # R1 -----------------------------------------------------------------------

    def _spans(self, items: Sequence[Item]) -> list[Span]:
        """The spans the embedding rows follow, in item then span order."""
        if self.bug == "chunk_first_span_only":
            return [item.spans[0] for item in items]
        return [span for item in items for span in item.spans]

    def _bounds(self, spans: Sequence[Span], prefix_len: int, extend_len: int) -> tuple[int, int]:
        """R1's ``(start, end)``: placeholder rows before the window and before its end."""
        first, stop = prefix_len, prefix_len + extend_len
        if self.bug == "chunk_start_off_by_one":
            first += 1
        if self.bug == "chunk_end_inclusive":
            stop += 1
        if self.bug == "chunk_nonempty_at_zero_extend" and extend_len == 0:
            stop = sys.maxsize
        return _before(spans, first), _before(spans, stop)

    def embedding_chunk(
        self, embedding: torch.Tensor, case: Case, request: int
    ) -> tuple[torch.Tensor, int, int]:
        self._validate(case)
        req = case.requests[request]
        flat = embedding.reshape(-1, embedding.shape[-1])
        tokens = sum(item.token_count for item in req.items)
        if flat.shape[0] != tokens and self.bug != "skip_row_validation":
            raise ValueError(
                f"requests[{request}]: embedding has {flat.shape[0]} rows for {tokens} placeholder tokens"
            )
        start, end = self._bounds(self._spans(req.items), req.prefix_len, req.extend_len)
        source = embedding if self.bug == "chunk_no_flatten" else flat
        return _rows(source, start, end), start, end

    # R2 -----------------------------------------------------------------------

    def precomputed_embedding(self, case: Case) -> torch.Tensor | None:
        self._validate(case)
        case = self._listed(case)
        torch = _torch()
        requests = [
            req for req in case.requests if req.items or self.bug == "precomputed_empty_request_not_skipped"
        ]
        present = [[item.precomputed for item in req.items] for req in requests]
        if not any(any(flags) for flags in present):
            return None
        if not all(all(flags) for flags in present):
            return self._partial_coverage(present)
        embeddings = [[tensors.item_embedding(case, item) for item in req.items] for req in requests]
        every = [e for per_request in embeddings for e in per_request]
        device = _target_device(every, cuda_first=self.bug != "precomputed_first_chunk_device")
        if self.bug != "precomputed_no_device_move":
            embeddings = [[e.to(device) for e in per_request] for per_request in embeddings]
        chunks = [self._precomputed_chunk(req, e) for req, e in zip(requests, embeddings, strict=True)]
        if self.bug == "precomputed_request_order":
            chunks.reverse()
        joined = torch.cat(chunks, dim=-2)
        if self.bug == "precomputed_no_flatten":
            return joined
        return joined.reshape(-1, joined.shape[-1])

    def _precomputed_chunk(self, req: Request, embeddings: list[torch.Tensor]) -> torch.Tensor:
        """R1 over the request's concatenated precomputed embeddings (kept in their ``ndim``)."""
        joined = _torch().cat(embeddings, dim=-2)
        if self.bug == "precomputed_ignores_window":
            return joined
        return _rows(joined, *self._bounds(self._spans(req.items), req.prefix_len, req.extend_len))

    def _partial_coverage(self, present: list[list[bool]]) -> None:
        """Mixed coverage: ``None`` (fallback) if a multi-item request lacks one, else raise."""
        fallback = any(len(flags) > 1 and not all(flags) for flags in present)
        if self.bug == "precomputed_fallback_inverted":
            fallback = not fallback
        if fallback:
            return None
        error = ValueError if self.bug == "precomputed_wrong_error_class" else NotImplementedError
        if self.bug == "precomputed_wrong_message":
            raise error("Mixing precomputed and raw MM items is not supported.")
        raise error(PARTIAL_PRECOMPUTED_MESSAGE)

    # R3 -----------------------------------------------------------------------

    def new_cache(self, max_size: int) -> EmbeddingCache:
        return EmbeddingCache(max_size)

    def cache_events(self, cache: Any) -> list[tuple[str, Hashable]] | None:
        return list(cache.events) if isinstance(cache, EmbeddingCache) else None

    def chunked_prefill_embedding(
        self, case: Case, encoder: Encoder, *, cache: Any = None, path: PathName = "batched"
    ) -> torch.Tensor | None:
        """R3: each request's window rows, in request order; ``None`` if no window holds any.

        ``found`` maps content keys to full embeddings for the whole batch, so the cache
        only saves work across batches: a tiny or evicting cache never costs a row or a
        second encode, and both paths share the same slicing.
        """
        if path not in self.paths:
            raise ValueError(f"unknown path {path!r}; expected one of {', '.join(self.paths)}")
        self._validate(case)
        case = self._listed(case)
        inside = [[item for item in req.items if self._overlaps(item, req)] for req in case.requests]
        if not any(inside):
            return None
        cache = self.new_cache(0) if cache is None else cache
        found: dict[Hashable, torch.Tensor] = {}
        if self.bug == "evicted_entry_served_empty":
            inside = self._assume_still_cached(case, inside, cache, found)
        if path == "batched":
            self._embed([item for items in inside for item in items], encoder, cache, found)
        chunks = []
        for r in self._request_order(len(inside)):
            req = case.requests[r]
            if path == "per_request":
                wanted = inside[r]
                if self.bug == "prefill_per_request_encodes_straddling":
                    wanted = [*wanted, *(i for i in req.items if i not in wanted and _straddles(i, req))]
                encoded = self._embed(wanted, encoder, cache, found)
                if not encoded and self.bug == "prefill_per_request_skips_cached":
                    continue
                if self.bug == "prefill_per_request_off_by_one":
                    req = replace(req, prefix_len=req.prefix_len + 1)
            chunks.extend(self._item_rows(item, req, found, cache) for item in inside[r])
        return _torch().cat(chunks)

    def _assume_still_cached(
        self,
        case: Case,
        inside: list[list[Item]],
        cache: EmbeddingCache,
        found: dict[Hashable, torch.Tensor],
    ) -> list[list[Item]]:
        """The seeded bug: an item served in part by an earlier step is taken to be cached still.

        If it was evicted in between, its next chunk is served empty instead of re-encoded.
        """
        torch = _torch()
        lost = {
            item.hash
            for items in inside
            for item in items
            if cache.note(("unfinished", item.hash)) is not None and item.hash not in cache
        }
        for req, items in zip(case.requests, inside, strict=True):
            for item in items:
                if item.hash in lost:
                    found[self._key(item)] = torch.empty(0, case.hidden, dtype=getattr(torch, case.dtype))
                unfinished = req.prefix_len + req.extend_len <= item.spans[-1][1]
                cache.remember(("unfinished", item.hash), 1 if unfinished else None)
        return inside

    def _request_order(self, count: int) -> range:
        """The order request chunks are concatenated in: the batch's."""
        if self.bug == "prefill_request_order":
            return range(count - 1, -1, -1)
        return range(count)

    def _overlaps(self, item: Item, req: Request) -> bool:
        """Whether any of the item's positions lies in the request's window."""
        first, stop = req.prefix_len, req.prefix_len + req.extend_len
        if self.bug == "prefill_overlap_by_extent":
            return item.spans[0][0] < stop and item.spans[-1][1] >= first
        if self.bug == "prefill_encodes_outside_window":
            return item.spans[0][0] < stop
        return _before(item.spans, stop) > _before(item.spans, first)

    def _key(self, item: Item) -> Hashable:
        """What identifies an embedding within a batch: content, i.e. hash and token count."""
        if self.bug == "prefill_dedup_ignores_count":
            return item.hash
        return (item.hash, item.token_count)

    def _unique(self, items: Sequence[Item]) -> list[Item]:
        """The first item of each content key, in order: no embedding is computed twice."""
        if self.bug == "prefill_duplicate_encode":
            return list(items)
        first: dict[Hashable, Item] = {}
        for item in items:
            first.setdefault(self._key(item), item)
        return list(first.values())

    def _cached(self, cache: EmbeddingCache, item: Item) -> torch.Tensor | None:
        """A cache hit only if it has the item's row count (equal hashes may differ in length)."""
        block = cache.get(item.hash)
        if block is None or self.bug == "warm_hit_always_misses":
            return None
        if block.shape[0] != item.token_count and self.bug != "prefill_cache_ignores_row_count":
            return None
        return block

    def _embed(
        self,
        items: Sequence[Item],
        encoder: Encoder,
        cache: EmbeddingCache,
        found: dict[Hashable, torch.Tensor],
    ) -> int:
        """Fill ``found`` with every item's full embedding: cache hits, then one encoder call.

        Returns how many items went to the encoder.
        """
        misses = []
        for item in self._unique(items):
            if self._key(item) in found:
                continue
            hit = self._cached(cache, item)
            if hit is None:
                misses.append(item)
            else:
                found[self._key(item)] = hit
        if misses:
            for item, block in zip(misses, self._blocks(encoder(misses), misses), strict=True):
                found[self._key(item)] = block
                # An entry owns its storage: the encoder may reuse its output buffer next step.
                cache.put(item.hash, block if self.bug == "cache_keeps_encoder_view" else block.clone())
        return len(misses)

    def _blocks(self, output: torch.Tensor | list[torch.Tensor], items: Sequence[Item]) -> list[torch.Tensor]:
        """One 2-D block per item from either encoder form (a tensor, or a list per item)."""
        if isinstance(output, list):
            if self.bug == "prefill_list_output_unflattened":
                return output
            return [block.reshape(-1, block.shape[-1]) for block in output]
        flat = output.reshape(-1, output.shape[-1])
        return list(flat.split([item.token_count for item in items]))

    def _item_rows(
        self,
        item: Item,
        req: Request,
        found: dict[Hashable, torch.Tensor],
        cache: EmbeddingCache,
    ) -> torch.Tensor:
        """The item's rows inside the window: its own span offsets over its full embedding."""
        block = found[self._key(item)]
        if block.shape[0] == 0 or (self.bug == "prefill_reads_back_from_cache" and item.hash not in cache):
            return block[:0]
        start, end = self._bounds(self._spans([item]), req.prefix_len, req.extend_len)
        if self.bug == "resume_from_last_chunk":
            start, end = self._resumed(item, cache, start, end)
        rows = _rows(block, start, end)
        if self.bug == "prefill_cache_warmth":
            return self._earlier_chunk(item, rows, cache)
        return rows

    def _resumed(self, item: Item, cache: EmbeddingCache, start: int, end: int) -> tuple[int, int]:
        """The seeded bug: an unfinished item's next rows start where its last chunk ended.

        Right for contiguous chunks of one request; wrong after a prefix-cache skip,
        or when two requests holding the item are at different points.
        """
        cursor = cache.note(item.hash)
        if cursor is not None:
            start, end = cursor, cursor + (end - start)
        cache.remember(item.hash, None if end >= item.token_count else end)
        return start, end

    def _earlier_chunk(self, item: Item, rows: torch.Tensor, cache: EmbeddingCache) -> torch.Tensor:
        """The seeded bug: the cache keeps an item's first window chunk and serves it ever after."""
        earlier = cache.get(("chunk", item.hash))
        if earlier is not None:
            return earlier
        cache.put(("chunk", item.hash), rows)
        return rows

    # R3w and R3d: engine options -----------------------------------------------

    def whole_item_prefill(
        self, case: Case, encoder: Encoder, *, cache: Any = None
    ) -> tuple[torch.Tensor | None, list[tuple[int, int, int]]]:
        """R3w: each window prefilled in one step that never cuts an item it reaches from its first
        token; the rows (R3's of what the steps scheduled) and the steps ``(request, start, tokens)``."""
        self._validate(case)
        steps = []
        for k, req in enumerate(case.requests):
            tokens = self._whole_item_stop(req) - req.prefix_len
            if tokens > 0:
                steps.append((k, req.prefix_len, tokens))
        scheduled = self._scheduled(case, steps)
        if self.bug == "whole_items_rows_of_window":
            scheduled = case
        return self.chunked_prefill_embedding(scheduled, encoder, cache=cache), steps

    def _whole_item_stop(self, req: Request) -> int:
        """Where the step from ``prefix_len`` ends: the window's end, or the start of the first item
        it reaches from its first token and cannot finish there (gaps of a multi-span item included).

        An item the step starts inside (a prefix-cache hit) may end past the window.
        """
        start, end = req.prefix_len, req.prefix_len + req.extend_len
        last = end + 1 if self.bug == "whole_items_end_inclusive" else end  # the last position inside
        for item in req.items:
            extent = item.extent
            reached = (
                start < extent.start
                if self.bug == "whole_items_cuts_at_first_token"
                else start <= extent.start
            )
            if reached and extent.start < end and extent.stop > last:
                if self.bug == "whole_items_stops_at_first_token":
                    return start
                return extent.stop if self.bug == "whole_items_finish_past_window" else extent.start
        return end

    @staticmethod
    def _scheduled(case: Case, steps: Sequence[tuple[int, int, int]]) -> Case:
        """The case with each window cut to the tokens its request's steps scheduled."""
        done = {k: start + tokens for k, start, tokens in steps}
        requests = tuple(
            replace(r, extend_len=done.get(k, r.prefix_len) - r.prefix_len)
            for k, r in enumerate(case.requests)
        )
        return replace(case, requests=requests)

    def draft_prefill(
        self, case: Case, encoder: Encoder, *, cache: Any = None
    ) -> tuple[torch.Tensor | None, list[tuple[int, int, int]], list[tuple[int, int, int, Any, Any]]]:
        """R3d: each window prefilled in one step, and after it a drafter's gather one token ahead.

        The answer is R3's rows, the steps ``(request, start, tokens)`` and for each
        step the drafter's ``(request, start, tokens, rows, mask)``: its window is the
        step's moved one token on, its mask the positions there of every item the
        step reached (starting before the step's end), its rows those positions'.
        """
        rows = self.chunked_prefill_embedding(case, encoder, cache=cache)
        cache = self.new_cache(0) if cache is None else cache
        steps = [(k, r.prefix_len, r.extend_len) for k, r in enumerate(case.requests) if r.extend_len > 0]
        drafts = [self._draft(case, step, encoder, cache) for step in steps]
        return rows, steps, drafts

    def _draft(
        self, case: Case, step: tuple[int, int, int], encoder: Encoder, cache: EmbeddingCache
    ) -> tuple[int, int, int, torch.Tensor | None, torch.Tensor]:
        """One step's drafter gather: its window ``[start + 1, start + tokens + 1)``."""
        torch = _torch()
        k, start, tokens = step
        req = case.requests[k]
        first = start if self.bug == "draft_gather_unshifted" else start + 1
        window = range(first, first + tokens)
        reach = start + tokens  # an item starting here was not reached by the step
        if self.bug == "draft_reads_unreached_item":
            reach = window.stop
        marks = window.stop - 1 if self.bug == "draft_clipped_at_step_end" else window.stop
        at: dict[int, tuple[Item, int]] = {}
        for item in req.items:
            if item.extent.start < reach:
                for index, p in enumerate(item.positions()):
                    if window.start <= p < marks:
                        at[p] = (item, index)
        needed = [item for item, _ in at.values()]  # one encode each (``_embed`` dedups)
        if self.bug == "draft_reads_unreached_item":  # encoded only for what the step itself reached
            needed = [item for item in needed if item.extent.start < start + tokens]
        found: dict[Hashable, torch.Tensor] = {}
        self._embed(needed, encoder, cache, found)
        picked = []
        for p in window:
            if p in at:
                item, index = at[p]
                if self._key(item) not in found:
                    raise RuntimeError(f"encoder cache miss: request {k}'s item at {item.extent.start}")
                picked.append(found[self._key(item)][index : index + 1])
        mask = torch.tensor([p in at for p in window], dtype=torch.bool, device=case.device)
        return k, start + 1, tokens, torch.cat(picked) if picked else None, mask

    # R3e ----------------------------------------------------------------------

    def embedding_and_mask(
        self, case: Case, encoder: Encoder, *, cache: Any = None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """R3e as an engine's caller runs it: each modality apart, with its own encoder (a model's
        ``get_image_feature``, ``get_audio_feature``), its rows scattered by its own mask."""
        modalities = sorted({item.modality for _, _, item in case.items()}, key=_modality_order)
        if len(modalities) <= 1:
            return self._embedding_and_mask(case, encoder, cache=cache)
        torch = _torch()
        input_ids, _ = tensors.input_ids(case)
        dtype = getattr(torch, case.dtype)
        embeds = torch.zeros(input_ids.shape[0], case.hidden, dtype=dtype, device=case.device)
        union = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=case.device)
        shape = union.shape
        for modality in modalities:
            one = _ModalityEncoder(encoder, modality)
            rows, mask = self._embedding_and_mask(self._of_modality(case, modality), one, cache=cache)
            if rows is None or mask is None:
                continue
            shape = mask.shape
            mask = mask.reshape(-1)
            embeds[mask] = rows.reshape(-1, rows.shape[-1]).to(embeds.dtype)
            union |= mask
        if not union.any():
            return None, None
        return embeds[union], union.reshape(shape)  # the mask in the shape each call gave it

    def _of_modality(self, case: Case, modality: str) -> Case:
        """The batch as one modality's call sees it: every request, with only that modality's items."""

        def kind(request: Request, item: Item) -> str:
            if self.bug == "modality_of_first_item":
                return request.items[0].modality
            return item.modality

        requests = tuple(
            replace(r, items=tuple(i for i in r.items if kind(r, i) == modality)) for r in case.requests
        )
        return replace(case, requests=requests)

    def _embedding_and_mask(
        self, case: Case, encoder: Encoder, *, cache: Any = None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        embedding = None
        if self.bug != "embed_mask_skips_precomputed":
            embedding = self.precomputed_embedding(case)
        if embedding is None:
            embedding = self.chunked_prefill_embedding(case, encoder, cache=cache)
            if embedding is None:
                return None, None
        input_ids, placeholders = tensors.input_ids(case)
        mask = self._mask(input_ids, placeholders)
        return self.adjust_embedding_length(embedding, int(mask.sum())), mask

    def _mask(self, input_ids: torch.Tensor, placeholders: torch.Tensor) -> torch.Tensor:
        """True where ``input_ids`` holds any item's placeholder id."""
        if self.bug == "mask_first_placeholder_only":
            return input_ids == placeholders[0]
        hits = (input_ids.unsqueeze(-1) == placeholders).any(dim=-1)
        if self.bug == "mask_row_shaped":
            return hits.unsqueeze(0)
        return ~hits if self.bug == "mask_marks_text" else hits

    # R4 -----------------------------------------------------------------------

    def count_mm_tokens(self, case: Case) -> int:
        self._validate(case)
        case = self._listed(case)
        total = 0
        for req in case.requests:
            spans = [span for item in req.items for span in item.spans]
            stop = req.prefix_len + req.extend_len
            if self.bug == "count_inclusive_end":
                stop += 1
            total += _before(spans, stop) - _before(spans, req.prefix_len)
        return total

    def adjust_embedding_length(self, embedding: torch.Tensor, wanted: int) -> torch.Tensor:
        """Keep the last ``wanted`` rows (upstream's compromise); too few rows is an error."""
        have = embedding.shape[-2]
        if have < wanted:
            if self.bug == "adjust_no_raise_on_short":
                return embedding
            error = ValueError if self.bug == "adjust_wrong_error_class" else RuntimeError
            prefix = (
                "Multimodal embedding too short"
                if self.bug == "adjust_wrong_message"
                else INSUFFICIENT_PREFIX
            )
            raise error(f"{prefix}: {wanted} placeholders vs {have} rows")
        if self.bug == "adjust_keeps_first":
            return _rows(embedding, 0, wanted)
        if self.bug == "adjust_zero_keeps_all":
            return embedding[..., -wanted:, :]
        return _rows(embedding, have - wanted, have)

    # R5 -----------------------------------------------------------------------

    def _check_one_grid(self, item: Item) -> None:
        if self.bug == "grid_check_ignores_grid_thws" and item.grid_key != "image_grid_thw":
            return
        rows = len(item.grid)
        if rows >= 1 if self.bug == "grid_check_at_least_one" else rows == 1:
            return
        if self.bug == "grid_check_wrong_message":
            raise ValueError("expected a single image_grid_thw row per item")
        raise ValueError(ONE_GRID_MESSAGE)

    def image_feature(self, case: Case, items: Sequence[FeatureItem]) -> torch.Tensor:
        checked = items[:1] if self.bug == "grid_check_first_item_only" else items
        for feature_item in checked:
            self._check_one_grid(feature_item.item)
        return _torch().cat([feature_item.features for feature_item in items])

    def split_item(self, case: Case, item: FeatureItem) -> list[FeatureItem]:
        """Cut an aggregated item as an engine does: by grid row, or without a grid entry by entry.

        Lengths decide, as in an engine: the carrier's first dimension (features,
        else precomputed rows) against the grid's ``t*h*w`` counts, and each
        model-data value's against the part and patch counts. Anything that does
        not line up is refused with a ``ValueError``.
        """
        whole = item.item
        count = len(whole.spans)
        if count <= 1:
            return [item]
        if whole.grid_form == "flat":
            if self.bug == "split_flat_grid_crashes":
                raise IndexError("too many indices for tensor of dimension 1")
            raise ValueError(f"cannot split {count} spans: a flat (rank-1) grid")
        if whole.grid_form == "absent":
            return self._split_entries(item, count)
        groups = self._span_groups(whole)
        if groups is None:
            if self.bug == "split_mismatched_grid_per_span" and whole.modality == "image":
                return self._split_per_span(item)
            raise ValueError(f"cannot split {count} spans: {len(whole.grid)} grid rows for {count} spans")
        counts = [t * h * w for t, h, w in whole.grid]
        carried = _first_dim(item.features if item.embedding is None else item.embedding)
        if item.embedding is not None:
            if [sum(e - s + 1 for s, e in group) for group in groups] != counts:
                raise ValueError(f"cannot split {count} spans: precomputed rows that do not follow the grid")
        elif carried != sum(counts) and self.bug != "split_ignores_feature_total":
            raise ValueError(f"cannot split {count} spans: {carried} feature rows for {sum(counts)} patches")
        bounds = list(accumulate(counts, initial=0))
        if self.bug == "split_drops_last_patch_rows":
            bounds[-1] -= 1
        if self.bug == "split_ignores_feature_total":
            bounds[-1] = carried or 0
        return [
            FeatureItem(
                self._part(whole, group, row),
                self._cut_features(item.features, lo, hi, k),
                embedding=self._cut_embedding(item.embedding, lo, hi),
                model_data=self._cut_data(item.model_data, k, len(groups), (lo, hi), bounds[-1]),
            )
            for k, (group, row, (lo, hi)) in enumerate(zip(groups, whole.grid, pairwise(bounds), strict=True))
        ]

    def _span_groups(self, whole: Item) -> list[tuple[Span, ...]] | None:
        """Each part's spans: an image's one span per grid row; a video's ``t`` frame spans per row
        (or one span per video)."""
        spans, rows = whole.spans, len(whole.grid)
        video = whole.modality == "video" and whole.grid_key == "video_grid_thw"
        if video and self.bug != "split_video_as_images":
            frames = [t for t, _, _ in whole.grid]
            starts = list(accumulate(frames, initial=0))
            if len(spans) == starts[-1]:
                return [spans[a:b] for a, b in pairwise(starts)]
        elif not video and (whole.modality != "image" or whole.grid_key == "video_grid_thw"):
            return None
        return [(span,) for span in spans] if len(spans) == rows else None

    def _split_entries(self, item: FeatureItem, count: int) -> list[FeatureItem]:
        """No grid: one part per span, each with one entry; patch-aligned data cut by ``num_patches``."""
        whole = item.item
        carried = _first_dim(item.features if item.embedding is None else item.embedding)
        if carried != count:
            raise ValueError(f"cannot split {count} spans: no grid, {carried} entries for {count} spans")
        sizes = item.model_data.get("num_patches")
        if sizes is not None:
            sizes = [int(n) for n in (sizes.tolist() if hasattr(sizes, "tolist") else sizes)]
        for key, value in item.model_data.items():
            alignment = MODEL_DATA_KEYS.get(key)
            if alignment == "row" and _first_dim(value) != count:
                raise ValueError(f"cannot split {count} spans: no grid, {key} has no entry per span")
            if alignment == "patch" and (sizes is None or len(sizes) != count):
                raise ValueError(f"cannot split {count} spans: no grid, patch data without num_patches")
        if self.bug == "split_ignores_num_patches":
            sizes = None
        patch_bounds = list(pairwise(accumulate(sizes, initial=0))) if sizes else [(0, 0)] * count
        total = patch_bounds[-1][1] if sizes else -1
        return [
            FeatureItem(
                replace(
                    whole,
                    spans=(span,),
                    grid=(whole.grid[k],) if len(whole.grid) == count else (),
                    feature_rows=None if item.embedding is not None else 1,
                ),
                self._cut_features(item.features, k, k + 1, k),
                embedding=self._cut_embedding(item.embedding, k, k + 1),
                model_data=self._cut_data(item.model_data, k, count, patch_bounds[k], total),
            )
            for k, span in enumerate(whole.spans)
        ]

    def _split_per_span(self, item: FeatureItem) -> list[FeatureItem]:
        """The seeded bug: an image whose grid does not match its spans is cut one entry per span,
        every part keeping the whole grid."""
        whole = item.item
        return [
            FeatureItem(
                replace(whole, spans=(span,)),
                self._cut_features(item.features, k, k + 1, k),
                embedding=self._cut_embedding(item.embedding, k, k + 1),
                model_data=dict(item.model_data),
            )
            for k, span in enumerate(whole.spans)
        ]

    def _cut_features(self, features: Any, lo: int, hi: int, k: int) -> Any:
        if features is None:
            return None
        if self.bug == "split_numpy_features_whole" and type(features).__module__ == "numpy":
            return features
        if self.bug == "split_sequence_features_by_part" and isinstance(features, (list, tuple)):
            return [features[k]]
        return features[lo:hi]

    def _cut_embedding(self, embedding: Any, lo: int, hi: int) -> Any:
        if embedding is None or self.bug == "split_precomputed_kept_whole":
            return embedding
        return embedding[lo:hi]

    def _cut_data(
        self, data: Mapping[str, Any], k: int, parts: int, patches: tuple[int, int], total: int
    ) -> dict[str, Any]:
        """Each value by its length: one per part (entry ``k``), one per patch (rows ``patches``), or
        anything else, copied."""
        cut: dict[str, Any] = {}
        for key, value in data.items():
            length = _first_dim(value)
            listed = isinstance(value, (list, tuple))
            if length is None:
                if self.bug != "split_scalar_data_dropped":
                    cut[key] = value
            elif listed and self.bug == "split_list_data_copied":
                cut[key] = value
            elif length == parts:
                cut[key] = [value[k]] if listed else value[k : k + 1]
            elif length == total and self.bug != "split_patch_data_copied":
                cut[key] = value[patches[0] : patches[1]]
            else:
                cut[key] = value
        return cut

    def _part(self, whole: Item, spans: tuple[Span, ...], grid_row: tuple[int, int, int]) -> Item:
        """The split item of one grid row: same content key, its spans, one grid row."""
        if self.bug == "split_spans_relative":
            origin = whole.spans[0][0]
            spans = tuple((start - origin, end - origin) for start, end in spans)
        grid = whole.grid if self.bug == "split_keeps_aggregated_grid" else (grid_row,)
        return replace(whole, spans=spans, grid=grid, grid_form="rows", feature_rows=None)


def _first_dim(value: Any) -> int | None:
    """A value's length along its first dimension; ``None`` for a scalar (or no value)."""
    if isinstance(value, (list, tuple)):
        return len(value)
    shape = getattr(value, "shape", None)
    return int(shape[0]) if shape is not None and len(shape) > 0 else None
