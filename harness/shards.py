"""``matrix --shard I/N`` and ``mmharness merge``: one matrix spread over machines, then joined.

A CI matrix runs one ``mmharness matrix`` command on N machines, each with
``--shard I/N``: each runs its share of the targets and writes its ``--json``
report, and ``mmharness merge`` joins the reports into the one the unsharded
command writes (the same JSON, table, exit code and so atlas). Targets are
dealt round-robin in the matrix's own order, the order given (oldest release
first), so each shard gets old and new releases alike rather than one shard
all the newest. Not in their sorted spelling: ``sglang==0.4.10`` sorts before
``sglang==0.4.6`` as text, and the order given is the one the report keeps.

A shard's report is a matrix report of its share with a ``shard`` field: which
share, the whole matrix's targets and command line, and the settings its cells
depend on (``Settings``: ``--env`` and ``--engine`` among them, which ``merge``
sets before it shrinks, replays and saves). That is what a merge needs to rebuild
the whole and to tell shares of one matrix from shares of others. Each target's
files' digest travels too (``Matrix.digests``): a path target whose files
changed since its shard tested them is refused by the merge, naming it.

A merge refuses (``MergeError``) what it cannot join into the unsharded
report: shares of different matrices, a shard given twice, and missing shards.
A merge of some shards would read as the whole matrix with its other releases
left out unnoticed, and an atlas made from it would hide their findings; each
shard's own report still reads alone (``mmharness atlas``). An interrupted
shard is merged, and the merged report says ``interrupted`` as the unsharded
run's would.

Replay (``mmharness.matrix.replay_classes``: each class's shrunk case run on
every target) needs every class, so a shard never replays: ``merge`` does, on
the joined matrix, loading each target (``-n`` at once), so that the merged
report is the unsharded run's, exact ranges included. Each finding's case
travels in its shard's report (``case``), so no findings directory is needed,
and so does the choice sequence of each case kept unshrunk (``choices``): a
shard's search shrinks nothing, and ``merge`` shrinks each class once
(``mmharness.matrix.shrink_classes``), as the unsharded run does.
A matrix run with ``--no-replay`` is merged without (``Settings.no_replay``), and
``merge --no-replay`` only joins, loading nothing: its report says it was not
replayed. An interrupted shard's matrix is not replayed either. A matrix run
``--against SPEC`` keeps it in its settings: the merge replays against it, as
the unsharded run does (a change exists only relative to it).

A shard searches one target per engine code among its own share
(``mmharness.matrix``: ``same_as``), so a merged report marks only the targets
that shared a code with an earlier one of the same shard; its cells are the
unsharded run's all the same (the same code searched twice finds the same).

Merging is a command of its own, as ``coverage combine`` and ``playwright
merge-reports`` are, rather than a ``matrix`` option: it runs no search (only
the replay, under the settings the shards ran with), so none of matrix's
options but ``--json`` and ``-n`` would mean anything beside it, and like
``mmharness atlas`` it reads reports.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from mmharness.matrix import Matrix, NotAMatrix

FIELD = "shard"
_SPEC = re.compile(r"([0-9]+)/([0-9]+)")


class MergeError(ValueError):
    """Shard reports that do not join into one matrix report; the message names the file and why."""


def parse(text: str) -> tuple[int, int]:
    """``I/N`` as ``(I, N)``; ``ValueError`` says what is wrong, for ``--shard``'s usage error."""
    spelled = _SPEC.fullmatch(text)
    if spelled is None:
        raise ValueError(f"expected I/N, the I-th of N shares (e.g. 2/3), got {text!r}")
    index, count = int(spelled[1]), int(spelled[2])
    if count < 1:
        raise ValueError(f"N must be 1 or more, got {text}")
    if not 1 <= index <= count:
        raise ValueError(f"I must be from 1 to N ({count}), got {text}")
    return index, count


def share(targets: Sequence[str], index: int, count: int) -> list[str]:
    """The targets of shard ``index`` of ``count``: every ``count``-th, from the ``index``-th on.

    Empty when there are fewer targets than shards: ``matrix --shard`` refuses such a share (exit 2), as a
    run of nothing whose report merges like a share that ran would hide a CI matrix's misconfiguration.
    """
    return list(targets[index - 1 :: count])


