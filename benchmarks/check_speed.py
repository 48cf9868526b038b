"""Examples per second of a check, and its overhead over a bare Hypothesis loop.

The budget: chunk checks >= 1,000 examples/s on one core against a loaded
SGLang target, and at most 1.3x the time of a bare ``@given`` loop that draws
the same cases and calls the same target function.

Run: python benchmarks/check_speed.py [--target sglang==0.5.23] [--examples 1000]
"""

from __future__ import annotations

import argparse
import time

from hypothesis import HealthCheck, given, settings
from mmharness import strategies as mst
from mmharness import tensors
from mmharness.checks import all_checks
from mmharness.runner import run_check
from mmharness.targets.specs import resolve


def bare_loop(target, examples: int) -> float:
    """Seconds for a plain Hypothesis loop calling ``embedding_chunk`` on each request with items."""

    @settings(max_examples=examples, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(mst.cases(min_items_total=1))
    def loop(case):
        for r, request in enumerate(case.requests):
            if request.items:
                target.embedding_chunk(tensors.request_embedding(case, request.items), case, r)

    start = time.perf_counter()
    loop()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--target", default="reference")
    parser.add_argument("--examples", type=int, default=1000)
    args = parser.parse_args()
    target = resolve(args.target)
    checks = all_checks()
    for check_id in ("chunk.matches_reference", "prefill.matches_reference", "embed_mask.matches_reference"):
        start = time.perf_counter()
        result = run_check(checks[check_id], target, profile="dev", max_examples=args.examples)
        seconds = time.perf_counter() - start
        print(f"{check_id:<32} {result.examples_run / seconds:7.0f} examples/s  ({result.status})")
    start = time.perf_counter()
    run_check(checks["chunk.matches_reference"], target, profile="dev", max_examples=args.examples)
    harness_seconds = time.perf_counter() - start
    bare_seconds = bare_loop(target, args.examples)
    print(f"chunk.matches_reference vs bare loop: {harness_seconds / bare_seconds:.2f}x")


if __name__ == "__main__":
    main()
