"""Cache events as an ``--against`` observable, and the draws that make a cache's eviction order show.

Offline: the comparison of recorded calls, each engine's watcher on a cache of the test's own (the
shape of vLLM's ``EncoderCacheManager`` and SGLang's ``mm_cache`` caches), the engine model's cache,
and ``steps.revisit``. With ``network``: vLLM 0.33.0 and SGLang 0.5.23 copies whose caches evict
their newest free entry instead of their oldest, and a vLLM copy whose scheduler does not register a
request's second use of an item, each against the unmodified release.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from types import SimpleNamespace

import pytest
from mmharness import steps
from mmharness.against import Call, Recorded, first_difference
from mmharness.checks.outcome import DIVERGENCE, HAZARD
from mmharness.engines.sglang import cache_watch
from mmharness.engines.vllm import driver
from mmharness.model import Case, Item, Request, validate
from mmharness.targets.base import Encoder, Target
from mmharness.targets.engine_model import EngineModel

VALUE = ("value", None)


def call(cached, *, encoded=((1, 2),)) -> Call:
    return Call("chunked_prefill_embedding", "v1", VALUE, (encoded,), cached)


def test_cache_events_that_differ_are_a_change_named_so():
    mine = [call((("miss", 1), ("insert", 1), ("evict", 1)))]
    theirs = [call((("miss", 1), ("insert", 1), ("evict", 2)))]
    difference = first_difference(mine, theirs)
    assert difference is not None and difference.observable == "cache events"
    assert difference.mine == "after 2 alike: ['evict 1']"
    assert difference.theirs == "after 2 alike: ['evict 2']"


def test_a_cache_either_target_cannot_observe_is_no_change():
    seen = [call((("miss", 1), ("insert", 1)))]
    assert first_difference(seen, [call(None)]) is None
    assert first_difference([call(None)], seen) is None
    assert first_difference(seen, seen) is None


def test_the_encoder_calls_are_named_before_the_cache_events():
    mine, theirs = [call((("hit", 1),), encoded=())], [call((("miss", 1),))]
    assert first_difference(mine, theirs).observable == "encoder calls"


def test_a_step_logs_difference_is_named_by_the_cache_events_that_differ_with_it():
    """vLLM's ``Served.log`` holds each step's evictions: the change is the cache's, not the log's."""

    def served(evicted: int, events: tuple) -> Call:
        log = ("list", (("StepLog", (("evicted", ("list", (evicted,))),)),))
        outcome = ("value", ("Served", (("rows", None), ("log", log))))
        return Call("scheduled_prefill", "v1", outcome, (), events)

    mine, theirs = served(1, (("evict", 1),)), served(2, (("evict", 2),))
    assert first_difference([mine], [theirs]).observable == "cache events"
    blind = Call(mine.method, mine.path, mine.outcome, mine.encoded, None)
    assert first_difference([blind], [theirs]).observable == "log"


class _Cached(Target):
    """A target whose cache is a list of events it appends to (so the test sees what is recorded)."""

    name = "cached"
    capabilities = frozenset()

    def describe(self) -> dict:
        return {}

    def new_cache(self, max_size: int) -> list:
        return [("insert", 0)]

    def cache_events(self, cache: list) -> list:
        return list(cache)

    def chunked_prefill_embedding(self, case, encoder, *, cache, path="batched"):
        if cache is not None:
            cache.append(("hit", 7))


def test_a_recorded_call_keeps_what_its_cache_did_during_it():
    target = Recorded(_Cached())
    cache = target.new_cache(0)
    case = Case((Request(1, 0, 1),))
    target.chunked_prefill_embedding(case, Encoder(case), cache=cache)
    assert [c.method for c in target.calls] == ["chunked_prefill_embedding"]
    assert target.calls[0].cached == (("hit", 7),)
    target.chunked_prefill_embedding(case, Encoder(case), cache=None)
    assert target.calls[1].cached is None


class _Manager:
    """The bookkeeping of vLLM's ``EncoderCacheManager`` as the scheduler calls it, written for this
    test: entries referenced by request ids, free ones in order, evicted oldest first for room."""

    def __init__(self, size: int, newest_first: bool = False) -> None:
        self.size, self.newest_first = size, newest_first
        self.cached: dict[str, set] = {}
        self.free_order: OrderedDict[str, int] = OrderedDict()
        self.freed: list[str] = []

    def check_and_update_cache(self, request, input_id: int) -> bool:
        key = request.mm_features[input_id].identifier
        self.free_order.pop(key, None)
        return key in self.cached

    def can_allocate(self, request, input_id: int, *_: int) -> bool:
        while len(self.cached) >= self.size:
            key, _ = self.free_order.popitem(last=self.newest_first)
            del self.cached[key]
            self.freed.append(key)
        return True

    def allocate(self, request, input_id: int) -> None:
        self.cached[request.mm_features[input_id].identifier] = {request.request_id}

    def release(self, key: str) -> None:
        self.free_order[key] = 1


def _vllm_events(newest_first: bool) -> list:
    manager, events = _Manager(2, newest_first), []
    driver.watch(manager, events)
    items = [Item(((k, k),), hash=k) for k in (10, 11, 12)]
    features = [SimpleNamespace(identifier=driver.identifier(item)) for item in items]
    request = SimpleNamespace(request_id="r", mm_features=features)
    for k in range(3):
        if not manager.check_and_update_cache(request, k):
            manager.can_allocate(request, k)
            manager.allocate(request, k)
        manager.release(features[k].identifier)
    return events


def test_the_vllm_watcher_records_lookups_inserts_and_evictions_in_order():
    assert _vllm_events(newest_first=False) == [
        ("miss", 10),
        ("insert", 10),
        ("miss", 11),
        ("insert", 11),
        ("miss", 12),
        ("evict", 10),
        ("insert", 12),
    ]
    assert ("evict", 11) in _vllm_events(newest_first=True)


class _LRU:
    """A cache shaped like SGLang's (``mm_cache``, ``get``/``set``/``free``), written for this test."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self.mm_cache: OrderedDict[int, int] = OrderedDict()

    def get(self, key: int):
        return self.mm_cache.get(key)

    def set(self, key: int, value: int) -> bool:
        while len(self.mm_cache) >= self.max_size:
            self.mm_cache.popitem(last=False)
        self.mm_cache[key] = value
        return True

    def free(self, key: int, allocator=None) -> bool:
        return self.mm_cache.pop(key, None) is not None


