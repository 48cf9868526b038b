"""Ctrl-C and SIGTERM end every long command cleanly: summary, findings and reports, marked interrupted.

Each test starts the CLI as a subprocess, waits until it is well into its work,
sends the signal and reads what it left behind.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path


def start(tmp_path: Path, *args: str) -> subprocess.Popen:
    command = [sys.executable, "-c", "import sys; from mmharness.cli import main; sys.exit(main())", *args]
    return subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(path: Path, timeout: float = 60) -> None:
    """Until ``path`` exists (the run has reached the point the test needs)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def test_ctrl_c_while_shrinking_keeps_the_finding_unshrunk(tmp_path):
    findings, report = tmp_path / "findings", tmp_path / "report.json"
    run = start(
        tmp_path,
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


def test_sigterm_reports_the_checks_that_ran(tmp_path):
    report, junit = tmp_path / "report.json", tmp_path / "junit.xml"
    run = start(
        tmp_path,
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


def test_ctrl_c_stops_a_matrix_and_its_workers(tmp_path):
    report = tmp_path / "matrix.json"
    targets = [arg for name in ("reference", "mutant:chunk_end_inclusive") * 3 for arg in ("--target", name)]
    run = start(tmp_path, "matrix", "-n", "2", *targets, "--profile", "deep", "--json", str(report))
    time.sleep(8)
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=60)
    assert run.returncode == 130, out + err
    assert json.loads(report.read_text())["interrupted"] is True
    assert "Traceback" not in err
