"""Checks of engine options: scheduling items whole (R3w), a drafter reading ahead (R3d).

Not every engine has these options; a target declaring the capability runs
its prefill with the option on and reports what each scheduler step did, so
the checks can hold every step to the rule, not only the final rows.

Each example also draws the scheduler's other options, independently
(``mmharness.strategies.run_options``, ints in the
example's params): a token budget per step shared by the requests, an encoder
compute budget, an encoder cache sized near the items (in embeddings), the
engine's second gather, and the other option (items whole with a drafter). A
target that can run them declares ``SCHEDULER_OPTIONS`` (``scheduled_prefill``:
vLLM's step driver); others run with the option alone. Under every combination the same rules
hold: each step's rows are R3's rows of what it scheduled, no step cuts an
item (R3w), the drafter's gather finds what was encoded (R3d), the step
that refuses a request schedules nothing of it, and a request the steps
leave waiting was held back by the token budget or the encoder cache (R3l:
otherwise a livelock). And the encoder's work is
watched (hazards, without hash collisions): no step encodes more than its
compute budget, no item is encoded again while a cache that evicts its
oldest unreferenced entries first, of the size in force, would still have
held it, and no entry is evicted while a request in the batch still holds it.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from mmharness import reference, tensors
from mmharness.checks.common import REFERENCE, collisions_as_hazards
from mmharness.checks.outcome import Failure, Hazard, Outcome, observe, show_error, value_of
from mmharness.checks.prefill import refused_collision, run, same
from mmharness.checks.registry import DIFFERENTIAL, check
from mmharness.deadline import NoProgress
from mmharness.model import Case, Item
from mmharness.targets.base import (
    DRAFT_LOOKAHEAD,
    SCHEDULER_OPTIONS,
    UNLIMITED_CACHE,
    WHOLE_ITEMS,
    Encoder,
    Target,
    paths_of,
)


def _option_cases(device: str, *, whole: int | None = None, drafter: int | None = None):
    """Random batches under drawn options, and an eighth of batches whose encoder calls show the cache's
    eviction order (``eviction_runs``), which random ones almost never do."""
    from hypothesis import strategies as st
    from mmharness import strategies as mst

    drawn = mst.cases(collisions=True, device=device).flatmap(
        lambda case: mst.run_options(case, whole=whole, drafter=drafter).map(lambda options: (case, options))
    )
    ordered = mst.eviction_runs(device=device, whole=whole, drafter=drafter)
    return st.sampled_from(range(8)).flatmap(lambda k: ordered if k == 7 else drawn)


def _path(target: Target, params: dict) -> str:
    """The path ``other_path`` asks for, by the target's own name: its second, else its default."""
    paths = paths_of(target)
    return paths[1] if params.get("other_path") and len(paths) > 1 else paths[0]


def _cache_size(case: Case, params: dict) -> int:
    rows = params.get("cache_size", 0)
    return rows * case.row_bytes if rows > 0 else UNLIMITED_CACHE


def _run_with_options(target: Target, case: Case, params: dict, *, whole: bool, drafter: bool) -> Any:
    """The prefill under the example's drawn options; ``None`` for an allowed refusal.

    The answer has ``rows``, ``steps``, ``drafts`` and ``log`` (``None`` from a
    target without ``SCHEDULER_OPTIONS``, which runs its option alone).
    """
    from types import SimpleNamespace

    if SCHEDULER_OPTIONS not in target.capabilities:
        method = "whole_item_prefill" if whole else "draft_prefill"
        served = _served(target, case, method, "prefill with its option")
        if served is None:
            return None
        rows, steps, *drafts = served
        return SimpleNamespace(rows=rows, steps=steps, drafts=drafts[0] if drafts else [], log=None)

    def positive(key: str) -> int | None:
        return params[key] if params.get(key, 0) > 0 else None

    call = partial(
        target.scheduled_prefill,
        case,
        Encoder(case),
        cache=target.new_cache(_cache_size(case, params)),
        path=_path(target, params),
        whole_items=whole,
        lookahead=1 if drafter else 0,
        token_budget=positive("token_budget"),
        encoder_budget=positive("encoder_budget"),
    )
    outcome = observe(call)
    _nothing_scheduled_for_the_refused(outcome)
    if refused_collision(case, outcome, anywhere=True):
        return None
    with collisions_as_hazards(case):
        served = value_of(outcome, "prefill under scheduler options", "the rows and the steps")
    return SimpleNamespace(
        rows=tensors_rows(served.rows),
        steps=served.steps,
        drafts=served.drafts,
        log=served.log,
        cache_size=served.cache_size,
        encoder_budget=served.encoder_budget,
        unit=served.unit,
    )


