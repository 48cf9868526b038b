"""``mmharness check``: run checks against a target (in worker processes with ``-n``), with baselines,
reports, ``--fail-fast`` and ``--coverage``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mmharness.commands.options import (
    DEADLINE_HELP,
    EXIT_CODES,
    NOTHING_RAN,
    UsageError,
    apply_env,
    check_max_examples,
    distinct,
    engine_option,
    env_option,
    exit_code,
    findings_option,
    loaded_target,
    nothing_ran,
    resolve_target,
    seconds,
    selected_checks,
    worker_count,
    writable,
)


def add_parser(sub) -> None:
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
    engine_option(check)
    env_option(check)
    check.add_argument(
        "--against",
        metavar="SPEC",
        help="a known-good target (any --target form: an engine release, a path) every case also runs"
        " on: each difference is a change, judged by the rules: a regression (fails the run), a fix or a"
        " neutral change (shown; fail under --strict)",
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
    check.add_argument("--deadline", type=seconds, metavar="S", help=DEADLINE_HELP)
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
        "--first-failure",
        action="store_true",
        help="each check ends at its first case that fails the run, reported and saved as found, not"
        " shrunk: whether the target fails, fast (not with --baseline, whose tolerated findings would end"
        " a search as well)",
    )
    check.add_argument(
        "--no-shrink",
        dest="shrink",
        action="store_false",
        help="report and save each failure as found, not shrunk: every way the target fails within the"
        " budget, in a third to a half of the time (a round of the search then ends at its first new"
        " failure, so it draws other cases than a shrinking run with the same seed: compare it with"
        " baselines written with --no-shrink too)",
    )
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
    check.add_argument(
        "--regressions",
        metavar="DIR",
        help="saved cases (a finding's file, each naming its check) each check runs before it searches:"
        f" committed findings as regression tests; none: no such cases (default: ./{REGRESSIONS} if present)",
    )


def run(args: argparse.Namespace) -> int:
    from mmharness import baseline, interrupts, reach, report, untested
    from mmharness.checks.outcome import HAZARD
    from mmharness.progress import Progress, summary_table
    from mmharness.runner import cuda_available
    from mmharness.session import Session
    from mmharness.workers import ordered

    apply_env(args)
    target = resolve_target(args.target)
    other = against_target(args.against)
    checks = selected_checks(args.checks)
    check_max_examples(args.max_examples)
    workers = worker_count(args.workers)
    current = baseline.identity(target, args.target)
    known = _baseline(args.baseline, current, args.against)
    if args.first_failure and args.baseline:
        raise UsageError("--first-failure with --baseline: a tolerated finding would end the search too")
    if args.first_failure and not args.shrink:  # what the two do together, said once
        print(
            "--first-failure with --no-shrink: each check ends at its first failing case, kept as found"
            " (as with --first-failure alone: --no-shrink's search for every way of failing is not run)",
            file=sys.stderr,
        )
    findings, args.findings = findings_option(args.findings)
    outputs = {"--json": args.json, "--junit": args.junit, "--write-baseline": args.write_baseline}
    distinct({findings: args.findings, **outputs})
    writable(findings, args.findings, directory=True)
    writable("--json", args.json)
    writable("--junit", args.junit)
    writable("--write-baseline", args.write_baseline)
    database = _database(args.database, args.profile)
    regressions = _regressions(args.regressions, {check.id for check in checks})
    devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
    if args.device == "cuda" and not cuda_available():
        raise UsageError("--device cuda: no CUDA device is visible (try --device cpu)")
    measured = _coverage_files(target) if args.coverage else None
    color = report.use_color(sys.stdout)
    _print_header(target, args.target, known.notes if known else (), other, args.against)
    shown = target.notes()
    if args.coverage and not measured:
        print(f"coverage: {args.target} loads no engine files: nothing to measure\n")
    results = []
    interrupted = False

    units = [(check, device) for device in devices for check in checks]
    options = {
        "profile": args.profile,
        "max_examples": args.max_examples,
        "seed": args.seed,
        "deadline": args.deadline,
        "stop_at": _failing_kinds(args.strict) if args.first_failure else (),  # the workers' too
        "shrink": args.shrink,
    }
    session = Session(
        target,
        args.target,
        database=database,
        findings=Path(args.findings),
        regressions=regressions,
        against=other,
        against_spec=args.against,
        **options,
    )
    if regressions:
        total = sum(len(cases) for cases in regressions.values())
        print(f"regressions: {total} saved case(s) from {args.regressions or REGRESSIONS} run first\n")
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
                    produced = ordered(lambda c, d: session.run(c, d, on_example=progress.tick), units, 1)
                else:
                    work = [
                        (
                            args.target,
                            c.id,
                            d,
                            args.database,
                            {
                                **options,
                                "regressions": {c.id: regressions.get(c.id, ())},
                                "against_spec": args.against,
                            },
                            measured,
                        )
                        for c, d in units
                    ]
                    produced = ordered(_check_in_worker, work, min(workers, len(units)))
                for check, _ in units:
                    progress.start(check.id)
                    result = next(produced)
                    if reached is not None:  # a worker's answer carries the arcs it reached
                        result, arcs = reach.unwrapped(result)
                        reached.add(arcs)
                    results.append(session.keep(result))
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
            details = report.finding_details(result, finding, args.target, against=args.against)
            print("\n" + details + note)
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
    changes = _changed_known(known, target, other, results, args) if known and not interrupted else []
    changed_json = [change.as_json() for change in changes]
    left = untested.report(results, shown)
    if left:
        print(f"\nuntested in {args.target} (what this run did not exercise):")
        for line in left:
            print(f"  {line}")
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
            against=args.against,
            untested=left,
            changes=changed_json,
        )
        report.write(args.json, json.dumps(data, indent=2) + "\n")
    if args.junit:
        junit = report.as_junit(
            results,
            args.target,
            strict=args.strict,
            interrupted=interrupted,
            against=args.against,
            changes=changed_json,
        )
        report.write(args.junit, junit)
    if args.write_baseline:
        search = {"profile": args.profile, "seed": args.seed, "against": args.against}
        document = baseline.dump(results, current, search)
        report.write(args.write_baseline, json.dumps(document, indent=2) + "\n")
    if interrupted:
        return interrupts.exit_code()
    if nothing_ran(results):
        return NOTHING_RAN
    changed = [HAZARD] * len(changes)  # as a hazard: shown, and fatal under --strict
    return exit_code([f.kind for r in results for f in _untolerated(r, known)] + changed, strict=args.strict)


def _changed_known(known, target, other, results, args) -> list:
    """The baseline's known findings whose own case no longer fails as recorded (``baseline.recheck``;
    against ``other`` where the run was), each shown with its case saved and the line replaying it."""
    from mmharness import baseline, report

    changes = baseline.recheck(known, target, results, other=other, other_spec=args.against or "")
    if changes:
        print(
            f"\n{len(changes)} known finding(s) changed: the baseline's own case no longer fails as recorded"
            " (the code changed where it already failed: a fix, or a change the known signature would"
            " hide; fatal under --strict; once reviewed, write the baseline again)"
        )
    for change in changes:
        entry = change.entry
        note = f"the baseline's case of {entry.kind}: {entry.signature}"
        change.saved = report.save_case(
            change.now.check, entry.example, args.target, Path(args.findings), note
        )
        print(f"  {entry.check} [{entry.device}] {entry.signature}: {change.shown()}")
        print(f"    saved to: {change.saved}")
        print(f"    reproduce with: {report.replay_command(change.saved, args.target, against=args.against)}")
    return changes


class _FailedFast(Exception):
    """``--fail-fast`` met a check that fails the run."""


def _untolerated(result, known) -> list:
    """The result's findings the baseline (if any) does not know: what counts against the run."""
    return [f for f in result.findings if known is None or not known.tolerates(result, f)]


