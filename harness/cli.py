"""``mmharness``: check, replay, matrix, targets, checks, fuzz.

Imports stay inside the commands so that ``mmharness --help`` never loads torch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from mmharness.fuzz.registry import CASE_PARSER, FUZZ_PARSERS

if TYPE_CHECKING:

    from mmharness.model import Case

PASSED_EXIT, DIVERGED, USAGE_ERROR, COULD_NOT_TEST_EXIT, NOTHING_RAN = 0, 1, 2, 3, 4
EXIT_CODES = """exit codes:
  0    every check passed (hazards shown; skips are functions the target lacks)
  1    a divergence (under --strict: also a hazard or a could-not-test)
  2    usage error: bad option, unreadable file, unloadable target
  3    the harness could not test part of the target (nothing diverged)
  4    nothing ran: every check (or replayed case) was skipped
  130  interrupted by Ctrl-C (SIGINT); the report says so and keeps what was found
  143  terminated (SIGTERM); likewise"""


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


DEADLINE_HELP = (
    "seconds one case may run: one still running then is a divergence of its own (did not finish in S s),"
    " saved and replayable; 0: no limit (default 10, at least 60 on CUDA, or $MMHARNESS_DEADLINE)"
)


def _seconds(value: str) -> float:
    """``--deadline``: a number of seconds, 0 or more."""
    import math

    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {value!r}") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (no limit) or more seconds, got {value}")
    return seconds


def _shard(value: str) -> tuple[int, int]:
    """``--shard I/N``, refused while parsing: before any release is downloaded."""
    from mmharness.shards import parse

    try:
        return parse(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mmharness",
        description="Property-based tests for the multimodal scheduling rules of LLM serving engines.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    check = sub.add_parser(
        "check",
        help="run checks against a target",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument(
        "--target",
        default="reference",
        help="reference, mutant:NAME, an engine release (ENGINE or ENGINE==X), a path (a tree holding the"
        " engine's package or one rules file), or module:attr (your adapter); `mmharness targets` lists"
        " every form; default: reference",
    )
    check.add_argument(
        "--checks",
        action="append",
        metavar="IDS",
        help="comma-separated check ids, families, rules (R1..R6) or id prefixes; repeatable",
    )
    check.add_argument("--device", choices=("cpu", "cuda", "all"), default="cpu")
    check.add_argument(
        "--profile",
        choices=("ci", "dev", "deep"),
        default="ci",
        help="examples per check: ci 100 from seeds fixed per check (default), dev 300 and deep 3000 random",
    )
    check.add_argument("--max-examples", type=int, metavar="N", help="examples per check (1 to 1000000)")
    check.add_argument(
        "--seed", type=int, metavar="N", help="other fixed seeds: the same cases every run, not the ci ones"
    )
    check.add_argument("--deadline", type=_seconds, metavar="S", help=DEADLINE_HELP)
    check.add_argument("--junit", metavar="FILE", help="write a JUnit XML report")
    check.add_argument("--json", metavar="FILE", help="write a JSON report")
    check.add_argument(
        "--baseline",
        action="append",
        metavar="FILE",
        help="known findings to tolerate, by how they failed (a --write-baseline file or a --json report);"
        " repeat to combine several (e.g. runs under other seeds)",
    )
    check.add_argument("--write-baseline", metavar="FILE", help="write this run's findings as a baseline")
    check.add_argument("--strict", action="store_true", help="hazards and could-not-test fail the run too")
    check.add_argument("--fail-fast", action="store_true", help="stop at the first check that fails the run")
    check.add_argument(
        "--coverage",
        action="store_true",
        help="measure the branch coverage of the target's rule functions (coverage.py, the `coverage` extra):"
        " a table, the unreached branches with why, and the figures in --json",
    )
    check.add_argument(
        "-n",
        "--workers",
        default="1",
        metavar="N",
        help="checks run in N processes, or auto: one per core; the same results as one (default 1)",
    )
    check.add_argument(
        "--database",
        metavar="SPEC",
        help="where failing examples are kept and replayed first: none, a directory, github:OWNER/REPO,"
        " redis://HOST (default: none for --profile ci, else a directory in the cache)",
    )
    check.add_argument(
        "--findings",
        metavar="DIR",
        help="where shrunk failing cases are saved (default: ./findings or $MMHARNESS_FINDINGS)",
    )

    replay = sub.add_parser("replay", help="re-run saved cases")
    replay.add_argument("cases", nargs="+", metavar="CASE.json")
    replay.add_argument("--target", help="target spec (default: the one the case was saved from)")
    replay.add_argument("-n", "--workers", default="1", metavar="N", help="replay in N processes, or auto")
    replay.add_argument("--deadline", type=_seconds, metavar="S", help=DEADLINE_HELP)

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
    matrix.add_argument(
        "-n", "--workers", default="1", metavar="N", help="targets run in N processes, or auto: one per core"
    )
    matrix.add_argument("--seed", type=int, metavar="N")
    matrix.add_argument("--deadline", type=_seconds, metavar="S", help=DEADLINE_HELP)
    matrix.add_argument(
        "--findings", metavar="DIR", help="save every finding's shrunk case under DIR/TARGET/ (default: none)"
    )
    matrix.add_argument(
        "--shard",
        type=_shard,
        metavar="I/N",
        help="run the I-th of N shares of the targets (every N-th, in order); `mmharness merge` joins them",
    )

    merge = sub.add_parser(
        "merge", help="join the --json reports of `matrix --shard I/N` into the unsharded matrix's report"
    )
    merge.add_argument("shards", nargs="+", metavar="SHARD.json", help="every shard's report, any order")
    merge.add_argument("--json", metavar="FILE", help="write the merged table as JSON")

    atlas = sub.add_parser("atlas", help="a matrix's --json as a release atlas (Markdown), with notes")
    atlas.add_argument("matrix", metavar="MATRIX.json", help="written by `mmharness matrix --json`")
    atlas.add_argument("--notes", metavar="FILE", help="what each class of finding means (JSON)")
    atlas.add_argument("-o", "--output", metavar="FILE", help="write here instead of standard output")

    targets = sub.add_parser("targets", help="list targets, or describe one")
    targets.add_argument("spec", nargs="?")

    sub.add_parser("checks", help="list the registered checks")

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

    fuzz = sub.add_parser(
        "fuzz",
        help="fuzz a parser with atheris (libFuzzer arguments after --)",
        usage=(
            "mmharness fuzz PARSER [--target SPEC] [--corpus DIR] [--baseline FILE] [--strict]"
            " [--findings DIR] [--describe] [-- LIBFUZZER_ARGS...]"
        ),
    )
    fuzz.add_argument("parser", choices=sorted(FUZZ_PARSERS))
    fuzz.add_argument(
        "--target",
        metavar="SPEC",
        help="engine parsers: a release (ENGINE==X) or a path to one (default: the engine's newest tested);"
        " case-parser ignores it",
    )
    fuzz.add_argument(
        "--corpus",
        metavar="DIR",
        help="seed inputs (default: corpus/PARSER when it exists); new inputs go to a scratch dir",
    )
    fuzz.add_argument(
        "--baseline",
        metavar="FILE",
        help="known findings (e.g. corpus/fuzz-baseline.json): reported once, not fatal",
    )
    fuzz.add_argument(
        "--strict",
        action="store_true",
        help="engine parsers: a ValueError/TypeError that Python raised inside the parser is a finding too",
    )
    fuzz.add_argument(
        "--findings",
        metavar="DIR",
        help="where findings and libFuzzer's crash files go (default: ./findings or $MMHARNESS_FINDINGS)",
    )
    fuzz.add_argument(
        "--describe",
        action="store_true",
        help="engine parsers: show the loaded release, files, functions and stubs, then exit",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    passthrough: list[str] = []
    if "--" in argv:  # everything after -- goes to libFuzzer untouched
        cut = argv.index("--")
        argv, passthrough = argv[:cut], argv[cut + 1 :]
    args = _parser().parse_args(argv)
    args.passthrough = passthrough
    args.argv = argv
    # Hypothesis keeps a little state on disk; the command keeps it in its cache, not in the cwd.
    from mmharness.targets.loader import cache_dir

    os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(cache_dir() / "hypothesis"))
    command = {
        "check": _check,
        "replay": _replay,
        "targets": _targets,
        "checks": _checks,
        "fuzz": _fuzz,
        "matrix": _matrix,
        "merge": _merge,
        "atlas": _atlas,
        "bench": _bench,
    }
    try:
        return command[args.command](args)
    except UsageError as error:
        print(f"mmharness: error: {error}", file=sys.stderr)
        return USAGE_ERROR
    except BrokenPipeError:  # `mmharness ... | head`: the reader left, which is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _bench(args: argparse.Namespace) -> int:
    import importlib

    from mmharness import bench, report

    newest = (
        getattr(importlib.import_module(module), "DEFAULT_TARGET", None) for module in FUZZ_PARSERS.values()
    )
    if not 1 <= args.examples <= MAX_EXAMPLES:
        raise UsageError(f"--examples must be in [1, {MAX_EXAMPLES}], got {args.examples}")
    if not 1 <= args.fuzz_seconds <= INT_MAX:  # libFuzzer's -max_total_time
        raise UsageError(f"--fuzz-seconds must be in [1, {INT_MAX}], got {args.fuzz_seconds}")
    _writable("--json", args.json)
    workers = _workers(args.workers)
    spec = args.target or next(found for found in newest if found)
    target = _target(spec)  # may download the release: only once every option is known to be good
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


def _target(spec: str):
    from mmharness.targets.base import TargetError
    from mmharness.targets.specs import resolve

    try:
        return resolve(spec)
    except TargetError as error:
        raise UsageError(str(error)) from None


def _selected_checks(groups: list[str] | None):
    from mmharness.checks import SelectionError, selected

    try:
        return selected(groups, "--checks")
    except SelectionError as error:
        raise UsageError(str(error)) from None


def _writable(option: str, path: str | None, *, directory: bool = False) -> None:
    """Refuse an output path before any check runs, not after all of them (see ``report.writable``)."""
    from mmharness.report import writable

    if path is not None:
        problem = writable(path, directory=directory)
        if problem:
            raise UsageError(f"{option} {path}: {problem}")


def _distinct(outputs: dict[str, str | None]) -> None:
    """Refuse one path given to two outputs (option -> path): one would overwrite the other."""
    seen: dict[str, str] = {}
    for option, path in outputs.items():
        if path is None:
            continue
        where = os.path.realpath(os.path.expanduser(path))
        if where in seen:
            raise UsageError(f"{seen[where]} and {option} name the same file {path}: give each its own")
        seen[where] = option


def _findings_option(given: str | None) -> tuple[str, str]:
    """Where findings go and who said so, for messages: ``--findings`` when given (``given``), else
    ``$MMHARNESS_FINDINGS`` when set, else the default ``./findings`` (named as ``--findings``)."""
    if given:
        return "--findings", given
    from_environment = os.environ.get("MMHARNESS_FINDINGS")
    return ("$MMHARNESS_FINDINGS", from_environment) if from_environment else ("--findings", "findings")


def _check(args: argparse.Namespace) -> int:
    from mmharness import baseline, interrupts, reach, report
    from mmharness.progress import Progress, summary_table
    from mmharness.runner import cuda_available, run_check
    from mmharness.workers import ordered

    target = _target(args.target)
    checks = _selected_checks(args.checks)
    _check_max_examples(args.max_examples)
    workers = _workers(args.workers)
    current = baseline.identity(target, args.target)
    known = _baseline(args.baseline, current)
    findings_option, args.findings = _findings_option(args.findings)
    outputs = {"--json": args.json, "--junit": args.junit, "--write-baseline": args.write_baseline}
    _distinct({findings_option: args.findings, **outputs})
    _writable(findings_option, args.findings, directory=True)
    _writable("--json", args.json)
    _writable("--junit", args.junit)
    _writable("--write-baseline", args.write_baseline)
    database = _database(args.database, args.profile)
    devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
    if args.device == "cuda" and not cuda_available():
        raise UsageError("--device cuda: no CUDA device is visible (try --device cpu)")
    measured = _coverage_files(target) if args.coverage else None
    color = report.use_color(sys.stdout)
    _print_header(target, args.target)
    if args.coverage and not measured:
        print(f"coverage: {args.target} loads no engine files: nothing to measure\n")
    results = []
    interrupted = False

    def keep(result) -> None:
        for finding in result.findings:
            if finding.example is not None:
                finding.saved = report.save(result, finding, args.target, Path(args.findings))
        results.append(result)

    units = [(check, device) for device in devices for check in checks]
    options = {
        "profile": args.profile,
        "max_examples": args.max_examples,
        "seed": args.seed,
        "deadline": args.deadline,
    }
    produced = None
    reached, recorder = None, None
    if measured:
        reached = reach.Reached()
        recorder = reach.Recorder(measured) if workers == 1 else None
    with interrupts.handled():
        try:
            if recorder is not None:
                recorder.start()
            with Progress(len(units), "checks") as progress:
                # Interrupted, ``ordered`` yields what had started (the checks in progress with their
                # partial results, ``interrupted``), serially or with workers, then raises ``Stop``.
                if workers == 1:
                    produced = ordered(
                        lambda c, d: run_check(
                            c, target, device=d, database=database, on_example=progress.tick, **options
                        ),
                        units,
                        1,
                    )
                else:
                    work = [(args.target, c.id, d, args.database, options, measured) for c, d in units]
                    produced = ordered(_check_in_worker, work, min(workers, len(units)))
                for check, _ in units:
                    progress.start(check.id)
                    result = next(produced)
                    if reached is not None:  # a worker's answer carries the arcs it reached
                        result, arcs = reach.unwrapped(result)
                        reached.add(arcs)
                    keep(result)
                    if result.interrupted:  # stopped part-way: its findings are in the report below
                        continue
                    progress.line(report.result_line(result, color=color))
                    stopping = interrupts.requested() is not None  # a signal outranks --fail-fast
                    if args.fail_fast and not stopping and _fails(result, known, args.strict):
                        raise _FailedFast
                next(produced, None)  # the end, or the interruption after the last partial result
        except _FailedFast:
            print("\n--fail-fast: stopped after the first check that fails the run", flush=True)
        except KeyboardInterrupt:  # report what ran, and what the checks in progress found
            interrupted = True
            print("\ninterrupted: reporting the checks that ran", flush=True)
        finally:
            if produced is not None:
                produced.close()  # stops the workers
            if recorder is not None:
                reached.add(recorder.stop())
    tolerated = 0
    for result in results:
        for finding in result.findings:
            known_one = known is not None and known.tolerates(result, finding)
            tolerated += known_one
            note = "  (tolerated: in the baseline)" if known_one else ""
            print("\n" + report.finding_details(result, finding, args.target) + note)
    tolerance = f"; {tolerated} finding(s) tolerated by the baseline" if known else ""
    rows = [
        (
            r.check.id,
            r.device,
            report.LABELS[r.status],
            str(len(r.findings)),
            str(r.examples_run),
            str(r.cases_run),
        )
        for r in results
    ]
    print()
    summary_table(rows, ("check", "device", "verdict", "findings", "examples", "cases"), sys.stdout)
    print(report.summary(results) + tolerance)
    deeper = known and baseline.shallower(known, results)
    if deeper:
        print(f"note: {deeper}")
    for entry in known.stale(results) if known else ():
        print(f"stale baseline entry (did not reproduce): {entry.check} [{entry.device}] {entry.signature}")
    figures = None
    if reached is not None:
        figures = reach.analyse(target, measured, reached)
        print("\n" + reach.render(figures))
    if args.json:
        data = report.as_json(
            results,
            args.target,
            strict=args.strict,
            identity=current,
            interrupted=interrupted,
            coverage=figures,
        )
        report.write(args.json, json.dumps(data, indent=2) + "\n")
    if args.junit:
        junit = report.as_junit(results, args.target, strict=args.strict, interrupted=interrupted)
        report.write(args.junit, junit)
    if args.write_baseline:
        search = {"profile": args.profile, "seed": args.seed}
        document = baseline.dump(results, current, search)
        report.write(args.write_baseline, json.dumps(document, indent=2) + "\n")
    if interrupted:
        return interrupts.exit_code()
    if _nothing_ran(results):
        return NOTHING_RAN
    return _exit_code([f.kind for r in results for f in _untolerated(r, known)], strict=args.strict)


def _nothing_ran(results) -> bool:
    """Every check (or replayed case) skipped: not a success, whatever the reason."""
    from mmharness.runner import SKIPPED

    if results and all(r.status == SKIPPED for r in results):
        print("nothing ran: every check was skipped (see the reasons above)", file=sys.stderr)
        return True
    return False


def _atlas(args: argparse.Namespace) -> int:
    from mmharness import atlas, report
    from mmharness.baseline import BaselineError, read_json
    from mmharness.matrix import Matrix, NotAMatrix

    _writable("--output", args.output)
    try:
        matrix = Matrix.from_json(read_json(args.matrix, "a matrix report"))
        notes = atlas.load_notes(args.notes) if args.notes else []
    except BaselineError as error:
        raise UsageError(str(error)) from None
    except NotAMatrix as error:
        raise UsageError(
            f"{args.matrix}: not a matrix report (`mmharness matrix --json` writes one): {error}"
        ) from None
    except atlas.NotesError as error:
        raise UsageError(f"--notes {error}") from None
    text = atlas.render(matrix, notes, command=_command_line(args.argv))
    if args.output:
        report.write(args.output, text)
    else:
        print(text, end="")
    return 0


def _command_line(argv: list[str]) -> str:
    """The command as run, one ``--target`` per line when there are many."""
    import shlex

    words = ["mmharness", *argv]
    lines, line = [], []
    for word in words:
        if word == "--target" and line and len(words) > 12:
            lines.append(shlex.join(line))
            line = []
        line.append(word)
    lines.append(shlex.join(line))
    return " \\\n    ".join(lines)


class _FailedFast(Exception):
    """``--fail-fast`` met a check that fails the run."""


def _untolerated(result, known) -> list:
    """The result's findings the baseline (if any) does not know: what counts against the run."""
    return [f for f in result.findings if known is None or not known.tolerates(result, f)]