def _nothing_scheduled_for_the_refused(outcome: Outcome) -> None:
    """The step that refuses a request schedules nothing of it: no token, no encoder input.

    A refusal may say which requests a step both scheduled and refused
    (``scheduled``: ``(step, request, tokens)``, vLLM's step driver). Any is a
    divergence, on a batch with a hash collision too: the refusal is allowed,
    running the refused request's tokens in that step (on the rows the refusal
    was about) is not (docs/rules.md, "A second engine").
    """
    scheduled = getattr(outcome.error, "scheduled", None) if outcome.raised else None
    if isinstance(scheduled, list) and scheduled:
        raise Failure(
            "a step scheduled tokens of a request it refused",
            expected="no token and no encoder input of a request in the step that refuses it",
            actual=f"(step, request, tokens) {scheduled}: {show_error(outcome.error)}",
            signature="a step scheduled tokens of a request it refused",
        )


def tensors_rows(rows: list[Any]) -> Any:
    """Every request's rows in request order (``None`` when no request has any)."""
    import torch

    present = [r for r in rows if r is not None]
    return torch.cat(present) if present else None


def _held_to_the_rules(case: Case, served: Any, *, whole: bool, drafter: bool, lookahead: int = 1) -> None:
    """R3 rows of what was scheduled, R3w's cuts, R3d's drafter gathers, then the encoder's work.

    A divergence is raised before any hazard of the same run.
    """
    scheduled = _scheduled(case, served.steps)
    cut = reference.cut_items(case, served.steps) if whole else []
    # With a drafter, vLLM's cut right before an item the look-ahead would reach is a hazard (see below).
    cut_for_lookahead = drafter and all(_cut_for_lookahead(case, served, c, lookahead) for c in cut)
    if cut and not cut_for_lookahead:
        raise Failure(
            "a step cut an item it started, with items scheduled whole",
            expected="each step ends before an item it cannot finish",
            actual=f"(request, item) {cut} cut by steps {served.steps}",
        )
    _scheduled_rows(case, scheduled, served.rows)
    if drafter:
        with collisions_as_hazards(case):
            for k, start, tokens, draft_rows, draft_mask in served.drafts:
                _draft_step(case, k, start, tokens, draft_rows, draft_mask)
    _liveness(case, served, whole=whole, lookahead=lookahead if drafter else 0)  # whatever the hashes
    if cut:
        raise Hazard(
            "a step cut an item it started, with items scheduled whole and a drafter: it stopped one token"
            " before the next item, which the drafter's look-ahead would reach",
            expected="each step ends before an item it cannot finish (the drafter may read the next"
            " item's first position from token embeddings, R3d)",
            actual=f"(request, item) {cut} cut by steps {served.steps}",
            signature="a step cut an item to keep a drafter's look-ahead off the next item",
        )
    if served.log is not None and not reference.has_any_collision(case):
        _encoder_work(case, served, lookahead if drafter else 0)


def _liveness(case: Case, served: Any, *, whole: bool, lookahead: int) -> None:
    """R3l: a request the steps left short of its window's end was blocked, in the step that scheduled
    nothing (a step driver stops there: every later step would be the same one), by the token budget or
    the encoder cache (``reference.blocker``); nothing blocking it is a livelock, naming the request, the
    step and what was free. The cache's room is the rules', never the target's own account of it."""
    log = served.log or []
    when = f"step {len(log) - 1}" if log else "the step after its last"
    unit = getattr(served, "unit", "embeddings")
    asked_in = getattr(log[-1], "asked", {}) if log else {}
    for k, at in reference.waiting(case, served.steps).items():
        request = case.requests[k]
        asked = asked_in.get(k, request.window.stop - at)
        room = _room(case, served, k, lookahead) if log else None
        if reference.blocker(request, at, asked, whole=whole, lookahead=lookahead, room=room, unit=unit):
            continue
        cache = _what_was_free(request, at, room, served) if room is not None else ""
        raise NoProgress(
            f"{when} scheduled no token of request {k}, waiting at position {at} of its window's end"
            f" {request.window.stop}, though neither the token budget nor the encoder cache blocked it",
            signature=reference.LIVELOCK,
            expected="a step schedules a token of a waiting request unless the token budget or the encoder"
            " cache holds back its next item (R3l)",
            actual=f"free in {when}: {asked} tokens asked{cache}; steps {served.steps}",
        )


