"""Stand-ins for the parts of SGLang that the harness does not load.

The scheduling rules import a few dozen names from the rest of the engine (its
data item type, runtime context, platform probes, loggers, GPU kernels). The
loader serves each such import from a stub module: a handful of names get a
*faithful shim* written here from how the rules use them (never copied from
SGLang), and every other name gets a recorded ``Stub`` that turns loud once the
files have loaded (``mmharness.targets.stubs``), so ``describe()`` shows what was
faked and a run that needs more says so.

torch is imported only inside functions: importing this module must stay cheap.
"""

from __future__ import annotations

import enum
import fnmatch
import logging
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mmharness.engines.sglang import distributed
from mmharness.engines.sglang.items import ItemSchema
from mmharness.engines.sglang.settings import Settings
from mmharness.targets.base import HarnessGap
from mmharness.targets.distributed import Collectives, GroupOfOne
from mmharness.targets.faults import engines_own
from mmharness.targets.settings import Declarations
from mmharness.targets.stubs import Record, Stub

ENGINE_LOGGER = "mmharness.engine"
"""Where the engine's own warnings go; silent unless a user attaches a handler."""


# The MM data item --------------------------------------------------------------------


class Modality(enum.Enum):
    """The modalities the rules branch on (``is_audio`` etc.), by the engine's member names."""

    IMAGE = enum.auto()
    MULTI_IMAGES = enum.auto()
    VIDEO = enum.auto()
    AUDIO = enum.auto()

    @staticmethod
    def from_str(name: str) -> Modality:
        """By member name, any case; an unknown name is a ``ValueError``, as in every release."""
        try:
            return Modality[name.upper()]
        except KeyError:
            raise engines_own(
                ValueError(f"unknown modality {name!r}; known: {', '.join(m.name for m in Modality)}")
            ) from None

    @staticmethod
    def all() -> list[Modality]:
        return list(Modality)


class MultimodalInputFormat(enum.Enum):
    """How a request's MM data arrived: raw media, a processor's output, or final embeddings."""

    NORMAL = enum.auto()
    PROCESSOR_OUTPUT = enum.auto()
    PRECOMPUTED_EMBEDDING = enum.auto()


class ItemGap(HarnessGap, AttributeError):
    """The engine read an item attribute the harness's item type cannot answer faithfully."""


COMMON_FIELDS = frozenset(
    (
        "modality", "hash", "pad_value", "offsets", "format", "feature",
        "precomputed_embeddings", "keep_device_embedding", "model_specific_data",
    )
)  # fmt: skip
"""Fields of every 0.5 release's item; without the release's own item type these are all it has."""

ALIASES = {"precomputed_embeddings": ("precomputed_features",)}
"""Older names of a field (``precomputed_features`` until 0.4.9), kept equal to it."""