def _fails(result, known, strict: bool) -> bool:
    from mmharness.runner import fails_run

    return any(fails_run(f.kind, strict=strict) for f in _untolerated(result, known))


def _failing_kinds(strict: bool) -> tuple[str, ...]:
    """The finding kinds that fail the run (``--first-failure`` ends a check's search at one)."""
    from mmharness.checks.outcome import COULD_NOT_TEST, DIVERGENCE, HAZARD
    from mmharness.runner import fails_run

    return tuple(kind for kind in (DIVERGENCE, HAZARD, COULD_NOT_TEST) if fails_run(kind, strict=strict))


def _baseline(paths: list[str] | None, current: dict, against: str | None):
    if not paths:
        return None
    from mmharness import baseline
    from mmharness.jsonfile import JSONFileError

    try:
        known = baseline.combined([baseline.load(path, current) for path in paths])
    except JSONFileError as error:  # unreadable as JSON, or not a usable baseline (BaselineError)
        raise UsageError(f"--baseline {error}") from None
    problem = baseline.mode_problem(known, against)
    if problem:
        raise UsageError(f"--baseline {problem}")
    return known


def _check_in_worker(
    spec: str, check_id: str, device: str, database: str | None, options: dict, measured: list | None = None
):
    """One check in a worker process: the target is loaded once per process, the database opened there.
    ``measured``: the engine files to measure (``--coverage``); the answer then carries the arcs reached."""
    from mmharness.checks import all_checks
    from mmharness.session import Session

    opened = _database(database, options["profile"])
    against_spec = options.get("against_spec")
    other = loaded_target(against_spec) if against_spec else None
    session = Session(loaded_target(spec), spec, database=opened, against=other, **options)
    check = all_checks()[check_id]
    if measured:
        from mmharness import reach

        return reach.measured_call(measured, session.run, check, device)
    return session.run(check, device)


