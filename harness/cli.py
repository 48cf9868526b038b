"""``mmharness``: check, replay, targets, checks. Exit 0 pass, 1 divergence, 2 usage error.

Imports stay inside the commands so that ``mmharness --help`` never loads torch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

USAGE_ERROR = 2


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mmharness",
        description="Property-based tests for the multimodal scheduling rules of LLM serving engines.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    check = sub.add_parser("check", help="run checks against a target")
    check.add_argument("--target", default="reference", help="target spec (default: reference)")
    check.add_argument(
        "--checks",
        action="append",
        metavar="IDS",
        help="comma-separated check ids, families, rules (R1..R6) or id prefixes; repeatable",
    )
    check.add_argument("--device", choices=("cpu", "cuda", "all"), default="cpu")
    check.add_argument("--profile", choices=("ci", "dev", "deep"), default="ci")
    check.add_argument("--max-examples", type=int, metavar="N")
    check.add_argument("--seed", type=int, metavar="N")
    check.add_argument("--junit", metavar="FILE", help="write a JUnit XML report")
    check.add_argument("--json", metavar="FILE", help="write a JSON report")
    check.add_argument("--baseline", metavar="FILE", help="a JSON report of known findings to tolerate")
    check.add_argument("--strict", action="store_true", help="hazards fail the run too")
    check.add_argument(
        "--findings",
        default=os.environ.get("MMHARNESS_FINDINGS", "findings"),
        metavar="DIR",
        help="where shrunk failing cases are saved (default: ./findings or $MMHARNESS_FINDINGS)",
    )

    replay = sub.add_parser("replay", help="re-run saved cases")
    replay.add_argument("cases", nargs="+", metavar="CASE.json")
    replay.add_argument("--target", help="target spec (default: the one the case was saved from)")

    matrix = sub.add_parser("matrix", help="run checks over several targets; a check x target table")
    matrix.add_argument(
        "--target",
        action="append",
        required=True,
        dest="targets",
        metavar="SPEC",
        help="a target spec; repeat, oldest release first",
    )
    matrix.add_argument("--checks", action="append", metavar="IDS")
    matrix.add_argument("--profile", choices=("ci", "dev", "deep"), default="ci")
    matrix.add_argument("--max-examples", type=int, metavar="N")
    matrix.add_argument("--json", metavar="FILE", help="write the table as JSON")
    matrix.add_argument("--strict", action="store_true", help="hazards count as failing")

    targets = sub.add_parser("targets", help="list targets, or describe one")
    targets.add_argument("spec", nargs="?")

    sub.add_parser("checks", help="list the registered checks")

    fuzz = sub.add_parser(
        "fuzz",
        help="fuzz a parser with atheris (libFuzzer arguments after --)",
        usage="mmharness fuzz PARSER [--corpus DIR] [-- LIBFUZZER_ARGS...]",
    )
    fuzz.add_argument("parser", choices=sorted(FUZZ_PARSERS))
    fuzz.add_argument(
        "--corpus",
        metavar="DIR",
        help="seed inputs (default: corpus/PARSER when it exists); new inputs go to a scratch dir",
    )
    return parser


FUZZ_PARSERS = {"case-parser": "harness.fuzz.case_parser"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    passthrough: list[str] = []
    if "--" in argv:  # everything after -- goes to libFuzzer untouched
        cut = argv.index("--")
        argv, passthrough = argv[:cut], argv[cut + 1 :]
    args = _parser().parse_args(argv)
    args.passthrough = passthrough
    command = {
        "check": _check,
        "replay": _replay,
        "targets": _targets,
        "checks": _checks,
        "fuzz": _fuzz,
        "matrix": _matrix,
    }
    try:
        return command[args.command](args)
    except UsageError as error:
        print(f"mmharness: error: {error}", file=sys.stderr)
        return USAGE_ERROR


def _target(spec: str):
    from harness.targets.base import TargetError
    from harness.targets.specs import resolve

    try:
        return resolve(spec)
    except TargetError as error:
        raise UsageError(str(error)) from None


def _selected_checks(groups: list[str] | None):
    from harness.checks import select

    ids = [part.strip() for group in groups or [] for part in group.split(",") if part.strip()]
    try:
        return select(ids or None)
    except KeyError as error:
        raise UsageError(f"unknown check {error.args[0]!r}; `mmharness checks` lists them") from None


def _baseline(path: str | None) -> set[tuple[str, str]]:
    if path is None:
        return set()
    try:
        data = json.loads(Path(path).read_text())
        return {(r["check"], r["device"]) for r in data["results"] if r["status"] in ("failed", "hazard")}
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UsageError(f"--baseline {path}: not a report written by --json ({error})") from None


def _check(args: argparse.Namespace) -> int:
    from harness import report
    from harness.runner import FAILED, HAZARD, cuda_available, is_divergence, run_check

    target = _target(args.target)
    checks = _selected_checks(args.checks)
    known = _baseline(args.baseline)
    _check_max_examples(args.max_examples)
    devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
    if args.device == "cuda" and not cuda_available():
        raise UsageError("--device cuda: no CUDA device is visible (try --device cpu)")
    color = report.use_color(sys.stdout)
    results = []
    for device in devices:
        for check in checks:
            result = run_check(
                check,
                target,
                profile=args.profile,
                device=device,
                max_examples=args.max_examples,
                seed=args.seed,
            )
            if result.status in (FAILED, HAZARD):
                result.saved = report.save(result, args.target, Path(args.findings))
            results.append(result)
            print(report.result_line(result, color=color), flush=True)
    for result in results:
        if result.status in (FAILED, HAZARD):
            print("\n" + report.failure_details(result, args.target))
    print("\n" + report.summary(results))
    if args.json:
        report.write(args.json, json.dumps(report.as_json(results, args.target), indent=2) + "\n")
    if args.junit:
        report.write(args.junit, report.as_junit(results, args.target))
    failing = [
        r for r in results if is_divergence(r, strict=args.strict) and (r.check.id, r.device) not in known
    ]
    return 1 if failing else 0


def _replay(args: argparse.Namespace) -> int:
    from harness import payload, report
    from harness.checks import all_checks
    from harness.runner import is_divergence, replay

    checks = all_checks()
    worst = 0
    for path in args.cases:
        try:
            document = payload.load_document(path)
        except (OSError, payload.PayloadError) as error:
            raise UsageError(f"{path}: {error}") from None
        check_id = document.provenance.get("check")
        if check_id not in checks:
            raise UsageError(f"{path}: names no known check ({check_id!r}); `mmharness checks` lists them")
        spec = args.target or document.provenance.get("target", "reference")
        result = replay(checks[check_id], _target(spec), (document.case, document.params))
        result.saved = path
        print(report.result_line(result, color=report.use_color(sys.stdout)) + f"  [{path}]")
        if result.failure:
            print(report.failure_details(result, spec))
        worst = max(worst, int(is_divergence(result)))
    return worst


def _matrix(args: argparse.Namespace) -> int:
    from harness import report
    from harness.matrix import render, run_matrix

    checks = _selected_checks(args.checks)
    _check_max_examples(args.max_examples)

    def progress(spec: str, result) -> None:
        shown = "could not load" if result is None else f"{result.check.id}: {result.status}"
        print(f"  {spec}: {shown}", file=sys.stderr, flush=True)

    matrix = run_matrix(args.targets, checks, args.profile, max_examples=args.max_examples, progress=progress)
    print(render(matrix, color=report.use_color(sys.stdout), strict=args.strict))
    if args.json:
        report.write(args.json, json.dumps(matrix.as_json(strict=args.strict), indent=2) + "\n")
    return 0


def _check_max_examples(value: int | None) -> None:
    if value is not None and value < 1:
        raise UsageError(f"--max-examples must be >= 1, got {value}")


def _targets(args: argparse.Namespace) -> int:
    if args.spec:
        for key, value in _target(args.spec).describe().items():
            if isinstance(value, dict):
                value = [f"{name}: {entry}" for name, entry in value.items()]
            if isinstance(value, (list, tuple, set, frozenset)):
                print(f"{key}: ({len(value)})")
                for entry in sorted(map(str, value)) if isinstance(value, (set, frozenset)) else value:
                    print(f"  {entry}")
            else:
                print(f"{key}: {value}")
        return 0
    from harness.targets.specs import listing

    for spec, description in listing():
        print(f"{spec:<40} {description}")
    return 0


def _checks(args: argparse.Namespace) -> int:
    from harness.checks import all_checks

    for check in all_checks().values():
        needs = ",".join(sorted(check.needs))
        print(f"{check.id:<32} {check.rule:<4} {check.family:<12} needs {needs:<24} {check.doc}")
    return 0


def _fuzz(args: argparse.Namespace) -> int:
    import importlib
    import tempfile

    try:
        import atheris  # noqa: F401
    except ImportError:
        raise UsageError("fuzzing needs atheris: pip install 'mmharness[fuzz]'") from None
    seeds = args.corpus or str(Path("corpus") / args.parser)
    if args.corpus and not Path(seeds).is_dir():
        raise UsageError(f"--corpus {seeds}: not a directory")
    scratch = tempfile.mkdtemp(prefix=f"mmharness-{args.parser}-")
    dirs = [scratch, *([seeds] if Path(seeds).is_dir() else [])]
    module = importlib.import_module(FUZZ_PARSERS[args.parser])
    module.main([f"mmharness-fuzz-{args.parser}", *args.passthrough, *dirs])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
