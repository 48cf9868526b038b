"""The one protocol every target implements, and what the harness hands to targets.

A target translates a ``Case`` into its own objects and calls its own functions.
It never imports checks; the checks only see this protocol. Methods a target
lacks are absent from ``capabilities`` and the checks needing them are skipped.
What generic code asks beyond those methods is ``EngineHooks``, each hook with a default.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from mmharness import tensors
from mmharness.item_data import FeatureItem as FeatureItem  # built by item_data, handed to targets
from mmharness.model import Case, Item

if TYPE_CHECKING:
    import torch
    from mmharness.reach import Excluded
    from mmharness.targets.settings import Declarations

# Capabilities: one per function a check may call.
CHUNK = "chunk"  # R1 embedding_chunk
PRECOMPUTED = "precomputed"  # R2 precomputed_embedding
PREFILL = "prefill"  # R3 chunked_prefill_embedding (batched path)
PER_REQUEST_PATH = "per_request_path"  # R3 on the per-request path
EMBED_AND_MASK = "embed_and_mask"  # R3e embedding_and_mask
COUNT = "count"  # R4 count_mm_tokens
ADJUST = "adjust"  # R4 adjust_embedding_length
ONE_GRID = "one_grid"  # R5 image_feature
SPLIT = "split"  # R5 split_item
WHOLE_ITEMS = "whole_items"  # R3w whole_item_prefill: an engine option, not in every engine
DRAFT_LOOKAHEAD = "draft_lookahead"  # R3d draft_prefill: an engine option, not in every engine
SHORT_LISTS = "short_lists"  # R3 with per-request lists shorter than the batch (EAGLE's convention)
SCHEDULER_OPTIONS = "scheduler_options"  # R3w, R3d and the step budgets under drawn scheduler options
PREFIX_RESUME = "prefix_resume"  # R3p prefix_resume_step: where a prefix-cache hit resumes a request
CHUNK_PLAN = "chunk_plan"  # chunk progress prefill_chunks: the chunks a long prompt is planned in
BLOCK_KEYS = "block_keys"  # R3p prefix_block_key: what a prefix cache files a KV block under

ALL_CAPABILITIES = frozenset(
    {CHUNK, PRECOMPUTED, PREFILL, PER_REQUEST_PATH, EMBED_AND_MASK, COUNT, ADJUST, ONE_GRID, SPLIT}
)
"""What a full target has: the rules every engine follows (options such as ``WHOLE_ITEMS`` are extra)."""

PathName = str
"""A target's name for one of its paths (``batched``, ``per_request``; ``v1``, ``v2``)."""
UNLIMITED_CACHE = 1 << 40
"""A cache size (bytes) no case fills: the cache never evicts."""
EncoderForm = Literal["tensor", "list"]
CACHE_EVENTS = ("hit", "miss", "insert", "evict")
"""What a cache may do to an entry: a lookup that finds it or not, an entry stored, one dropped for room."""
CacheEvent = tuple[str, int]
"""``(event, key)``: one of ``CACHE_EVENTS`` and the entry's key (an item's hash, or the engine's key of
several items)."""


METHODS: dict[str, tuple[str, ...]] = {
    CHUNK: ("embedding_chunk",),
    PRECOMPUTED: ("precomputed_embedding",),
    PREFILL: ("chunked_prefill_embedding", "new_cache"),
    PER_REQUEST_PATH: ("chunked_prefill_embedding", "new_cache"),
    EMBED_AND_MASK: ("embedding_and_mask", "new_cache"),
    COUNT: ("count_mm_tokens",),
    ADJUST: ("adjust_embedding_length",),
    ONE_GRID: ("image_feature",),
    SPLIT: ("split_item",),
    WHOLE_ITEMS: ("whole_item_prefill", "new_cache"),
    DRAFT_LOOKAHEAD: ("draft_prefill", "new_cache"),
    SHORT_LISTS: ("chunked_prefill_embedding", "new_cache"),
    SCHEDULER_OPTIONS: ("scheduled_prefill", "new_cache"),
    PREFIX_RESUME: ("prefix_resume_step",),
    CHUNK_PLAN: ("prefill_chunks",),
    BLOCK_KEYS: ("prefix_block_key",),
}
"""What a target declaring a capability must implement; a target implements only what it declares."""


class TargetError(Exception):
    """A target cannot be found, loaded or used; the message says what to do instead."""


class HarnessGap(Exception):
    """The harness could not drive the engine here, so nothing about the engine was learnt.

    Raised by adapters and stubs: a stub or shim reached at run time, a call form
    the adapter does not know, an engine object it cannot build. A check that
    meets one reports *could not test* naming ``what``, never a divergence.
    """

    def __init__(self, message: str, *, what: str) -> None:
        super().__init__(message)
        self.what = what