class MultimodalDataItem:
    """What the scheduling rules read and write on one engine MM item.

    The fields are the engine's names (``offsets`` as a list of inclusive
    ``(start, end)`` pairs, ``precomputed_embeddings``, ``model_specific_data``),
    so engine code runs on it unchanged. The loader subclasses it per load with
    the release's own fields (``schema``, read from its ``schedule_batch.py``),
    each set to its declared default. As in the engine, an unknown attribute is
    looked up in ``model_specific_data``; a name the release's item type does
    not have raises a plain ``AttributeError`` as the engine's would, but a
    method it has and this type does not implement, or any unknown name when
    the release's type is not at hand, is an ``ItemGap`` (a *could not test*
    verdict naming it). ``set(name, value)`` (how payload parsers fill an
    item) writes a field, or any other name into ``model_specific_data``.
    """

    _mm_record: Record | None = None
    _mm_schema: ItemSchema | None = None

    def __init__(
        self,
        *,
        modality: Modality = Modality.IMAGE,
        hash: int | None = None,
        pad_value: int | None = None,
        offsets: list[tuple[int, int]] | None = None,
        feature: Any = None,
        precomputed_embeddings: Any = None,
        model_specific_data: dict[str, Any] | None = None,
    ) -> None:
        if self._mm_schema is not None:
            self.__dict__.update(self._mm_schema.defaults())
        self.modality = modality
        self.hash = hash
        self.pad_value = pad_value
        self.offsets = offsets
        self.feature = feature
        self.set_precomputed(precomputed_embeddings)
        self.model_specific_data = {} if model_specific_data is None else model_specific_data
        self.keep_device_embedding = False

    def set_precomputed(self, embedding: Any) -> None:
        """Hand the item a precomputed embedding under every name a release may read it by."""
        self.precomputed_embeddings = embedding
        for alias in ALIASES["precomputed_embeddings"]:
            self.__dict__[alias] = embedding
        self.format = None if embedding is None else MultimodalInputFormat.PRECOMPUTED_EMBEDDING

    @classmethod
    def _mm_fields(cls) -> frozenset[str]:
        return COMMON_FIELDS if cls._mm_schema is None else frozenset(cls._mm_schema.fields)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        data = self.__dict__.get("model_specific_data") or {}
        if name in data:
            return data[name]
        schema = self._mm_schema
        if schema is not None and name not in schema.methods:
            # the release's own item lacks it too: the engine's outcome, as its own type's would be
            raise engines_own(AttributeError(f"'MultimodalDataItem' object has no attribute '{name}'"))
        if MOVES.matches(name):  # a transport method the release's item has: in place, a no-op here
            if self._mm_record is not None:
                self._mm_record.shimmed.add(f"MultimodalDataItem.{name} (rule: {MOVES.name})")
            return _nothing
        if self._mm_record is not None:
            self._mm_record.item_misses.add(name)
        where = "its item type has it" if schema is not None else "its item type is not at hand"
        raise ItemGap(
            f"the engine read MultimodalDataItem.{name}, which the harness's item does not"
            f" implement ({where})",
            what=f"MultimodalDataItem.{name}",
        )

    def set(self, name: str, value: Any) -> None:
        if name in self._mm_fields():
            setattr(self, name, value)
        else:
            self.model_specific_data[name] = value

    __setitem__ = set

    def is_modality(self, modality: Modality) -> bool:
        return self.modality == modality

    def is_image(self) -> bool:
        return self.modality in (Modality.IMAGE, Modality.MULTI_IMAGES)

    def is_video(self) -> bool:
        return self.modality == Modality.VIDEO

    def is_audio(self) -> bool:
        return self.modality == Modality.AUDIO

    def is_valid(self) -> bool:
        return self.is_image() or self.is_video() or self.is_audio()

    def is_precomputed_embedding(self) -> bool:
        return self.precomputed_embeddings is not None

    def padding_values(self) -> tuple[int | None, ...]:
        return (self.pad_value,)

    def padding_sequence(self, length: int) -> list[int | None]:
        return [self.pad_value] * length

    def set_pad_value(self) -> None:
        """The harness sets ``pad_value`` itself (from the case), so there is nothing to derive."""

    # CUDA-IPC transport: features are plain tensors here, never shared handles.
    def has_cuda_ipc_proxy(self) -> bool:
        return False

    def can_defer_cuda_ipc_feature_reconstruction(self) -> bool:
        return False

    def acknowledge_deferred_cuda_ipc_feature(self, *args: Any, **kwargs: Any) -> None:
        return None

    def release_transport_proxies(self, *args: Any, **kwargs: Any) -> None:
        return None

    def reconstruct(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __repr__(self) -> str:
        return (
            f"MultimodalDataItem(modality={self.modality.name}, hash={self.hash}, "
            f"offsets={self.offsets}, precomputed={self.precomputed_embeddings is not None})"
        )


def item_type(record: Record, schema: ItemSchema | None) -> type:
    """The item type of one load: the shim with that load's record and release fields."""
    return type(
        "MultimodalDataItem",
        (MultimodalDataItem,),
        {"_mm_record": record, "_mm_schema": schema, "__module__": __name__},
    )


# Runtime context ---------------------------------------------------------------------


RUNTIME_DEFAULTS: dict[str, Any] = {
    "chunked_prefill_size": -1,
    "tp_size": 1,
    "tp_rank": 0,
    "attn_tp_size": 1,
    "attn_tp_rank": 0,
    "dp_size": 1,
    "pp_size": 1,
    "enable_dp_attention": False,
    "enable_dense_mlp_attn_tp": False,
    "mm_enable_dp_encoder": False,
    "disable_radix_cache": False,
}
"""One process, one rank, chunked prefill off: the scheduling rules' single-GPU view."""


class RuntimeContext:
    """What ``get_schedule()``, ``get_parallel()``, ``get_server_args()`` and friends return.

    Known settings have single-rank defaults; any other setting is recorded and
    reads as a falsy ``Stub``.
    """

    def __init__(self, name: str, record: Record) -> None:
        self._name = name
        self._record = record

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        if name in RUNTIME_DEFAULTS:
            return RUNTIME_DEFAULTS[name]
        self._record.stubbed.add(f"{self._name}().{name}")
        return Stub(f"{self._name}().{name}", self._record)


class ServerArgsDict(dict):
    """``global_server_args_dict`` of 0.4.x: the same defaults, item access."""

    def __init__(self, record: Record) -> None:
        super().__init__(RUNTIME_DEFAULTS)
        self._record = record

    def __missing__(self, key: str) -> Any:
        self._record.stubbed.add(f"global_server_args_dict[{key!r}]")
        return Stub(f"global_server_args_dict[{key!r}]", self._record)


# Small functions ---------------------------------------------------------------------


def maybe_assert_sum(tensor: Any, expected: int, msg: str = "") -> None:
    """Strict: the engine's probe is off by default; here a wrong sum always raises."""
    total = int(tensor.sum())
    if total != expected:
        raise engines_own(AssertionError(f"{msg}: sum {total} != expected {expected}"))


def flatten_nested_list(nested: Any) -> list:
    """Lists flatten recursively; tuples (offset pairs) stay whole, as the rules rely on."""
    if isinstance(nested, list):
        return [leaf for part in nested for leaf in flatten_nested_list(part)]
    return [nested]


def materialize_multimodal_features(features: list, *, device: Any = None, dtype: Any = None) -> Any:
    """Concatenate per-item feature tensors on one device and dtype (Kimi-K3's materialisation)."""
    import torch

    return torch.cat([f.to(device=device, dtype=dtype) for f in features])


def _false(*args: Any, **kwargs: Any) -> bool:
    return False


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


class StaticCacheShim:
    """An embedding cache for a lone rules file whose ``multimodal_cache.py`` is not at hand.

    Byte-bounded LRU over hash keys with the method names the rules call
    (``get``/``get_single``/``set``/``put``/``free``/``has``); ``describe()``
    says the cache is a shim, so cache checks on such a target test this class.
    """

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self.current_size = 0
        self.mm_cache: OrderedDict[Any, Any] = OrderedDict()

    @staticmethod
    def combine_hashes(hashes: list) -> Any:
        return hash(tuple(hashes)) if hashes else None

    @staticmethod
    def _size(entry: Any) -> int:
        tensor = getattr(entry, "embedding", entry)
        return tensor.element_size() * tensor.numel()

    def get(self, key: Any, combined_hash: Any = None) -> Any:
        key = self.combine_hashes(key) if isinstance(key, list) else key
        return self.get_single(key)

    def get_single(self, key: Any) -> Any:
        entry = self.mm_cache.get(key)
        if entry is not None:
            self.mm_cache.move_to_end(key)
        return entry

    def set(self, key: Any, entry: Any, *args: Any) -> bool:
        if key in self.mm_cache:
            self.mm_cache.move_to_end(key)
            return True
        size = self._size(entry)
        if size > self.max_size:
            return False
        while self.current_size + size > self.max_size:
            _, evicted = self.mm_cache.popitem(last=False)
            self.current_size -= self._size(evicted)
        self.mm_cache[key] = entry
        self.current_size += size
        return True

    put = set

    def has(self, key: Any) -> bool:
        return key in self.mm_cache

    def free(self, key: Any, *args: Any) -> bool:
        if key not in self.mm_cache:
            return False
        self.current_size -= self._size(self.mm_cache.pop(key))
        return True

    def clear(self) -> None:
        self.mm_cache.clear()
        self.current_size = 0

    def __len__(self) -> int:
        return len(self.mm_cache)


@dataclass
class EmbeddingResult:
    """The cache's entry type when ``multimodal_cache.py`` is not at hand."""

    embedding: Any


class EVSEmbeddingResult:
    """The output of an EVS-pruned video's encoder (``Item.frame_rows``), where the harness's encoder
    stands in for the model: its rows and the rows each frame kept. ``SGLangTarget`` makes it also an
    instance of the release's own ``EmbeddingResult``, as the cache requires.

    ``redistribute_pruned_frames_placeholders`` is the model's half of the move, written from the
    rule (docs/rules.md, R3e): in the request's whole sequence (``pre_chunked_input_ids``), frame
    ``k``'s run of placeholders becomes ``num_tokens_per_frame[k]`` of them and every other token
    keeps its order; the window's ids of the result and the runs of the item's placeholder id are
    returned. Its contract is one request's window: ``input_ids`` holding anything else (a batch's)
    is refused, as the model's own method asserts.
    """

    def __init__(self, *, embedding: Any, num_tokens_per_frame: list[int]) -> None:
        self.embedding = embedding
        self.num_tokens_per_frame = list(num_tokens_per_frame)

    def redistribute_pruned_frames_placeholders(
        self, input_ids: Any, offsets: list, *, item: Any, extend_prefix_len: int, extend_seq_len: int
    ) -> tuple[Any, list[tuple[int, int]]]:
        import torch

        if len(input_ids) != extend_seq_len:
            raise engines_own(
                AssertionError(
                    f"EVS moves one request's placeholders: handed {len(input_ids)} input ids for a"
                    f" window of {extend_seq_len} (a batch's ids, not the request's)"
                )
            )
        if len(offsets) != len(self.num_tokens_per_frame):
            raise engines_own(
                ValueError(
                    f"EVS moves each frame's placeholders: handed {len(offsets)} runs for"
                    f" {len(self.num_tokens_per_frame)} frames"
                )
            )
        sequence = list(item.pre_chunked_input_ids)
        frames = [(int(start), int(end)) for start, end in offsets]
        moved: list[int] = []
        cursor = 0
        for (start, end), kept in zip(frames, self.num_tokens_per_frame, strict=True):
            moved += sequence[cursor:start] + [item.pad_value] * kept
            cursor = end + 1
        moved += sequence[cursor:]
        runs: list[tuple[int, int]] = []
        for position, token in enumerate(moved):
            if token != item.pad_value:
                continue
            if runs and runs[-1][1] == position - 1:
                runs[-1] = (runs[-1][0], position)
            else:
                runs.append((position, position))
        window = moved[extend_prefix_len : extend_prefix_len + extend_seq_len]
        return torch.tensor(window, dtype=input_ids.dtype, device=input_ids.device), runs


def get_mm_items_offset(input_ids: Any, mm_token_id: int) -> list[tuple[int, int]]:
    """``BaseMultimodalProcessor.get_mm_items_offset``, which the release's ``EVSEmbeddingResult`` calls
    on the moved sequence: the maximal runs of ``mm_token_id`` in a 1-D tensor, in order, as inclusive
    ``(start, end)`` pairs.

    Written from that contract (its docstring's example: ids ``[1, 2, 3, 3, 3, 4, 3, 3]`` and token 3
    give ``[(2, 4), (6, 7)]``) rather than by loading ``base_processor.py``: that module is the
    processors' (executors, IPC transport, image libraries), which every scheduling load would then
    run with stubs, for one static helper. Where they part: the release's helper finds run edges by
    comparing each position with its neighbour cyclically, so a sequence that both starts and ends
    with the token pairs the wrong edges. The processors find the offsets with that same helper and
    their prompts never begin and end with a video's placeholders, so that is input the engine never
    receives (DESIGN.md section 9); the harness draws such sequences, and reports none of them.
    """
    flags = [bool(token == mm_token_id) for token in input_ids.reshape(-1).tolist()]
    runs: list[tuple[int, int]] = []
    for position, flag in enumerate(flags):
        if not flag:
            continue
        if runs and runs[-1][1] == position - 1:
            runs[-1] = (runs[-1][0], position)
        else:
            runs.append((position, position))
    return runs


# Name -> shim ------------------------------------------------------------------------


def _context_getter(name: str, record: Record) -> Callable[[], RuntimeContext]:
    context = RuntimeContext(name, record)
    return lambda *args, **kwargs: context


def _engine_logger() -> logging.Logger:
    logger = logging.getLogger(ENGINE_LOGGER)
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
        logger.propagate = False
    return logger


def _cuda_available(*args: Any, **kwargs: Any) -> bool:
    import torch

    return torch.cuda.is_available()


# Rules: names served by what they are, whichever release or fork uses them ---------------------


@dataclass(frozen=True)
class Rule:
    """A kind of helper served by one faithful stand-in, recognised by its name's patterns.

    Only a function's name (lower snake case) read from a module the harness
    does not load is matched (the loader asks shims only for those): a helper
    defined in a loaded file runs from that file. A query (``get_``, ``is_``,
    ``has_``, ``can_``, ``should_``) is never matched: what it returns matters.
    """

    name: str
    patterns: tuple[str, ...]
    shim: Callable[..., Any]
    why: str

    def matches(self, name: str) -> bool:
        if not _SNAKE.match(name) or name.startswith(_QUERIES):
            return False
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.patterns)


