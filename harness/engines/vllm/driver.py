"""The step driver: a ``Case`` run through vLLM's own scheduler, encoder cache and gather.

One call is what happens to the case's requests in vLLM's V1 engine when they
arrive with their prefix already computed (``num_computed_tokens =
prefix_len``, the prefix cache) and prefill their window: every scheduler step
asks ``Scheduler._try_schedule_encoder_inputs`` which encoder inputs the step
needs (with the step's encoder budget, the ``EncoderCacheManager`` deciding
hits, room and evictions), allocates them, runs the recording encoder on the
scheduled items, stores the outputs in the worker's cache by identifier (and
drops what the manager freed), gathers the step's rows and mask with the V1
runner's ``_gather_mm_embeddings`` or V2's ``gather_mm_embeddings``, advances
the computed tokens and frees the encoder inputs behind them. When every window
is done the requests finish and release their cache references; the cache
object (manager and worker cache) lives on for the next call.

A request the scheduler rejects (an identifier cached with another embedding
count, 0.31 on) leaves the batch as vLLM finishes it with an error; the others
go on, and the call then raises the rejection (``Rejected``: a clear refusal),
with the log of the steps taken. The step that rejects a request must schedule
nothing of it (no token, no encoder input): one that does stops the call there,
before the step's encode and gather run for it, and the rejection's log shows
the request both scheduled and rejected in that step (``Rejected.scheduled``),
which the checks hold to the rules. A step that advances no request and ends
none, while windows remain, stops the call: the steps say who was left waiting
and the step's log what each asked for, for the checks to judge (R3l), or, in a
call without options, where nothing could hold a request back, it is the
engine's ``NoProgress`` (a divergence). So is running past a cap on the steps
far above what a case needs. The driver never ends a request vLLM did not.

The engine's classes are never instantiated (their constructors want a whole
engine configuration): a ``StandIn`` (``mmharness.targets.standin``) holds the
state a method reads and answers every other method name with the engine
class's own function, bound to it, so the methods run as written. A state
attribute the stand-in lacks is a ``HarnessGap`` naming it (could not test),
never a divergence.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mmharness import reference
from mmharness.deadline import NoProgress
from mmharness.model import Case, Item
from mmharness.targets import standin
from mmharness.targets.base import Encoder, HarnessGap
from mmharness.targets.faults import engines_own
from mmharness.targets.standin import parameters

STEP_CAP_FACTOR, STEP_CAP_SLACK = 4, 64
"""A call takes at most (window tokens + requests) steps (each step advances a window or ends a
request, or the driver stops); more than ``4 x that + 64`` is an engine gone astray (``NoProgress``)."""


class StandIn(standin.StandIn):
    """A stand-in of one of vLLM's classes (``mmharness.targets.standin``): its gaps name vLLM."""

    _mm_engine = "vLLM"


@dataclass
class Modules:
    """The release's pieces the driver calls (``None`` where the release lacks one)."""

    placeholder_range: type
    feature_spec: type
    request: type
    cache_manager: type
    scheduler: type
    runner_v1: type | None
    runner_v2: type | None
    scatter: Callable[..., Any] | None
    """``scatter_mm_placeholders`` when this release's runner caches outputs at placeholder length."""
    has_is_embed: bool


@dataclass
class EncoderCache:
    """What ``new_cache`` hands out: the scheduler's ``EncoderCacheManager`` and the worker's cache.

    Sized in embeddings when first used (``max_size`` bytes over the case's row
    size), never below the largest item's placeholder length: vLLM sizes its
    encoder cache from the model's largest item (in embeddings, or placeholder
    tokens in releases that count those), so a smaller one is no configuration
    it runs.
    """

    max_size: int
    manager: Any = None
    outputs: dict[str, Any] = field(default_factory=dict)
    features: dict[str, list[Any]] = field(default_factory=dict)
    """Per request id, its feature specs (model runner V2 reads them from its encoder cache)."""
    events: list[tuple[str, int]] = field(default_factory=list)
    """What the manager did, in order (``watch``): ``(hit|miss|insert|evict, item hash)``."""