def gap_in(error: BaseException | None) -> HarnessGap | None:
    """The ``HarnessGap`` behind an error, following ``raise ... from`` and implicit context."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, HarnessGap):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


REQUIRED = ("name", "capabilities", "describe")
"""What every target has itself; the rest of ``Target`` has defaults."""


def with_defaults(adapter: Any) -> Target:
    """``adapter`` as a ``Target``: itself where it is one, else a view of it adding the defaults of the
    ``EngineHooks`` it lacks."""
    return adapter if isinstance(adapter, Target) else _WithDefaults(adapter)


def default_paths(capabilities: Collection[str]) -> tuple[PathName, ...]:
    """The paths of a target that names none: ``batched`` and ``per_request`` for one declaring
    ``PER_REQUEST_PATH``, any other ``batched``."""
    return ("batched", "per_request") if PER_REQUEST_PATH in capabilities else ("batched",)


def paths_of(target: Target) -> tuple[PathName, ...]:
    """The paths a target can take to one answer, its default first (``Target.paths``)."""
    return tuple(target.paths)


def unloaded(
    missing: Collection[str], errors: Mapping[str, str], owners: Mapping[str, Collection[str]]
) -> dict[str, str]:
    """``Target.unloaded`` from a load: each missing capability whose owning files include one that failed.

    ``owners`` maps a capability to the engine modules that would hold it
    (a capability not listed stays a plain skip); ``errors`` is the loader's
    module -> error.
    """
    found: dict[str, str] = {}
    for capability in missing:
        broken = [f"{m} ({errors[m]})" for m in owners.get(capability, ()) if m in errors]
        if broken:
            found[capability] = f"{', '.join(broken)} did not load"
    return found


def missing_methods(target: object) -> list[str]:
    """The methods a target's declared capabilities need and it lacks (empty when it is whole)."""
    declared = target.capabilities  # type: ignore[attr-defined]  # REQUIRED is checked first
    return sorted(
        {
            f"{method} (for {capability})"
            for capability in declared
            for method in METHODS.get(capability, ())
            if not callable(getattr(target, method, None))
        }
    )


@dataclass
class Encoder:
    """The deterministic encoder handed to targets; it records which items it encoded.

    Rows come from ``(hash, token_count)`` as for a precomputed embedding, so a
    target that serves one item's rows for another (a hash collision handled by
    hash alone) produces visibly different values.
    """

    case: Case
    form: EncoderForm = "tensor"
    calls: list[list[tuple[int, int]]] = field(default_factory=list)

    def __call__(self, items: Sequence[Item]) -> torch.Tensor | list[torch.Tensor]:
        self.calls.append([(item.hash, item.token_count) for item in items])
        blocks = [tensors.block(item.hash, item.token_count, self.case) for item in items]
        if self.form == "list":
            return [tensors.shaped(b, self.case) for b in blocks]
        import torch

        return tensors.shaped(torch.cat(blocks), self.case)

    @property
    def encoded(self) -> list[tuple[int, int]]:
        return [key for call in self.calls for key in call]


UNDECLARED_EVS = "EVS-pruned videos: the target does not say it receives them (its unreceived is the default)"


@runtime_checkable
class EngineHooks(Protocol):
    """What generic code asks of a target besides its capabilities' methods: each hook with a default.

    A class subclassing ``Target`` (``LoadedTarget`` for an engine's files) inherits the defaults and
    overrides what its engine knows; ``with_defaults`` gives them to an adapter that lacks them. Generic
    code calls them directly, and ``mmharness.testing`` checks each is there, callable as declared
    (``hook_problems``).
    """

    missing: Mapping[str, str] = MappingProxyType({})
    """Capability -> why this target lacks it (skip reasons quote it)."""
    unloaded: Mapping[str, str] = MappingProxyType({})
    """Capability -> the file that should hold it and its load error (its checks: could not test)."""

    @property
    def paths(self) -> tuple[PathName, ...]:
        """The paths this target can take to one answer (``batched``, ``per_request``; ``v1``, ``v2``),
        its default first."""
        return default_paths(self.capabilities)  # type: ignore[attr-defined]

    def notes(self) -> list[str]:
        """What a user should know before reading this target's verdicts (``check`` prints them)."""
        return []

    def cache_events(self, cache: Any) -> list[CacheEvent] | None:
        """Everything ``cache`` (one ``new_cache`` made) did so far, in order: hits, misses, insertions
        and evictions (``CACHE_EVENTS``). ``--against`` compares what each call added, since two engines
        that serve the same rows may keep other entries. ``None``: this target cannot observe its cache,
        and nothing is compared (never a change)."""
        return None

    def unreceived(self, case: Case) -> str | None:
        """Why this target's engine never receives ``case`` (its own processors never make it), or
        ``None``: a check leaves such a case out rather than judge it. EVS is one engine's convention,
        so by default an EVS-pruned video is left out (``UNDECLARED_EVS``)."""
        return UNDECLARED_EVS if any(item.frame_rows for _, _, item in case.items()) else None

    def leave_out(self, why: str) -> None:
        """A drawn case was left out for ``why`` (``unreceived``): a target keeping notes says it is
        untested (``LoadedTarget``); by default nothing is kept."""

    def split_unreceived(self, item: Item) -> str | None:
        """Why the engine's splitter never sees this item form (R5's checks then try a plain one), or
        ``None``: by default every form is received."""
        return None

    def rule_functions(self) -> Mapping[str, Callable[..., Any]]:
        """Name -> the engine function that carries out a rule (``check --coverage`` reports each, entered
        or not); by default none, and only the functions a run enters are reported."""
        return {}

    def excluded_branches(self) -> Sequence[Excluded]:
        """Branches of the rule functions verified, by reading the engine's code, to be taken by no run
        of the rules (``reach.Excluded``): ``check --coverage`` leaves them out of its CPU figure."""
        return ()

    def branch_reasons(self) -> Mapping[str, str]:
        """Reason (one of ``reach.REASONS``) -> a pattern of the engine's own names that give it: a
        guard reading one explains an unreached branch so (an engine's CUDA event, say)."""
        return {}

    def declared_settings(self) -> Declarations | None:
        """The engine settings its code may read, as its package declares them (``targets.settings``);
        ``None``: the harness cannot see them."""
        return None

    def engine_functions(self) -> Mapping[str, str | None]:
        """Every engine function the harness knows by name -> ``None`` where a check drives it, else why
        none does (absent, an unknown form, a parameter it cannot supply): the fork report lists the
        latter, and a comparison calls one driven there and not here lost coverage. By default none."""
        return {}


