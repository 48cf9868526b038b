"""Findings out: result lines, failure details, saved cases, JSON and JUnit reports.

Every finding has a kind (docs/rules.md, "Verdicts"): a *divergence* fails the
run; a *hazard* is shown and fails only under ``--strict``; *could not test*
(the harness could not drive the engine there) is never an engine verdict and
has an exit code of its own; a *skip* is a function the target lacks.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shlex
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, TextIO
from xml.etree import ElementTree

from mmharness.against import change_of
from mmharness.checks.outcome import COULD_NOT_TEST, DIVERGENCE, HAZARD
from mmharness.deadline import SIGNATURE as DID_NOT_FINISH
from mmharness.runner import PASSED, SKIPPED, Example, Finding, Result, fails_run

if TYPE_CHECKING:
    from mmharness.checks.registry import Check

_COLORS = {PASSED: "32", DIVERGENCE: "31", HAZARD: "33", COULD_NOT_TEST: "35", SKIPPED: "2"}
LABELS = {
    PASSED: "PASS",
    DIVERGENCE: "DIVERGENCE",
    HAZARD: "HAZARD",
    COULD_NOT_TEST: "COULD-NOT-TEST",
    SKIPPED: "SKIP",
}
_WIDTH = max(map(len, LABELS.values()))


def use_color(stream: TextIO) -> bool:
    return stream.isatty() and "NO_COLOR" not in os.environ


def result_line(result: Result, *, color: bool = False) -> str:
    label = LABELS[result.status].ljust(_WIDTH)
    if color:
        label = f"\033[{_COLORS[result.status]}m{label}\033[0m"
    check = result.check
    if result.status == PASSED:
        detail = f"{result.examples_run} examples" + (
            f", {result.cases_run} cases" if result.cases_run > result.examples_run else ""
        )
    elif result.status == SKIPPED:
        detail = result.reason
    else:
        ways = len(result.findings)
        more = f" (+{ways - 1} more way{'s' if ways > 2 else ''} of failing)" if ways > 1 else ""
        detail = f"after {result.first_failure_at} examples: {result.reason}{more}"
    device = f" [{result.device}]" if result.device != "cpu" else ""
    return f"{label} {check.id} ({check.rule}){device}  {detail}"


def replay_command(
    path: str, target_spec: str, deadline: float | None = None, against: str | None = None
) -> str:
    """The command replaying a saved case (with ``deadline``: the one a case that did not finish had;
    with ``against``: on both targets, as ``check --against`` ran it)."""
    from mmharness.targets import settings
    from mmharness.targets.specs import ENGINE_VARIABLE

    command = f"mmharness replay {shlex.quote(path)} --target {shlex.quote(target_spec)}"
    command += f" --against {shlex.quote(against)}" if against else ""
    engine = os.environ.get(ENGINE_VARIABLE, "").strip()  # --engine: the spec alone may not say which
    command += f" --engine {shlex.quote(engine)}" if engine else ""
    command += "".join(f" {shlex.quote(word)}" for word in settings.env_options())  # --env, as run
    return command + (f" --deadline {deadline:g}" if deadline else "")


def save(result: Result, finding: Finding, target_spec: str, directory: Path) -> str:
    """Write a finding's shrunk example as a case document; return its path."""
    note = f"{finding.kind}: {finding.failure.message}"
    return save_case(result.check, finding.example, target_spec, directory, note)


def save_case(check: Check, example: Example, target_spec: str, directory: Path, note: str) -> str:
    """Write an example of ``check`` as a case document naming the target, the engine and the settings
    it ran under (what ``replay`` needs); return its path."""
    from mmharness import payload
    from mmharness.targets import settings
    from mmharness.targets.specs import ENGINE_VARIABLE

    case, params = example
    text = payload.dumps(
        case,
        check=check.id,
        rule=check.rule,
        target=target_spec,
        engine=os.environ.get(ENGINE_VARIABLE, "").strip() or None,
        params=params,
        note=note,
        env=settings.given(),
    )
    digest = hashlib.sha1(text.encode()).hexdigest()[:10]
    path = directory / f"{check.id}-{digest}.json"
    write(str(path), text)
    return str(path)


