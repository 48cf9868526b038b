"""What a release's embedding cache does, seen from outside: hits, misses, insertions, evictions.

SGLang's caches (``mem_cache/multimodal_cache.py``: ``MultiModalCache`` with
``put``, ``MultiModalStaticCache`` with ``set`` and ``get_single``) keep their
entries in an ordered dict, ``mm_cache``, and evict for room inside the call
that stores. ``watch`` wraps an instance's own methods, where the engine calls
them, and records each call's effect in order; the methods still run as
written. An eviction is a key gone from ``mm_cache`` during a store (or an
explicit ``free``), listed before the store's insert, in the order the dict
held them. A cache without ``mm_cache`` or an instance dictionary is not
watched, and ``events`` is ``None`` for it: nothing is compared.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_EVENTS = "_mmharness_events"
"""The instance attribute holding a watched cache's events."""
LOOKUPS = ("get", "get_single")
STORES = ("set", "put")


def watch(cache: Any) -> Any:
    """``cache`` with its lookups, stores and ``free`` recorded (``events``); returned as it is when it
    keeps no ``mm_cache`` dict or cannot hold attributes of its own."""
    if not isinstance(getattr(cache, "mm_cache", None), dict) or not hasattr(cache, "__dict__"):
        return cache
    if _EVENTS in vars(cache):
        return cache
    log: list[tuple[str, Any]] = []
    vars(cache)[_EVENTS] = log
    for name in LOOKUPS:
        if callable(getattr(cache, name, None)):
            setattr(cache, name, _lookup(cache, getattr(cache, name), log))
    for name in STORES:
        if callable(getattr(cache, name, None)):
            setattr(cache, name, _store(cache, getattr(cache, name), log))
    if callable(getattr(cache, "free", None)):
        cache.free = _store(cache, cache.free, log, insert=False)
    return cache


def events(cache: Any) -> list[tuple[str, Any]] | None:
    """What a watched cache did so far, in order; ``None`` for one ``watch`` left alone."""
    log = vars(cache).get(_EVENTS) if hasattr(cache, "__dict__") else None
    return None if log is None else list(log)


def _key(cache: Any, first: Any) -> Any:
    """The entry a call names: an item's hash, or the engine's combined key of a list of them."""
    if isinstance(first, (list, tuple)):
        combine = getattr(cache, "combine_hashes", None)
        return combine(list(first)) if callable(combine) else tuple(first)
    return first


def _lookup(cache: Any, method: Callable[..., Any], log: list) -> Callable[..., Any]:
    def lookup(first: Any, *args: Any, **kwargs: Any) -> Any:
        found = method(first, *args, **kwargs)
        log.append(("hit" if found is not None else "miss", _key(cache, first)))
        return found

    return lookup


def _store(cache: Any, method: Callable[..., Any], log: list, *, insert: bool = True) -> Callable[..., Any]:
    def store(first: Any, *args: Any, **kwargs: Any) -> Any:
        before = list(cache.mm_cache)
        done = method(first, *args, **kwargs)
        log.extend(("evict", key) for key in before if key not in cache.mm_cache)
        key = _key(cache, first)
        if insert and key in cache.mm_cache and key not in before:
            log.append(("insert", key))
        return done

    return store