def _fails(result, known, strict: bool) -> bool:
    from mmharness.runner import fails_run

    return any(fails_run(f.kind, strict=strict) for f in _untolerated(result, known))


def _exit_code(kinds: list[str], *, strict: bool) -> int:
    """From the kinds of the findings (or the statuses of the results) that count against a run."""
    from mmharness.checks.outcome import COULD_NOT_TEST
    from mmharness.runner import fails_run

    if any(fails_run(kind, strict=strict) for kind in kinds):
        return DIVERGED
    return COULD_NOT_TEST_EXIT if COULD_NOT_TEST in kinds else PASSED_EXIT


def _baseline(paths: list[str] | None, current: dict):
    if not paths:
        return None
    from mmharness import baseline

    try:
        return baseline.combined([baseline.load(path, current) for path in paths])
    except baseline.BaselineError as error:
        raise UsageError(f"--baseline {error}") from None


def _check_in_worker(
    spec: str, check_id: str, device: str, database: str | None, options: dict, measured: list | None = None
):
    """One check in a worker process: the target is loaded once per process, the database opened there.
    ``measured``: the engine files to measure (``--coverage``); the answer then carries the arcs reached."""
    from mmharness.checks import all_checks
    from mmharness.runner import run_check

    opened = _database(database, options["profile"])
    check, target = all_checks()[check_id], _loaded(spec)
    if measured:
        from mmharness import reach

        return reach.measured_call(
            measured, run_check, check, target, device=device, database=opened, **options
        )
    return run_check(check, target, device=device, database=opened, **options)


