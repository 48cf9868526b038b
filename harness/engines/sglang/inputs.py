"""What the harness builds for SGLang's rule functions: their items, batches, encoder and stand-ins.

A ``Case`` becomes the engine's own arguments as the engine's caller
(``embed_mm_inputs``) makes them (``Builder``): one engine item per case item
(offsets as ``(start, end)`` pairs, placeholder id as ``pad_value``; an item the
encoder embeds carries its features, a precomputed one its rows, never both, as
the processors hand them), cumulative ``items_size``, per-request prefix and
extend lengths and ``items_offset_list``; the encoder each call is handed; the
stand-in model, text embedding and vision tower the callers' code meets. All of
it is the harness's supply (``targets.faults``): a raise here, or an attribute
the engine reads that these objects lack, is *could not test*, never the
engine's divergence; only a refusal of what the engine handed the encoder (an
item it was never given) is the engine's own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import accumulate
from types import SimpleNamespace
from typing import Any

from mmharness import item_data, tensors
from mmharness.model import Case, Item, Request
from mmharness.targets.base import Encoder, HarnessGap
from mmharness.targets.faults import engines_own, supplied

FEATURE = "item.feature"
"""What an encoder item's features are supplied as: a plain tensor, where a processor's may carry more."""


@dataclass
class Batch:
    """A case in the engine's calling convention."""

    items: list[Any]
    owners: dict[int, Item]
    items_size: list[int]
    prefix_length: list[int]
    extend_length: list[int]
    items_offset_list: list[list[tuple[int, int]]]
    requests: dict[int, int] = field(default_factory=dict)
    """``id`` of an engine item -> its request's index in the case."""
    calls: list[set[int]] = field(default_factory=list)
    """The requests whose items each encoder call held, in call order."""
    case: Case | None = None
    """The case it came from (the lazily built ``input_ids``, placeholder ids and device)."""