def _what_was_free(request: Any, at: int, room: Any, served: Any) -> str:
    """The cache's size and budget in force, and the room they had for the item at ``at``, if any."""
    shown = f", a cache of {served.cache_size} {served.unit} and an encoder budget of {served.encoder_budget}"
    for i, item in enumerate(request.items):
        if item.extent.start <= at < item.extent.stop:
            free = room(item)
            return shown + (f", item {i} cached" if free is None else f", {free} free for item {i}")
    return shown


def _room(case: Case, served: Any, k: int, lookahead: int) -> Any:
    """What a cache of the size in force has, by the rules, for request ``k``'s item in the last step.

    ``None`` for an item a request still in the batch surely holds (a step ran it over the item's
    positions, and it has not passed its end): cached, it needs no room. Otherwise the cache less every
    other item a request in the batch may hold (one a step reached, look-ahead included, or any
    another request has not passed, up to its window's end and the look-ahead), at most the step's
    encoder budget: room a cache evicting only unreferenced entries surely has, whatever the target's
    own accounting says.
    """
    last = len(served.log) - 1
    ends = [r.window.stop for r in case.requests]

    def room(item: Item) -> int | None:
        holder = _holder(case, served.log, last, item.hash, 0)  # a step ran over its positions
        if holder is not None and case.requests[holder[0]].items[holder[1]].token_count == item.token_count:
            return None
        taken = {  # by hash and size: with a hash collision both entries count
            (other.hash, other.token_count): other
            for r, computed in served.log[last].live.items()
            for other in case.requests[r].items
            if other.extent.stop > computed
            and (
                (r != k and other.extent.start < ends[r] + lookahead)
                or _holder(case, served.log, last, other.hash, lookahead) is not None
            )
        }
        taken.pop((item.hash, item.token_count), None)
        used = sum(reference.cost(other, served.unit) for other in taken.values())
        return min(served.cache_size - used, served.encoder_budget)

    return room


def scheduled_run(target: Target, case: Case, params: dict) -> None:
    """The case run once under the example's drawn options (items whole and a drafter as drawn), held
    to the rules; nothing for a target without ``SCHEDULER_OPTIONS`` (``prefill.stateful`` uses it)."""
    if SCHEDULER_OPTIONS not in target.capabilities or "token_budget" not in params:
        return
    whole, drafter = bool(params.get("whole")), bool(params.get("drafter"))
    served = _run_with_options(target, case, params, whole=whole, drafter=drafter)
    if served is not None:
        _held_to_the_rules(case, served, whole=whole, drafter=drafter)


def _cut_for_lookahead(case: Case, served: Any, cut: tuple[int, int], lookahead: int) -> bool:
    """Whether the scheduler cut the item stopping a step ``lookahead`` before another item of its request.

    vLLM, with items whole and a drafter, rolls a step back to one token
    before the next item it cannot finish (so the drafter's look-ahead stays
    off it), even when that cuts the item just before: R3w and R3d together
    (docs/rules.md, "A second engine"). A step that got every token it asked
    for (its log's ``asked``, where the target keeps one) was ended by its
    window or the token budget, not rolled back: its cut is the whole-items
    divergence, wherever it happens to stop.
    """
    k, i = cut
    request = case.requests[k]
    item = request.items[i].extent
    starts = {other.extent.start for other in request.items}
    asked = {(r, step.live[r]): n for step in served.log or () for r, n in getattr(step, "asked", {}).items()}
    return any(
        r == k
        and first <= item.start
        and item.start < first + n < item.stop
        and first + n + lookahead in starts
        and n < asked.get((r, first), n + 1)
        for r, first, n in served.steps
    )