@dataclass(frozen=True)
class Settings:
    """What a matrix's cells depend on besides its checks and targets: shares of one matrix agree on it.

    ``deadline`` is the one the checks ran under (from ``$MMHARNESS_DEADLINE``
    or the profile when not given), so machines set up differently disagree.
    ``strict`` changes no cell, only the report's first failing targets and the exit code.
    """

    profile: str = field(metadata={"flag": "--profile"})
    seed: int | None = field(metadata={"flag": "--seed"})
    max_examples: int | None = field(metadata={"flag": "--max-examples"})
    deadline: float | None = field(metadata={"flag": "--deadline"})
    strict: bool = field(metadata={"flag": "--strict"})
    no_replay: bool = field(default=False, metadata={"flag": "--no-replay"})
    """``merge`` does not replay the classes, as the unsharded command would not (a report from
    before replay has none: it replays)."""
    against: str | None = field(default=None, metadata={"flag": "--against"})
    """The spec every case also ran on: ``merge`` replays each class against it too (a change exists
    only relative to it), and shards against different targets are different matrices."""
    env: tuple[str, ...] = field(default=(), metadata={"flag": "--env"})
    """The ``--env NAME=VALUE`` settings the shard ran under, sorted: ``merge`` sets them before it
    shrinks, replays and saves (a case may fail only under them; saved cases and replay lines carry
    them), and shards under other settings are different matrices."""
    engine: str | None = field(default=None, metadata={"flag": "--engine"})
    """``--engine`` (``$MMHARNESS_ENGINE``): which engine its path specs are, set by ``merge`` likewise."""

    @classmethod
    def of_run(cls, *args: Any, **options: Any) -> Settings:
        """The settings of this process's run: the fields given, and its ``--env`` and ``--engine``."""
        from mmharness.targets.settings import given
        from mmharness.targets.specs import ENGINE_VARIABLE

        env = tuple(f"{name}={value}" for name, value in sorted(given().items()))
        engine = os.environ.get(ENGINE_VARIABLE, "").strip() or None
        return cls(*args, **options, env=env, engine=engine)

    def apply(self) -> None:
        """Set the shard's ``--env`` and ``--engine`` in this process (and the workers it starts)."""
        from mmharness.targets.settings import apply
        from mmharness.targets.specs import ENGINE_VARIABLE

        apply(self.env)
        if self.engine:
            os.environ[ENGINE_VARIABLE] = self.engine


@dataclass(frozen=True)
class Shard:
    """Which share of which matrix a report holds."""

    index: int
    count: int
    targets: tuple[str, ...]
    """Every target of the whole matrix, in its order."""
    settings: Settings
    command: str
    """The whole matrix's command line: the shard's own without its ``--shard``."""

    def as_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "count": self.count,
            "targets": list(self.targets),
            "settings": asdict(self.settings),
            "command": self.command,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Shard:
        from mmharness.targets.settings import parse_assignment

        settings = Settings(**{**data["settings"], "env": tuple(data["settings"].get("env", ()))})
        for assignment in settings.env:
            parse_assignment(str(assignment))  # a ValueError naming it
        shard = cls(
            int(data["index"]),
            int(data["count"]),
            tuple(str(t) for t in data["targets"]),
            settings,
            str(data["command"]),
        )
        if not 1 <= shard.index <= shard.count:
            raise ValueError(f"index {shard.index} of {shard.count}")
        return shard


def report(matrix: Matrix, shard: Shard) -> dict[str, Any]:
    """A shard's ``--json`` report: its share's matrix report, and which share of what it is."""
    return {**matrix.as_json(strict=shard.settings.strict, choices=True), FIELD: shard.as_json()}


