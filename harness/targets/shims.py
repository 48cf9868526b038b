"""Stand-ins for the parts of SGLang that the harness does not load.

The scheduling rules import a few dozen names from the rest of the engine (its
data item type, runtime context, platform probes, loggers, GPU kernels). The
loader serves each such import from a stub module: a handful of names get a
*faithful shim* written here from how the rules use them (never copied from
SGLang), and every other name gets a ``Stub``, a harmless placeholder that is
recorded so ``describe()`` can show the user what was faked.

torch is imported only inside functions: importing this module must stay cheap.
"""

from __future__ import annotations

import enum
import inspect
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ENGINE_LOGGER = "mmharness.engine"
"""Where the engine's own warnings go; silent unless a user attaches a handler."""


@dataclass
class Record:
    """Every name the loader synthesised or shimmed, and what the engine asked the item shim for."""

    stubbed: set[str] = field(default_factory=set)
    shimmed: set[str] = field(default_factory=set)
    item_misses: set[str] = field(default_factory=set)
    packages: set[str] = field(default_factory=set)
    """Third-party top-level packages served from stubs (only when a load opts in, see the loader)."""


# Placeholders ------------------------------------------------------------------------


class Stub:
    """A placeholder for an engine name the harness does not load.

    It survives what module-level engine code does with imported names: call it,
    read attributes, subclass it (``__mro_entries__``, class keywords such as
    ``msgspec.Struct``'s ``kw_only=True`` included), decorate with it (a call
    with one function or class returns it unchanged), use it in annotations
    (``X | None``, ``X[int]``) and in ``isinstance`` (never matches). It is falsy,
    so feature switches read from it are off.

    A stub may stand for a module (``from sglang.srt.managers import
    schedule_batch``), so a ``resolve`` hook, when given, answers its attributes:
    that is how ``schedule_batch.MultimodalDataItem`` still reaches the shim.
    """

    __slots__ = ("_mm_class", "_mm_name", "_mm_resolve")

    def __init__(self, name: str, resolve: Callable[[str, str], Any] | None = None) -> None:
        object.__setattr__(self, "_mm_name", name)
        object.__setattr__(self, "_mm_class", None)
        object.__setattr__(self, "_mm_resolve", resolve)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        if self._mm_resolve is not None:
            return self._mm_resolve(self._mm_name, name)
        return Stub(f"{self._mm_name}.{name}")

    def __setattr__(self, name: str, value: Any) -> None:
        """Engine code may set attributes on a stub (a registry, a flag); ignore them."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and (inspect.isfunction(args[0]) or isinstance(args[0], type)):
            return args[0]
        return Stub(f"{self._mm_name}()")

    def __mro_entries__(self, bases: tuple) -> tuple[type]:
        if self._mm_class is None:
            name = self._mm_name.rsplit(".", 1)[-1]
            namespace = {"__doc__": f"stub of {self._mm_name}", "__init_subclass__": _any_class_keywords}
            object.__setattr__(self, "_mm_class", type(name, (), namespace))
        return (self._mm_class,)

    def __getitem__(self, key: Any) -> Stub:
        return self

    def __or__(self, other: Any) -> Stub:
        return self

    __ror__ = __or__

    def __instancecheck__(self, obj: Any) -> bool:
        return False

    def __subclasscheck__(self, cls: Any) -> bool:
        return False

    def __bool__(self) -> bool:
        return False

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0

    def __enter__(self) -> Stub:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def __repr__(self) -> str:
        return f"<mmharness stub {self._mm_name}>"


def _any_class_keywords(cls: type, **keywords: Any) -> None:
    """A stub base class takes the class keywords its real counterpart takes, and ignores them."""


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
            raise ValueError(
                f"unknown modality {name!r}; known: {', '.join(m.name for m in Modality)}"
            ) from None

    @staticmethod
    def all() -> list[Modality]:
        return list(Modality)


class MultimodalInputFormat(enum.Enum):
    """How a request's MM data arrived: raw media, a processor's output, or final embeddings."""

    NORMAL = enum.auto()
    PROCESSOR_OUTPUT = enum.auto()
    PRECOMPUTED_EMBEDDING = enum.auto()


class MultimodalDataItem:
    """What the scheduling rules read and write on one engine MM item.

    The fields are the engine's names (``offsets`` as a list of inclusive
    ``(start, end)`` pairs, ``precomputed_embeddings``, ``model_specific_data``),
    so engine code runs on it unchanged. As in the engine, an unknown attribute is
    looked up in ``model_specific_data``; anything else raises ``AttributeError``
    naming this shim and is recorded, so a release that needs more shows up in
    ``describe()``. The loader subclasses it per load to attach that record.
    ``set(name, value)`` (how payload parsers fill an item) writes a field, or any
    other name into ``model_specific_data``, as the engine's item does.
    """

    _mm_record: Record | None = None
    FIELDS = frozenset(
        (
            "modality", "hash", "pad_value", "offsets", "format", "feature",
            "precomputed_embeddings", "keep_device_embedding", "model_specific_data",
        )
    )  # fmt: skip

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
        self.modality = modality
        self.hash = hash
        self.pad_value = pad_value
        self.offsets = offsets
        self.feature = feature
        self.precomputed_embeddings = precomputed_embeddings
        self.model_specific_data = {} if model_specific_data is None else model_specific_data
        self.keep_device_embedding = False
        self.format = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        data = self.__dict__.get("model_specific_data") or {}
        if name in data:
            return data[name]
        if self._mm_record is not None:
            self._mm_record.item_misses.add(name)
        raise AttributeError(
            f"'MultimodalDataItem' object has no attribute '{name}' "
            "(mmharness shim: this release needs more of the item type)"
        )

    def set(self, name: str, value: Any) -> None:
        if name in self.FIELDS:
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

    def set_pad_value(self) -> None:
        """The harness sets ``pad_value`` itself (from the case), so there is nothing to derive."""

    # CUDA-IPC transport: features are plain tensors here, never shared handles.
    def has_cuda_ipc_proxy(self) -> bool:
        return False

    def can_defer_cuda_ipc_feature_reconstruction(self) -> bool:
        return False

    def acknowledge_deferred_cuda_ipc_feature(self, *args: Any, **kwargs: Any) -> None:
        return None

    def reconstruct(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __repr__(self) -> str:
        return (
            f"MultimodalDataItem(modality={self.modality.name}, hash={self.hash}, "
            f"offsets={self.offsets}, precomputed={self.precomputed_embeddings is not None})"
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
        return Stub(f"{self._name}().{name}")


class ServerArgsDict(dict):
    """``global_server_args_dict`` of 0.4.x: the same defaults, item access."""

    def __init__(self, record: Record) -> None:
        super().__init__(RUNTIME_DEFAULTS)
        self._record = record

    def __missing__(self, key: str) -> Any:
        self._record.stubbed.add(f"global_server_args_dict[{key!r}]")
        return Stub(f"global_server_args_dict[{key!r}]")


# Small functions ---------------------------------------------------------------------


def maybe_assert_sum(tensor: Any, expected: int, msg: str = "") -> None:
    """Strict: the engine's probe is off by default; here a wrong sum always raises."""
    total = int(tensor.sum())
    if total != expected:
        raise AssertionError(f"{msg}: sum {total} != expected {expected}")


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
    "get_bool_env_var": _false,
    "print_warning_once": _nothing,
    "MultiModalStaticCache": StaticCacheShim,
    "MultiModalCache": StaticCacheShim,
    "EmbeddingResult": EmbeddingResult,
}


def shim_for(name: str, record: Record, item_type: type) -> Any:
    """The faithful shim serving ``name`` from a stub module, or ``None`` for a plain ``Stub``."""
    if name in _FIXED:
        return _FIXED[name]
    if name == "MultimodalDataItem":
        return item_type
    if name in CONTEXT_GETTERS:
        return _context_getter(name, record)
    if name == "global_server_args_dict":
        return ServerArgsDict(record)
    if name == "logger":
        return _engine_logger()
    return None
