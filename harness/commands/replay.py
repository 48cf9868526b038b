"""``mmharness replay``: re-run saved cases (``findings/*.json``, or the findings a run's ledger recorded)
against the target they name, or another."""

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
    replay.add_argument(
        "cases",
        nargs="+",
        metavar="CASE.json",
        help="saved cases; a run's ledger (ledger.ndjson) replays every finding it recorded, those a"
        " killed run found and did not get to save among them",
    )
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
    replay.add_argument(
        "--standalone",
        action="store_true",
        help="write the case as one pytest file needing only the engine (ENGINE_ROOT) and torch, instead"
        " of replaying it; a check no writer covers is refused (exit 2)",
    )
    replay.add_argument("-o", "--output", metavar="FILE", help="with --standalone: write it here, not stdout")


def run(args: argparse.Namespace) -> int:
    from mmharness.checks import all_checks
    from mmharness.progress import Progress
    from mmharness.views import console
    from mmharness.workers import ordered

    apply_env(args)
    checks = all_checks()
    workers = worker_count(args.workers)
    saved = [one for path in args.cases for one in _saved(path, args.target, checks)]  # every file read first
    if args.standalone or args.output:
        return _standalone(args, saved)
    work = [unit for _, unit, _ in saved]
    _apply_recorded(args, [(path, document) for path, _, document in saved])
    if args.against is not None:  # resolved before anything runs
        try:
            loaded_target(args.against)
        except UsageError as error:
            raise UsageError(f"--against {args.against}: {error}") from None
    results = []
    with Progress(len(work), "cases") as progress:
        units = [(*w, args.deadline, args.against) for w in work]
        replayed = ordered(_replay_in_worker, units, min(workers, len(work)))
        for path, (spec, _, _, _), _ in saved:
            result = next(replayed)
            for finding in result.findings:
                finding.saved = path
            line = console.result_line(result, color=console.use_color(sys.stdout)) + f"  [{path}]"
            details = console.result_details(result, spec, against=args.against)
            progress.line(line + ("\n" + details if result.findings else ""))
            results.append(result)
    if nothing_ran(results):
        return NOTHING_RAN
    return exit_code([result.status for result in results], strict=False)


Saved = tuple[str, tuple[str, str, "Case", dict], "Document"]
"""What to replay: where it came from, ``(target spec, check id, case, params)``, and its document."""


def _saved(path: str, target: str | None, checks: dict) -> list[Saved]:
    """A saved case file, or every finding a ledger recorded (``path#N``: its N-th), as what to replay;
    a usage error says what is wrong."""
    from mmharness import ledger, payload

    path, _, picked = path.partition("#") if ".ndjson#" in path else (path, "", "")
    if not path.endswith(".ndjson"):
        try:
            return [(path, *_unit(path, payload.load_document(path), target, checks))]
        except (OSError, payload.PayloadError) as error:
            raise UsageError(f"{path}: {error}") from None
    try:
        documents = ledger.case_documents(ledger.read(path))
    except ledger.LedgerError as error:
        raise UsageError(str(error)) from None
    if not documents:
        raise UsageError(f"{path}: the ledger records no finding with a case")
    numbered = list(enumerate(documents, 1))
    if picked:
        if not picked.isdigit() or not 1 <= int(picked) <= len(documents):
            raise UsageError(f"{path}#{picked}: the ledger records findings #1 to #{len(documents)}")
        numbered = [numbered[int(picked) - 1]]
    found = []
    for n, document in numbered:
        where = f"{path}#{n}"
        try:
            found.append((where, *_unit(where, payload.parse_document(document), target, checks)))
        except payload.PayloadError as error:
            raise UsageError(f"{where}: {error}") from None
    return found


def _unit(path: str, document: Document, target: str | None, checks: dict) -> tuple[tuple, Document]:
    """A saved case's document as ``(target spec, check id, case, params)``, checked."""
    from mmharness import params

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


def _standalone(args: argparse.Namespace, saved: list[Saved]) -> int:
    """``--standalone``: the one finding given, as a pytest file (``mmharness.standalone``)."""
    from pathlib import Path

    from mmharness import report, standalone

    if not args.standalone:
        raise UsageError("-o/--output is --standalone's: add --standalone")
    if len(saved) != 1:
        raise UsageError(f"--standalone writes one finding at a time; {len(saved)} given (pick one: FILE#N)")
    if args.output is not None and not Path(args.output).stem.isidentifier():  # pytest imports it by name
        raise UsageError(f"-o {args.output}: pytest imports a test file by its name: use one like test_x.py")
    path, (spec, check_id, case, params), document = saved[0]
    _apply_recorded(args, [(path, document)])
    target = loaded_target(spec)
    rule = document.provenance.get("rule") or ""
    finding = standalone.Finding(
        check_id, rule, case, params, spec, Path(target.describe().get("source", "")), path
    )
    try:
        text = standalone.write(finding, target)
    except standalone.Unsupported as error:
        raise UsageError(f"--standalone: {error}") from None
    why = standalone.verify(text, finding.root)
    if why is not None:
        raise UsageError(f"--standalone: {check_id}: the file written does not reproduce the finding: {why}")
    if args.output is None:
        sys.stdout.write(text)
        return 0
    problem = report.writable(args.output)
    if problem:
        raise UsageError(f"-o {args.output}: {problem}")
    report.write(args.output, text)
    print(f"mmharness: wrote {args.output}: ENGINE_ROOT=TREE python -m pytest {args.output}", file=sys.stderr)
    return 0


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
