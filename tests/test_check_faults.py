"""``check`` under faults (``tests/fault_injection.py``, ``docs/guarantees.md``): an interrupt at each
phase of a run (a target loading, the search, shrinking, saving, the report), a full disk under the
ledger and the reports, a cut ledger. The same invariants each time: a run that did not finish never
exits 0, an error is one line, every finding found before the fault is on disk and replays, and the
report (or the ledger) says what did not finish."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fault_injection import cli, cut, interrupt_at, no_space, one_line, replays, unfinished

TARGET = "mutant:chunk_start_off_by_one"
CHECKS = "chunk.matches_reference,count.matches_reference,adjust.matches_reference"


def _check(capsys, tmp_path: Path, *extra: str) -> tuple[int, str, str]:
    argv = ["check", "--target", TARGET, "--checks", CHECKS, "--max-examples", "20"]
    argv += ["--findings", str(tmp_path / "findings"), "--json", str(tmp_path / "r.json"), *extra]
    return cli(capsys, *argv)


def _ledger(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "findings" / "ledger.ndjson").read_text().splitlines()]


@pytest.mark.parametrize(
    ("phase", "where", "call"),
    [
        ("the search of the second check", "mmharness.runner.run_check", 2),
        ("saving the first finding", "mmharness.report.save_case", 1),
        ("shrinking the first failure", "mmharness.runner.shrink_found", 1),
    ],
)
def test_an_interrupt_at_any_phase_keeps_what_was_found_and_says_what_did_not_finish(
    capsys, tmp_path, monkeypatch, phase, where, call
):
    extra = ("--fail-fast",) if "shrink" in phase else ()
    interrupt_at(monkeypatch, where, call=call)
    code, out, err = _check(capsys, tmp_path, *extra)
    unfinished(code)
    assert code == 130 and "Traceback" not in out + err, phase
    ledger = _ledger(tmp_path)
    assert ledger[0]["record"] == "started"
    assert ledger[-1] == {"record": "finished", "exit_code": 130, "interrupted": True, "stopped": ""}
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["interrupted"] is True and report["not_finished"], "the report says what did not finish"
    assert all(r["status"] != "passed" or not r["interrupted"] for r in report["results"])
    found = [r for r in ledger if r["record"] == "found"]
    assert found, f"{phase}: the first way of failing is on disk as found"
    code, out, _ = cli(capsys, "replay", str(tmp_path / "findings" / "ledger.ndjson"))
    assert code == 1 and "--- DIVERGENCE" in out, "and the ledger's findings replay"
    saved = [str(path) for path in (tmp_path / "findings").glob("*.json")]
    if saved:  # interrupted while saving the first, none is; the ledger holds it
        replays(saved, TARGET, capsys)


def test_an_interrupt_while_writing_the_report_is_one_line_and_never_a_pass(capsys, tmp_path, monkeypatch):
    interrupt_at(monkeypatch, "mmharness.views.json_report.as_json")
    code, out, err = _check(capsys, tmp_path)
    unfinished(code)
    assert code == 130 and "Traceback" not in out + err
    assert "finished" not in {r["record"] for r in _ledger(tmp_path)}, "the ledger says the run did not end"
    replays([str(p) for p in (tmp_path / "findings").glob("*.json")], TARGET, capsys)


@pytest.mark.parametrize(("where", "after"), [("mmharness.ledger.append", 3), ("mmharness.report.write", 0)])
def test_a_full_disk_is_one_line_and_keeps_what_was_written(capsys, tmp_path, monkeypatch, where, after):
    no_space(monkeypatch, where, after=after)
    code, out, err = _check(capsys, tmp_path)
    assert code == 2, out + err
    one_line(err, "cannot write", "No space left on device")
    assert len(_ledger(tmp_path)) >= min(after, 3), "the records written before the disk filled stay whole"


def test_a_ledger_cut_by_a_kill_still_replays_and_a_damaged_one_is_named(capsys, tmp_path):
    assert _check(capsys, tmp_path)[0] == 1
    ledger = tmp_path / "findings" / "ledger.ndjson"
    whole = ledger.read_bytes()
    cut(ledger, size=len(whole) - 7)  # killed while the last record was being written
    code, out, _ = cli(capsys, "replay", str(ledger))
    assert code == 1 and "--- DIVERGENCE" in out
    lines = whole.splitlines(keepends=True)
    ledger.write_bytes(lines[0] + lines[1][: len(lines[1]) // 2] + b"\n" + b"".join(lines[2:]))
    code, _, err = cli(capsys, "replay", str(ledger))
    assert code == 2
    one_line(err, str(ledger), "line 2")


def test_a_full_disk_under_the_ledger_names_the_ledger(capsys, tmp_path, monkeypatch):
    import errno
    import os

    def full(descriptor, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("mmharness.ledger.os.write", full)
    code, _, err = _check(capsys, tmp_path)
    assert code == 2
    one_line(err, f"cannot write {tmp_path / 'findings' / 'ledger.ndjson'}", "No space left on device")


# replay and atlas under the same faults ---------------------------------------------------------------


def test_an_interrupted_replay_is_never_a_pass_and_a_full_disk_under_atlas_is_one_line(
    capsys, tmp_path, monkeypatch
):
    """``replay`` stopped between two cases exits 130 (never 0 or 1, which read as verdicts); ``atlas``
    whose document the disk refuses says so in one line, exit 2, leaving no part of it."""
    assert _check(capsys, tmp_path, "--first-failure")[0] == 1
    (one,) = (tmp_path / "findings").glob("*.json")
    saved = [str(one), str(one)]
    with pytest.MonkeyPatch.context() as patch:
        interrupt_at(patch, "mmharness.against.replay_case", call=2)
        code, out, err = cli(capsys, "replay", *saved)
    unfinished(code)
    assert code == 130 and "Traceback" not in out + err
    matrix = tmp_path / "m.json"
    argv = ["matrix", "--target", TARGET, "--checks", "chunk.matches_reference", "--max-examples", "5"]
    assert cli(capsys, *argv, "--json", str(matrix))[0] == 1
    no_space(monkeypatch, "mmharness.report.write")
    document = tmp_path / "atlas.md"
    code, _, err = cli(capsys, "atlas", str(matrix), "-o", str(document))
    assert code == 2 and not document.exists()
    one_line(err, "cannot write", "No space left on device")