_SNAKE = re.compile(r"^_*[a-z][a-z0-9_]*$")
_QUERIES = tuple(f"{p}_" for p in ("get", "is", "has", "can", "should"))


def _identity(*args: Any, **kwargs: Any) -> Any:
    """What a move on one host hands back: what it was handed (its first argument)."""
    if args:
        return args[0]
    return next(iter(kwargs.values()), None)


MOVES = Rule(
    "moves on this host",
    (
        "materiali[sz]e_*", "_materiali[sz]e_*", "*_to_device", "move_*", "_move_*",
        "*transfer*", "*cuda_ipc*", "reconstruct*", "acknowledge_*", "release_transport*",
    ),
    _identity,
    "A helper that only moves a tensor between devices or processes, or materialises a transported"
    " one, leaves its values as they are. The harness builds every tensor on the case's device in"
    " this process, never behind a CUDA-IPC handle: the move is the identity on what it is handed.",
)  # fmt: skip
LOGGING = Rule(
    "logging and metrics",
    ("log_*", "_log_*", "*metrics*", "record_*", "trace_*", "print_*once"),
    _nothing,
    "A logging, tracing or metrics call observes and changes nothing the rules compute; it is a no-op.",
)
RULES = (MOVES, LOGGING)
"""The rules, in the order they are tried."""