def test_the_sglang_watcher_records_what_its_cache_did():
    cache = cache_watch.watch(_LRU(2))
    assert cache_watch.watch(cache) is cache and cache_watch.events(cache) == []
    for key in (1, 2):
        cache.set(key, key)
    cache.get(1)
    cache.set(3, 3)
    cache.get(2)
    cache.free(3)
    assert cache_watch.events(cache) == [
        ("insert", 1),
        ("insert", 2),
        ("hit", 1),
        ("evict", 1),
        ("insert", 3),
        ("hit", 2),
        ("evict", 3),
    ]
    assert cache_watch.events(object()) is None, "a cache it cannot watch: nothing to compare"


def test_the_engine_models_cache_reports_its_events():
    model = EngineModel()
    cache = model.new_cache(2 * 4 * 4)  # two rows of four floats
    case = Case(
        (
            Request(2, 0, 2, (Item(((0, 0),), hash=1), Item(((1, 1),), hash=2))),
            Request(2, 0, 2, (Item(((0, 0),), hash=3), Item(((1, 1),), hash=1))),
        ),
        hidden=4,
    )
    model.chunked_prefill_embedding(case, Encoder(case), cache=cache)
    events = model.cache_events(cache)
    assert ("evict", 1) in events and ("insert", 3) in events
    assert model.cache_events(None) is None


def test_a_revisit_sends_every_item_again_after_the_others():
    items = (Item(((2, 3), (5, 5)), hash=1), Item(((7, 7),), hash=2))
    case = Case((Request(9, 4, 5, items), Request(3, 0, 3, (Item(((1, 1),), hash=1, precomputed=True),))))
    again = steps.revisit(case)
    validate(again)
    assert again.requests[:2] == case.requests
    last = again.requests[2]
    assert (last.prefix_len, last.extend_len) == (0, last.seq_len)
    assert [(i.hash, i.token_count, i.precomputed) for i in last.items] == [
        (i.hash, i.token_count, i.precomputed) for _, _, i in case.items()
    ]
    assert [i.spans for i in last.items] == [((1, 2), (4, 4)), ((6, 6),), ((8, 8),)]
    assert steps.revisit(Case((Request(2, 0, 2),))) == Case((Request(2, 0, 2),))
    short = Case(case.requests, prefix_listed=1)
    assert steps.revisit(short) is short


