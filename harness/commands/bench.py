"""``mmharness bench``: how fast the harness is, each figure beside a baseline from the same run
(the work is ``mmharness.bench``)."""

from __future__ import annotations

import argparse
import json

from mmharness.commands.options import (
    INT_MAX,
    MAX_EXAMPLES,
    UsageError,
    resolve_target,
    worker_count,
    writable,
)
from mmharness.fuzz.registry import fuzz_parsers


def add_parser(sub) -> None:
    bench = sub.add_parser(
        "bench",
        help="how fast the harness is: each figure beside a baseline measured in the same run",
        description="Cases/s per check beside a hand-written property, check time with 1 and N workers,"
        " the atlas over the cached releases, fuzz execs/s, load and --help time.",
    )
    bench.add_argument("--target", help="the release to measure (default: the engine's newest tested)")
    bench.add_argument("-n", "--workers", default="auto", metavar="N", help="workers for check and atlas")
    bench.add_argument(
        "--examples", type=int, default=500, metavar="N", help="examples per check (default 500)"
    )
    bench.add_argument(
        "--fuzz-seconds", type=int, default=10, metavar="S", help="per fuzz target (default 10)"
    )
    bench.add_argument("--no-atlas", action="store_true", help="skip the atlas over the cached releases")
    bench.add_argument("--json", metavar="FILE", help="write every figure as JSON")


def run(args: argparse.Namespace) -> int:
    import importlib

    from mmharness import bench, report

    newest = (
        getattr(importlib.import_module(module), "DEFAULT_TARGET", None) for module in fuzz_parsers().values()
    )
    if not 1 <= args.examples <= MAX_EXAMPLES:
        raise UsageError(f"--examples must be in [1, {MAX_EXAMPLES}], got {args.examples}")
    if not 1 <= args.fuzz_seconds <= INT_MAX:  # libFuzzer's -max_total_time
        raise UsageError(f"--fuzz-seconds must be in [1, {INT_MAX}], got {args.fuzz_seconds}")
    writable("--json", args.json)
    workers = worker_count(args.workers)
    spec = args.target or next(found for found in newest if found)
    target = resolve_target(spec)  # may download the release: only once every option is known to be good
    print(f"mmharness bench: {spec}, {workers} workers, {args.examples} examples per check", flush=True)
    document = bench.run(
        spec,
        workers=workers,
        examples=args.examples,
        fuzz_seconds=args.fuzz_seconds,
        engine=bench.engine_of(target),
        atlas=not args.no_atlas,
        shown=lambda figure: print(bench.line(figure), flush=True),
    )
    if args.json:
        report.write(args.json, json.dumps(document, indent=2) + "\n")
    return 0