def _coverage_files(target) -> list[str]:
    """``--coverage``: the target's engine files (none: nothing to measure), once coverage.py is known to
    be installed: before any check runs."""
    from mmharness import reach

    try:
        reach.available()
    except reach.CoverageMissing as error:
        raise UsageError(str(error)) from None
    return reach.engine_files(target)


REGRESSIONS = "corpus/regressions"
"""Where ``check`` finds saved cases to run first when ``--regressions`` names no directory."""


def _regressions(directory: str | None, selected: set[str]) -> dict[str, list]:
    """Check id -> the saved cases of ``directory`` (each file's provenance names its check) that a
    selected check runs first. A file that does not parse is a usage error naming it and where."""
    from mmharness import payload

    if directory == "none" or (directory is None and not Path(REGRESSIONS).is_dir()):
        return {}
    folder = Path(directory or REGRESSIONS)
    if not folder.is_dir():
        raise UsageError(f"--regressions {directory}: not a directory")
    found: dict[str, list] = {}
    for path in sorted(folder.glob("*.json")):
        try:
            document = payload.load_document(path)
        except (OSError, payload.PayloadError) as error:
            raise UsageError(f"--regressions: {path}: {error}") from None
        check_id = document.provenance.get("check")
        if check_id in selected:
            found.setdefault(check_id, []).append((document.case, document.params))
    return found


def _database(spec: str | None, profile: str):
    from mmharness.database import DatabaseError, default_spec, open_database

    try:
        return open_database(spec or default_spec(profile))
    except (DatabaseError, OSError) as error:
        raise UsageError(str(error)) from None


def _print_header(target, spec: str, baseline_notes=(), other=None, other_spec: str | None = None) -> None:
    """The target and what a user should know before reading its verdicts (stubs, missing modules; how
    a baseline applies: to another spelling of the same files, or by spec only); with ``--against``,
    the target compared with, and its notes."""
    _print_target("target", target, spec)
    notes = [*target.notes(), *(f"baseline {note}" for note in baseline_notes)]
    for note in notes:
        print(f"  note: {note}")
    if other is not None:
        _print_target("against", other, other_spec)
        for note in other.notes():
            print(f"  note: {note}")
        print("  each difference is a change: regression (fails the run), fix, neutral (fail under --strict)")
    print(flush=True)


def _print_target(label: str, target, spec: str) -> None:
    release = target.describe().get("release")
    print(f"{label}: {spec}" + (f" (release {release})" if release and release != spec else ""))


def against_target(spec: str | None):
    """``--against SPEC`` resolved (``None`` without it); one that does not resolve is a usage error."""
    if spec is None:
        return None
    try:
        return resolve_target(spec)
    except UsageError as error:
        raise UsageError(f"--against {spec}: {error}") from None