def _encoder_work(case: Case, served: Any, lookahead: int) -> None:
    """Hazards of the encoder's work under a compute budget and a cache of a given size.

    - A step's encoder inputs cost at most its compute budget (vLLM raises the
      budget to its largest item, so one item always fits).
    - An item is encoded again only when a cache that evicts its oldest
      unreferenced entry first (vLLM's documented policy) would have evicted
      it: between the item's last encode and this one, the items any live
      request could have held or needed (from where it stood to its window's
      end, and the drafter's look-ahead) together with the item would not
      fit. Otherwise the cache dropped, or never kept, what it had room for.
    - No entry is evicted while a request in the batch holds it (a step
      scheduled it over the item and it has not passed the item's end), a
      request stopped in the middle of an item across steps included, whatever
      the cache's size (a target whose log names what each step evicted).
    """
    ends = [r.prefix_len + r.extend_len for r in case.requests]
    last: dict[int, int] = {}
    for t, step in enumerate(served.log):
        for evicted in getattr(step, "evicted", ()):
            holder = _holder(case, served.log, t, evicted, lookahead)
            if holder is not None:
                k, i, since = holder
                raise Hazard(
                    f"step {t} evicted the cache entry of item {i} of request {k}, which still held it"
                    f" (since step {since})",
                    expected="only entries no request in the batch holds are evicted (its cache's policy)",
                    actual=f"evicted hashes per step {[getattr(s, 'evicted', []) for s in served.log]};"
                    f" each step's requests at {[s.live for s in served.log]}",
                    signature="evicted a cache entry a live request still held",
                )
        items = [case.requests[k].items[i] for k, i in step.encoded]
        cost = sum(reference.cost(item, served.unit) for item in items)
        if cost > served.encoder_budget:
            raise Hazard(
                f"step {t} encoded more than the step's encoder compute budget",
                expected=f"at most {served.encoder_budget} {served.unit} per step",
                actual=f"{cost} {served.unit}: (request, item) {step.encoded}",
                signature="the encoder ran past a step's compute budget",
            )
        for (k, i), item in zip(step.encoded, items, strict=True):
            if item.hash in last:
                held = _could_hold(case, served.log[last[item.hash] : t + 1], ends, lookahead)
                held.pop(item.hash, None)
                need = sum(reference.cost(one, served.unit) for one in (item, *held.values()))
                if need <= served.cache_size:
                    raise Hazard(
                        f"step {t} encoded item {i} of request {k} again"
                        f" (last encoded in step {last[item.hash]})",
                        expected=(
                            f"served from a cache of {served.cache_size} {served.unit}: with the items live"
                            f" requests could hold since ({sorted(held)}), it needs {need}"
                        ),
                        actual=f"encoder inputs per step {[s.encoded for s in served.log]}",
                        signature="re-encoded an item a cache evicting its oldest free entries would hold",
                    )
            last[item.hash] = t


def _holder(case: Case, log: list, t: int, item_hash: int, lookahead: int) -> tuple[int, int, int] | None:
    """Who holds an item of this hash at step ``t``: ``(request, item, since step)``, or ``None``.

    It holds the item from the first step that scheduled it over one of the
    item's positions (its look-ahead included) until it passes the item's end
    or leaves the batch; no eviction in between is vLLM's.
    """
    for k, computed in log[t].live.items():
        for i, item in enumerate(case.requests[k].items):
            if item.hash != item_hash or computed >= item.extent.stop:
                continue
            positions = set(item.positions())
            for s, earlier in enumerate(log[:t]):
                n, start = earlier.scheduled.get(k, 0), earlier.live.get(k, 0)
                if n > 0 and any(p in positions for p in range(start, start + n + lookahead)):
                    return k, i, s
    return None


def _could_hold(case: Case, log: list, ends: list[int], lookahead: int) -> dict[int, Item]:
    """Hash -> item, for every item a live request of these steps could hold a reference to or allocate.

    A request holds the items it started and has not passed; a step it was
    scheduled in reaches its tokens and the look-ahead; a step that scheduled
    nothing of it may still have tried (and evicted for) anything up to its
    window's end.
    """
    held: dict[int, Item] = {}
    for step in log:
        for k, computed in step.live.items():
            reach = ends[k] if k not in step.scheduled else computed + step.scheduled[k]
            for item in case.requests[k].items:
                if item.extent.stop > computed and item.extent.start < reach + lookahead:
                    held.setdefault(item.hash, item)
    return held


