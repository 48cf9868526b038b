"""Budget: loading an SGLang target by path takes <= 50 ms once cached.

Usage: ``python benchmarks/load_target.py [SPEC ...]`` (default ``sglang==0.5.23``;
a ``sglang==X`` spec downloads once). Prints the first load (compiling into the
bytecode cache, or reading it) and the median of repeated warm loads, each a
fresh private namespace, with torch already imported (the harness imports it
anyway to make tensors). A benchmark, not a timed test: the figure depends on the machine.
"""

from __future__ import annotations

import statistics
import sys
import time

BUDGET_MS = 50.0
REPEATS = 20


def _source(spec: str):
    from mmharness.engines.sglang import adapter, layout
    from mmharness.targets import loader

    if spec.startswith("sglang=="):
        version = spec.removeprefix("sglang==")
        return loader.locate(adapter.fetch(version), layout.RULES, release=version)
    return loader.locate(spec, layout.RULES)


def measure(spec: str) -> tuple[float, float]:
    """(first load, median warm load) in milliseconds, each building a full SGLangTarget."""
    from mmharness.engines.sglang.adapter import SGLangTarget, load

    source = _source(spec)
    started = time.perf_counter()
    SGLangTarget(load(source), spec)
    first = (time.perf_counter() - started) * 1000
    warm = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        SGLangTarget(load(source), spec)
        warm.append((time.perf_counter() - started) * 1000)
    return first, statistics.median(warm)


def main(argv: list[str]) -> int:
    import torch  # noqa: F401 - imported up front: its ~2 s import is not the loader's cost

    worst = 0.0
    for spec in argv or ["sglang==0.5.23"]:
        first, warm = measure(spec)
        worst = max(worst, warm)
        budget = f"budget {BUDGET_MS:.0f} ms"
        print(f"{spec}: first load {first:.1f} ms, warm load median {warm:.1f} ms ({budget})")
    return 0 if worst <= BUDGET_MS else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