def case_hash(finding: Finding) -> str | None:
    """A short hash of a finding's shrunk case, to tell two baselined cases apart."""
    if finding.example is None:
        return None
    from mmharness import payload

    case, params = finding.example
    return hashlib.sha1(payload.dumps(case, params=params).encode()).hexdigest()[:10]


def case_document(finding: Finding) -> dict | None:
    """A finding's case as a case document (no provenance), which a baseline keeps to replay."""
    if finding.example is None:
        return None
    from mmharness import payload

    case, params = finding.example
    return payload.dump(case, params=params)


def failure_details(result: Result, target_spec: str, *, against: str | None = None) -> str:
    """Every finding of a result, with what a maintainer needs to see and reproduce each."""
    return "\n".join(
        finding_details(result, finding, target_spec, against=against) for finding in result.findings
    )


def finding_details(result: Result, finding: Finding, target_spec: str, *, against: str | None = None) -> str:
    """``against``: the spec of the target a ``check --against`` run compared with (both are named)."""
    from mmharness import payload

    failure = finding.failure
    lines = [
        f"--- {LABELS[finding.kind]} {result.check.id} (rule {result.check.rule}) on {target_spec}"
        + (f" against {against}" if against else ""),
        f"    {result.check.doc}",
        f"    {failure.message}",
        f"    signature: {finding.signature}",
        f"    expected: {failure.expected}",
        f"    actual:   {failure.actual}",
    ]
    if finding.example:
        case, params = finding.example
        shown = "shrunk case" if finding.shrunk else "case as first seen (interrupted before shrinking)"
        shown = finding.unshrunk or shown  # the search stopped for cases that hit the deadline
        lines.append(f"    {shown}:")
        lines += ("      " + line for line in payload.dumps(case, params=params).splitlines())
    if finding.saved:
        deadline = result.deadline if finding.signature == DID_NOT_FINISH else None
        lines += [
            f"    saved to: {finding.saved}",
            f"    reproduce with: {replay_command(finding.saved, target_spec, deadline, against)}",
        ]
    return "\n".join(lines)


def summary(results: list[Result]) -> str:
    counts = {status: sum(r.status == status for r in results) for status in LABELS}
    return (
        f"{counts[PASSED]} passed, {counts[DIVERGENCE]} diverged, {counts[HAZARD]} hazards,"
        f" {counts[COULD_NOT_TEST]} could not test, {counts[SKIPPED]} skipped"
    )


def as_json(
    results: list[Result],
    target_spec: str,
    *,
    strict: bool = False,
    identity: dict | None = None,
    interrupted: bool = False,
    coverage: dict | None = None,
    against: str | None = None,
    untested: list[str] | None = None,
    changes: list[dict] | None = None,
) -> dict:
    """The report; ``untested``: what the run did not exercise (``mmharness.untested``);
    ``changes``: the baseline's known findings whose own case no longer fails as recorded
    (``baseline.Change.as_json``);
    ``coverage`` (``mmharness.reach.analyse``'s figures, ``check --coverage``) is kept
    under that key when given. ``against``: the spec ``check --against`` compared with (``None``: no
    comparison); each finding of such a run carries its ``change`` (regression, fix, neutral)."""
    document = {
        "format": "mmharness.report/2",
        "target": target_spec,
        "against": against,
        "identity": identity or {},
        "strict": strict,
        "interrupted": interrupted,
        "untested": list(untested or ()),
        "results": [
            {
                "check": r.check.id,
                "rule": r.check.rule,
                "family": r.check.family,
                "device": r.device,
                "status": r.status,
                "reason": r.reason,
                "examples": r.examples_run,
                "cases": r.cases_run,
                "first_failure_at": r.first_failure_at,
                "interrupted": r.interrupted,
                "findings": [
                    {
                        "kind": f.kind,
                        "signature": f.signature,
                        "message": f.failure.message,
                        "expected": f.failure.expected,
                        "actual": f.failure.actual,
                        "first_failure_at": f.first_failure_at,
                        "case_hash": case_hash(f),
                        "saved": f.saved,
                        "shrunk": f.shrunk,
                        "case": case_document(f),
                        **({"change": change_of(f.signature)} if against else {}),
                    }
                    for f in r.findings
                ],
            }
            for r in results
        ],
        "baseline_changes": list(changes or ()),
    }
    if coverage is not None:
        document["coverage"] = coverage
    return document


