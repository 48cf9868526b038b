"""Known findings a run tolerates: each recorded by how it failed, not only that it did.

A baseline entry is ``(check, device, signature)`` with the kind and the
shrunk case. A finding whose signature is in the baseline is tolerated; a new
signature in a check that already had findings is new, and fails the run as
any other. A baseline is written by ``--write-baseline``, and a ``--json``
report serves as one too.

A known signature can hide a change: code that already fails, changed, may
fail the same way on other cases, or stop failing on this one, and the search
would see nothing new. So each entry's own case is replayed after the search
(``recheck``): one that no longer fails the way its entry recorded is a
*changed* known finding, shown with its case saved and a replay line, and
fatal under ``--strict`` (a fix is one too: write the baseline again). An entry
without a case (a baseline from before cases were kept) that did not reproduce
in the search is *stale*: shown, never fatal, since a search draws what it
draws.

A baseline names its target by what it runs, not by how it was spelled: its
``target`` (a report's ``identity``) holds the sha256 of each engine file the
target loaded, by its path in the package, and of the whole. It applies to
any target loading the same bytes (a release, a path copy of its files, an
installed copy), and to no other spec: a copy with a file changed, added or
missing is refused, each such file named. The same spec over files changed
since it was written (a checkout edited in the CI that keeps its baseline, a
mutant of the benchmark's copy) still uses it, never silently: a note names
each file that differs, since findings are recorded by how they failed, not
where, and a new bug in changed code may fail as a known one did. A target
that loads no files (the reference, a mutant) is known by its name, and so
is a baseline recorded before digests (by its spec only), with a note.

A baseline holds what its search reached, no more: one written from the CI
profile's 100 examples misses hazards the same target shows at 3000, and a
deeper run would call them new. So a baseline records how deep it searched
(``search``: profile, examples per check, seed), several baselines combine
(``--baseline A --baseline B``: runs under other seeds), and a run deeper than
its baseline says so.

Beside a target's identity (how a baseline knows it) is its behaviour key
(``behaviour_key``): what decides what it does, never how it was named, so
``matrix`` searches one target per key and gives the others its cells.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mmharness.jsonfile import JSONFileError, read_json
from mmharness.records import Record
from mmharness.runner import SKIPPED, Example, Result
from mmharness.views import rows

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
    example: Example | None = field(default=None, compare=False)
    """The shrunk case, replayed by ``recheck`` (``None``: kept by no baseline before cases were)."""


def identity(target: Target, spec: str) -> dict:
    """What a baseline records of its target: the spec and release as spelled, and what decides whether it
    applies: the sha256 of each engine file loaded (``files``, by path in the package) and of the whole
    (``digest``); neither for a target that loads no files."""
    described = target.describe()
    release = described.get("release")
    files = described.get("digests")
    if not isinstance(files, dict):  # an adapter of its own that lists its files: known by their names
        files = _digests_by_name([str(f) for f in described.get("files") or []])
    recorded: dict = {"spec": spec, "release": None if release in (None, "unknown") else str(release)}
    if files:
        recorded["files"] = dict(sorted(files.items()))
        recorded["digest"] = whole_digest(recorded["files"])
    return recorded


NAMING = ("target", "release", "source", "files", "load_ms")
"""``describe()`` fields that only name a target: its spec, its release, where its copy lies (the files'
paths; their contents are ``digests``) and how long the load took. A behaviour key leaves them out."""
DYNAMIC_SETTINGS = ("getattr(envs", "vars(envs", "envs.__dict__", "envs.__getattr__")
"""Engine code reaching its settings object by a computed name: then any declared setting may be read."""


def behaviour_key(target: Target) -> str | None:
    """One sha256 of what decides a target's behaviour; ``None`` where the harness cannot tell (never merged).

    Two targets with the same key run the same code on the same inputs, so a search with a fixed seed
    finds the same on both and ``matrix`` searches only the first (``mmharness.matrix``): the sha256 of
    every engine file loaded (``describe()``'s ``digests``, modules followed into the tree included),
    and the rest of ``describe()`` (the item type's fields and methods, the functions and their forms,
    capabilities and why others are missing, shims, stubs, settings read, files that did not load)
    less the fields that only name it (``NAMING``), each path inside the copy written as ``<source>``;
    and the value of each declared setting (``srt/environ.py``, ``envs.py``) under this process's
    environment whose name the loaded code holds (every one, where it reads settings by a computed
    name: ``DYNAMIC_SETTINGS``), since code reads them at call time. A path outside the copy, or
    anything else a description spells per copy, makes keys differ: a lost saving, never a wrong merge.

    ``None`` for a target that loads no engine files (the reference, a mutant, an adapter of one's own:
    their behaviour is their code, which no digest covers) and for one whose settings the harness
    cannot see (shims other than the engines' own)."""
    described = target.describe()
    if not isinstance(described.get("digests"), dict) or not described["digests"]:
        return None
    settings = _settings_read(target, [str(f) for f in described.get("files") or []])
    if settings is None:
        return None
    kept = {name: value for name, value in described.items() if name not in NAMING}
    kept["declared_settings"] = settings
    text = json.dumps(kept, sort_keys=True, default=repr)
    source = described.get("source")
    if isinstance(source, str) and source:
        text = text.replace(json.dumps(source)[1:-1], "<source>")
    return hashlib.sha256(text.encode()).hexdigest()


def _settings_read(target: Target, files: list[str]) -> dict | None:
    """The declared settings the loaded ``files`` may read, with their values now; ``None`` when the
    target's settings cannot be seen or a file cannot be read. ``{}`` for a load with no engine shims."""
    from mmharness.targets.settings import Unknown

    declarations = target.declared_settings()
    if declarations is None:
        return None
    try:
        code = "".join(Path(f).read_text(errors="replace") for f in files)
    except OSError:
        return None
    dynamic = any(word in code for word in DYNAMIC_SETTINGS)
    values = {}
    for name in sorted(declarations.settings):
        if not dynamic and name not in code:
            continue
        declaration = declarations.settings[name]
        try:
            found = declaration.read(os.environ)
            values[name] = [declaration.kind, repr(found.value), found.source]
        except Unknown as why:
            values[name] = [declaration.kind, "unknown", str(why)]
    return {
        "values": values,
        "methods": sorted(declarations.methods),
        "absent": declarations.absent,
        "problems": list(declarations.problems),
    }


def whole_digest(files: dict[str, str]) -> str:
    """One sha256 of every file's path and digest (``sha256sum``'s lines, sorted by path)."""
    lines = "".join(f"{digest}  {path}\n" for path, digest in sorted(files.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def _digests_by_name(paths: list[str]) -> dict[str, str]:
    """Files an adapter lists without digests: by file name (by path where two share a name)."""
    names = [Path(p).name for p in paths]
    found = {}
    for path, name in zip(paths, names, strict=True):
        try:
            digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        except OSError:
            digest = ""
        found[name if names.count(name) == 1 else str(Path(path).resolve())] = digest
    return found


def applies(path: str, recorded: dict, current: dict) -> list[str]:
    """The notes of a baseline ``recorded`` for a target that applies to ``current``; ``BaselineError``
    where it does not.

    It applies to a target loading the same files (digests), whatever its spec, and to the same spec
    over files changed since (a checkout edited, a release upgraded: what a CI of one tree and the
    mutation benchmark compare), then with a note naming each file that differs. Another spec over other
    files is another target: refused, naming them."""
    shown, spec = recorded.get("spec"), current["spec"]
    if "digest" not in recorded:  # a target without files, or a baseline recorded before digests
        if shown != spec:
            raise BaselineError(f"{path}: recorded for target {shown!r}, not {spec!r}")
        if "digest" not in current:
            return []
        return [
            f"{path} was recorded for {shown!r} by its spec only (a baseline from before file digests):"
            " it applies by that name, whatever files the target loads now; write it again with"
            " --write-baseline to tie it to the files' content"
        ]
    files = recorded.get("files")
    if not isinstance(files, dict) or not all(isinstance(d, str) for d in files.values()):
        raise BaselineError(f"{path}: not a baseline or a --json report (bad target files)")
    now = current.get("files") or {}
    if recorded["digest"] == current.get("digest") and files == now:
        if shown == spec:
            return []
        return [
            f"{path} was recorded for {shown!r}: it applies to {spec!r},"
            f" which loads the same {len(files)} files"
        ]
    changed = sorted(f for f in files.keys() & now.keys() if files[f] != now[f])
    missing, added = sorted(files.keys() - now.keys()), sorted(now.keys() - files.keys())
    differ = (
        "; ".join(
            f"{label}: {', '.join(names)}"
            for label, names in (
                ("changed", changed),
                ("not loaded now", missing),
                ("loaded now only", added),
            )
            if names
        )
        or "the whole digest"
    )
    if shown != spec:
        raise BaselineError(
            f"{path}: recorded for target {shown!r}, not {spec!r}, whose engine files differ ({differ});"
            " a baseline applies to another spelling of the same files only (write one for this target"
            " with --write-baseline)"
        )
    return [
        f"{path} was recorded for {shown!r} before its engine files changed ({differ}): the findings it"
        " tolerates may not be this code's; review them and write it again with --write-baseline"
    ]


@dataclass(frozen=True)
class Baseline:
    path: str
    entries: frozenset[Entry]
    depth: int | None = None
    """Examples per check of the deepest search behind it (``None``: not recorded)."""
    notes: tuple[str, ...] = ()
    """What a user should know of how it applies (recorded for another spelling, or by spec only)."""
    compared: bool | None = None
    """Whether its findings come from a run with ``--against``, which signs them as changes (``None``:
    it cannot tell: no findings). A run tolerates only findings signed its own way (``mode_problem``)."""

    def signatures(self) -> dict[tuple[str, str], frozenset[str]]:
        """``(check, device)`` -> the signatures known there (an entry of any way of failing left out)."""
        known: dict[tuple[str, str], set[str]] = {}
        for e in self.entries:
            if e.signature is not None:
                known.setdefault((e.check, e.device), set()).add(e.signature)
        return {unit: frozenset(signatures) for unit, signatures in known.items()}

    def knows(self, check: str, device: str, signature: str) -> bool:
        """Whether a finding of ``check`` on ``device`` failing as ``signature`` is a known one."""
        return any(
            e.check == check and e.device == device and (e.signature is None or e.signature == signature)
            for e in self.entries
        )

    def stale(self, ledger: Sequence[Record]) -> list[Entry]:
        """Entries without a case (``recheck`` judges the others) of checks that ran whose way of
        failing did not show up."""
        units = [row for row in rows(ledger) if row.ran]
        seen = {(r.check, r.device, f.signature) for r in units for f in r.findings}
        ran = {(r.check, r.device) for r in units}
        return sorted(
            (
                e
                for e in self.entries
                if e.example is None
                and (e.check, e.device) in ran
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
            entries = [_entry(path, f"entries[{n}]", e) for n, e in enumerate(data["entries"])]
            search = data.get("search") or {}
            depth = search.get("examples")
            compared = _compared(search, entries)
        elif str(data.get("format", "")).startswith("mmharness.report/"):
            recorded = {"spec": data["target"], **data.get("identity", {})}
            entries = list(_from_report(path, data["results"]))
            depth = max((r.get("examples") or 0 for r in data["results"]), default=0) or None
            compared = _compared(data, entries)
        else:
            raise BaselineError(f"{path}: not a baseline or a --json report (format {data.get('format')!r})")
    except (KeyError, TypeError, AttributeError) as error:
        raise BaselineError(f"{path}: not a baseline or a --json report (missing or bad {error})") from None
    if isinstance(recorded, str):  # a target recorded by its spec alone
        recorded = {"spec": recorded}
    if not isinstance(recorded, dict):
        raise BaselineError(f"{path}: not a baseline or a --json report (bad target {recorded!r})")
    notes = applies(path, recorded, current)
    depth = depth if isinstance(depth, int) else None
    return Baseline(path, frozenset(entries), depth, tuple(notes), compared)


def _compared(recorded: dict, entries: list[Entry]) -> bool | None:
    """Whether a baseline's run compared with ``--against``: as it recorded (``against``, in a report and
    in a baseline's ``search``), else from its signatures (a baseline from before it was recorded)."""
    from mmharness import against

    if "against" in recorded:
        return recorded["against"] is not None
    signatures = [e.signature for e in entries if e.signature]
    if not signatures:
        return None
    return any(against.compared(s) for s in signatures)


def combined(baselines: list[Baseline]) -> Baseline:
    """Several baselines as one: every entry of each (runs under other seeds add what theirs found)."""
    depths = [b.depth for b in baselines if b.depth is not None]
    modes = {b.compared for b in baselines} - {None}
    if len(modes) > 1:
        shown = " and ".join(f"{b.path} ({_mode(b.compared)})" for b in baselines if b.compared is not None)
        raise BaselineError(f"{shown}: written in different modes, so their findings are signed otherwise")
    return Baseline(
        ", ".join(b.path for b in baselines),
        frozenset().union(*(b.entries for b in baselines)),
        max(depths, default=None),
        tuple(note for b in baselines for note in b.notes),
        modes.pop() if modes else None,
    )


def mode_problem(known: Baseline, against: str | None) -> str | None:
    """Why ``known`` cannot serve a run with (or without) ``--against``, or ``None``: such a run signs its
    findings as changes (``regression: ...``, ``neutral change (...)``), a run without it by the rules,
    so a baseline of the other mode would tolerate nothing and call each of its own cases changed."""
    if known.compared is None or known.compared == (against is not None):
        return None
    run = f"this run compares against {against}" if against else "this run has no --against"
    return (
        f"{known.path}: written {_mode(known.compared)} and {run}: its findings are signed the other way,"
        " so it would tolerate none (write it in the same mode)"
    )


def _mode(compared: bool | None) -> str:
    return "with --against" if compared else "without --against"


def shallower(known: Baseline, ledger: Sequence[Record]) -> str | None:
    """A note when this run searched deeper than the baseline did: what is new may only be deeper."""
    deepest = max((row.examples for row in rows(ledger)), default=0)
    if known.depth is None or deepest <= known.depth:
        return None
    return (
        f"the baseline ({known.path}) was written from {known.depth} examples per check and this run"
        f" searched up to {deepest}: a new finding may be one that shallower search never reached"
        " (write baselines deeper: --profile deep, or several --seed runs given as --baseline A --baseline B)"
    )


def _from_report(path: str, results: list[dict]) -> Iterable[Entry]:
    for n, r in enumerate(results):
        findings = r.get("findings")
        if findings is None and r["status"] in ("failed", "hazard"):
            yield Entry(r["check"], r["device"], None, r["status"])
        for k, f in enumerate(findings or ()):
            yield _entry(
                path, f"results[{n}].findings[{k}]", {**f, "check": r["check"], "device": r["device"]}
            )


def _entry(path: str, where: str, e: dict) -> Entry:
    """An entry of a baseline (or a report's finding, with its result's check and device); its case, when
    kept, parsed here, so a damaged one is named before anything runs."""
    from mmharness import payload

    example = None
    if e.get("case") is not None:
        try:
            document = payload.parse_document(e["case"])
        except payload.PayloadError as error:
            raise BaselineError(f"{path}: {where}.case: {error}") from None
        example = (document.case, document.params)
    return Entry(e["check"], e["device"], e["signature"], e.get("kind", ""), e.get("case_hash"), example)


def recheck(
    known: Baseline,
    target: Target,
    ran: Mapping[tuple[str, str], float | None],
    *,
    other: Target | None = None,
    other_spec: str = "",
) -> list[tuple[Entry, Result]]:
    """Replay each known case of a check that ran (``ran``: each unit that ran to its end, with its
    deadline); each entry whose case no longer fails as recorded, with its replay.

    Exact where the search is not: the case is fixed, and a target loading the same files fails on it
    the same way every time, so a change means the code changed there. A case that did not finish in
    time is left out (timing is not exact), and so is an entry whose check the replay cannot run.
    ``other``: the run's ``--against`` target, each case run against it as the search did."""
    from mmharness.against import replay_case
    from mmharness.checks import all_checks
    from mmharness.deadline import SIGNATURE as DID_NOT_FINISH

    registered = all_checks()
    changes = []
    for entry in sorted(
        known.entries, key=lambda e: (e.check, e.device, e.signature or "", e.case_hash or "")
    ):
        unit = (entry.check, entry.device)
        if entry.example is None or unit not in ran or entry.signature == DID_NOT_FINISH:
            continue
        now = replay_case(
            registered[entry.check],
            target,
            entry.example,
            other=other,
            other_spec=other_spec,
            deadline=ran[unit],
        )
        if now.status != SKIPPED and all(f.signature != entry.signature for f in now.findings):
            changes.append((entry, now))
    return changes


def dump(ledger: Sequence[Record], current: dict, search: dict) -> dict:
    """A baseline of every finding of a run, with how deep the run searched (``search``: its options)."""
    from mmharness.views.json_report import case_hash

    units = rows(ledger)
    return {
        "format": FORMAT,
        "target": current,
        "search": {**search, "examples": max((r.examples for r in units), default=0)},
        "entries": [
            {
                "check": r.check,
                "device": r.device,
                "signature": f.signature,
                "kind": f.kind,
                "case_hash": case_hash(f.case),
                "case": f.case,
            }
            for r in units
            for f in r.findings
        ],
    }
