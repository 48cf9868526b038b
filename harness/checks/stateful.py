"""R3 across steps: one engine instance and one embedding cache through a whole prefill program.

Single-step checks give every call a fresh cache; this one keeps what an engine
keeps between scheduler steps. A program (``mmharness.steps``) interleaves
chunks of several requests (through the encoder path, or end to end with the
case's precomputed embeddings), prefix-cache skips, cache replacements (a
shrink, an eviction of everything), switches of path and encoder form, and
encoders that reuse their output buffers. After every step:

- the rows are the reference's for that step's windows (a divergence
  otherwise: wrong rows, another request's rows, a crash);
- a cached entry does not change when the encoder overwrites its output buffer
  after the step (a hazard: the cache kept a view of the encoder's output);
- a warm cache with room does not re-encode an item it holds (a hazard:
  encoder work not needed; items outside a window are ``prefill.encoder_calls``'s).

A target that runs scheduler options (``SCHEDULER_OPTIONS``: vLLM's step
driver) then runs the case once more under the example's drawn options
(``mmharness.checks.options``): requests sharing each step's token budget on a
cache sized near the items, an encoder budget below it, items whole or a
drafter as drawn. Its steps are held to R3 (and R3w, R3d), and its encoder
work to the step's budget and to what a cache of that size would hold.

A divergence is reported before any hazard of the same program. A failing
program is saved with its steps and replays like any other case.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

from mmharness import steps as program
from mmharness.checks.common import REFERENCE, hazard_on_collision
from mmharness.checks.embed_mask import compare
from mmharness.checks.options import scheduled_run
from mmharness.checks.outcome import Failure, Hazard, Outcome, is_clear_error, observe
from mmharness.checks.prefill import same
from mmharness.checks.registry import DIFFERENTIAL, check
from mmharness.model import Case
from mmharness.targets.base import EMBED_AND_MASK, PREFILL, UNLIMITED_CACHE, Encoder, Target, paths_of

SCRIBBLE = 512.0
"""What a reused encoder buffer is overwritten with: exact in every dtype, and no item row holds it."""


def _programs(device: str):
    from hypothesis import strategies as st
    from mmharness import strategies as mst

    def drawn(items: int):
        return mst.cases(
            min_requests=1, max_requests=3, min_items_total=items, collisions=True, device=device
        )

    # Half the cases hold three items or more and end with a request sending them all again
    # (``steps.revisit``): after the others ran on a small cache, what it kept is hit and what it
    # evicted is encoded again, so the cache's eviction order shows.
    cases = st.one_of(drawn(1), drawn(3).map(program.revisit))
    return cases.flatmap(
        lambda case: st.tuples(mst.prefill_programs(case), mst.run_options(case)).map(
            lambda drawn: (case, {"steps": drawn[0], **drawn[1]})
        )
    )


class BufferReusingEncoder(Encoder):
    """The harness's encoder, keeping what it returned so a step can overwrite it afterwards."""

    def __init__(self, case: Case, form: str) -> None:
        super().__init__(case, form)
        self.outputs: list[Any] = []

    def __call__(self, items):
        output = super().__call__(items)
        self.outputs.extend(output if isinstance(output, list) else [output])
        return output

    def scribble(self) -> None:
        for tensor in self.outputs:
            tensor.fill_(SCRIBBLE)