def _coverage_files(target) -> list[str]:
    """``--coverage``: the target's engine files (none: nothing to measure), once coverage.py is known to
    be installed: before any check runs."""
    from mmharness import reach

    try:
        reach.available()
    except reach.CoverageMissing as error:
        raise UsageError(str(error)) from None
    return reach.engine_files(target)


_LOADED: dict = {}
"""Targets loaded in this (worker) process, by spec."""


def _loaded(spec: str):
    if spec not in _LOADED:
        _LOADED[spec] = _target(spec)
    return _LOADED[spec]


def _workers(value: str) -> int:
    from mmharness.workers import count

    try:
        return count(value)
    except ValueError as error:
        raise UsageError(str(error)) from None


def _database(spec: str | None, profile: str):
    from mmharness.database import DatabaseError, default_spec, open_database

    try:
        return open_database(spec or default_spec(profile))
    except (DatabaseError, OSError) as error:
        raise UsageError(str(error)) from None


def _print_header(target, spec: str) -> None:
    """The target and what a user should know before reading its verdicts (stubs, missing modules)."""
    described = target.describe()
    release = described.get("release")
    print(f"target: {spec}" + (f" (release {release})" if release and release != spec else ""))
    notes = target.notes() if hasattr(target, "notes") else []
    for note in notes:
        print(f"  note: {note}")
    print(flush=True)


