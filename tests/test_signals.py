"""Ctrl-C and SIGTERM end every long command cleanly: summary, findings and reports, marked interrupted.

Each test starts the CLI as a subprocess, waits until it is well into its work,
sends the signal and reads what it left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

CLI = "import sys; from mmharness.cli import main; sys.exit(main())"


@pytest.fixture
def start(tmp_path: Path):
    """Start the CLI in a process group of its own; whatever the test's outcome, nothing is left running."""
    started: list[subprocess.Popen] = []

    def run(*args: str) -> subprocess.Popen:
        command = [sys.executable, "-c", CLI, *args]
        pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
        process = subprocess.Popen(command, cwd=tmp_path, start_new_session=True, **pipes)
        started.append(process)
        return process

    yield run
    for process in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def test_ctrl_c_while_shrinking_keeps_the_finding_unshrunk(tmp_path, start):
    findings, report = tmp_path / "findings", tmp_path / "report.json"
    run = start(
        *("check", "--target", "mutant:resume_from_last_chunk", "--checks", "prefill.stateful"),
        *("--profile", "deep", "--json", str(report), "--findings", str(findings)),
    )
    time.sleep(8)  # the first failure comes within a second; shrinking these programs takes longer
    run.send_signal(signal.SIGINT)
    out, _ = run.communicate(timeout=120)
    assert run.returncode == 130, out
    assert "interrupted: reporting the checks that ran" in out
    data = json.loads(report.read_text())
    assert data["interrupted"] is True
    (result,) = data["results"]
    assert result["status"] == "divergence" and result["interrupted"] is True
    assert all(Path(f["saved"]).is_file() for f in result["findings"])


def test_sigterm_reports_the_checks_that_ran(tmp_path, start):
    report, junit = tmp_path / "report.json", tmp_path / "junit.xml"
    run = start(
        *("check", "--profile", "deep", "--checks", "chunk", "--checks", "count"),
        *("--json", str(report), "--junit", str(junit), "--findings", str(tmp_path / "f")),
    )
    time.sleep(6)
    run.send_signal(signal.SIGTERM)
    out, _ = run.communicate(timeout=120)
    assert run.returncode == 143, out
    assert json.loads(report.read_text())["interrupted"] is True
    assert 'name="interrupted" value="true"' in junit.read_text()
    assert "passed" in out.splitlines()[-1]  # the summary line


def test_ctrl_c_stops_a_matrix_and_its_workers(tmp_path, start):
    report = tmp_path / "matrix.json"
    targets = [arg for name in ("reference", "mutant:chunk_end_inclusive") * 3 for arg in ("--target", name)]
    run = start("matrix", "-n", "2", *targets, "--profile", "deep", "--json", str(report))
    time.sleep(8)
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=60)
    assert run.returncode == 130, out + err
    assert json.loads(report.read_text())["interrupted"] is True
    assert "Traceback" not in err