@dataclass
class Machine:
    """One engine, one cache, and a program's progress through the case's requests."""

    target: Target
    case: Case
    cache: Any = None
    warm: bool = True
    held: set[tuple[int, int]] = field(default_factory=set)
    together: set[tuple[tuple[int, int], ...]] = field(default_factory=set)
    """Sets of items the encoder was handed in one call while the cache was warm (a request encoded whole)."""
    hazards: list[Hazard] = field(default_factory=list)
    progress: list[int] = field(default_factory=list)
    colliding: set[int] = field(default_factory=set)
    """Hashes the case gives two token counts: re-encoding those is the cache doing its job."""

    def __post_init__(self) -> None:
        self.cache = self.target.new_cache(UNLIMITED_CACHE)
        self.progress = [0] * len(self.case.requests)
        keys = [(item.hash, item.token_count) for _, _, item in self.case.items()]
        self.colliding = {h for h, n in keys if any(h == other and n != m for other, m in keys)}

    def run(self, k: int, step: dict) -> None:
        if step["op"] == program.CACHE:
            self.cache = self.target.new_cache(self._size(step["size"]))
            self.warm = step["size"] == "unlimited"
            self.held.clear()
            self.together.clear()
        elif step["op"] == program.EMBED and EMBED_AND_MASK in self.target.capabilities:
            batch = program.window_case(self.case, self.progress, step["requests"], step["lengths"])
            encoder = BufferReusingEncoder(batch, "tensor")
            compare(
                self.target,
                batch,
                encoder,
                self.cache,
                f"step {k} (end to end)",
                _scribble_hazard,
                self._refused_collision,
            )
            self._watch_encoder(f"step {k} (end to end)", encoder, batch)
            if step.get("scribble"):
                encoder.scribble()
        elif step["op"] in program.CHUNKS:
            self._prefill(k, step)
        self.progress = program.advance(self.case, self.progress, step)

    def _size(self, name: str) -> int:
        row = self.case.row_bytes
        rows = sum(item.token_count for _, _, item in self.case.items())
        distinct = sorted(
            {(item.hash, item.token_count) for _, _, item in self.case.items()}, key=lambda k: -k[1]
        )
        pair = sum(count for _, count in distinct[:2]) * row
        sizes = {
            "unlimited": UNLIMITED_CACHE,
            "half": rows * row // 2,
            "tiny": 2 * row,
            "zero": 0,
            "pair": pair,
        }
        return sizes[name]

    def _prefill(self, k: int, step: dict) -> None:
        batch = program.window_case(self.case, self.progress, step["requests"], step["lengths"])
        default, *others = paths_of(self.target)
        path = others[0] if others and step.get("path") == "other" else default
        encoder = BufferReusingEncoder(batch, step.get("form", "tensor"))
        call = partial(self.target.chunked_prefill_embedding, batch, encoder, cache=self.cache, path=path)
        actual = observe(call)
        expected = observe(partial(REFERENCE.chunked_prefill_embedding, batch, Encoder(batch)))
        what = f"step {k} ({path} path)"
        if self._refused_collision(batch, actual):
            return
        try:
            same(batch, what, expected, actual)
        except Failure as failure:
            failure.message += f" (requests {step['requests']} at {self._windows(batch)})"
            raise _scribble_hazard(failure, actual) from None
        self._watch_encoder(what, encoder, batch)
        if step.get("scribble"):
            encoder.scribble()

    def _refused_collision(self, batch: Case, actual: Outcome) -> bool:
        """A clear refusal of a batch holding a hash the case gives two token counts (now or in the cache)."""
        return (
            actual.raised
            and is_clear_error(actual.error)
            and any(item.hash in self.colliding for _, _, item in batch.items())
        )

    def _watch_encoder(self, what: str, encoder: Encoder, batch: Case) -> None:
        again = [key for key in encoder.encoded if key in self.held and key[0] not in self.colliding]
        if again:
            # Beside a multi-span item an engine may encode a request whole (one cache entry for
            # the request): a class of its own, apart from re-encoding where every item is cached alone.
            whole = {
                (item.hash, item.token_count)
                for request in batch.requests
                if any(len(item.spans) > 1 for item in request.items)
                for item in request.items
            }
            beside = ", beside a multi-span item in its request" if set(again) <= whole else ""
            repeated = [call for call in encoder.calls if len(call) > 1 and _group(call) in self.together]
            if repeated:  # the same items, encoded together again: a whole-request entry never hit
                beside = ", all the items it had encoded together before"
            self.hazards.append(
                Hazard(
                    f"{what}: a warm cache with room re-encoded {again}{beside}",
                    expected="its entries served from the cache",
                    actual=f"encoder calls {encoder.calls}",
                    signature=f"a warm cache with room re-encoded an item it holds{beside}",
                )
            )
        if self.warm and self.cache is not None:  # a target without a cache holds nothing
            self.held.update(encoder.encoded)
            self.together.update(_group(call) for call in encoder.calls if len(call) > 1)

    def _windows(self, batch: Case) -> str:
        return ", ".join(f"[{r.prefix_len}, {r.prefix_len + r.extend_len})" for r in batch.requests)


def _group(call: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    return tuple(sorted(set(call)))


def _scribble_hazard(failure: Failure, actual: Outcome) -> Failure:
    """A failure whose rows hold what an earlier step's encoder buffer was overwritten with: a hazard."""
    value = actual.value[0] if isinstance(actual.value, tuple) else actual.value
    if actual.raised or value is None or not hasattr(value, "eq") or not bool(value.eq(SCRIBBLE).any()):
        return failure
    return Hazard(
        f"{failure.message}: rows an earlier step's encoder buffer was overwritten with",
        expected=failure.expected,
        actual=failure.actual,
        signature="the cache kept a view of the encoder's output (a reused buffer corrupts it)",
    )


@check(
    "prefill.stateful",
    rule="R3",
    family=DIFFERENTIAL,
    needs={PREFILL},
    examples=_programs,
    params=("steps",),
)
@hazard_on_collision
def stateful(target: Target, case: Case, params: dict) -> None:
    """Across a prefill program on one engine and cache, every step's rows are the reference's."""
    machine = Machine(target, case)
    for k, step in enumerate(params["steps"]):
        machine.run(k, step)
    # The engine's own scheduler across steps: the requests share each step's token budget, so one stops
    # inside an item while the others allocate and evict (a target that runs scheduler options).
    try:
        scheduled_run(target, case, params)
    except Hazard as hazard:
        machine.hazards.append(hazard)
    if machine.hazards:
        raise machine.hazards[0]