@dataclass
class StepLog:
    """One scheduler step as the encoder saw it: where each live request stood, and what was encoded."""

    live: dict[int, int]
    """Request index -> its computed tokens when the step began (requests still in the batch)."""
    encoded: list[tuple[int, int]] = field(default_factory=list)
    """``(request, item)`` of every encoder input the step ran, in encoder-call order."""
    scheduled: dict[int, int] = field(default_factory=dict)
    """Request index -> the tokens the step scheduled for it (requests it scheduled nothing for absent)."""
    asked: dict[int, int] = field(default_factory=dict)
    """Request index -> the tokens it asked the scheduler for: the rest of its window, at most what was
    left of the step's token budget. Fewer scheduled means the scheduler cut the step (to keep an item
    whole, or off an item it cannot encode); as many means the window or the budget ended it."""
    rejected: list[int] = field(default_factory=list)
    """Requests the step rejected (an identifier cached or scheduled with another embedding count)."""
    evicted: list[int] = field(default_factory=list)
    """Hashes of the items whose cache entries the manager evicted while scheduling the step."""


@dataclass
class Served:
    """What one call served: each request's rows (``None``: none) and mask, and every step taken."""

    rows: list[Any]
    masks: list[Any]
    steps: list[tuple[int, int, int]]
    """``(request, first position, tokens)`` per request per scheduler step, in order."""
    drafts: list[tuple[int, int, int, Any, Any]] = field(default_factory=list)
    """With a drafter: ``(request, first position, tokens, rows, mask)`` of its gather per step."""
    log: list[StepLog] = field(default_factory=list)
    """Every scheduler step, including those that scheduled nothing."""
    cache_size: int = 0
    """The encoder cache's size in ``unit`` (after vLLM's floor: its largest item)."""
    encoder_budget: int = 0
    """Each step's encoder compute budget in ``unit`` (after vLLM's floor: its largest item)."""
    unit: str = "embeddings"
    """What the cache and budget count: ``embeddings`` (``is_embed`` gaps excluded) or ``placeholders``."""


class Rejected(ValueError):
    """vLLM rejected a request (a clear refusal); ``log``: the steps taken, up to the one that rejected it."""

    def __init__(self, message: str, log: list[StepLog]) -> None:
        super().__init__(message)
        self.log = log

    @property
    def scheduled(self) -> list[tuple[int, int, int]]:
        """``(step, request, tokens)`` of each request a step scheduled and rejected (the rules: none)."""
        return [
            (t, k, step.scheduled[k])
            for t, step in enumerate(self.log)
            for k in step.rejected
            if k in step.scheduled
        ]


def identifier(item: Item) -> str:
    """The item's cache key: vLLM keys encoder outputs by the item's hash (or the client's uuid)."""
    return f"mm-{item.hash:x}"


def placeholder(modules: Modules, item: Item) -> Any:
    """The item's ``PlaceholderRange``: half-open from its first span's start to its last span's end.

    A one-span item needs no mask; a multi-span item (a video's frames, audio
    interleaved with text) marks its span positions in ``is_embed``.
    """
    import torch

    first, length = item.extent.start, len(item.extent)
    if len(item.spans) == 1:
        return modules.placeholder_range(offset=first, length=length)
    if not modules.has_is_embed:
        raise HarnessGap(
            "this release's PlaceholderRange has no is_embed: an item of several spans has no form",
            what="PlaceholderRange.is_embed",
        )
    mask = torch.zeros(length, dtype=torch.bool)
    for start, end in item.spans:
        mask[start - first : end - first + 1] = True
    return modules.placeholder_range(offset=first, length=length, is_embed=mask)


def item_hash(identifier: str) -> int:
    """The item hash behind an identifier ``identifier`` gave (``-1``: one the harness never gave)."""
    try:
        return int(identifier.removeprefix("mm-"), 16) if identifier.startswith("mm-") else -1
    except ValueError:
        return -1


