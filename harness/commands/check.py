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
    UsageError,
    apply_env,
    check_max_examples,
    distinct,
    engine_option,
    env_option,
    findings_option,
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
    _what_runs(check)
    _how_it_searches(check)
    _what_it_writes(check)
    _what_fails_it(check)


def _what_runs(check: argparse.ArgumentParser) -> None:
    """The target, what it is compared with, the checks and devices."""
    group = check.add_argument_group("what runs")
    group.add_argument(
        "--target",
        default="reference",
        help="reference, mutant:NAME, an engine release (ENGINE or ENGINE==X), a path (a tree holding the"
        " engine's package or one rules file), or module:attr (your adapter); `mmharness targets` lists"
        " every form; default: reference",
    )
    engine_option(group)
    env_option(group)
    group.add_argument(
        "--against",
        metavar="SPEC",
        help="a known-good target (any --target form: an engine release, a path) every case also runs"
        " on, on the paths both have: each difference is a change judged by the rules: a regression"
        " (fails the run), inherited, permitted, a fix or neutral (shown; fail under --strict)",
    )
    group.add_argument(
        "--allow-lost",
        action="append",
        metavar="CHECKS",
        help="with --against: comma-separated checks or engine functions (globs too: 'GPUModelRunner.*')"
        " that may run on the other target and not on this one (lost coverage, else exit 3); repeatable",
    )
    group.add_argument(
        "--checks",
        action="append",
        metavar="IDS",
        help="comma-separated check ids, families, rules (R1..R6) or id prefixes; repeatable",
    )
    group.add_argument("--device", choices=("cpu", "cuda", "all"), default="cpu")
    group.add_argument(
        "--regressions",
        metavar="DIR",
        help="saved cases (a finding's file, each naming its check) each check runs before it searches:"
        f" committed findings as regression tests; none: no such cases (default: ./{REGRESSIONS} if present)",
    )


def _how_it_searches(check: argparse.ArgumentParser) -> None:
    """How each check searches, and how the run spreads and stops."""
    group = check.add_argument_group("how it searches")
    group.add_argument(
        "--profile",
        choices=("ci", "dev", "deep"),
        default="ci",
        help="examples per check: ci 100 from seeds fixed per check (default), dev 300 and deep 3000 random",
    )
    group.add_argument("--max-examples", type=int, metavar="N", help="examples per check (1 to 1000000)")
    group.add_argument(
        "--seed", type=int, metavar="N", help="other fixed seeds: the same cases every run, not the ci ones"
    )
    group.add_argument("--deadline", type=seconds, metavar="S", help=DEADLINE_HELP)
    group.add_argument(
        "--first-failure",
        action="store_true",
        help="each check ends at its first case that fails the run, reported and saved as found, not"
        " shrunk: whether the target fails, fast (a baseline's known findings pass by)",
    )
    group.add_argument(
        "--no-shrink",
        dest="shrink",
        action="store_false",
        help="report and save each failure as found, not shrunk: every way the target fails within the"
        " budget, in a third to a half of the time (a round of the search then ends at its first new"
        " failure, so it draws other cases than a shrinking run with the same seed: compare it with"
        " baselines written with --no-shrink too)",
    )
    group.add_argument(
        "--fail-fast",
        action="store_true",
        help="a first verdict, fast: the run stops at the first way of failing the run (a baseline's known"
        " findings aside), shrinks that one for --shrink-time at most, saves it and exits",
    )
    group.add_argument(
        "--shrink-time",
        type=seconds,
        default=30.0,
        metavar="S",
        help="with --fail-fast: seconds the first failure is shrunk for; then its smallest case so far is"
        " kept, as partly shrunk (default 30)",
    )
    group.add_argument(
        "-n",
        "--workers",
        default="1",
        metavar="N",
        help="checks run in N processes, or auto: one per core; the same results as one (default 1)",
    )
    group.add_argument(
        "--database",
        metavar="SPEC",
        help="where failing examples are kept and replayed first: none, a directory, github:OWNER/REPO,"
        " redis://HOST (default: none for --profile ci, else a directory in the cache)",
    )