def _replay(args: argparse.Namespace) -> int:
    from mmharness import report
    from mmharness.checks import all_checks
    from mmharness.progress import Progress
    from mmharness.workers import ordered

    checks = all_checks()
    workers = _workers(args.workers)
    work = [_saved_case(path, args.target, checks) for path in args.cases]  # every file read first
    results = []
    with Progress(len(work), "cases") as progress:
        replayed = ordered(_replay_in_worker, [(*w, args.deadline) for w in work], min(workers, len(work)))
        for path, (spec, _, _, _) in zip(args.cases, work, strict=True):
            result = next(replayed)
            for finding in result.findings:
                finding.saved = path
            line = report.result_line(result, color=report.use_color(sys.stdout)) + f"  [{path}]"
            progress.line(line + ("\n" + report.failure_details(result, spec) if result.findings else ""))
            results.append(result)
    if _nothing_ran(results):
        return NOTHING_RAN
    return _exit_code([result.status for result in results], strict=False)


def _saved_case(path: str, target: str | None, checks: dict) -> tuple[str, str, Case, dict]:
    """A saved case file as ``(target spec, check id, case, params)``; a usage error says what is wrong."""
    from mmharness import payload
    from mmharness.checks.common import params_problem

    try:
        document = payload.load_document(path)
    except (OSError, payload.PayloadError) as error:
        raise UsageError(f"{path}: {error}") from None
    check_id = document.provenance.get("check")
    if check_id not in checks:
        named = f"names no known check ({check_id!r})"
        if check_id is None:
            named = 'names no check (it has no "check" key)'

        raise UsageError(f"{path}: {named}; `mmharness checks` lists them")
    problem = params_problem(checks[check_id], document.case, document.params)
    if problem:
        raise UsageError(f"{path}: {problem}")
    return target or document.provenance.get("target", "reference"), check_id, document.case, document.params


