"""The reference model as a target: the self-check, and the baseline every mutant departs from."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mmharness import reference, tensors
from mmharness.model import Case, Item, validate
from mmharness.targets.base import ALL_CAPABILITIES, Encoder, FeatureItem, PathName, Target

if TYPE_CHECKING:
    import torch


class ReferenceTarget(Target):
    """Answers every rule from ``mmharness.reference``; refuses malformed cases with a ``CaseError``."""

    name = "reference"
    capabilities = ALL_CAPABILITIES

    def describe(self) -> dict[str, Any]:
        return {"target": self.name, "source": reference.__file__, "stubbed": []}

    def unreceived(self, case: Case) -> str | None:
        """``None``: the rules speak of every well-formed case, EVS-pruned videos included."""
        return None

    def embedding_chunk(
        self, embedding: torch.Tensor, case: Case, request: int
    ) -> tuple[torch.Tensor, int, int]:
        validate(case)
        req = case.requests[request]
        flat = embedding.reshape(-1, embedding.shape[-1])
        tokens = sum(item.token_count for item in req.items)
        if flat.shape[0] != tokens:
            raise ValueError(
                f"requests[{request}]: embedding has {flat.shape[0]} rows for {tokens} placeholder tokens"
            )
        inside, start, end = reference.request_chunk(req)
        return _rows(flat, inside), start, end

    def precomputed_embedding(self, case: Case) -> torch.Tensor | None:
        validate(case)
        rows = reference.precomputed_embedding(case)
        return (
            None if rows is None else tensors.materialise(case, rows).to(reference.precomputed_device(case))
        )

    def new_cache(self, max_size: int) -> None:
        return None

    def chunked_prefill_embedding(
        self, case: Case, encoder: Encoder, *, cache: Any = None, path: PathName = "batched"
    ) -> torch.Tensor | None:
        validate(case)
        wanted = reference.chunked_prefill_embedding(case)
        if wanted is None:
            return None
        unique: dict[tuple[int, int], Item] = {}
        for r in map(reference.pruned, case.requests):  # where the rows are served (after EVS)
            for item in r.items:
                if any(p in r.window for p in item.positions()):
                    unique.setdefault((item.hash, item.token_count), item)
        encoded = _per_item(encoder(list(unique.values())), list(unique.values()))
        by_key = dict(zip(unique, encoded, strict=True))
        import torch

        return torch.stack([by_key[(row.hash, row.count)][row.index] for row in wanted])

    def embedding_and_mask(
        self, case: Case, encoder: Encoder, *, cache: Any = None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        import torch

        embedding = self.precomputed_embedding(case)
        if embedding is None:
            embedding = self.chunked_prefill_embedding(case, encoder, cache=cache)
            if embedding is None:
                return None, None
        input_ids, _ = tensors.input_ids(case)
        mask = torch.tensor(reference.embedding_mask(case), dtype=torch.bool, device=input_ids.device)
        kept = reference.adjust_embedding_length(embedding.shape[0], int(mask.sum()))
        return embedding[kept.start : kept.stop], mask

    def count_mm_tokens(self, case: Case) -> int:
        validate(case)
        return reference.count_mm_tokens(case)

    def adjust_embedding_length(self, embedding: torch.Tensor, wanted: int) -> torch.Tensor:
        kept = reference.adjust_embedding_length(embedding.shape[-2], wanted)  # rows: [n, H] or [1, n, H]
        return embedding[..., kept.start : kept.stop, :]

    def image_feature(self, case: Case, items: Sequence[FeatureItem]) -> torch.Tensor:
        import torch

        for feature_item in items:
            reference.check_one_grid(feature_item.item)
        return torch.cat([feature_item.features for feature_item in items])

    def split_item(self, case: Case, item: FeatureItem) -> list[FeatureItem]:
        """R5's parts (``mmharness.item_data.expected_parts``); outside the rule, a clear ``ValueError``."""
        from mmharness import item_data

        return item_data.expected_parts(item)


def _per_item(output: torch.Tensor | list[torch.Tensor], items: list[Item]) -> list[torch.Tensor]:
    """Cut an encoder's output (one tensor, or a list per item) into 2-D per-item blocks."""
    if isinstance(output, list):
        return [block.reshape(-1, block.shape[-1]) for block in output]
    flat = output.reshape(-1, output.shape[-1])
    return list(flat.split([item.token_count for item in items]))


def _rows(flat: torch.Tensor, indices: list[int]) -> torch.Tensor:
    """``flat[indices]``; one run of indices is taken as a slice, the same rows several times faster."""
    if indices and indices == list(range(indices[0], indices[-1] + 1)):
        return flat[indices[0] : indices[-1] + 1]
    return flat[indices]