def as_junit(
    results: list[Result],
    target_spec: str,
    *,
    strict: bool = False,
    interrupted: bool = False,
    against: str | None = None,
    changes: list[dict] | None = None,
) -> str:
    """JUnit XML: a testcase per check; divergences fail, could-not-test errs, hazards fail under strict.
    ``against``: as in ``finding_details``. ``changes`` (as in ``as_json``): a testcase each, failing
    under strict as a hazard does."""
    shown = f"{target_spec} against {against}" if against else target_spec
    changes = list(changes or ())
    failed = sum(fails_run(r.status, strict=strict) and r.status != COULD_NOT_TEST for r in results)
    suite = ElementTree.Element(
        "testsuite",
        name=f"mmharness[{shown}]",
        tests=str(len(results) + len(changes)),
        failures=str(failed + (len(changes) if strict else 0)),
        errors=str(sum(r.status == COULD_NOT_TEST for r in results)),
        skipped=str(sum(r.status == SKIPPED for r in results)),
    )
    properties = ElementTree.SubElement(suite, "properties")
    ElementTree.SubElement(properties, "property", name="interrupted", value=str(interrupted).lower())
    for r in results:
        case = ElementTree.SubElement(
            suite,
            "testcase",
            classname=f"mmharness.{r.check.rule}",
            name=f"{r.check.id}[{r.device}]",
        )
        if r.status == COULD_NOT_TEST:
            node = ElementTree.SubElement(case, "error", message=r.reason)
            node.text = failure_details(r, target_spec, against=against)
        elif fails_run(r.status, strict=strict):
            node = ElementTree.SubElement(case, "failure", message=r.reason)
            node.text = failure_details(r, target_spec, against=against)
        elif r.status == SKIPPED:
            ElementTree.SubElement(case, "skipped", message=r.reason)
        elif r.findings:
            ElementTree.SubElement(case, "system-out").text = failure_details(r, target_spec, against=against)
    for change in changes:
        name = f"{change['check']}[{change['device']}] known: {change['signature']}"
        case = ElementTree.SubElement(suite, "testcase", classname="mmharness.baseline", name=name)
        text = change["shown"] + (f"; saved to {change['saved']}" if change["saved"] else "")
        ElementTree.SubElement(case, "failure" if strict else "system-out", message=text).text = text
    return ElementTree.tostring(suite, encoding="unicode")


def writable(path: str, *, directory: bool = False) -> str | None:
    """Why ``path`` cannot take an output (``None`` if it can), found by trying, before a run.

    A file output must be a regular file (or not exist yet) in a directory where a
    file can be created, since ``write`` replaces it atomically; a device such as
    ``/dev/full`` is refused rather than replaced.
    """
    where = Path(path)
    try:
        if directory:
            if where.exists() and not where.is_dir():
                return "not a directory"
            where.mkdir(parents=True, exist_ok=True)
            folder = where
        else:
            if where.is_dir():
                return "is a directory"
            if where.exists() and not where.is_file():
                return "not a regular file (a device, a pipe): give a file path"
            where.parent.mkdir(parents=True, exist_ok=True)
            folder = where.parent
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".mmharness-probe-"):
            pass
    except OSError as error:
        return f"cannot write there ({error.strerror or error})"
    return None


def write(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically: a reader never sees half a report.

    The text goes to a temporary file beside ``path`` that then replaces it. A new
    file gets the mode any other would (``0o666`` less the umask), an existing
    one keeps its own: the temporary file is not left private (``0o600``).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        kept = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        kept = None
    temporary, descriptor = _temporary_beside(target)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            out.write(text)
        if kept is not None:
            os.chmod(temporary, kept)
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _temporary_beside(target: Path) -> tuple[Path, int]:
    """A new file next to ``target``, created ``0o666`` so that the umask (and a default ACL) applies."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        temporary = target.parent / f".{target.name}.{secrets.token_hex(6)}"
        try:
            return temporary, os.open(temporary, flags, 0o666)
        except FileExistsError:
            continue