class Lazy:
    """A value of the vocabulary built only if the function called names it (``SGLangTarget._call``)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


@dataclass(frozen=True)
class Builder:
    """The items, batches and encoders of one load: its item type and ``Modality``, whether its rules
    take an encoder's list output, and the type an EVS video's encoder output is made as."""

    item_type: type
    modality: Any
    list_encoder: bool
    evs_type: type | None
    logger: logging.Logger

    def member(self, item: Item) -> Any:
        return self.modality[item.modality.upper()]

    def item(
        self,
        case: Case,
        item: Item,
        *,
        embedding: Any = None,
        feature: Any = None,
        grid: bool = False,
        model_data: Mapping[str, Any] | None = None,
        request: Request | None = None,
    ) -> Any:
        """One engine item: ``model_data``, with the grid under its key (``grid``), and for an EVS video
        the request's whole sequence (what the model's ``pad_input_ids`` leaves for EVS)."""
        data: dict[str, Any] = dict(model_data or {})
        if grid:
            data[item.grid_key] = item_data.grid(item)
        if item.frame_rows and request is not None:
            data["pre_chunked_input_ids"] = tensors.sequence_ids(request)
        return self.item_type(
            modality=self.member(item),
            hash=item.hash,
            pad_value=tensors.placeholder_id(item),
            offsets=[tuple(span) for span in item.spans],
            feature=feature,
            precomputed_embeddings=embedding,
            model_specific_data=data,
        )

    def batch(self, case: Case, *, precomputed: bool, modality: str | None = None) -> Batch:
        """The case in the engine's calling convention: every item, or one modality's (``modality``);
        with ``precomputed``, a precomputed item carries its rows, and every other item its features.

        The per-request lists are cut to the case's ``prefix_listed`` and
        ``extend_listed`` (shorter than the batch, as EAGLE hands them).
        """
        items, owners, requests = [], {}, {}
        chosen = [[i for i in r.items if modality is None or i.modality == modality] for r in case.requests]
        for r, request_items in enumerate(chosen):
            for item in request_items:
                embedding = tensors.item_embedding(case, item) if precomputed and item.precomputed else None
                feature = features(case, item) if embedding is None else None
                engine_item = self.item(
                    case, item, embedding=embedding, feature=feature, request=case.requests[r]
                )
                owners[id(engine_item)] = item
                requests[id(engine_item)] = r
                items.append(engine_item)
        return Batch(
            items=items,
            owners=owners,
            items_size=[0, *accumulate(len(c) for c in chosen)],
            prefix_length=[r.prefix_len for r in case.requests][: case.prefix_listed],
            extend_length=[r.extend_len for r in case.requests][: case.extend_listed],
            items_offset_list=[[tuple(span) for item in c for span in item.spans] for c in chosen],
            requests=requests,
            case=case,
        )

    def modalities(self, case: Case) -> list[str]:
        """The case's modalities in the order the engine embeds them (its ``Modality`` members)."""
        present = {item.modality for _, _, item in case.items()}
        members = self.modality
        order = [m.name.lower() for m in (members.all() if hasattr(members, "all") else members)]
        return [m for m in order if m in present] + sorted(present - set(order))

    def values(self, batch: Batch, **more: Any) -> dict[str, Any]:
        """Every argument a batch-level rule function may take, by name (``forms.SUPPLIED``); ``more``
        (the encoder, the call's own ids) replaces the defaults built from the batch's case."""
        case = batch.case
        assert case is not None
        return {
            "items": batch.items,
            "embedding_items": batch.items,
            "items_size": batch.items_size,
            "prefix_length": batch.prefix_length,
            "extend_length": batch.extend_length,
            "items_offset_list": batch.items_offset_list,
            "logger": self.logger,
            "input_ids": Lazy(lambda: tensors.input_ids(case)[0]),
            "placeholder_tensor": Lazy(lambda: placeholders(batch)),
            "device": Lazy(lambda: device_of({**more, "case": case})),
            **more,
        }

    def embedder(self, batch: Batch, encoder: Encoder, modality: str | None = None) -> Callable[[list], Any]:
        """The data-embedding function: engine items back to case items, then the encoder.

        ``modality``: the function is one modality's (a model's ``get_image_feature``),
        so an item of another modality handed to it is the engine's mistake.
        """

        def embed(engine_items: list[Any]) -> Any:
            try:
                items = [batch.owners[id(e)] for e in engine_items]
            except KeyError:
                raise engines_own(
                    RuntimeError("mmharness: the engine encoded an item it was not given")
                ) from None
            strays = sorted({item.modality for item in items} - {modality}) if modality else []
            if strays:
                raise engines_own(
                    RuntimeError(
                        f"mmharness: the engine handed the {modality} encoder {' and '.join(strays)} items"
                    )
                )
            batch.calls.append({batch.requests[id(e)] for e in engine_items})
            output = encoder(items)
            pruned = [item for item in items if item.frame_rows]
            if isinstance(output, list) and (pruned or not self.list_encoder):
                import torch

                output = torch.cat([part.reshape(-1, part.shape[-1]) for part in output])
            if pruned:
                return self.pruned_output(items, output)
            return output

        return embed

    def pruned_output(self, items: list[Item], output: Any) -> Any:
        """An EVS video's encoder output as the model returns it: its rows and the rows each frame kept.
        The model prunes one video per call (it asserts so), and so does this stand-in."""
        if len(items) != 1 or self.evs_type is None:
            raise engines_own(
                RuntimeError(f"mmharness: EVS prunes one video per encoder call, not {len(items)} items")
            )
        return self.evs_type(embedding=output, num_tokens_per_frame=list(items[0].frame_rows))


def features(case: Case, item: Item) -> Any:
    """An encoder item's features as a processor hands them: its feature rows, a plain tensor on the
    case's device (the encoder stand-in never reads them); remembered as ``FEATURE``, so an attribute the
    engine reads that a plain tensor lacks (a transport tensor's ``transport_mode``) is a gap."""
    return supplied(tensors.item_features(case, item), FEATURE)


