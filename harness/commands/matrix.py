"""``mmharness matrix``: checks x targets, one table (``--shard I/N``: a CI job's share of the targets);
``mmharness merge``: the shards' reports joined back into the unsharded matrix's.

After its search, ``matrix`` shrinks each class's case once, on the first
target that found it (``mmharness.matrix.shrink_classes``: the searches shrink
nothing, as shrinking is most of a search's time), then replays it on every
target (``mmharness.matrix.replay_classes``), so a class's range is exact rather
than what each target's search happened to draw. A shard cannot (it lacks the
other shards' classes): ``merge`` shrinks and replays on the merged matrix, so
the merged report is still the unsharded one's. ``--no-replay`` (on ``matrix``, or on
``merge`` for a quick join where the releases cannot be loaded) skips it.
``--against SPEC``: every column's checks run against a known-good target, as
``check --against`` does (``mmharness.matrix``), and so does the replay.
Targets of one engine code (``baseline.behaviour_key``) are searched and
replayed once, the others given the cells, under a search with a fixed seed;
``--no-dedup`` searches each."""

from __future__ import annotations

import argparse
import json
import os
import sys

from mmharness.commands.options import (
    DEADLINE_HELP,
    USAGE_ERROR,
    UsageError,
    apply_env,
    check_max_examples,
    command_line,
    distinct,
    engine_option,
    env_option,
    exit_code,
    loaded_target,
    seconds,
    selected_checks,
    worker_count,
    writable,
    write_output,
)

GRID_HELP = (
    "the check x target table as a compact grid (a character per cell, a row per class of finding, a"
    " column per target, a legend): auto (on a terminal), always, never"
)