@runtime_checkable
class Target(EngineHooks, Protocol):
    """What a check may ask of a target. Tensors in and out are on ``case.device``.

    A target has a ``name``, its ``capabilities`` and ``describe`` (``REQUIRED``), and
    implements the methods of the capabilities it declares (``METHODS``). It
    explains absent ones in ``missing`` (capability -> why), which skip reasons
    show. A capability absent because the file that should hold it did not load
    goes in ``unloaded`` (capability -> the file and its error) as well: its
    checks are *could not test*, never a skip, since a broken file is not a
    missing feature. The rest is ``EngineHooks``, whose defaults a class subclassing
    ``Target`` inherits; an adapter with only ``REQUIRED`` is given them
    (``with_defaults``), so an adapter written before them still loads. Each
    method's contract is its rule in ``docs/rules.md``;
    ``mmharness.targets.reference`` implements every rule's method, and
    ``docs/examples/toy_adapter.py`` is a target with a few of them.
    """

    name: str
    capabilities: frozenset[str]

    def describe(self) -> dict[str, Any]:
        """What ``mmharness targets`` shows: release, files, functions, stubbed names."""


HOOKS = tuple(name for name in vars(EngineHooks) if not name.startswith("_"))
"""Every ``EngineHooks`` member, by name."""


def hook_problems(target: object) -> list[str]:
    """The hooks a target lacks, or cannot be called with as ``EngineHooks`` declares them (generic code
    calls them so); empty when it keeps the contract."""
    problems = []
    for hook in HOOKS:
        declared = vars(EngineHooks)[hook]
        if not hasattr(target, hook):
            problems.append(f"{hook}: absent")
        elif inspect.isfunction(declared) and not _callable_as(getattr(target, hook), _called(declared)):
            problems.append(f"{hook}: not callable as {hook}{_called(declared)}")
    return problems


def _called(method: Callable[..., Any]) -> inspect.Signature:
    """How generic code calls a hook: its signature less ``self``."""
    signature = inspect.signature(method)
    return signature.replace(parameters=list(signature.parameters.values())[1:])


def _callable_as(function: Any, declared: inspect.Signature) -> bool:
    """Whether ``function`` takes the arguments a hook declared so is called with."""
    parameters = declared.parameters.values()
    positional = [None for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
    keywords = {p.name: None for p in parameters if p.kind is p.KEYWORD_ONLY}
    try:
        inspect.signature(function).bind(*positional, **keywords)
    except (TypeError, ValueError):  # not callable, or takes other arguments
        return False
    return True


class _WithDefaults(Target):
    """An adapter shaped like ``Target`` before it had hooks: its own members, then the hooks' defaults."""

    def __init__(self, adapter: Any) -> None:
        self._adapter = adapter

    def __getattr__(self, name: str) -> Any:  # reached only for what Target does not define
        return getattr(self._adapter, name)

    name = property(lambda self: self._adapter.name)
    capabilities = property(lambda self: self._adapter.capabilities)

    def describe(self) -> dict[str, Any]:
        return self._adapter.describe()


def _own_or_default(hook: str) -> property:
    """The adapter's own ``hook`` where it has one, else ``EngineHooks``' default (a value, a property's
    value or a bound method)."""
    default = vars(EngineHooks)[hook]

    def read(self: _WithDefaults) -> Any:
        if hasattr(self._adapter, hook):
            return getattr(self._adapter, hook)
        return default.__get__(self, _WithDefaults) if hasattr(default, "__get__") else default

    return property(read)


for _hook in HOOKS:
    setattr(_WithDefaults, _hook, _own_or_default(_hook))
