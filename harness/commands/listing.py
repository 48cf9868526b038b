"""``mmharness targets`` (every target form, or one target described; ``--nearest``: the releases it
behaves like, ``mmharness.nearest``) and ``mmharness checks`` (the registered checks)."""

from __future__ import annotations

import argparse

from mmharness.commands.options import (
    UsageError,
    apply_env,
    check_max_examples,
    engine_option,
    env_option,
    resolve_target,
    selected_checks,
    worker_count,
    writable,
    write_output,
)

NEAREST_OPTIONS = {
    "candidates": "--candidate",
    "max_examples": "--max-examples",
    "checks": "--checks",
    "findings": "--findings",
    "json": "--json",
}
"""Options that mean something only with ``--nearest``: refused without it rather than ignored."""
NEAREST_EXIT_CODES = """exit codes of --nearest (a CI step: does a fork regress from its nearest release?):
  0    the nearest candidate behaves identically, or its changes are fixes and neutral changes only
  1    the nearest candidate's changes include a regression (a rule the target breaks where it holds)
  2    usage error: bad option, unloadable target or --candidate
  4    no candidate could be compared
  130  interrupted by Ctrl-C (SIGINT); the ranking (and --json) keeps the candidates that finished
  143  terminated (SIGTERM); likewise"""


def add_parser(sub) -> None:
    targets = sub.add_parser(
        "targets",
        help="list targets, or describe one (--nearest: where it sits)",
        epilog=NEAREST_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    targets.add_argument("spec", nargs="?")
    engine_option(targets)
    env_option(targets)
    nearest = targets.add_argument_group(
        "--nearest",
        "where a target (a fork) sits among releases: each candidate runs a fixed sample of every check's"
        " cases (the ci profile's seeds) against the target, as `check --against` compares; ranked by"
        " checks with a change, the identical ones named, then the nearest's changes, each shrunk",
    )
    nearest.add_argument(
        "--nearest", action="store_true", help="rank the candidate releases by how like SPEC they behave"
    )
    nearest.add_argument(
        "--candidate",
        action="append",
        dest="candidates",
        metavar="SPEC",
        help="a release (any target spec) to compare with; repeat (default: every cached release of the"
        " target's engine)",
    )
    nearest.add_argument(
        "--max-examples", type=int, metavar="N", help="sample cases per check and candidate (default 20)"
    )
    nearest.add_argument("--checks", action="append", metavar="IDS", help="the checks compared (default all)")
    nearest.add_argument(
        "-n", "--workers", default="1", metavar="N", help="candidates in N processes, or auto: one per core"
    )
    nearest.add_argument(
        "--findings", metavar="DIR", help="save the nearest's changes' shrunk cases under DIR (default: none)"
    )
    nearest.add_argument(
        "--json",
        metavar="PATH",
        help="write the ranking (each candidate's checks, identical or not), the nearest and its changes"
        " (judgement, shrunk case; replay line with --findings) and the exit code as JSON",
    )

    sub.add_parser("checks", help="list the registered checks")


def run(args: argparse.Namespace) -> int:
    return _checks(args) if args.command == "checks" else _targets(args)


def _targets(args: argparse.Namespace) -> int:
    apply_env(args)
    given = [flag for name, flag in NEAREST_OPTIONS.items() if getattr(args, name, None) is not None]
    if given and not args.nearest:
        raise UsageError(f"{given[0]} needs --nearest")
    if args.nearest:
        return _nearest(args)
    if args.spec:
        print_description(_with_tree(resolve_target(args.spec)))
        return 0
    from mmharness.targets.specs import listing

    for spec, description in listing():
        print(f"{spec:<40} {description}")
    return 0


def _nearest(args: argparse.Namespace) -> int:
    """``targets SPEC --nearest``: the candidates ranked, the identical ones, the nearest's changes."""
    import json
    import sys
    from pathlib import Path

    from mmharness import interrupts, nearest
    from mmharness.progress import Progress

    if not args.spec:
        raise UsageError("--nearest needs a target: mmharness targets SPEC --nearest")
    checks = selected_checks(args.checks)
    check_max_examples(args.max_examples)
    workers = worker_count(args.workers)
    writable("--findings", args.findings, directory=True)
    writable("--json", args.json)
    target = resolve_target(args.spec)
    try:
        candidates = args.candidates or nearest.engine_candidates(target, args.spec)
    except nearest.NearestError as error:
        raise UsageError(f"--nearest: {error}") from None
    for spec in dict.fromkeys(args.candidates or ()):  # each named one loads, or is refused at once
        try:
            resolve_target(spec)
        except UsageError as error:
            raise UsageError(f"--candidate {spec}: {error}") from None
    budget = args.max_examples if args.max_examples is not None else nearest.MAX_EXAMPLES
    print(
        f"nearest to {args.spec}: {len(candidates)} candidate(s), {len(checks)} check(s),"
        f" {budget} sample case(s) per check (profile {nearest.PROFILE}, its fixed seeds)",
        flush=True,
    )
    with interrupts.handled():
        with Progress(len(candidates), "candidates", stream=sys.stderr) as progress:

            def done(candidate) -> None:
                changed = f"{len(candidate.changed)} check(s) changed"
                progress.line(f"  {candidate.spec}: {'could not load' if candidate.error else changed}")

            found = nearest.compare_all(
                args.spec, candidates, checks, max_examples=budget, workers=workers, progress=done
            )
        chosen = found.nearest
        if chosen is not None and chosen.changed and not found.interrupted:
            print(f"searching {chosen.spec}'s changes again, shrinking each", file=sys.stderr, flush=True)
            try:
                other = resolve_target(chosen.spec)
                folder = Path(args.findings) if args.findings else None
                nearest.search_changes(found, target, other, findings=folder)
            except KeyboardInterrupt:
                found.interrupted = True
    print("\n".join(["", *nearest.ranking_lines(found), "", *nearest.change_lines(found)]))
    code = interrupts.exit_code() if found.interrupted else nearest.exit_code(found)
    if args.json:
        document = nearest.as_json(found, [c.id for c in checks], code=code)
        write_output("--json", args.json, json.dumps(document, indent=2) + "\n")
    if found.interrupted:
        print("\ninterrupted: the ranking holds the candidates that finished")
    elif code == nearest.REGRESSED:
        print(f"\nexit {code}: the changes from {found.nearest.spec} include a regression")
    return code


def _with_tree(target) -> dict:
    """The target's ``describe()``, with ``tree`` after its release where it is a tree by path: a fork's
    version file names its donor release, which alone would read as that release."""
    from mmharness.targets.provenance import tree

    described, said = target.describe(), tree(target)
    if said is None:
        return described
    return {**dict(list(described.items())[:2]), "tree": said, **described}


def print_description(description: dict) -> None:
    """A target's ``describe()`` (or a fuzz target's), one key a line, collections one entry a line."""
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