def _what_it_writes(check: argparse.ArgumentParser) -> None:
    """The run's outputs besides the console."""
    group = check.add_argument_group("what it writes")
    group.add_argument(
        "--findings",
        metavar="DIR",
        help="where shrunk failing cases are saved (default: ./findings or $MMHARNESS_FINDINGS)",
    )
    group.add_argument(
        "--ledger",
        metavar="FILE",
        help="where the run's records go as they happen, one JSON line each (default: ledger.ndjson in the"
        " findings directory); a ledger without a finished record is a run that did not finish",
    )
    group.add_argument("--json", metavar="FILE", help="write a JSON report")
    group.add_argument("--junit", metavar="FILE", help="write a JUnit XML report")
    group.add_argument(
        "--coverage",
        action="store_true",
        help="measure the branch coverage of the target's rule functions (coverage.py, the `coverage` extra):"
        " a table, the unreached branches with why, and the figures in --json",
    )


def _what_fails_it(check: argparse.ArgumentParser) -> None:
    """What counts against the run: baselines of known findings, and --strict."""
    group = check.add_argument_group("what fails the run")
    group.add_argument(
        "--baseline",
        action="append",
        metavar="FILE",
        help="known findings to tolerate, by how they failed (a --write-baseline file or a --json report);"
        " repeat to combine several (e.g. runs under other seeds)",
    )
    group.add_argument("--write-baseline", metavar="FILE", help="write this run's findings as a baseline")
    group.add_argument("--strict", action="store_true", help="hazards and could-not-test fail the run too")


def run(args: argparse.Namespace) -> int:
    from mmharness import executor, interrupts, passes, records
    from mmharness.ledger import Ledger

    plan = _plan(args)
    ledger = Ledger(plan.ledger)
    settings = {"profile": args.profile, "max_examples": args.max_examples, "seed": args.seed}
    units = tuple((check.id, device) for check, device in plan.units)
    ledger.add(records.Started(plan.spec, plan.against, units, settings, plan.identity, *_given()))
    ledger.extend(passes.lost(plan))
    shown = _print_header(plan, args, ledger)
    done = executor.execute(plan, ledger)
    if done.failed_fast:
        print("\n--fail-fast: stopped after the first check that fails the run", flush=True)
    if done.interrupted:
        print("\ninterrupted: reporting the checks that ran", flush=True)
    figures = _passes(plan, ledger, done, shown)
    _report(plan, ledger, done, args, figures)
    code = interrupts.exit_code() if done.interrupted else _exit_code(plan, ledger)
    ledger.add(records.Finished(code, done.interrupted, "fail-fast" if done.failed_fast else ""))
    return code


def _search(args: argparse.Namespace, known) -> dict:
    """The options of every check's search (``Session``'s): ``--first-failure`` and ``--fail-fast`` stop
    at the first failing case, the latter shrinking it for ``--shrink-time``; a baseline's known
    findings pass such a search by."""
    stopping = args.first_failure or args.fail_fast
    return {
        "profile": args.profile,
        "max_examples": args.max_examples,
        "seed": args.seed,
        "deadline": args.deadline,
        "stop_at": _failing_kinds(args.strict) if stopping else (),
        "shrink": args.shrink,
        "shrink_seconds": args.shrink_time if args.fail_fast and not args.first_failure else None,
        "tolerated": known.signatures() if known is not None and stopping else {},
    }


def _given() -> tuple[dict, str | None]:
    """The ``--env`` settings and ``--engine`` of this run, which its ledger keeps for replay."""
    import os

    from mmharness.targets import settings
    from mmharness.targets.specs import ENGINE_VARIABLE

    return settings.given(), os.environ.get(ENGINE_VARIABLE, "").strip() or None