def watch(manager: Any, events: list[tuple[str, int]]) -> None:
    """Record in ``events`` what the release's ``EncoderCacheManager`` does, in the order it does it.

    Its own methods still run; each is wrapped on the instance, where the
    scheduler calls them: a lookup (``check_and_update_cache``: a hit or a
    miss), an allocation (an insert), and the entries ``can_allocate`` evicted
    for room (in the order of its ``freed`` list, else of its ``cached`` keys).
    Only what vLLM's scheduler asks of its manager is seen, so two releases
    whose managers keep other entries differ here even where their rows agree.
    """

    def key(request: Any, input_id: int) -> int:
        return item_hash(request.mm_features[input_id].identifier)

    def held() -> list:
        return list(getattr(manager, "cached", {}))

    def check_and_update_cache(lookup: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(request: Any, input_id: int, *args: Any, **kwargs: Any) -> Any:
            found = lookup(request, input_id, *args, **kwargs)
            events.append(("hit" if found else "miss", key(request, input_id)))
            return found

        return wrapped

    def allocate(allocating: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(request: Any, input_id: int, *args: Any, **kwargs: Any) -> Any:
            done = allocating(request, input_id, *args, **kwargs)
            events.append(("insert", key(request, input_id)))
            return done

        return wrapped

    def can_allocate(room: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            freed = getattr(manager, "freed", None)
            before = len(freed) if isinstance(freed, list) else held()
            answer = room(*args, **kwargs)
            if isinstance(before, int):
                dropped = manager.freed[before:]
            else:
                now = set(held())
                dropped = [h for h in before if h not in now]
            events.extend(("evict", item_hash(h)) for h in dropped)
            return answer

        return wrapped

    for name, wrap in (
        ("check_and_update_cache", check_and_update_cache),
        ("allocate", allocate),
        ("can_allocate", can_allocate),
    ):
        method = getattr(manager, name, None)
        if callable(method):  # a manager lacking one (a fork's, a test's) is watched for the rest
            setattr(manager, name, wrap(method))


def spans_of(position: Any) -> list[tuple[int, int]]:
    """The inclusive spans a ``PlaceholderRange`` marks: the inverse of ``placeholder``."""
    offset, length, mask = position.offset, position.length, getattr(position, "is_embed", None)
    marked = [offset + k for k in range(length) if mask is None or bool(mask[k])]
    spans: list[tuple[int, int]] = []
    for p in marked:
        if spans and spans[-1][1] == p - 1:
            spans[-1] = (spans[-1][0], p)
        else:
            spans.append((p, p))
    return spans


class Driver:
    """Runs cases through one loaded release; one instance per target."""

    def __init__(self, modules: Modules) -> None:
        self.m = modules
        self._calls = 0
        self._feature_fields = set(parameters(modules.feature_spec))
        gather = modules.runner_v2.gather_mm_embeddings if modules.runner_v2 is not None else None
        self._v2_fields = set(parameters(gather)) if gather else set()
        self._v2_required = parameters(gather, required=True) if gather else []
        self.v2_drafts = "draft_lookahead" in self._v2_fields
        """Whether model runner V2's gather reads ahead for a drafter (``draft_lookahead``)."""
        gather_v1 = modules.runner_v1._gather_mm_embeddings if modules.runner_v1 is not None else None
        self.v1_drafts = gather_v1 is not None and "shift_computed_tokens" in parameters(gather_v1)
        """Whether the V1 runner's gather reads ahead for a drafter (``shift_computed_tokens``)."""

    def drafts_on(self, path: str) -> bool:
        """Whether a drafter's gather runs on ``path``: its own gather reads ahead, or (``v2``) V1's does."""
        return self.v1_drafts or (path == "v2" and self.v2_drafts)

    # requests ---------------------------------------------------------------------

    def _feature(self, item: Item) -> Any:
        values = {
            "data": None,
            "modality": item.modality,
            "identifier": identifier(item),
            "mm_position": placeholder(self.m, item),
            "mm_hash": identifier(item),
        }
        return self.m.feature_spec(**{k: v for k, v in values.items() if k in self._feature_fields})

    def _request(self, case: Case, k: int) -> Any:
        request = case.requests[k]
        features = [self._feature(item) for item in request.items]
        return StandIn(
            self.m.request,
            "Request",
            request_id=f"req-{self._calls}-{k}",
            mm_features=features,
            num_encoder_inputs=len(features),
            has_encoder_inputs=bool(features),
            num_computed_tokens=request.prefix_len,
            num_output_placeholders=0,
            num_prompt_tokens=request.seq_len,
        )

    @property
    def counts_embeddings(self) -> bool:
        """Whether this release sizes its cache and budget in embeddings (``get_num_encoder_embeds``)."""
        return hasattr(self.m.request, "get_num_encoder_embeds")

    def cost(self, item: Item) -> int:
        """An item's size in the unit the release's cache manager counts."""
        return item.token_count if self.counts_embeddings else len(item.extent)

    def _scheduler(self, cache: EncoderCache, whole_items: bool, lookahead: int) -> Any:
        return StandIn(
            self.m.scheduler,
            "Scheduler",
            encoder_cache_manager=cache.manager,
            scheduler_config=types.SimpleNamespace(disable_chunked_mm_input=whole_items),
            is_encoder_decoder=False,
            ec_connector=None,
            encoder_cache_mismatch_reqs=set(),
            use_eagle=lookahead > 0,
            num_prefill_lookahead=lookahead,
            num_spec_tokens=0,
            num_lookahead_tokens=0,
        )

    def _size(self, case: Case, cache: EncoderCache) -> None:
        largest = max((self.cost(item) for _, _, item in case.items()), default=0)
        wanted = max(cache.max_size // case.row_bytes, largest)
        if cache.manager is None:
            cache.manager = self.m.cache_manager(cache_size=wanted)
            watch(cache.manager, cache.events)
        elif cache.manager.cache_size < largest:  # vLLM's invariant: the cache holds its largest item
            grow = largest - cache.manager.cache_size
            cache.manager.cache_size += grow
            cache.manager.num_free_slots += grow
            cache.manager.num_freeable_slots += grow

    # one call ---------------------------------------------------------------------

    def run(
        self,
        case: Case,
        encoder: Encoder,
        cache: EncoderCache,
        path: str,
        *,
        whole_items: bool = False,
        lookahead: int = 0,
        token_budget: int | None = None,
        encoder_budget: int | None = None,
        report_stalls: bool = False,
    ) -> Served:
        """Each request's window rows and mask, as the gathers of every step served them.

        With ``whole_items`` (vLLM's ``disable_chunked_mm_input``) the window's end
        is the step's token budget: a request whose next item the window would
        cut stops before it, as vLLM would until a later step has the budget.
        With ``lookahead`` (an EAGLE drafter), the scheduler plans for the drafter
        reading that many tokens ahead, and after every step the gather of
        ``path`` runs again shifted, as it does for the drafter's inputs (V2's
        ``draft_lookahead`` where the release has it, else V1's).

        ``token_budget`` is the scheduler's ``max_num_batched_tokens``: one
        step's tokens, shared by the requests in order (each takes what it
        needs of what is left), so requests interleave and one may stop inside
        an item while others allocate and evict. ``encoder_budget`` is each
        step's encoder compute budget (``max_num_encoder_input_tokens``);
        without it the cache's size. Both are raised, as vLLM's
        ``compute_mm_encoder_budget`` raises them, to the largest item (with
        items whole and a drafter, one token more: a step starting one token
        before an item must fit it).

        A step that schedules nothing and ends no request (none reached its
        window's end, none was rejected) leaves the engine where it was, so
        every later step would be the same. With ``report_stalls`` the call
        stops there: the waiting requests' steps stop short of their windows,
        and the last ``StepLog`` says what each asked for, for the caller to
        judge (R3l: only a token budget or a cache that cannot take the next
        item excuses it). Without, it is ``NoProgress``: a call without
        options, whose budgets and cache vLLM raises to the largest item, has
        nothing that could hold a request back. Either way the
        driver never ends a request the engine did not: a request leaves the
        batch when its window is done or vLLM rejects it, and the rest only
        when the call is over.
        """
        self._calls += 1
        self._size(case, cache)
        scheduler = self._scheduler(cache, whole_items, lookahead)
        budget, tokens = self._budgets(case, cache, whole_items, lookahead, encoder_budget, token_budget)
        log: list[StepLog] = []
        steps: list[tuple[int, int, int]] = []
        drafts: list[tuple[int, int, int, Any, Any]] = []
        requests = [self._request(case, k) for k in range(len(case.requests))]
        ends = [r.prefix_len + r.extend_len for r in case.requests]
        rows: list[list[Any]] = [[] for _ in requests]
        masks: list[list[Any]] = [[] for _ in requests]
        live = set(range(len(requests)))
        rejected: list[int] = []
        hashes = {identifier(item): item.hash for _, _, item in case.items()}
        need = sum(max(0, end - r.num_computed_tokens) for r, end in zip(requests, ends, strict=True))
        cap = STEP_CAP_FACTOR * (need + len(requests)) + STEP_CAP_SLACK
        taken = 0
        try:
            while any(requests[k].num_computed_tokens < ends[k] for k in live):
                taken += 1
                if taken > cap:
                    raise self._stuck_at_cap(_waiting(requests, ends, live), cap, need, len(requests))
                log.append(StepLog({k: requests[k].num_computed_tokens for k in sorted(live)}))
                scheduled = self._schedule(
                    scheduler, requests, ends, live, budget, tokens, lookahead, log=log[-1]
                )
                log[-1].scheduled = {k: count for k, (count, _) in scheduled.items()}
                # vLLM finishes a rejected request with an error after the step, and forgets the rejection
                mismatched = scheduler.encoder_cache_mismatch_reqs
                left = [k for k in sorted(live) if requests[k].request_id in mismatched]
                mismatched.clear()
                log[-1].rejected = left
                for k in left:
                    rejected.append(k)
                    self._finish(requests[k], cache, live, k)
                if any(k in scheduled for k in left):  # its tokens must not run: stop before the encode
                    break
                if not scheduled:
                    done = [k for k in live if requests[k].num_computed_tokens >= ends[k]]
                    for k in done:  # in vLLM they would go on past their window and release their items
                        self._finish(requests[k], cache, live, k)
                    if done or left:
                        continue
                    if not report_stalls:
                        raise self._stuck(_waiting(requests, ends, live), taken)
                    break  # nothing scheduled or ended: every later step is this one (the caller judges)
                for mm_hash in cache.manager.get_freed_mm_hashes():
                    cache.outputs.pop(mm_hash, None)
                    if mm_hash in hashes:
                        log[-1].evicted.append(hashes[mm_hash])
                log[-1].encoded = self._encode(case, encoder, requests, scheduled, cache)
                embeds, mask = self._gather(case, requests, scheduled, cache, path)
                self._split(embeds, mask, scheduled, rows, masks)
                if lookahead:
                    drafts += self._draft(case, requests, scheduled, cache, lookahead, path)
                for k, (count, _) in scheduled.items():
                    steps.append((k, requests[k].num_computed_tokens, count))
                    requests[k].num_computed_tokens += count
                    scheduler._free_encoder_inputs(requests[k])
        finally:
            for k in sorted(live):
                self._finish(requests[k], cache, live, k)
        if rejected:
            raise engines_own(
                Rejected(
                    f"vLLM rejected request {rejected[0]}: an item's identifier is cached (or scheduled)"
                    " with another embedding count",
                    log,
                )
            )
        return self._served(case, cache, budget, (rows, masks, steps, drafts, log))

    def _budgets(
        self,
        case: Case,
        cache: Any,
        whole_items: bool,
        lookahead: int,
        encoder_budget: int | None,
        token_budget: int | None,
    ) -> tuple[int, int | None]:
        """A call's encoder and token budgets, raised as vLLM's ``compute_mm_encoder_budget`` raises them:
        to the largest item (with items whole and a drafter, a step must fit the widest one token early)."""
        largest = max((self.cost(item) for _, _, item in case.items()), default=0)
        widest = max((len(item.extent) for _, _, item in case.items()), default=0)
        budget = cache.manager.cache_size if encoder_budget is None else max(encoder_budget, largest)
        tokens = None if token_budget is None else max(token_budget, 1)
        if tokens is not None and whole_items:
            tokens = max(tokens, widest + lookahead)
        return budget, tokens

    def _served(self, case: Case, cache: Any, budget: int, gathered: tuple) -> Served:
        """What a call's steps served: each request's rows and mask, the steps, drafts and logs."""
        import torch

        rows, masks, steps, drafts, log = gathered
        empty_mask = torch.zeros(0, dtype=torch.bool, device=case.device)
        return Served(
            [torch.cat(r) if r else None for r in rows],
            [torch.cat(m).to(case.device) if m else empty_mask for m in masks],
            steps,
            drafts,
            log,
            cache.manager.cache_size,
            budget,
            "embeddings" if self.counts_embeddings else "placeholders",
        )

    @staticmethod
    def _stuck(waiting: list[str], step: int) -> NoProgress:
        """A step that scheduled no token of any unfinished request and ended none, in a call without
        options (nothing could hold a request back): the engine's livelock (R3l)."""
        return NoProgress(
            f"vLLM's scheduler scheduled no token in step {step} for {len(waiting)} unfinished request(s),"
            " in a call where neither the token budget nor the encoder cache could hold one back",
            signature=reference.LIVELOCK,
            actual="; ".join(waiting),
        )

    @staticmethod
    def _stuck_at_cap(waiting: list[str], cap: int, need: int, requests: int) -> NoProgress:
        """More steps than the case can need: each one moved something, yet the windows are not done."""
        return NoProgress(
            f"the windows are still unfinished after {cap} scheduler steps, the cap for this case"
            f" ({STEP_CAP_FACTOR} x ({need} window tokens + {requests} requests) + {STEP_CAP_SLACK})",
            signature="the windows are still unfinished at the cap on scheduler steps",
            expected=f"at most {need + requests} steps (each advances a window or ends a request)",
            actual="; ".join(waiting),
        )

    @staticmethod
    def _finish(request: Any, cache: EncoderCache, live: set[int], k: int) -> None:
        """The request leaves the batch (finished or rejected) and releases its cache references."""
        cache.manager.free(request)
        cache.features.pop(request.request_id, None)
        live.discard(k)

    def _schedule(
        self,
        scheduler: Any,
        requests: list[Any],
        ends: list[int],
        live: set[int],
        budget: int,
        tokens: int | None,
        lookahead: int,
        *,
        log: StepLog,
    ) -> dict[int, tuple[int, list[int]]]:
        """One scheduler step: request index -> (tokens scheduled, encoder inputs to run).

        As vLLM's ``schedule`` does for running requests: in order, each asks
        for what is left of its window (at most what is left of the token
        budget), and the step's token and encoder budgets go down only by what
        a request was scheduled. What each asked for goes in the step's
        ``log`` (``asked``).
        """
        scheduled: dict[int, tuple[int, list[int]]] = {}
        for k in sorted(live):
            request = requests[k]
            remaining = ends[k] - request.num_computed_tokens
            if tokens is not None:
                remaining = min(remaining, tokens)
            if remaining <= 0:
                continue
            log.asked[k] = remaining
            answer = scheduler._try_schedule_encoder_inputs(
                request, request.num_computed_tokens, remaining, budget, shift_computed_tokens=lookahead
            )
            to_run, count = answer[0], answer[1]
            duplicates = answer[4] if len(answer) > 4 else []
            if count == 0:
                continue
            budget = answer[2]
            if tokens is not None:
                tokens -= count
            if hasattr(self.m.scheduler, "_allocate_encoder_inputs"):
                scheduler._allocate_encoder_inputs(request, to_run, duplicates)
            else:
                for i in to_run:
                    scheduler.encoder_cache_manager.allocate(request, i)
            scheduled[k] = (count, list(to_run))
        return scheduled

    def _encode(
        self,
        case: Case,
        encoder: Encoder,
        requests: list[Any],
        scheduled: dict[int, tuple[int, list[int]]],
        cache: EncoderCache,
    ) -> list[tuple[int, int]]:
        """The model runner's encoder step: every scheduled input, one encoder call, cached by identifier."""
        import torch

        wanted = [(k, i) for k, (_, inputs) in scheduled.items() for i in inputs]
        if not wanted:
            return wanted
        items = [case.requests[k].items[i] for k, i in wanted]
        output = encoder(items)
        if not isinstance(output, list):
            flat = output.reshape(-1, output.shape[-1])
            output = list(torch.split(flat, [item.token_count for item in items]))
        for (k, i), rows in zip(wanted, output, strict=True):
            rows = rows.reshape(-1, rows.shape[-1])
            feature = requests[k].mm_features[i]
            if self.m.scatter is not None:
                rows = self.m.scatter(rows, is_embed=feature.mm_position.is_embed)
            cache.outputs[feature.identifier] = rows
        return wanted

    def _gather(
        self,
        case: Case,
        requests: list[Any],
        scheduled: dict[int, tuple[int, list[int]]],
        cache: EncoderCache,
        path: str,
    ) -> tuple[list[Any], Any]:
        ids = [requests[k].request_id for k in scheduled]
        counts = [count for count, _ in scheduled.values()]
        total = sum(counts)
        if path == "v2":
            return self._gather_v2(case, requests, scheduled, cache, ids, counts, total)
        runner, output = self._runner_v1(case, requests, scheduled, cache)
        return self.m.runner_v1._gather_mm_embeddings(runner, output)

    def _draft(
        self,
        case: Case,
        requests: list[Any],
        scheduled: dict[int, tuple[int, list[int]]],
        cache: EncoderCache,
        lookahead: int,
        path: str = "v1",
    ) -> list[tuple[int, int, int, Any, Any]]:
        """The drafter's gather of this step: each request's window moved ``lookahead`` tokens on.

        On the path ``v2`` (where its gather takes ``draft_lookahead``) model
        runner V2's gather reads ahead; otherwise the V1 runner's.
        """
        if path == "v2" and self.v2_drafts:
            ids = [requests[k].request_id for k in scheduled]
            counts = [count for count, _ in scheduled.values()]
            embeds, mask = self._gather_v2(
                case, requests, scheduled, cache, ids, counts, sum(counts), draft_lookahead=lookahead
            )
        elif not self.v1_drafts:
            raise HarnessGap(
                f"no gather of this release reads ahead for a drafter on the path {path}",
                what="a drafter's gather",
            )
        else:
            runner, output = self._runner_v1(case, requests, scheduled, cache)
            embeds, mask = self.m.runner_v1._gather_mm_embeddings(
                runner, output, shift_computed_tokens=lookahead
            )
        rows: list[list[Any]] = [[] for _ in requests]
        masks: list[list[Any]] = [[] for _ in requests]
        self._split(embeds, mask, scheduled, rows, masks)
        return [
            (k, requests[k].num_computed_tokens + lookahead, n, rows[k][0] if rows[k] else None, masks[k][0])
            for k, (n, _) in scheduled.items()
        ]

    def _runner_v1(
        self,
        case: Case,
        requests: list[Any],
        scheduled: dict[int, tuple[int, list[int]]],
        cache: EncoderCache,
    ) -> tuple[Any, Any]:
        ids = [requests[k].request_id for k in scheduled]
        counts = [count for count, _ in scheduled.values()]
        total = sum(counts)
        runner = StandIn(
            self.m.runner_v1,
            "GPUModelRunner",
            input_batch=types.SimpleNamespace(req_ids=ids),
            requests={
                requests[k].request_id: types.SimpleNamespace(
                    num_computed_tokens=requests[k].num_computed_tokens,
                    mm_features=requests[k].mm_features,
                    mrope_positions=None,
                    xdrope_positions=None,
                )
                for k in scheduled
            },
            encoder_cache=cache.outputs,
            is_multimodal_pruning_enabled=False,
            uses_mrope=False,
            uses_xdrope_dim=0,
            is_mm_embed=_Buffer(total),
            is_mm_embed_buffers=[_Buffer(total), _Buffer(total)],
            is_mm_embed_idx=0,
            device=_device(case),
        )
        output = types.SimpleNamespace(
            total_num_scheduled_tokens=total, num_scheduled_tokens=dict(zip(ids, counts, strict=True))
        )
        return runner, output

    def _gather_v2(
        self,
        case: Case,
        requests: list[Any],
        scheduled: dict[int, tuple[int, list[int]]],
        cache: EncoderCache,
        ids: list[str],
        counts: list[int],
        total: int,
        *,
        draft_lookahead: int = 0,
    ) -> tuple[list[Any], Any]:
        import numpy as np

        for k in scheduled:
            cache.features[requests[k].request_id] = requests[k].mm_features
        computed = np.array([requests[k].num_computed_tokens for k in scheduled], dtype=np.int32)
        values = {
            "req_ids": ids,
            "total_num_scheduled_tokens": total,
            "num_scheduled_tokens": np.array(counts, dtype=np.int32),
            "query_start_loc": np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32),
            "prefill_lens": np.array([case.requests[k].seq_len for k in scheduled], dtype=np.int32),
            "num_computed_tokens": computed,
            "computed_prefill_lens": computed,
        }
        if draft_lookahead:
            values["draft_lookahead"] = draft_lookahead
        unknown = [name for name in self._v2_required if name not in values]
        if unknown:
            raise HarnessGap(
                f"model runner V2's gather_mm_embeddings takes {unknown}, which the harness does not know",
                what="EncoderRunner.gather_mm_embeddings",
            )
        runner = StandIn(
            self.m.runner_v2,
            "EncoderRunner",
            encoder_cache=_WorkerCache(cache),
            req_id_to_mm_features=cache.features,
            tmp_is_mm_embed=_Buffer(0),
            is_realtime=False,
            device=_device(case),
        )
        gather = self.m.runner_v2.gather_mm_embeddings
        return gather(runner, **{k: v for k, v in values.items() if k in self._v2_fields})

    @staticmethod
    def _split(
        embeds: Sequence[Any],
        mask: Any,
        scheduled: dict[int, tuple[int, list[int]]],
        rows: list[list[Any]],
        masks: list[list[Any]],
    ) -> None:
        """A step's gathered rows and mask, cut back into its requests (rows follow the mask)."""
        import torch

        mask = mask.reshape(-1).cpu()
        flat = torch.cat([e.reshape(-1, e.shape[-1]) for e in embeds]) if embeds else None
        marked = int(mask.sum())
        held = 0 if flat is None else flat.shape[0]
        if held != marked:
            raise engines_own(
                ValueError(
                    f"the step's gathered embeddings hold {held} rows for {marked} placeholder positions"
                    " of its mask (the model's merge would refuse them)"
                )
            )
        start = taken = 0
        for k, (count, _) in scheduled.items():
            piece = mask[start : start + count]
            n = int(piece.sum())
            masks[k].append(piece)
            if n:
                rows[k].append(flat[taken : taken + n])
            start, taken = start + count, taken + n


def _waiting(requests: list[Any], ends: list[int], live: set[int]) -> list[str]:
    """Each unfinished request and where it stands, for a ``NoProgress`` message."""
    return [
        f"request {k} at position {requests[k].num_computed_tokens} of its window's end {ends[k]}"
        for k in sorted(live)
        if requests[k].num_computed_tokens < ends[k]
    ]


class _WorkerCache(dict):
    """Model runner V2's encoder cache as each release reads it.

    A dict of outputs by identifier (0.15 on), with the outputs and the
    requests' feature specs as attributes (``encoder_outputs``, ``mm_features``:
    later releases).
    """

    def __init__(self, cache: EncoderCache) -> None:
        super().__init__(cache.outputs)
        self.encoder_outputs = cache.outputs
        self.mm_features = cache.features


class _Buffer:
    """vLLM's host-to-device staging on one CPU process, where the host tensor is the device tensor.

    A ``CpuGpuBuffer`` copies its first ``n`` entries; a ``UvaBufferPool``
    (model runner V2 in 0.15) copies the tensor it is handed.
    """

    def __init__(self, size: int) -> None:
        import torch

        self.cpu = torch.zeros(size, dtype=torch.bool)
        self.gpu = self.cpu

    def copy_to_gpu(self, what: Any = None) -> Any:
        if hasattr(what, "shape"):
            return what
        return self.cpu if what is None else self.cpu[:what]


def _device(case: Case) -> Any:
    import torch

    return torch.device(case.device)


def rows_of(rows: list[Any]) -> Any:
    """Every request's rows in request order (``None`` when no window holds a placeholder)."""
    import torch

    present = [r for r in rows if r is not None]
    return torch.cat(present) if present else None
