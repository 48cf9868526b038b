"""Real-code mutation score: single-point mutants of a release's rule file, each checked by the harness.

Usage::

    pip install -e '.[mutation]'
    python benchmarks/mutation_score.py [--release 0.5.23] [-n 2] [--limit N] [--json score.json]

The mutants come from cosmic-ray (its operators and its mutator; the harness
writes none of its own): comparisons, arithmetic, numbers, boolean operators,
``not``, loops that run zero times. Only mutants inside the file's functions
count. For each mutant the file is rewritten in a private copy of the release
and ``mmharness check --target COPY --baseline BASE`` runs, BASE being the
report of the unmutated copy: a mutant is *killed* when the run fails (exit 1:
a new way of failing), *timed out* when it exceeds the limit (also a kill),
and *survives* otherwise. With ``--strict`` a new hazard or could-not-test
signature kills too (wasted encoder work, a cache keeping views: behaviour
that follows the rules but changed). Workers run in parallel, each on its own copy. The
report gives the kill rate per function and every survivor with its diff.

cosmic-ray fits because it mutates a file on disk by (operator, occurrence)
and leaves running the tests to us: the harness loads rule files by path, and
needs no test framework in between. (mutmut 3 rewrites a package into
trampolines driven from its own pytest run, which a file loaded by path
outside any package does not fit.)
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from mmharness.workers import count

RULES_FILE = "sglang/srt/managers/mm_schedule.py"
OPERATORS = (
    "core/NumberReplacer",
    "core/ReplaceTrueWithFalse",
    "core/ReplaceFalseWithTrue",
    "core/ReplaceAndWithOr",
    "core/ReplaceOrWithAnd",
    "core/AddNot",
    "core/ZeroIterationForLoop",
    "core/ReplaceBinaryOperator_Add_Sub",
    "core/ReplaceBinaryOperator_Sub_Add",
    "core/ReplaceBinaryOperator_Mul_Add",
    "core/ReplaceBinaryOperator_FloorDiv_Mul",
    "core/ReplaceComparisonOperator_Eq_NotEq",
    "core/ReplaceComparisonOperator_NotEq_Eq",
    "core/ReplaceComparisonOperator_Lt_LtE",
    "core/ReplaceComparisonOperator_LtE_Lt",
    "core/ReplaceComparisonOperator_Gt_GtE",
    "core/ReplaceComparisonOperator_GtE_Gt",
    "core/ReplaceComparisonOperator_Lt_GtE",
    "core/ReplaceComparisonOperator_Gt_LtE",
    "core/ReplaceComparisonOperator_Is_IsNot",
    "core/ReplaceComparisonOperator_IsNot_Is",
    "core/ReplaceComparisonOperator_In_NotIn",
    "core/ReplaceComparisonOperator_NotIn_In",
)
"""Single-point mutations: comparisons (boundaries and negations), arithmetic, constants, booleans, loops."""
TIMEOUT_S = 300
OUTCOMES = {1: "killed", 0: "survived", 3: "survived (could not test)", -1: "timed out"}


def functions_of(source: str) -> list[tuple[str, int, int]]:
    """``(name, first line, last line)`` of each top-level function."""
    tree = ast.parse(source)
    return [
        (node.name, node.lineno, node.end_lineno or node.lineno)
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]


def mutations(rules: Path, workdir: Path) -> list[dict]:
    """Every cosmic-ray mutation of the chosen operators that falls inside a function."""
    from cosmic_ray.commands import init
    from cosmic_ray.work_db import WorkDB, use_db

    functions = functions_of(rules.read_text())
    found = []
    with use_db(str(workdir / "session.sqlite"), WorkDB.Mode.create) as db:
        init([rules], db, {})  # every operator cosmic-ray has; ours are picked below
        for item in db.work_items:
            for spec in item.mutations:
                if spec.operator_name not in OPERATORS:
                    continue
                line = spec.start_pos[0]
                owner = next((name for name, first, last in functions if first <= line <= last), None)
                if owner is not None:
                    job = {"operator": spec.operator_name, "occurrence": spec.occurrence}
                    found.append({**job, "line": line, "function": owner})
    return found


def check(target: Path, *extra: str) -> int:
    command = [sys.executable, "-m", "mmharness.cli", "check", "--target", str(target), *extra]
    env = {**os.environ, "MMHARNESS_FINDINGS": str(target.parent / "findings")}
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=TIMEOUT_S, env=env, check=False
        )
    except subprocess.TimeoutExpired:
        return -1
    return done.returncode


def run_worker(copy: Path, jobs: list[dict], strict: bool = False) -> list[dict]:
    """Every job on one private copy of the release: mutate, check against the copy's baseline, restore."""
    from cosmic_ray.mutating import mutate_code
    from cosmic_ray.plugins import get_operator

    rules = copy / RULES_FILE
    original = rules.read_text()
    baseline = copy.parent / f"{copy.name}-baseline.json"
    check(copy, "--json", str(baseline))
    results = []
    for job in jobs:
        mutated = mutate_code(original, get_operator(job["operator"])(), job["occurrence"])
        if mutated is None:
            results.append({**job, "outcome": "not applied"})
            continue
        rules.write_text(mutated)
        started = time.perf_counter()
        code = check(copy, "--baseline", str(baseline), "--fail-fast", *(["--strict"] if strict else []))
        rules.write_text(original)
        outcome = OUTCOMES.get(code, f"exit {code}")
        lines = difflib.unified_diff(original.splitlines(True), mutated.splitlines(True), n=0)
        diff = "".join(lines).split("\n", 2)[-1]  # without the file header lines
        seconds = round(time.perf_counter() - started, 1)
        results.append({**job, "outcome": outcome, "seconds": seconds, "diff": diff})
        where = f"{job['function']} line {job['line']} ({job['operator'].removeprefix('core/')})"
        print(f"[{copy.name} {len(results)}/{len(jobs)}] {where}: {outcome} in {seconds} s", flush=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", default="0.5.23", help="the SGLang release whose rules file is mutated")
    parser.add_argument(
        "-n", "--workers", type=count, default="auto", help="copies checked at once, or auto (one per core)"
    )
    parser.add_argument("--limit", type=int, help="only the first N mutants (a quick look)")
    parser.add_argument("--function", action="append", help="only mutants inside these functions")
    parser.add_argument("--json", help="write every mutant's outcome here")
    parser.add_argument("--strict", action="store_true", help="a new hazard or could-not-test kills too")
    parser.add_argument(
        "--survivors-of", metavar="JSON", help="only the mutants that survived in an earlier run's --json"
    )
    args = parser.parse_args()

    from mmharness.engines.sglang.adapter import fetch

    release = fetch(args.release)
    with tempfile.TemporaryDirectory(prefix="mmharness-mutation-") as scratch:
        workdir = Path(scratch)
        copies = []
        for k in range(args.workers):
            copies.append(workdir / f"copy{k}")
            shutil.copytree(release, copies[-1])
        jobs = mutations(copies[0] / RULES_FILE, workdir)
        if args.function:
            jobs = [job for job in jobs if job["function"] in args.function]
        if args.survivors_of:
            earlier = json.loads(Path(args.survivors_of).read_text())
            alive = {(r["operator"], r["occurrence"]) for r in earlier if r["outcome"] == "survived"}
            jobs = [job for job in jobs if (job["operator"], job["occurrence"]) in alive]
        jobs = jobs[: args.limit] if args.limit else jobs
        print(f"{len(jobs)} mutants of {RULES_FILE} in sglang=={args.release}, {args.workers} workers")
        shares = [jobs[k :: args.workers] for k in range(args.workers)]
        with ProcessPoolExecutor(max_workers=args.workers) as pool:
            stricts = [args.strict] * len(copies)
            results = [r for part in pool.map(run_worker, copies, shares, stricts) for r in part]
    report(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


def report(results: list[dict]) -> None:
    per_function: dict[str, list[dict]] = defaultdict(list)
    for result in results:
        if result["outcome"] != "not applied":
            per_function[result["function"]].append(result)
    total = killed = 0
    print(f"\n{'function':<40} {'killed':>7} {'of':>4} {'score':>7}")
    for name, mutants in sorted(per_function.items()):
        dead = sum(m["outcome"] in ("killed", "timed out") for m in mutants)
        total, killed = total + len(mutants), killed + dead
        print(f"{name:<40} {dead:>7} {len(mutants):>4} {dead / len(mutants):>7.1%}")
    if total:
        print(f"{'all':<40} {killed:>7} {total:>4} {killed / total:>7.1%}")
    print("\nsurvivors:")
    for result in results:
        if result["outcome"].startswith("survived"):
            where = f"{result['function']} line {result['line']} ({result['operator']})"
            print(f"--- {where}: {result['outcome']}")
            print(result["diff"].rstrip())


if __name__ == "__main__":
    raise SystemExit(main())