def _shard(value: str) -> tuple[int, int]:
    """``--shard I/N``, refused while parsing: before any release is downloaded."""
    from mmharness.shards import parse

    try:
        return parse(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_parser(sub) -> None:
    _matrix_parser(sub)
    _merge_parser(sub)


def _matrix_parser(sub) -> None:
    """``matrix``: its targets, then how it searches (``_search_options``)."""
    matrix = sub.add_parser(
        "matrix",
        help="run checks over several targets; a check x target table",
        description="Run the checks on each target, then replay each class's shrunk case (a check and a"
        " failure signature, with the case of the first target whose search found it) once on every"
        " target whose search missed it: where it fails the same way, the target shows the class too"
        ' (marked \'r\' in the table, "by": "replay" in --json), so a class\'s first and last target are'
        " exact. With --shard I/N there is no replay (a shard has only its own classes): `mmharness"
        " merge` replays on the joined matrix.",
    )
    matrix.add_argument(
        "--target",
        action="append",
        required=True,
        dest="targets",
        metavar="SPEC",
        help="a target spec; repeat, oldest release first",
    )
    engine_option(matrix)
    env_option(matrix)
    matrix.add_argument(
        "--against",
        metavar="SPEC",
        help="a known-good target every case on every target also runs on, as `check --against` does:"
        " each finding is a change from it (a regression, inherited, permitted, fix or neutral), and so is"
        " each replayed class",
    )
    _search_options(matrix)


def _search_options(matrix: argparse.ArgumentParser) -> None:
    """What ``matrix`` runs on each target, how, and what it does after the search."""
    matrix.add_argument("--checks", action="append", metavar="IDS")
    matrix.add_argument("--profile", choices=("ci", "dev", "deep"), default="ci")
    matrix.add_argument("--max-examples", type=int, metavar="N")
    matrix.add_argument("--json", metavar="FILE", help="write the table as JSON")
    matrix.add_argument("--strict", action="store_true", help="hazards count as failing")
    matrix.add_argument("--grid", choices=("auto", "always", "never"), default="auto", help=GRID_HELP)
    matrix.add_argument(
        "-n", "--workers", default="1", metavar="N", help="targets run in N processes, or auto: one per core"
    )
    matrix.add_argument("--seed", type=int, metavar="N")
    matrix.add_argument("--deadline", type=seconds, metavar="S", help=DEADLINE_HELP)
    matrix.add_argument(
        "--findings", metavar="DIR", help="save every finding's shrunk case under DIR/TARGET/ (default: none)"
    )
    matrix.add_argument(
        "--shard",
        type=_shard,
        metavar="I/N",
        help="run the I-th of N shares of the targets (every N-th, in order); `mmharness merge` joins them"
        " and replays the classes (a shard has only its own)",
    )
    matrix.add_argument(
        "--no-replay",
        dest="replay",
        action="store_false",
        help="after the search, do not replay each class's shrunk case on every target (one run per class"
        " and target; the targets where it fails the same way show the class, marked 'by replay'): a"
        " class's range is then only the targets whose own search found it",
    )
    matrix.add_argument(
        "--no-dedup",
        dest="dedup",
        action="store_false",
        help="search and replay every target, even one running the same engine code as an earlier one"
        " (same loaded files' digests, item fields, settings, forms, shims and stubs): by default, with a"
        " fixed seed (the ci profile or --seed), only the first of each code is, and the others get its"
        " cells (marked '=' in the table, \"same_as\" in --json)",
    )


def _merge_parser(sub) -> None:
    """``merge``: the shards' reports joined, then replayed as the unsharded matrix would."""
    merge = sub.add_parser(
        "merge",
        help="join the --json reports of `matrix --shard I/N` into the unsharded matrix's report,"
        " replaying every class's case on every target as the unsharded matrix does",
        description="Join the shards' reports into the unsharded matrix's, then shrink each class's case"
        " once and replay it on every target whose search missed it, as the unsharded `mmharness matrix`"
        " does after its search: a shard cannot, it has only its own classes (its report carries each"
        " case as found, with its choice sequence). This loads every target (-n N at once); --no-replay"
        " only joins.",
    )
    merge.add_argument("shards", nargs="+", metavar="SHARD.json", help="every shard's report, any order")
    merge.add_argument("--json", metavar="FILE", help="write the merged table as JSON")
    merge.add_argument(
        "--findings",
        metavar="DIR",
        help="save each class's shrunk case under DIR/TARGET/ (the shards saved their cases as found;"
        " default: none)",
    )
    merge.add_argument("--grid", choices=("auto", "always", "never"), default="auto", help=GRID_HELP)
    merge.add_argument(
        "-n", "--workers", default="1", metavar="N", help="replay on N targets at once, or auto: one per core"
    )
    merge.add_argument(
        "--no-replay",
        dest="replay",
        action="store_false",
        help="only join: load no target (a class's range is then the targets whose search found it);"
        " the shards' own --no-replay does the same",
    )


def run(args: argparse.Namespace) -> int:
    return _merge(args) if args.command == "merge" else _matrix(args)


def _matrix(args: argparse.Namespace) -> int:
    from mmharness import interrupts
    from mmharness.commands.check import against_target
    from mmharness.runner import deadline_for

    apply_env(args)
    against_target(args.against)  # a usage error before any column runs; each worker loads its own
    checks = selected_checks(args.checks)
    check_max_examples(args.max_examples)
    workers = worker_count(args.workers)
    distinct({"--json": args.json, "--findings": args.findings})
    writable("--findings", args.findings, directory=True)
    writable("--json", args.json)
    deadline = deadline_for(args.profile, "cpu", args.deadline)
    targets = _share(args)
    with interrupts.handled():  # one block: a signal between the search and the replay stops cleanly too
        matrix = _searched(args, targets, checks, workers)
        if args.replay and not args.shard and not matrix.interrupted:
            _replay(matrix, workers, args.deadline, args.findings)
    _show_matrix(matrix, strict=args.strict, deadline=deadline, grid=args.grid)
    if args.json:
        write_output("--json", args.json, json.dumps(_document(args, matrix, deadline), indent=2) + "\n")
    if matrix.interrupted:
        return interrupts.exit_code()
    return _matrix_exit_code(matrix, strict=args.strict)


def _share(args: argparse.Namespace) -> list[str]:
    """The targets this run searches: all of them, or a shard's share (refused where it has none)."""
    from mmharness import shards

    if not args.shard:
        return args.targets
    index, count = args.shard
    targets = shards.share(args.targets, index, count)
    if not targets:  # nothing would run, yet its report would merge as a share that did
        raise UsageError(
            f"--shard {index}/{count}: this share has no targets ({len(args.targets)} target(s) over"
            f" {count} shards): run at most {len(args.targets)} shard(s)"
        )
    print(f"shard {index}/{count}: {len(targets)} of {len(args.targets)} targets", file=sys.stderr)
    return targets


def _searched(args: argparse.Namespace, targets: list[str], checks, workers: int):
    """Every target's column, a progress line each (and which share one search, being the same code)."""
    from mmharness.matrix import run_matrix
    from mmharness.progress import Progress

    with Progress(len(targets), "targets", stream=sys.stderr) as progress:
        same_as: dict[str, str] = {}

        def keyed(found: dict[str, str]) -> None:
            same_as.update(found)
            if found:
                searched = f"{len(targets) - len(found)} of {len(targets)} targets, one per engine code"
                print(f"searching {searched}", file=sys.stderr)

        def done(spec: str, cells: int | None) -> None:
            ran = f"{cells} checks" if cells == len(checks) else f"{cells} of {len(checks)} (interrupted)"
            if spec in same_as:
                ran += f", the cells of {same_as[spec]} (same code)"
            progress.line(f"  {spec}: {'could not load' if cells is None else ran}")

        return run_matrix(
            targets,
            checks,
            args.profile,
            max_examples=args.max_examples,
            seed=args.seed,
            workers=workers,
            progress=done,
            command=command_line(args.argv),
            findings=args.findings,
            deadline=args.deadline,
            replay=False,
            against=args.against,
            dedup=args.dedup,
            keyed=keyed,
            shrink=not args.replay,  # each class is shrunk once, before its replay (here or by merge)
        )


def _document(args: argparse.Namespace, matrix, deadline: float | None) -> dict:
    """The ``--json`` report: the matrix's, or a shard's (with what ``merge`` needs to join it)."""
    from mmharness import shards

    if not args.shard:
        return matrix.as_json(strict=args.strict)
    settings = shards.Settings.of_run(
        args.profile,
        args.seed,
        args.max_examples,
        deadline,
        args.strict,
        no_replay=not args.replay,
        against=args.against,
    )
    whole = command_line(_unsharded(args.argv))
    return shards.report(matrix, shards.Shard(*args.shard, tuple(args.targets), settings, whole))


def _replay(matrix, workers: int, deadline: float | None, findings: str | None = None) -> None:
    """Shrink each class's case once (``shrink_classes``), then replay it on every target
    (``replay_classes``), a line per target."""
    from mmharness.matrix import classes, replay_classes, shrink_classes
    from mmharness.progress import Progress

    count = len(classes(matrix))
    print(
        f"shrinking {count} class(es)' cases, each once, on the first target that found it", file=sys.stderr
    )
    with Progress(len(matrix.targets), "targets", stream=sys.stderr) as progress:

        def shrunk(spec: str, cases: int, done: int) -> None:
            progress.line(f"  {spec}: {done} of {cases} case(s) shrunk")

        shrink_classes(matrix, workers=workers, deadline=deadline, findings=findings, progress=shrunk)
    if matrix.interrupted:
        return
    print(f"replaying {count} class(es)' cases on the targets whose search missed them", file=sys.stderr)
    with Progress(len(matrix.targets), "targets", stream=sys.stderr) as progress:

        def done(spec: str, cases: int, shown: int) -> None:
            progress.line(f"  {spec}: {cases} case(s) replayed, {shown} failed the same way")

        replay_classes(matrix, workers=workers, deadline=deadline, progress=done)


def _show_matrix(matrix, *, strict: bool, deadline: float | None, grid: str = "auto") -> None:
    """The table (on a terminal, or with --grid always: the compact grid), then how to replay each saved
    finding (a hung one under the deadline it overran)."""
    from mmharness import report
    from mmharness.deadline import SIGNATURE as DID_NOT_FINISH
    from mmharness.matrix import render
    from mmharness.views import console

    compact = grid == "always" or (grid == "auto" and sys.stdout.isatty())
    print(render(matrix, color=console.use_color(sys.stdout), strict=strict, grid=compact))
    for (check_id, spec), cell in matrix.cells.items():
        for seen in cell.findings:
            if seen.saved:
                hung = seen.signature == DID_NOT_FINISH
                again = report.replay_command(seen.saved, spec, deadline if hung else None, matrix.against)
                print(f"{check_id} on {spec}: reproduce with: {again}")


def _matrix_exit_code(matrix, *, strict: bool) -> int:
    """A target that did not load is a usage error (a misspelt release), else as the cells say."""
    if matrix.target_errors:
        return USAGE_ERROR
    return exit_code([cell.status for cell in matrix.cells.values()], strict=strict)


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
    from mmharness import interrupts
    from mmharness.jsonfile import JSONFileError, read_json
    from mmharness.matrix import NotAMatrix, save_found
    from mmharness.shards import MergeError, merge

    workers = worker_count(args.workers)
    distinct({"--json": args.json, "--findings": args.findings})
    writable("--findings", args.findings, directory=True)
    writable("--json", args.json)
    try:
        matrix, settings = merge([(path, read_json(path, "a shard report")) for path in args.shards])
    except (JSONFileError, MergeError) as error:
        raise UsageError(str(error)) from None
    settings.apply()  # the shards' --env and --engine: each case shrinks, replays and saves as it ran
    replaying = args.replay and not settings.no_replay and not matrix.interrupted
    _unchanged(matrix, replaying=replaying)
    with interrupts.handled():  # under the deadline the shards' checks ran under (None: none, so 0)
        if args.findings:  # each case on disk before any is shrunk: an interrupted merge keeps them all
            try:
                save_found(matrix, args.findings)
            except NotAMatrix as error:
                raise UsageError(f"a shard's report: {error}") from None
        if replaying:
            from mmharness.commands.check import against_target

            against_target(settings.against)  # the shards' --against must load here to replay against it
            _replay(matrix, workers, 0 if settings.deadline is None else settings.deadline, args.findings)
    _show_matrix(matrix, strict=settings.strict, deadline=settings.deadline, grid=args.grid)
    if args.json:
        write_output("--json", args.json, json.dumps(matrix.as_json(strict=settings.strict), indent=2) + "\n")
    if matrix.interrupted:  # its replay, or a shard: what did not finish never exits 0
        return interrupts.exit_code()
    return _matrix_exit_code(matrix, strict=settings.strict)


def _unchanged(matrix, *, replaying: bool) -> None:
    """Refuse a merge over a path target whose files changed since its shard tested them (the digest its
    report recorded, ``Matrix.digests``): its cells are of other code, and a replay would mix the two.
    A release is verified against its download (``targets.releases``); a path the merge cannot see is
    checked only where it must load, to replay, and refused there."""
    from mmharness.baseline import identity
    from mmharness.targets.specs import is_path

    for spec, recorded in matrix.digests.items():
        if not is_path(spec):
            continue
        if not os.path.exists(os.path.expanduser(spec)):
            if replaying:
                raise UsageError(
                    f"{spec}: its shard tested it, but it is not here to replay on; merge where it is,"
                    " or join without replaying (merge --no-replay)"
                )
            continue
        now = identity(loaded_target(spec), spec).get("digest")
        if now != recorded:
            raise UsageError(
                f"{spec}: its files changed since its shard tested them (digest {recorded[:12]} then,"
                f" {str(now)[:12]} now): run its shard again on the files as they are"
            )
