"""Known findings a run tolerates: each recorded by how it failed, not only that it did.

A baseline entry is ``(check, device, signature)`` with the kind and the hash
of the shrunk case for reference. A finding whose signature is in the baseline
is tolerated; a new signature in a check that already had findings is new, and
fails the run as any other. Entries that did not reproduce in a run where
their check ran are *stale* (shown, never fatal): the engine may have been
fixed. A baseline is written by ``--write-baseline``, and a ``--json`` report
serves as one too. It matches the same target however it was spelled, as
long as it loads the same files (a relative or an absolute path, a release or
its unpacked directory).

A baseline holds what its search reached, no more: one written from the CI
profile's 100 examples misses hazards the same target shows at 3000, and a
deeper run would call them new. So a baseline records how deep it searched
(``search``: profile, examples per check, seed), several baselines combine
(``--baseline A --baseline B``: runs under other seeds), and a run deeper than
its baseline says so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mmharness.jsonfile import JSONFileError, read_json
from mmharness.runner import Finding, Result

if TYPE_CHECKING:
    from mmharness.targets.base import Target

FORMAT = "mmharness.baseline/1"


class BaselineError(JSONFileError):
    """A baseline file that cannot be used; a ``JSONFileError``, so a caller catches one class for a
    file unreadable as JSON and one unusable as a baseline."""


@dataclass(frozen=True)
class Entry:
    check: str
    device: str
    signature: str | None
    """``None``: any way of failing (an entry from a report of the first format)."""
    kind: str = ""
    case_hash: str | None = None


def identity(target: Target, spec: str) -> dict[str, str | None]:
    """What makes two spellings of a target the same: its release, or the files it loaded."""
    described = target.describe()
    release = described.get("release")
    files = described.get("files") or []
    return {
        "spec": spec,
        "release": None if release in (None, "unknown") else str(release),
        "source": "|".join(sorted(str(Path(f).resolve()) for f in files)) or None,
    }


def same_target(recorded: dict, current: dict) -> bool:
    if recorded.get("spec") == current.get("spec"):
        return True
    return bool(recorded.get("source")) and recorded.get("source") == current.get("source")


@dataclass(frozen=True)
class Baseline:
    path: str
    entries: frozenset[Entry]
    depth: int | None = None
    """Examples per check of the deepest search behind it (``None``: not recorded)."""

    def tolerates(self, result: Result, finding: Finding) -> bool:
        return any(
            e.check == result.check.id
            and e.device == result.device
            and (e.signature is None or e.signature == finding.signature)
            for e in self.entries
        )

    def stale(self, results: Iterable[Result]) -> list[Entry]:
        """Entries of checks that ran whose way of failing did not show up."""
        seen = {(r.check.id, r.device, f.signature) for r in results for f in r.findings}
        ran = {(r.check.id, r.device) for r in results}
        return sorted(
            (
                e
                for e in self.entries
                if (e.check, e.device) in ran
                and (e.check, e.device, e.signature) not in seen
                and not (e.signature is None and any((e.check, e.device) == s[:2] for s in seen))
            ),
            key=lambda e: (e.check, e.device, e.signature or ""),
        )


def load(path: str, current: dict) -> Baseline:
    """Read a baseline (or a ``--json`` report) recorded for the same target as ``current``."""
    data = read_json(path, "a baseline")
    if not isinstance(data, dict):
        raise BaselineError(f"{path}: not a baseline or a --json report (not a JSON object)")
    try:
        if data.get("format") == FORMAT:
            recorded = data["target"]
            entries = [
                Entry(e["check"], e["device"], e["signature"], e.get("kind", ""), e.get("case_hash"))
                for e in data["entries"]
            ]
            depth = (data.get("search") or {}).get("examples")
        elif str(data.get("format", "")).startswith("mmharness.report/"):
            recorded = {"spec": data["target"], **data.get("identity", {})}
            entries = list(_from_report(data["results"]))
            depth = max((r.get("examples") or 0 for r in data["results"]), default=0) or None
        else:
            raise BaselineError(f"{path}: not a baseline or a --json report (format {data.get('format')!r})")
    except (KeyError, TypeError, AttributeError) as error:
        raise BaselineError(f"{path}: not a baseline or a --json report (missing or bad {error})") from None
    if not isinstance(recorded, dict) or not same_target(recorded, current):
        shown = recorded.get("spec") if isinstance(recorded, dict) else recorded
        raise BaselineError(f"{path}: recorded for target {shown!r}, not {current['spec']!r}")
    return Baseline(path, frozenset(entries), depth if isinstance(depth, int) else None)


def combined(baselines: list[Baseline]) -> Baseline:
    """Several baselines as one: every entry of each (runs under other seeds add what theirs found)."""
    depths = [b.depth for b in baselines if b.depth is not None]
    return Baseline(
        ", ".join(b.path for b in baselines),
        frozenset().union(*(b.entries for b in baselines)),
        max(depths, default=None),
    )


def shallower(known: Baseline, results: Iterable[Result]) -> str | None:
    """A note when this run searched deeper than the baseline did: what is new may only be deeper."""
    deepest = max((r.examples_run for r in results), default=0)
    if known.depth is None or deepest <= known.depth:
        return None
    return (
        f"the baseline ({known.path}) was written from {known.depth} examples per check and this run"
        f" searched up to {deepest}: a new finding may be one that shallower search never reached"
        " (write baselines deeper: --profile deep, or several --seed runs given as --baseline A --baseline B)"
    )


def _from_report(results: list[dict]) -> Iterable[Entry]:
    for r in results:
        findings = r.get("findings")
        if findings is None and r["status"] in ("failed", "hazard"):
            yield Entry(r["check"], r["device"], None, r["status"])
        for f in findings or ():
            yield Entry(r["check"], r["device"], f["signature"], f["kind"], f.get("case_hash"))


def dump(results: list[Result], current: dict, search: dict) -> dict:
    """A baseline of every finding of a run, with how deep the run searched (``search``: its options)."""
    from mmharness.report import case_hash

    deepest = max((r.examples_run for r in results), default=0)
    return {
        "format": FORMAT,
        "target": current,
        "search": {**search, "examples": deepest},
        "entries": [
            {
                "check": r.check.id,
                "device": r.device,
                "signature": f.signature,
                "kind": f.kind,
                "case_hash": case_hash(f),
            }
            for r in results
            for f in r.findings
        ],
    }