def device_of(values: dict[str, Any]) -> Any:
    """The device of a call's tensors: its ``input_ids``' or ``embedding``'s, else its case's."""
    import torch

    for name in ("input_ids", "embedding", "placeholder_tensor"):
        value = values.get(name)
        if isinstance(value, torch.Tensor):
            return value.device
    case = values.get("case")
    return torch.device(case.device if isinstance(case, Case) else "cpu")


def placeholders(batch: Batch) -> Any:
    """The sorted placeholder ids of a batch's items, as ``embed_mm_inputs`` hands one modality's call."""
    import torch

    assert batch.case is not None
    ids = sorted({item.pad_value for item in batch.items})
    return torch.tensor(ids, dtype=torch.int64, device=batch.case.device)


class Namespace(SimpleNamespace):
    """A stand-in's plain attributes (a request's ``MultimodalInputs``, a tower's parts): one the engine
    reads and it lacks is the harness's gap, since its class is the harness's."""


def mm_inputs(items: list[Any]) -> Namespace:
    """A request's ``MultimodalInputs`` as ``embed_mm_inputs`` reads it: its items, nothing else."""
    return Namespace(mm_items=items)


class TextEmbedding:
    """The language model's token embedding, as ``embed_mm_inputs`` uses it: zeros for every token.

    Only the rows under the engine's masks are read back, so the text rows' values do not matter.
    """

    num_embeddings = 1 << 62

    def __init__(self, case: Case) -> None:
        import torch

        self.embedding_dim = case.hidden
        self.weight = torch.empty(0, case.hidden, dtype=getattr(torch, case.dtype))

    def __call__(self, input_ids: Any) -> Any:
        import torch

        rows = input_ids.shape[0]
        return torch.zeros(rows, self.embedding_dim, dtype=self.weight.dtype, device=input_ids.device)


class ModelGap(HarnessGap, AttributeError):
    """An attribute the stand-in model lacks: a gap where the engine needs it, and plain absence where it
    asks with a default (``getattr`` and ``hasattr`` catch an ``AttributeError``)."""


def model(embedders: dict[str, Callable[[list[Any]], Any]]) -> Any:
    """A multimodal model as ``embed_mm_inputs`` meets it: a ``get_<modality>_feature`` method per
    modality, the harness's encoder for that modality's items.

    Bound methods, as a model's own are: the rules read a bound encoder's name
    and class to decide whether the model moves its features to the device
    itself (a list of model classes; this one is on no such list, so the rules
    move them). Any other attribute the engine reads of it is a gap; one it asks for with a default
    (``getattr(model, name, None)``: a model may lack it) it does without, as for a model lacking it.
    """

    def method(modality: str, embed: Callable[[list[Any]], Any]) -> Callable[[Any, list[Any]], Any]:
        def feature(self: Any, items: list[Any]) -> Any:
            return embed(items)

        feature.__name__ = feature.__qualname__ = f"get_{modality}_feature"
        return feature

    def missing(self: Any, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise ModelGap(f"the harness's stand-in model has no {name}", what=f"multimodal_model.{name}")

    namespace: dict[str, Any] = {f"get_{m}_feature": method(m, embed) for m, embed in embedders.items()}
    return type("StandInModel", (), {**namespace, "__getattr__": missing})()


class IdentityTower:
    """A vision tower whose output is its input: Kimi-K3's features pass straight through."""

    patch_size = 14

    def __init__(self, device: Any, dtype: Any) -> None:
        import torch

        self.device = torch.device(device)
        weight = torch.empty(0, dtype=dtype)
        self.patch_embed = Namespace(proj=Namespace(weight=weight))

    def __call__(self, pixel_values: Any, *args: Any, **kwargs: Any) -> Any:
        return pixel_values


def kimi_stand_in(case: Case) -> Namespace:
    """Kimi-K3's model as its ``get_image_feature`` reads it: an identity tower and projector."""
    import torch

    return Namespace(
        vision_tower=IdentityTower(case.device, getattr(torch, case.dtype)),
        mm_projector=lambda embeds: embeds,
        use_data_parallel=False,
        _encoder_image_processor=None,
    )
