"""Progress: a live bar on a terminal, plain lines in a pipe, a log or under NO_COLOR."""

from __future__ import annotations

import io

from mmharness.progress import Progress, interactive, summary_table


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_off_a_terminal():
    stream = io.StringIO()
    with Progress(2, "checks", stream=stream) as progress:
        progress.start("one")
        progress.tick(10)
        progress.line("PASS one")
        progress.line("PASS two")
    assert stream.getvalue() == "PASS one\nPASS two\n"
    assert not summary_table([("a",)], ("h",), stream)


def test_a_bar_on_a_terminal_unless_told_otherwise(monkeypatch):
    for name in ("NO_COLOR", "CI", "TERM"):
        monkeypatch.delenv(name, raising=False)
    stream = Terminal()
    assert interactive(stream)
    with Progress(1, "checks", stream=stream) as progress:
        progress.start("chunk.matches_reference")
        progress.line("PASS chunk.matches_reference")
    assert "PASS chunk.matches_reference" in stream.getvalue()
    assert summary_table([("chunk.matches_reference", "PASS")], ("check", "verdict"), stream)
    monkeypatch.setenv("NO_COLOR", "1")
    assert not interactive(stream)
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("CI", "true")
    assert not interactive(stream)
