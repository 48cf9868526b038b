"""``mmharness replay``: re-run saved cases (``findings/*.json``) against the target they name, or another."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from mmharness.commands.options import (
    DEADLINE_HELP,
    NOTHING_RAN,
    UsageError,
    apply_env,
    engine_option,
    env_option,
    exit_code,
    loaded_target,
    nothing_ran,
    seconds,
    worker_count,
)

if TYPE_CHECKING:
    from mmharness.model import Case
    from mmharness.payload import Document


def add_parser(sub) -> None:
    replay = sub.add_parser("replay", help="re-run saved cases")
    replay.add_argument("cases", nargs="+", metavar="CASE.json")
    replay.add_argument("--target", help="target spec (default: the one the case was saved from)")
    engine_option(replay)
    env_option(replay)
    replay.add_argument(
        "--against",
        metavar="SPEC",
        help="also run each case on this target and report the change, as `check --against` does",
    )
    replay.add_argument("-n", "--workers", default="1", metavar="N", help="replay in N processes, or auto")
    replay.add_argument("--deadline", type=seconds, metavar="S", help=DEADLINE_HELP)


def run(args: argparse.Namespace) -> int:
    from mmharness import report
    from mmharness.checks import all_checks
    from mmharness.progress import Progress
    from mmharness.workers import ordered

    apply_env(args)
    checks = all_checks()
    workers = worker_count(args.workers)
    saved = [_saved_case(path, args.target, checks) for path in args.cases]  # every file read first
    work = [unit for unit, _ in saved]
    _apply_recorded(args, [(path, document) for path, (_, document) in zip(args.cases, saved, strict=True)])
    if args.against is not None:  # resolved before anything runs
        try:
            loaded_target(args.against)
        except UsageError as error:
            raise UsageError(f"--against {args.against}: {error}") from None
    results = []
    with Progress(len(work), "cases") as progress:
        units = [(*w, args.deadline, args.against) for w in work]
        replayed = ordered(_replay_in_worker, units, min(workers, len(work)))
        for path, (spec, _, _, _) in zip(args.cases, work, strict=True):
            result = next(replayed)
            for finding in result.findings:
                finding.saved = path
            line = report.result_line(result, color=report.use_color(sys.stdout)) + f"  [{path}]"
            details = report.failure_details(result, spec, against=args.against)
            progress.line(line + ("\n" + details if result.findings else ""))
            results.append(result)
    if nothing_ran(results):
        return NOTHING_RAN
    return exit_code([result.status for result in results], strict=False)


def _saved_case(path: str, target: str | None, checks: dict) -> tuple[tuple[str, str, Case, dict], Document]:
    """A saved case file as ``(target spec, check id, case, params)`` and its document; a usage error
    says what is wrong."""
    from mmharness import params, payload

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
    problem = params.problem(checks[check_id], document.case, document.params)
    if problem:
        raise UsageError(f"{path}: {problem}")
    spec = target or document.provenance.get("target", "reference")
    return (spec, check_id, document.case, document.params), document


def _apply_recorded(args: argparse.Namespace, saved: list[tuple[str, Document]]) -> None:
    """Set the engine settings (``--env``) the cases were saved under, and the engine (``--engine``)
    their target was loaded as, where this command does not give them: a finding made under a setting
    is replayed under it. Processes share one environment, so cases saved under different values are
    replayed apart (a usage error names two)."""
    import os

    from mmharness.targets import settings
    from mmharness.targets.specs import ENGINE_VARIABLE

    given = settings.given()

    def recorded(document: Document) -> tuple:
        env = tuple(sorted((k, v) for k, v in document.env.items() if k not in given))
        return env, None if args.engine or args.target else document.provenance.get("engine")

    first_path, first = saved[0][0], recorded(saved[0][1])
    for path, document in saved[1:]:
        if recorded(document) != first:
            raise UsageError(
                f"{first_path} and {path} were saved under different settings or engines"
                f" ({_shown(first)} and {_shown(recorded(document))}): replay them apart"
            )
    env, engine = first
    if env:
        settings.apply([*(f"{k}={v}" for k, v in given.items()), *(f"{k}={v}" for k, v in env)])
        print(f"mmharness: replaying with the settings the cases were saved under: {_shown(first)}")
    if engine:
        os.environ[ENGINE_VARIABLE] = engine


def _shown(recorded: tuple) -> str:
    env, engine = recorded
    words = [f"--env {k}={v}" for k, v in env] + ([f"--engine {engine}"] if engine else [])
    return " ".join(words) or "none"


def _replay_in_worker(
    spec: str,
    check_id: str,
    case: Case,
    params: dict,
    deadline: float | None = None,
    against_spec: str | None = None,
):
    from mmharness.against import replay_case
    from mmharness.checks import all_checks

    check, target = all_checks()[check_id], loaded_target(spec)
    other = None if against_spec is None else loaded_target(against_spec)
    return replay_case(
        check, target, (case, params), other=other, other_spec=against_spec or "", deadline=deadline
    )