def _replay_in_worker(spec: str, check_id: str, case: Case, params: dict, deadline: float | None = None):
    from mmharness.checks import all_checks
    from mmharness.runner import replay

    return replay(all_checks()[check_id], _loaded(spec), (case, params), deadline=deadline)


def _matrix(args: argparse.Namespace) -> int:
    from mmharness import interrupts, report, shards
    from mmharness.matrix import run_matrix
    from mmharness.progress import Progress
    from mmharness.runner import deadline_for

    checks = _selected_checks(args.checks)
    _check_max_examples(args.max_examples)
    workers = _workers(args.workers)
    _distinct({"--json": args.json, "--findings": args.findings})
    _writable("--findings", args.findings, directory=True)
    _writable("--json", args.json)
    deadline = deadline_for(args.profile, "cpu", args.deadline)
    targets = args.targets
    if args.shard:
        index, count = args.shard
        targets = shards.share(args.targets, index, count)
        print(f"shard {index}/{count}: {len(targets)} of {len(args.targets)} targets", file=sys.stderr)

    with interrupts.handled(), Progress(len(targets), "targets", stream=sys.stderr) as progress:

        def done(spec: str, cells: int | None) -> None:
            ran = f"{cells} checks" if cells == len(checks) else f"{cells} of {len(checks)} (interrupted)"
            progress.line(f"  {spec}: {'could not load' if cells is None else ran}")

        matrix = run_matrix(
            targets,
            checks,
            args.profile,
            max_examples=args.max_examples,
            seed=args.seed,
            workers=workers,
            progress=done,
            command=_command_line(args.argv),
            findings=args.findings,
            deadline=args.deadline,
        )
    _show_matrix(matrix, strict=args.strict, deadline=deadline)
    if args.json:
        document = matrix.as_json(strict=args.strict)
        if args.shard:
            settings = shards.Settings(args.profile, args.seed, args.max_examples, deadline, args.strict)
            whole = _command_line(_unsharded(args.argv))
            shard = shards.Shard(*args.shard, tuple(args.targets), settings, whole)
            document = shards.report(matrix, shard)
        report.write(args.json, json.dumps(document, indent=2) + "\n")
    if matrix.interrupted:
        return interrupts.exit_code()
    return _matrix_exit_code(matrix, strict=args.strict)


