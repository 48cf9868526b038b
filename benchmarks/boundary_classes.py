"""Which boundary classes each check's CI-profile run reaches, and at which example.

Usage: ``python benchmarks/boundary_classes.py [--target SPEC]`` (default: the
reference). A ``-`` is a class the check's cases never reach within the budget.
"""

from __future__ import annotations

import argparse

from mmharness.boundaries import CLASSES, first_seen
from mmharness.checks import all_checks
from mmharness.targets.specs import resolve

SHORT = ["start", "end", "empty", "1-tok", "multi", "2-items", "gap-req", "3-D", "collide"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="reference")
    args = parser.parse_args()
    target = resolve(args.target)
    print(f"{'check':<32}" + "".join(f"{name:>8}" for name in SHORT))
    for check in all_checks().values():
        if check.needs - target.capabilities or check.needs_cuda:
            continue
        first = first_seen(check, target)
        print(f"{check.id:<32}" + "".join(f"{first.get(c, '-'):>8}" for c in CLASSES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
