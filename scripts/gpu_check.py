"""The CUDA run: every check on CPU and CUDA against the reference, a recent release and an old one.

Made for a machine with a GPU and no network: it needs torch, Hypothesis,
pytest and pytest-xdist there, and the releases unpacked beforehand into a
folder (an mmharness cache, filled on a machine with network by
``MMHARNESS_CACHE=DIR mmharness targets sglang==X`` per release). Run it through
``scripts/gpu-check.sh DIR`` (which installs mmharness without dependencies)
or ``tox -e gpu -- DIR``. It prints, per check and device, each target's
verdict, then examples/s on CUDA beside CPU; ``--json FILE`` keeps it all.
Where no CUDA device is visible every CUDA cell reads ``skip`` with the
reason: nothing passes silently. A few minutes on a GPU machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("releases", help="a folder of releases unpacked beforehand (an mmharness cache)")
    parser.add_argument(
        "--engine", default="sglang", help="the engine whose releases to take (default sglang)"
    )
    parser.add_argument(
        "--examples", type=int, default=100, help="examples per check and device (default 100)"
    )
    parser.add_argument("--json", metavar="FILE", help="write every result as JSON")
    parser.add_argument(
        "--target",
        action="append",
        help="a release to check (repeat; default: the newest and oldest unpacked)",
    )
    args = parser.parse_args(argv)
    os.environ["MMHARNESS_CACHE"] = str(Path(args.releases).resolve())

    from mmharness.checks import all_checks
    from mmharness.runner import cuda_available, run_check
    from mmharness.targets.releases import cached
    from mmharness.targets.specs import resolve

    found = cached(args.engine)
    if not found:
        print(f"gpu_check: no {args.engine} release unpacked in {args.releases}", file=sys.stderr)
        return 2
    specs = ["reference", *(args.target or dict.fromkeys([found[-1], found[0]]))]
    cuda = cuda_available()
    gpu = _gpu_name() if cuda else "none visible: every CUDA cell is a skip"
    print(f"CUDA: {gpu}; targets: {', '.join(specs)}")
    rows: list[dict] = []
    for spec in specs:
        target = resolve(spec)
        for check in all_checks().values():
            for device in ("cpu", "cuda"):
                began = time.perf_counter()
                result = run_check(check, target, device=device, max_examples=args.examples)
                seconds = time.perf_counter() - began
                rows.append(
                    {
                        "target": spec,
                        "check": check.id,
                        "device": device,
                        "status": result.status,
                        "reason": result.reason,
                        "examples": result.examples_run,
                        "seconds": round(seconds, 3),
                    }
                )
    print(_table(rows, specs))
    skips = sorted({r["reason"] for r in rows if r["status"] == "skipped"})
    print("\n".join(f"skipped: {reason}" for reason in skips))
    print(_speeds(rows, specs))
    if args.json:
        Path(args.json).write_text(
            json.dumps({"cuda": cuda, "targets": specs, "results": rows}, indent=2) + "\n"
        )
    return 1 if any(row["status"] == "divergence" for row in rows) else 0


def _gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name(0)


SHORT = {"passed": "pass", "divergence": "DIVERGE", "hazard": "hazard", "could not test": "untested"}


def _table(rows: list[dict], specs: list[str]) -> str:
    """Check x device rows, one column per target: the verdict."""
    cell = {(r["check"], r["device"], r["target"]): r for r in rows}
    keys = sorted({(r["check"], r["device"]) for r in rows})
    width = max(len(check) for check, _ in keys) + 6
    lines = ["check".ljust(width) + "".join(spec[:22].ljust(24) for spec in specs)]
    for check, device in keys:
        verdicts = (cell[(check, device, spec)] for spec in specs)
        shown = (SHORT.get(r["status"], r["status"]) for r in verdicts)
        lines.append(f"{check} [{device}]".ljust(width) + "".join(v.ljust(24) for v in shown))
    return "\n".join(lines)


def _speeds(rows: list[dict], specs: list[str]) -> str:
    """Examples/s on each device per target, over the checks that ran on both."""
    lines = []
    for spec in specs:
        ran = {
            device: [r for r in rows if r["target"] == spec and r["device"] == device and r["examples"]]
            for device in ("cpu", "cuda")
        }
        both = {r["check"] for r in ran["cpu"]} & {r["check"] for r in ran["cuda"]}
        if not both:
            lines.append(f"{spec}: no check ran on CUDA")
            continue
        rate = {
            device: sum(r["examples"] for r in ran[device] if r["check"] in both)
            / sum(r["seconds"] for r in ran[device] if r["check"] in both)
            for device in ran
        }
        lines.append(
            f"{spec}: {rate['cuda']:.0f} examples/s on CUDA, {rate['cpu']:.0f} on CPU"
            f" ({rate['cuda'] / rate['cpu']:.2f}x) over {len(both)} checks"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