def _show_matrix(matrix, *, strict: bool, deadline: float | None) -> None:
    """The table, then how to replay each saved finding (a hung one under the deadline it overran)."""
    from mmharness import report
    from mmharness.deadline import SIGNATURE as DID_NOT_FINISH
    from mmharness.matrix import render

    print(render(matrix, color=report.use_color(sys.stdout), strict=strict))
    for (check_id, spec), cell in matrix.cells.items():
        for seen in cell.findings:
            if seen.saved:
                hung = seen.signature == DID_NOT_FINISH
                again = report.replay_command(seen.saved, spec, deadline if hung else None)
                print(f"{check_id} on {spec}: reproduce with: {again}")


def _matrix_exit_code(matrix, *, strict: bool) -> int:
    """A target that did not load is a usage error (a misspelt release), else as the cells say."""
    if matrix.target_errors:
        return USAGE_ERROR
    return _exit_code([cell.status for cell in matrix.cells.values()], strict=strict)


def _unsharded(argv: list[str]) -> list[str]:
    """The whole matrix's command: ``argv`` less its ``--shard I/N`` (or ``--shard=I/N``, or a prefix
    argparse took for it: one it parsed cannot be ambiguous)."""
    words: list[str] = []
    value_next = False
    for word in argv:
        name, equals, _ = word.partition("=")
        if value_next:
            value_next = False
        elif len(name) > 2 and "--shard".startswith(name):
            value_next = not equals
        else:
            words.append(word)
    return words