def _served(target: Target, case: Case, method: str, what: str) -> Any:
    """The option's answer, ``None`` for an allowed refusal; a crash on a colliding batch is a hazard.

    An option may look past the windows, so a clear refusal of a collision
    anywhere in the batch is allowed.
    """
    call = partial(getattr(target, method), case, Encoder(case), cache=target.new_cache(UNLIMITED_CACHE))
    outcome = observe(call)
    if refused_collision(case, outcome, anywhere=True):
        return None
    with collisions_as_hazards(case):
        return value_of(outcome, what, "the rows and the steps")


def _scheduled(case: Case, steps: list) -> Case:
    scheduled = reference.scheduled_windows(case, steps)
    if isinstance(scheduled, str):
        raise Failure(
            "the steps do not prefill the windows",
            expected="steps running on from each prefix",
            actual=scheduled,
        )
    return scheduled


def _scheduled_rows(case: Case, scheduled: Case, rows: Any) -> None:
    with collisions_as_hazards(case):
        same(scheduled, "rows of the tokens scheduled", run(REFERENCE, scheduled)[0], Outcome(value=rows))


@check(
    "prefill.whole_items",
    rule="R3w",
    family=DIFFERENTIAL,
    needs={WHOLE_ITEMS},
    examples=lambda device: _option_cases(device, whole=1),
    sweeps=True,
)
def whole_items(target: Target, case: Case, params: dict) -> None:
    """With items scheduled whole, no step cuts an item it started; the rows are R3's of what it ran.

    Under the drawn scheduler options (a drafter among them). A cut does not
    depend on hashes, so only a crash or the rows are a hazard on a batch with
    a hash collision.
    """
    drafter = bool(params.get("drafter"))
    served = _run_with_options(target, case, params, whole=True, drafter=drafter)
    if served is None:
        return
    _held_to_the_rules(case, served, whole=True, drafter=drafter)


@check(
    "prefill.draft_lookahead",
    rule="R3d",
    family=DIFFERENTIAL,
    needs={DRAFT_LOOKAHEAD},
    examples=lambda device: _option_cases(device, drafter=1),
    sweeps=True,
)
def draft_lookahead(target: Target, case: Case, params: dict) -> None:
    """A drafter reading one token ahead is served R3's rows there, never an encoder cache miss.

    Each step's drafter window is the step's window moved one token on. Its
    mask marks placeholder positions only, and every one of an item the step
    itself reached (it starts before the step's end); an item starting at the
    step's end may be left to token embeddings. The rows, in mask order, are
    those positions' rows. Under the drawn scheduler options (items whole
    among them; the drafter's gather on the drawn path where it has one).
    """
    whole = bool(params.get("whole"))
    served = _run_with_options(target, case, params, whole=whole, drafter=True)
    if served is None:
        return
    _held_to_the_rules(case, served, whole=whole, drafter=True)


def _draft_step(case: Case, k: int, start: int, tokens: int, draft_rows: Any, draft_mask: Any) -> None:
    request = case.requests[k]
    window = range(start, start + tokens)
    row_at = {p: item.row(i) for item in request.items for i, p in enumerate(item.positions())}
    needed = {p for item in request.items if item.extent.start < start + tokens - 1 for p in item.positions()}
    marked = [p for p, on in zip(window, draft_mask.reshape(-1).tolist(), strict=True) if on]
    wrong = [p for p in marked if p not in row_at]
    missing = [p for p in window if p in needed and p not in marked]
    what = f"drafter window [{start}, {start + tokens}) of request {k}"
    if wrong or missing:
        raise Failure(
            f"{what}: the mask does not mark the placeholders",
            expected=f"the placeholders of every item the step reached, no text (missing {missing})",
            actual=f"marked {marked}",
        )
    expected = Outcome(value=tensors.materialise(case, [row_at[p] for p in marked]))
    actual = Outcome(value=draft_rows if draft_rows is not None else tensors.materialise(case, []))
    same(case, f"{what}: rows in mask order", expected, actual)