def _plan(args: argparse.Namespace):
    """The run the options ask for, every option checked (a bad one refused in one line) and the targets
    loaded before anything runs."""
    from mmharness import baseline
    from mmharness.plan import Plan, ledger_path
    from mmharness.runner import cuda_available

    apply_env(args)
    target = resolve_target(args.target)
    identity = baseline.identity(target, args.target)
    other = against_target(args.against)
    checks = selected_checks(args.checks)
    check_max_examples(args.max_examples)
    if args.first_failure and not args.shrink:  # what the two do together, said once
        print(
            "--first-failure with --no-shrink: each check ends at its first failing case, kept as found"
            " (as with --first-failure alone: --no-shrink's search for every way of failing is not run)",
            file=sys.stderr,
        )
    findings, args.findings = findings_option(args.findings)
    outputs = {"--json": args.json, "--junit": args.junit, "--write-baseline": args.write_baseline}
    distinct({findings: args.findings, "--ledger": args.ledger, **outputs})
    writable(findings, args.findings, directory=True)
    for option, path in {**outputs, "--ledger": args.ledger}.items():
        writable(option, path)
    _database(args.database, args.profile)  # refused here, opened where each unit runs
    if args.device == "cuda" and not cuda_available():
        raise UsageError("--device cuda: no CUDA device is visible (try --device cpu)")
    functions = {*target.engine_functions(), *(other.engine_functions() if other is not None else ())}
    allowed = _allowed_lost(args.allow_lost, args.against, {check.id for check in checks} | functions)
    known = _baseline(args.baseline, identity, args.against)
    return Plan(
        args.target,
        target,
        checks,
        ["cpu", "cuda"] if args.device == "all" else [args.device],
        Path(args.findings),
        search=_search(args, known),
        database=args.database,
        regressions=_regressions(args.regressions, {check.id for check in checks}),
        against=args.against,
        other=other,
        workers=worker_count(args.workers),
        coverage=_coverage_files(target) if args.coverage else None,
        fail_fast=args.fail_fast,
        strict=args.strict,
        baseline=known,
        identity=identity,
        allow_lost=allowed,
        ledger=ledger_path(Path(args.findings), args.ledger),
    )


def _allowed_lost(given: list[str] | None, against: str | None, known: set[str]) -> frozenset[str]:
    """``--allow-lost NAME,...``: checks or engine functions (or glob patterns of them) whose lost
    coverage does not fail the run; each must name a selected check or a function either target
    knows, and only with ``--against``."""
    import fnmatch

    names = {name.strip() for value in given or () for name in value.split(",") if name.strip()}
    if names and against is None:
        raise UsageError("--allow-lost needs --against: coverage is lost only against another target")
    unknown = sorted(name for name in names if not fnmatch.filter(known, name))
    if unknown:
        raise UsageError(
            f"--allow-lost {', '.join(unknown)}: not a check this run selects nor an engine function either"
            " target knows"
        )
    return frozenset(names)


def _passes(plan, ledger, done, shown: list[str]) -> dict | None:
    """The passes over the search's records: the baseline's tolerance and known cases replayed (not
    after an interruption: the search did not finish), what went untested, coverage figures (lost
    coverage was recorded before the run)."""
    from mmharness import passes, reach

    if plan.baseline is not None:
        ledger.extend(passes.tolerance(ledger.records, plan.baseline))
        if not done.interrupted:
            ledger.extend(passes.changed_known(ledger.records, plan))
    ledger.extend(_untested(plan, ledger, shown))
    if done.reached is None:
        return None
    return reach.analyse(plan.target, plan.coverage, done.reached)


def _untested(plan, ledger, shown: list[str]) -> list:
    """What of the target the run did not exercise (``mmharness.untested``), as records; ``shown``: the
    notes the header printed."""
    from mmharness import records, untested

    return [records.Untested(line) for line in untested.report(ledger.records, plan.target, shown)]


