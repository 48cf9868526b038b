"""Progress of a long run: a live bar on a terminal, plain lines everywhere else.

``check``, ``matrix``, ``replay`` and the mutation benchmark report each unit
of work as it finishes. On an interactive terminal (and without ``NO_COLOR``,
``CI`` or ``TERM=dumb``) a rich progress bar shows the units done, the one
running and the examples it has tried; elsewhere (a pipe, a CI log) each
finished unit is one plain line, and nothing is redrawn. The result lines the
caller prints go through ``line`` so they sit above the bar.
"""

from __future__ import annotations

import os
import sys
from contextlib import AbstractContextManager
from typing import Any, TextIO


def interactive(stream: TextIO) -> bool:
    plain = any(os.environ.get(name) for name in ("NO_COLOR", "CI")) or os.environ.get("TERM") == "dumb"
    return stream.isatty() and not plain


class Progress(AbstractContextManager):
    """``total`` units of work called ``what`` (``checks``, ``targets``, ``cases``)."""

    def __init__(self, total: int, what: str, *, stream: TextIO | None = None) -> None:
        self.total = total
        self.what = what
        self.stream = stream or sys.stdout
        self.done = 0
        self.current = ""
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        if interactive(self.stream):
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar

            console = Console(file=self.stream)
            self._bar = Bar(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[detail]}"),
                console=console,
                transient=True,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(self.what, total=self.total, detail="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def start(self, name: str) -> None:
        """A unit began (shown on the bar only)."""
        self.current = name
        if self._bar is not None:
            self._bar.update(self._task, detail=name)

    def tick(self, examples: int) -> None:
        """The running unit has tried ``examples`` examples (shown on the bar only)."""
        if self._bar is not None and examples % 10 == 0:
            self._bar.update(self._task, detail=f"{self.current}: {examples} examples")

    def line(self, text: str) -> None:
        """A finished unit's line, above the bar or as a plain line."""
        self.done += 1
        if self._bar is not None:
            from rich.text import Text

            self._bar.console.print(Text.from_ansi(text), soft_wrap=True)
            self._bar.update(self._task, completed=self.done)
        else:
            print(text, file=self.stream, flush=True)


def summary_table(rows: list[tuple[str, ...]], headers: tuple[str, ...], stream: TextIO) -> bool:
    """A table of the run at the end, on a terminal; ``False`` (nothing printed) elsewhere."""
    if not interactive(stream):
        return False
    from rich.console import Console
    from rich.table import Table

    table = Table(*headers, box=None)
    for row in rows:
        table.add_row(*row)
    Console(file=stream).print(table)
    return True