def rule_for(name: str) -> Rule | None:
    """The rule serving a name read from a stub module, or ``None``."""
    return next((rule for rule in RULES if rule.matches(name)), None)


CONTEXT_GETTERS = (
    "get_schedule",
    "get_parallel",
    "get_server_args",
    "get_global_server_args",
    "get_serving",
    "get_disagg",
    "get_exec",
    "get_platform",
    "get_spec",
)

_FIXED: dict[str, Any] = {
    "Modality": Modality,
    "MultimodalInputFormat": MultimodalInputFormat,
    "maybe_assert_sum": maybe_assert_sum,
    "flatten_nested_list": flatten_nested_list,
    "materialize_multimodal_features": materialize_multimodal_features,
    "is_hip": _false,
    "is_npu": _false,
    "is_xpu": _false,
    "is_cuda": _cuda_available,
    "print_warning_once": _nothing,
    "MultiModalStaticCache": StaticCacheShim,
    "MultiModalCache": StaticCacheShim,
    "EmbeddingResult": EmbeddingResult,
    "EVSEmbeddingResult": EVSEmbeddingResult,
    "get_mm_items_offset": get_mm_items_offset,
}


class SGLangShims:
    """The shims of one load: the fixed table, that load's item type and runtime context."""

    def __init__(
        self, record: Record, schema: ItemSchema | None, declared: Declarations | None = None
    ) -> None:
        self.settings = Settings(declared or Declarations(absent="none handed to the load"), record)
        self.record = record
        self.item_type = item_type(record, schema)
        self.modality = Modality
        self._made: dict[str, Any] = {}
        self.collectives = Collectives()
        """What engine code asked of its process group of one (``mmharness.targets.distributed``)."""
        self._groups: dict[str, GroupOfOne] = {}
        self.ruled: dict[str, str] = {}
        """Name -> the rule that served it (``RULES``)."""

    def shim_for(self, name: str) -> Any:
        """The faithful shim serving ``name`` from a stub module, or ``None`` for a plain ``Stub``."""
        setting = self.settings.shim_for(name)  # envs and the get_*_env_var helpers
        if setting is not None:
            return setting
        if name in _FIXED:
            return _FIXED[name]
        if name == "MultimodalDataItem":
            return self.item_type
        if name == "logger":
            return _engine_logger()
        if name in CONTEXT_GETTERS or name == "global_server_args_dict":
            if name not in self._made:
                self._made[name] = (
                    ServerArgsDict(self.record)
                    if name == "global_server_args_dict"
                    else _context_getter(name, self.record)
                )
            return self._made[name]
        one_rank = distributed.shim(name, self.collectives, self._groups)  # a process group of one
        if one_rank is not None:
            return one_rank
        rule = rule_for(name)
        if rule is not None:
            self.ruled[name] = rule.name
            return rule.shim
        return None