def _merge(args: argparse.Namespace) -> int:
    from mmharness import report
    from mmharness.baseline import BaselineError, read_json
    from mmharness.shards import MergeError, merge

    _writable("--json", args.json)
    try:
        matrix, settings = merge([(path, read_json(path, "a shard report")) for path in args.shards])
    except (BaselineError, MergeError) as error:
        raise UsageError(str(error)) from None
    _show_matrix(matrix, strict=settings.strict, deadline=settings.deadline)
    if args.json:
        report.write(args.json, json.dumps(matrix.as_json(strict=settings.strict), indent=2) + "\n")
    return _matrix_exit_code(matrix, strict=settings.strict)


MAX_EXAMPLES = 1_000_000


def _check_max_examples(value: int | None) -> None:
    if value is not None and not 1 <= value <= MAX_EXAMPLES:
        raise UsageError(f"--max-examples must be in [1, {MAX_EXAMPLES}], got {value}")


def _seed_corpus(parser: str) -> Path:
    """``corpus/PARSER`` of the current directory, else of the checkout the package runs from."""
    here = Path("corpus") / parser
    if here.is_dir():
        return here
    return Path(__file__).resolve().parent.parent / "corpus" / parser


INTEGER_FLAGS = (
    "-atheris_runs=",
    "-runs=",
    "-max_len=",
    "-seed=",
    "-max_total_time=",
    "-timeout=",
    "-jobs=",
    "-workers=",
    "-fork=",
    "-rss_limit_mb=",
    "-malloc_limit_mb=",
)
"""libFuzzer's (and atheris's) integer flags: each takes 0 to ``INT_MAX``, checked before the run."""
INT_MAX = 2**31 - 1


def _check_libfuzzer_args(args: list[str]) -> None:
    """libFuzzer's integer flags, checked here: atheris answers a bad one with a C++ traceback, and
    libFuzzer reads a negative one (or one past ``INT_MAX``, which wraps) as no bound at all."""
    for arg in args:
        flag = next((f for f in INTEGER_FLAGS if arg.startswith(f)), None)
        if flag is None:
            continue
        value = arg.removeprefix(flag)
        if not value.lstrip("-").isdigit():
            raise UsageError(f"{arg}: {flag[:-1]} takes an integer")
        if not 0 <= int(value) <= INT_MAX:
            raise UsageError(f"{arg}: {flag[:-1]} must be in [0, {INT_MAX}], got {value}")


def _targets(args: argparse.Namespace) -> int:
    if args.spec:
        _print_description(_target(args.spec).describe())
        return 0
    from mmharness.targets.specs import listing

    for spec, description in listing():
        print(f"{spec:<40} {description}")
    return 0


