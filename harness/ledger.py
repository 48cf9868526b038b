"""The ledger: a run's records (``mmharness.records``) as NDJSON, one line each, on disk as they come.

Each record is one ``write`` to a file opened for appending, then synced, so a
worker process may append to the same ledger as its parent (``Found``
records), and a run killed at any point leaves every record it had written,
whole. A ledger without a ``Finished`` record is a run that did not finish.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from mmharness.records import FORMAT, Finished, Record, RecordError, Started, from_json

NAME = "ledger.ndjson"
"""The ledger's file name in the findings directory, where no ``--ledger`` names one."""


class Ledger:
    """Appends records to ``path`` (``None``: memory only) and keeps them, in order, in ``records``."""

    def __init__(self, path: str | os.PathLike[str] | None, *, fresh: bool = True) -> None:
        self.path = None if path is None else Path(path)
        self.records: list[Record] = []
        if self.path is not None and fresh:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text("", encoding="utf-8")

    def add(self, *records: Record) -> None:
        for record in records:
            self.records.append(record)
            if self.path is not None:
                append(self.path, record)

    def extend(self, records: Iterable[Record]) -> None:
        self.add(*records)

    def of(self, kind: type[Record]) -> list:
        """The records of ``kind`` (and its subclasses), in order."""
        return [r for r in self.records if isinstance(r, kind)]


def append(path: Path, record: Record) -> None:
    """One record as one line, appended in one write and synced: whole on disk, or not there at all."""
    line = (json.dumps(record.as_json(), ensure_ascii=False, sort_keys=False) + "\n").encode("utf-8")
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        os.write(descriptor, line)
        os.fsync(descriptor)
    except OSError as error:  # a full disk: say which file (os.write names none)
        raise OSError(error.errno, error.strerror, str(path)) from None
    finally:
        os.close(descriptor)


class LedgerError(ValueError):
    """A ledger file that cannot be read: the line and what is wrong with it."""


def read(path: str | os.PathLike[str]) -> list[Record]:
    """A ledger's records. A last line cut short (the run was killed while writing it) is left out;
    any other bad line is a ``LedgerError`` naming it."""
    return list(_records(Path(path)))


def _records(path: Path) -> Iterator[Record]:
    try:
        lines = path.read_bytes().split(b"\n")
    except OSError as error:
        raise LedgerError(f"{path}: {error.strerror or error}") from None
    complete, last = lines[:-1], lines[-1]  # ``last`` is what follows the final newline: a cut line
    for number, line in enumerate(complete, 1):
        try:
            record = from_json(json.loads(line))
        except (ValueError, RecordError) as error:
            raise LedgerError(f"{path}: line {number}: {error}") from None
        if number == 1 and not (isinstance(record, Started) and record.format == FORMAT):
            raise LedgerError(f"{path}: line 1: not a {FORMAT} ledger (no started record)")
        yield record
    del last


def case_documents(records: list[Record]) -> list[dict]:
    """Each recorded finding's case as a saved case's document (its check, target, settings and how it
    failed as provenance), in run order: what ``replay LEDGER`` runs."""
    from mmharness.views import rows

    started = next((r for r in records if isinstance(r, Started)), None)
    provenance: dict = {}
    if started is not None:
        given = {"target": started.target, "env": started.env, "engine": started.engine}
        provenance = {key: value for key, value in given.items() if value}
    return [
        {**f.case, **provenance, "check": row.check, "note": f"{f.kind}: {f.message}"}
        for row in rows(records)
        for f in row.findings
        if f.case is not None
    ]


def finished(records: Iterable[Record]) -> Finished | None:
    """The run's end record; ``None``: the run did not finish."""
    return next((r for r in records if isinstance(r, Finished)), None)