# Releases (network) ---------------------------------------------------------------------------

VLLM, SGLANG = "0.33.0", "0.5.23"
EVICT_NEWEST = {
    "vllm": (
        "vllm/v1/core/encoder_cache_manager.py",
        "self.freeable.popitem(last=False)",
        "self.freeable.popitem(last=True)",
    ),
    "sglang": (
        "sglang/srt/mem_cache/multimodal_cache.py",
        "lru_hash, lru_embedding = self.mm_cache.popitem(last=False)",
        "lru_hash, lru_embedding = self.mm_cache.popitem(last=True)",
    ),
}
SECOND_HOLDER_DROPPED = (
    "vllm/v1/core/sched/scheduler.py",
    "        for input_id in duplicate_input_ids:\n"
    "            self.encoder_cache_manager.check_and_update_cache(request, input_id)\n",
    "        for input_id in duplicate_input_ids:\n            pass\n",
)
"""vLLM's scheduler not registering a request's second use of an item scheduled in one step."""


@pytest.fixture(scope="module")
def releases(harness_cache):
    """``releases(engine)``: the release's target and the root of its unpacked files."""
    from mmharness.targets.specs import resolve

    loaded: dict = {}

    def get(engine: str):
        if engine not in loaded:
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv("MMHARNESS_CACHE", str(harness_cache))
                target = resolve(f"{engine}=={VLLM if engine == 'vllm' else SGLANG}")
            loaded[engine] = target, Path(target.describe()["source"])
        return loaded[engine]

    return get


def _stateful(target, against=None, stop_at=(), *, shrink=True):
    """``prefill.stateful``'s search on ``target`` (against ``against``); ``shrink=False`` for a test that
    asks only which ways it fails (``run_check``'s: every finding kept as found)."""
    from mmharness.against import against as compared
    from mmharness.checks import all_checks
    from mmharness.runner import run_check

    check = all_checks()["prefill.stateful"]
    checked = check if against is None else compared(check, against)
    return run_check(checked, target, stop_at=stop_at, shrink=shrink)


def _signatures(result) -> list[str]:
    return [finding.failure.signature for finding in result.findings]


def _copy(releases, seeded_copy, engine: str, edit: tuple[str, str, str]):
    from mmharness.targets.specs import resolve

    target, root = releases(engine)
    return target, resolve(str(seeded_copy(root, [edit])))


@pytest.mark.network
@pytest.mark.parametrize("engine", sorted(EVICT_NEWEST))
def test_a_cache_evicting_its_newest_free_entry_is_a_neutral_change(releases, seeded_copy, engine):
    """Eviction order is no rule: alone the copy fails nothing; against the release its cache events
    differ, and so do its encoder calls (a later request finds what the other evicted), nothing else."""
    release, mutant = _copy(releases, seeded_copy, engine, EVICT_NEWEST[engine])
    assert _stateful(mutant, stop_at=(DIVERGENCE,)).status != DIVERGENCE
    changes = _signatures(_stateful(mutant, release))
    assert any(s.startswith("neutral change (cache events)") for s in changes), changes
    assert any(s.startswith("neutral change (encoder calls)") for s in changes), changes
    assert all(s.startswith("neutral change (") for s in changes), changes


@pytest.mark.network
def test_a_second_holder_the_scheduler_drops_is_seen_with_and_without_against(releases, seeded_copy):
    release, mutant = _copy(releases, seeded_copy, "vllm", SECOND_HOLDER_DROPPED)
    # kept as found: shrinking its findings is most of the search's time, and the same three ways of
    # failing are met (at examples 11, 37 and 50)
    assert "evicted a cache entry a live request still held" in _signatures(_stateful(mutant, shrink=False))
    changes = _signatures(_stateful(mutant, release, stop_at=(HAZARD, DIVERGENCE)))
    assert any(s.startswith("neutral change (cache events)") for s in changes), changes


@pytest.mark.network
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_release_against_itself_has_no_change(releases, engine):
    target, _ = releases(engine)
    result = _stateful(target, target)
    assert not result.findings, _signatures(result)