def merge(reports: Sequence[tuple[str, object]]) -> tuple[Matrix, Settings]:
    """The unsharded matrix from its shards' reports (``(file name, JSON)``), and its settings.

    Raises ``MergeError`` naming the file for a report that is not a shard's,
    one of another matrix, a shard given twice or missing shards.
    """
    read = sorted((_read(name, data) for name, data in reports), key=lambda one: one[2].index)
    first_name, first_matrix, first = read[0]
    for name, matrix, shard in read[1:]:
        _same(first_name, name, "shard count (N of --shard I/N)", first.count, shard.count)
        _same(first_name, name, "targets (--target)", first.targets, shard.targets)
        _same(first_name, name, "checks (--checks)", first_matrix.checks, matrix.checks)
        for setting in fields(Settings):
            mine, theirs = getattr(first.settings, setting.name), getattr(shard.settings, setting.name)
            _same(first_name, name, setting.metadata["flag"], mine, theirs)
    given: dict[int, str] = {}
    for name, _, shard in read:
        if shard.index in given:
            raise MergeError(
                f"shard {shard.index}/{shard.count} is given twice: {given[shard.index]} and {name}"
            )
        given[shard.index] = name
    missing = [str(k) for k in range(1, first.count + 1) if k not in given]
    if missing:
        raise MergeError(
            f"shard(s) {', '.join(missing)} of {first.count} missing: give every shard's report"
            " (a merge of some would read as the whole matrix)"
        )
    part = {target: matrix for _, matrix, _ in read for target in matrix.targets}
    interrupted = any(matrix.interrupted for _, matrix, _ in read)
    whole = Matrix(
        [t for t in first.targets if t in part],
        list(first_matrix.checks),
        command=first.command,
        interrupted=interrupted,
        against=first.settings.against,
        dedup=any(matrix.dedup for _, matrix, _ in read),
    )
    for target in whole.targets:  # in the matrix's order, as the unsharded run fills them
        whole.cells.update({(c, target): part[target].cell(c, target) for c in whole.checks})
        if target in part[target].target_errors:
            whole.target_errors[target] = part[target].target_errors[target]
        if target in part[target].releases:
            whole.releases[target] = part[target].releases[target]
        if target in part[target].same_as:  # within its shard: merge's replay runs once for both
            whole.same_as[target] = part[target].same_as[target]
        if target in part[target].digests:
            whole.digests[target] = part[target].digests[target]
    return whole, first.settings


def _read(name: str, data: object) -> tuple[str, Matrix, Shard]:
    """A shard report as its matrix and shard; ``MergeError`` for anything else."""
    try:
        matrix = Matrix.from_json(data)
    except NotAMatrix as error:
        raise MergeError(
            f"{name}: not a matrix report (`mmharness matrix --json` writes one): {error}"
        ) from None
    if FIELD not in data:
        raise MergeError(f"{name}: not a shard's report (`mmharness matrix --shard I/N --json` writes one)")
    try:
        shard = Shard.from_json(data[FIELD])
    except (KeyError, TypeError, ValueError) as error:
        raise MergeError(f"{name}: malformed {FIELD!r} field: {error}") from None
    mine = share(shard.targets, shard.index, shard.count)
    outside = [t for t in matrix.targets if t not in mine]
    if outside:
        raise MergeError(f"{name}: target {outside[0]!r} is not in shard {shard.index}/{shard.count}'s share")
    return name, matrix, shard


def _same(first: str, name: str, what: str, mine: object, theirs: object) -> None:
    """Refuse two shards whose ``what`` differs: they are shares of different matrices."""
    if mine == theirs:
        return
    if isinstance(mine, list | tuple) and isinstance(theirs, list | tuple):
        pairs = enumerate(zip(mine, theirs, strict=False))
        k = next((k for k, (a, b) in pairs if a != b), min(len(mine), len(theirs)))
        what, mine, theirs = f"{what} #{k + 1}", _at(mine, k), _at(theirs, k)
    else:
        mine, theirs = repr(mine), repr(theirs)
    raise MergeError(f"shards of different matrices: {what} is {theirs} in {name}, {mine} in {first}")


def _at(values: Sequence[object], k: int) -> str:
    return repr(values[k]) if k < len(values) else "absent"