def _report(plan, ledger, done, args, figures: dict | None) -> None:
    """Every view of the records: the console (what did not run first), JSON, JUnit, a baseline file."""
    from mmharness import baseline, reach, records, report
    from mmharness.views import console, json_report, junit

    untested = [r.what for r in ledger.of(records.Untested)]
    lines = console.not_run(ledger.records, plan.spec, untested)
    if lines:
        print("\n" + "\n".join(lines))
    for text in console.findings(ledger.records, plan.spec, against=plan.against):
        print("\n" + text)
    print()
    console.table(ledger.records)
    tolerated = len(ledger.of(records.Tolerated))
    print(
        console.summary(ledger.records)
        + (f"; {tolerated} finding(s) tolerated by the baseline" if plan.baseline else "")
    )
    for line in console.explained(ledger.records, strict=plan.strict):
        print(line)
    _baseline_notes(plan, ledger)
    if figures is not None:
        print("\n" + reach.render(figures))
    shown = {"strict": plan.strict, "interrupted": done.interrupted, "against": plan.against}
    if args.json:
        data = json_report.as_json(
            ledger.records, plan.spec, identity=plan.identity, coverage=figures, untested=untested, **shown
        )
        report.write(args.json, json.dumps(data, indent=2) + "\n")
    if args.junit:
        report.write(args.junit, junit.as_junit(ledger.records, plan.spec, **shown))
    if args.write_baseline:
        search = {"profile": args.profile, "seed": args.seed, "against": args.against}
        document = baseline.dump(ledger.records, plan.identity, search)
        report.write(args.write_baseline, json.dumps(document, indent=2) + "\n")


def _baseline_notes(plan, ledger) -> None:
    """How the baseline met this run: searched deeper than it, entries that did not reproduce, known
    findings whose own case changed."""
    from mmharness import baseline
    from mmharness.views import console

    known = plan.baseline
    if known is None:
        return
    deeper = baseline.shallower(known, ledger.records)
    if deeper:
        print(f"note: {deeper}")
    for entry in known.stale(ledger.records):
        print(f"stale baseline entry (did not reproduce): {entry.check} [{entry.device}] {entry.signature}")
    lines = console.changed(ledger.records, plan.spec, against=plan.against)
    if lines:
        print("\n" + "\n".join(lines))


def _exit_code(plan, ledger) -> int:
    from mmharness import passes
    from mmharness.exits import NOTHING_RAN

    code = passes.exit_code(ledger.records, strict=plan.strict)
    if code == NOTHING_RAN:
        print("nothing ran: every check was skipped (see the reasons above)", file=sys.stderr)
    return code


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


def _print_header(plan, args, ledger) -> list[str]:
    """The target and what a user should know before reading its verdicts (stubs, missing modules; how
    a baseline applies: to another spelling of the same files, or by spec only); with ``--against``,
    the target compared with, and its notes; regressions run first; coverage with nothing to measure."""
    from mmharness import records

    _print_target("target", plan.target, plan.spec)
    shown = plan.target.notes()
    baseline_notes = plan.baseline.notes if plan.baseline else ()
    for note in [*shown, *(f"baseline {note}" for note in baseline_notes)]:
        print(f"  note: {note}")
    if plan.other is not None:
        from mmharness.against import path_note

        _print_target("against", plan.other, plan.against)
        for note in [*plan.other.notes(), *filter(None, [path_note(plan.target, plan.other, plan.against)])]:
            print(f"  note: {note}")
        print("  each difference is a change: a regression fails the run; the others fail under --strict")
        for lost in ledger.of(records.Lost):  # what no longer runs, before any verdict
            print(f"  lost coverage: {lost.shown()}" + (" (allowed: --allow-lost)" if lost.allowed else ""))
    print(flush=True)
    if plan.coverage is not None and not plan.coverage:
        print(f"coverage: {plan.spec} loads no engine files: nothing to measure\n")
    if plan.regressions:
        total = sum(len(cases) for cases in plan.regressions.values())
        print(f"regressions: {total} saved case(s) from {args.regressions or REGRESSIONS} run first\n")
    return shown


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
