"""Examples-to-kill for every seeded mutant under the CI profile (budget: median <= 20).

Run: python benchmarks/mutant_kills.py [--profile ci]
"""

from __future__ import annotations

import argparse
import statistics

from mmharness.selftest import kill
from mmharness.targets.mutants import MUTANTS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--profile", default="ci", choices=("ci", "dev", "deep"))
    args = parser.parse_args()
    counts = []
    for name in sorted(MUTANTS):
        result = kill(name, profile=args.profile)
        shown = "SURVIVED" if result.examples is None else str(result.examples)
        print(f"{name:<40} {shown:>8}  {', '.join(result.killed_by)}", flush=True)
        if result.examples is not None:
            counts.append(result.examples)
    median = statistics.median(counts)
    print(f"\nkilled {len(counts)}/{len(MUTANTS)}; examples to kill: median {median}, max {max(counts)}")


if __name__ == "__main__":
    main()
