"""Findings out: result lines, failure details, saved cases, JSON and JUnit reports."""

from __future__ import annotations

import hashlib
import os
import shlex
from pathlib import Path
from typing import TextIO
from xml.etree import ElementTree

from harness.runner import FAILED, HAZARD, PASSED, SKIPPED, Result

_COLORS = {PASSED: "32", FAILED: "31", HAZARD: "33", SKIPPED: "2"}
_LABELS = {PASSED: "PASS", FAILED: "FAIL", HAZARD: "HAZARD", SKIPPED: "SKIP"}


def use_color(stream: TextIO) -> bool:
    return stream.isatty() and "NO_COLOR" not in os.environ


def result_line(result: Result, *, color: bool = False) -> str:
    label = _LABELS[result.status]
    if color:
        label = f"\033[{_COLORS[result.status]}m{label}\033[0m"
    check = result.check
    detail = {
        PASSED: f"{result.examples_run} examples",
        SKIPPED: result.reason,
    }.get(result.status, f"after {result.first_failure_at} examples: {result.reason}")
    device = f" [{result.device}]" if result.device != "cpu" else ""
    return f"{label:<6} {check.id} ({check.rule}){device}  {detail}"


def replay_command(path: str, target_spec: str) -> str:
    return f"mmharness replay {shlex.quote(path)} --target {shlex.quote(target_spec)}"


def save(result: Result, target_spec: str, directory: Path) -> str:
    """Write the shrunk example as a case document; return its path."""
    from harness import payload

    case, params = result.example
    text = payload.dumps(
        case,
        check=result.check.id,
        rule=result.check.rule,
        target=target_spec,
        params=params,
        note=result.reason,
    )
    digest = hashlib.sha1(text.encode()).hexdigest()[:10]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{result.check.id}-{digest}.json"
    path.write_text(text)
    return str(path)


def failure_details(result: Result, target_spec: str) -> str:
    """Everything a maintainer needs to see a failure and reproduce it with one command."""
    from harness import payload

    failure = result.failure
    lines = [
        f"--- {_LABELS[result.status]} {result.check.id} (rule {result.check.rule}) on {target_spec}",
        f"    {result.check.doc}",
        f"    {failure.message}",
        f"    expected: {failure.expected}",
        f"    actual:   {failure.actual}",
    ]
    if result.example:
        case, params = result.example
        lines.append("    shrunk case:")
        lines += ("      " + line for line in payload.dumps(case, params=params).splitlines())
    if result.saved:
        lines += [
            f"    saved to: {result.saved}",
            f"    reproduce with: {replay_command(result.saved, target_spec)}",
        ]
    return "\n".join(lines)


def summary(results: list[Result]) -> str:
    counts = {status: sum(r.status == status for r in results) for status in _LABELS}
    return (
        f"{counts[PASSED]} passed, {counts[FAILED]} failed, "
        f"{counts[HAZARD]} hazards, {counts[SKIPPED]} skipped"
    )


def as_json(results: list[Result], target_spec: str, *, strict: bool = False) -> dict:
    return {
        "format": "mmharness.report/1",
        "target": target_spec,
        "strict": strict,
        "results": [
            {
                "check": r.check.id,
                "rule": r.check.rule,
                "family": r.check.family,
                "device": r.device,
                "status": r.status,
                "reason": r.reason,
                "examples": r.examples_run,
                "first_failure_at": r.first_failure_at,
                "saved": r.saved,
                "expected": r.failure.expected if r.failure else None,
                "actual": r.failure.actual if r.failure else None,
            }
            for r in results
        ],
    }


def as_junit(results: list[Result], target_spec: str, *, strict: bool = False) -> str:
    """JUnit XML: one testcase per check; hazards pass with a system-out note, or fail under strict."""
    failing = (FAILED, HAZARD) if strict else (FAILED,)
    suite = ElementTree.Element(
        "testsuite",
        name=f"mmharness[{target_spec}]",
        tests=str(len(results)),
        failures=str(sum(r.status in failing for r in results)),
        skipped=str(sum(r.status == SKIPPED for r in results)),
    )
    for r in results:
        case = ElementTree.SubElement(
            suite,
            "testcase",
            classname=f"mmharness.{r.check.rule}",
            name=f"{r.check.id}[{r.device}]",
        )
        if r.status in failing:
            node = ElementTree.SubElement(case, "failure", message=r.reason)
            node.text = failure_details(r, target_spec)
        elif r.status == SKIPPED:
            ElementTree.SubElement(case, "skipped", message=r.reason)
        elif r.status == HAZARD:
            ElementTree.SubElement(case, "system-out").text = failure_details(r, target_spec)
    return ElementTree.tostring(suite, encoding="unicode")


def write(path: str, text: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text)