def _print_description(description: dict) -> None:
    for key, value in description.items():
        if isinstance(value, dict):
            value = [f"{name}: {entry}" for name, entry in value.items()]
        if isinstance(value, (list, tuple, set, frozenset)):
            print(f"{key}: ({len(value)})")
            for entry in sorted(map(str, value)) if isinstance(value, (set, frozenset)) else value:
                print(f"  {entry}")
        else:
            print(f"{key}: {value}")


def _checks(args: argparse.Namespace) -> int:
    from mmharness.checks import all_checks

    for check in all_checks().values():
        needs = ",".join(sorted(check.needs))
        print(f"{check.id:<32} {check.rule:<4} {check.family:<12} needs {needs:<24} {check.doc}")
    return 0


def _fuzz(args: argparse.Namespace) -> int:
    from mmharness.fuzz import FINDINGS_ENV

    saved = os.environ.get(FINDINGS_ENV)
    if args.findings:  # the fuzz guard reads it from the environment; put it back for a caller in-process
        os.environ[FINDINGS_ENV] = args.findings
    try:
        return _run_fuzzer(args)
    finally:
        if saved is None:
            os.environ.pop(FINDINGS_ENV, None)
        else:
            os.environ[FINDINGS_ENV] = saved


def _run_fuzzer(args: argparse.Namespace) -> int:
    """Every option checked, then the fuzzer in a child process (``mmharness.fuzz.supervised``): its
    scratch directory, dictionary and temporary files are removed however libFuzzer ends it, and a
    SIGINT or SIGTERM answers 130 or 143 (libFuzzer's own answer would be 72)."""
    import importlib

    from mmharness.fuzz import Baseline, findings_dir, supervised
    from mmharness.targets.base import TargetError

    engine = args.parser != CASE_PARSER
    _writable(_findings_option(args.findings)[0], str(findings_dir()), directory=True)
    try:
        baseline = Baseline.load(args.baseline) if args.baseline else None
    except ValueError as error:
        raise UsageError(f"--baseline {error}") from None
    seeds = args.corpus or str(_seed_corpus(args.parser))
    if args.corpus and not Path(seeds).is_dir():
        raise UsageError(f"--corpus {seeds}: not a directory")
    _check_libfuzzer_args(args.passthrough)
    module = importlib.import_module(FUZZ_PARSERS[args.parser])
    target = args.target or (module.DEFAULT_TARGET if engine else None)
    if args.describe:
        if not engine:
            raise UsageError("--describe shows an engine parser's target; case-parser has none")
        try:
            _print_description(module.describe(args.parser, target))
        except TargetError as error:
            raise UsageError(str(error)) from None
        return 0
    try:
        import atheris  # noqa: F401
    except ImportError:
        raise UsageError("fuzzing needs atheris: pip install 'mmharness[fuzz]'") from None
    replaying = any(not arg.startswith("-") and Path(arg).is_file() for arg in args.passthrough)
    libfuzzer = list(args.passthrough)
    if not any(arg.startswith("-artifact_prefix=") for arg in libfuzzer):
        findings_dir().mkdir(parents=True, exist_ok=True)
        libfuzzer.insert(0, f"-artifact_prefix={findings_dir()}{os.sep}")

    def fuzz(scratch: Path) -> int:
        """In the child: new inputs go to ``scratch/corpus`` (libFuzzer writes into the first corpus
        dir, so the seeds stay clean); an engine parser writes its dictionary into ``scratch``."""
        corpus = scratch / "corpus"
        corpus.mkdir()
        dirs = [] if replaying else [str(corpus), *([seeds] if Path(seeds).is_dir() else [])]
        argv = [f"mmharness-fuzz-{args.parser}", *libfuzzer, *dirs]
        try:
            if not engine:
                module.main(argv, baseline=baseline)
            else:
                module.main(
                    argv,
                    parser=args.parser,
                    target=target,
                    baseline=baseline,
                    strict=args.strict,
                    scratch=scratch,
                )
        except TargetError as error:
            print(f"mmharness: error: {error}", file=sys.stderr)
            return USAGE_ERROR
        return PASSED_EXIT

    return supervised(f"mmharness-{args.parser}-", fuzz)

if __name__ == "__main__":
    raise SystemExit(main())
