"""Ctrl-C and SIGTERM end every long command cleanly: summary, findings and reports, marked interrupted.

Each test starts the CLI as a subprocess (the ``start`` fixture), waits until it is well into its work
(the newer ones until it prints a line saying so: ``fault_injection.Output``), sends the signal and reads
what it left behind.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from fault_injection import Output


def test_ctrl_c_while_shrinking_keeps_the_finding_unshrunk(tmp_path, start):
    findings, report = tmp_path / "findings", tmp_path / "report.json"
    run = start(
        *("check", "--target", "mutant:resume_from_last_chunk", "--checks", "prefill.stateful"),
        *("--profile", "deep", "--json", str(report), "--findings", str(findings)),
        *("--seed", "4"),  # fixed cases, the first to fail a divergence (a random one may be a hazard)
    )
    ledger = findings / "ledger.ndjson"
    deadline = time.monotonic() + 120  # the first failure comes within seconds on an idle machine
    while time.monotonic() < deadline and '"record": "found"' not in (
        ledger.read_text() if ledger.exists() else ""
    ):
        time.sleep(0.2)
    time.sleep(1)  # shrinking these programs takes far longer
    run.send_signal(signal.SIGINT)
    out, _ = run.communicate(timeout=120)
    assert run.returncode == 130, out
    assert "interrupted: reporting the checks that ran" in out
    data = json.loads(report.read_text())
    assert data["interrupted"] is True
    (result,) = data["results"]
    assert result["status"] == "unfinished" and result["interrupted"] is True, "stopped: not a verdict"
    assert {f["kind"] for f in result["findings"]} == {"divergence"}, "what it had found is kept"
    assert all(Path(f["saved"]).is_file() for f in result["findings"])
    assert data["not_finished"] == [{"check": "prefill.stateful", "device": "cpu", "state": "unfinished"}]


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


ADAPTERS = '''
"""Targets for the signal tests. Slow answers R4 wrongly (a count one too many, slowly; an adjusted
embedding a row short) and says so on standard error once it has been wrong five times at each;
Idle has nothing to check; Hung answers right but hangs in its third count."""
import sys
import time

from mmharness.targets.base import ADJUST, COUNT
from mmharness.targets.reference import ReferenceTarget


class Slow(ReferenceTarget):
    name = "slow"
    capabilities = frozenset({COUNT, ADJUST})

    def __init__(self):
        self.wrong = {}

    def said(self, what):
        self.wrong[what] = self.wrong.get(what, 0) + 1
        if self.wrong[what] == 5:
            print(f"{self.name} {what}: wrong 5 times", file=sys.stderr, flush=True)

    def count_mm_tokens(self, case):
        time.sleep(0.3)
        count = super().count_mm_tokens(case)
        self.said("count")
        return count + 1

    def adjust_embedding_length(self, embedding, wanted):
        kept = super().adjust_embedding_length(embedding, wanted)
        if kept.shape[-2] == 0:
            return kept
        self.said("adjust")
        return kept[..., 1:, :]


class Slower(Slow):
    name = "slower"


class Idle(ReferenceTarget):
    name = "idle"
    capabilities = frozenset()


class Hung(ReferenceTarget):
    name = "hung"
    capabilities = frozenset({COUNT, ADJUST})

    def __init__(self):
        self.counted = 0

    def count_mm_tokens(self, case):
        self.counted += 1
        if self.counted == 3:
            print("hung: hanging", file=sys.stderr, flush=True)
            time.sleep(600)
        return super().count_mm_tokens(case)
'''
FOREVER = ("--max-examples", "1000000")


@pytest.fixture
def adapters(tmp_path: Path) -> str:
    """The module of the test targets, importable from the CLI's working directory."""
    (tmp_path / "signal_adapters.py").write_text(ADAPTERS)
    return "signal_adapters"


def test_ctrl_c_keeps_what_the_workers_had_found(tmp_path, start, adapters):
    """With workers, the checks in progress are reported (partial, marked) and their findings saved."""
    findings, report = tmp_path / "fd", tmp_path / "r.json"
    run = start(
        *("check", "-n", "2", "--target", f"{adapters}:Slow", *FOREVER),
        *("--checks", "chunk.matches_reference,count,adjust.matches_reference"),
        *("--json", str(report), "--findings", str(findings)),
        merged=True,
    )
    output = Output(run)
    output.wait_for("SKIP", "slow count: wrong 5 times", "slow adjust: wrong 5 times")
    code, out = output.interrupt()
    assert code == 130, out
    assert "interrupted: reporting the checks that ran" in out and "Traceback" not in out
    data = json.loads(report.read_text())
    assert data["interrupted"] is True
    results = {r["check"]: r for r in data["results"]}
    assert list(results) == ["chunk.matches_reference", "count.matches_reference", "adjust.matches_reference"]
    assert results["chunk.matches_reference"]["status"] == "skipped"
    for check in ("count.matches_reference", "adjust.matches_reference"):
        assert results[check]["interrupted"] is True and results[check]["findings"], results[check]
        assert all(Path(f["saved"]).is_file() for f in results[check]["findings"])
    assert {p.name.split("-")[0] for p in findings.glob("*.json")} == {
        "adjust.matches_reference",
        "count.matches_reference",
    }
    stopped = {r["check"] for r in data["not_finished"]}
    assert stopped == {"count.matches_reference", "adjust.matches_reference"}, "said not to have finished"
    ledger = [json.loads(line) for line in (findings / "ledger.ndjson").read_text().splitlines()]
    assert {r["check"] for r in ledger if r["record"] == "unfinished"} == stopped, "and so says the ledger"


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_signal_stops_an_example_that_hangs(tmp_path, start, adapters, workers):
    """The example in progress is stopped where it hangs, and the stop is no finding."""
    report = tmp_path / "r.json"
    run = start(
        *("check", "-n", workers, "--target", f"{adapters}:Hung", *FOREVER),
        *("--checks", "count,adjust.matches_reference", "--json", str(report), "--findings", "fd"),
        merged=True,
        env={"MMHARNESS_DEADLINE": "0"},  # no deadline of its own: only the signal ends the hang
    )
    output = Output(run)
    output.wait_for("hung: hanging")
    started = time.monotonic()
    code, out = output.interrupt(signal.SIGTERM, timeout=15)
    assert time.monotonic() - started < 15
    assert code == 143, out
    data = json.loads(report.read_text())
    assert data["interrupted"] is True
    counted = data["results"][0]
    assert counted["check"] == "count.matches_reference" and counted["interrupted"] is True
    assert all(r["status"] == "unfinished" and r["findings"] == [] for r in data["results"]), data["results"]
    assert data["not_finished"][0] == {
        "check": "count.matches_reference",
        "device": "cpu",
        "state": "unfinished",
    }


def test_ctrl_c_keeps_the_targets_in_progress_of_a_parallel_matrix(tmp_path, start, adapters):
    """The finished target, and the cells of those in progress, are in the table, the JSON and on disk."""
    findings, report = tmp_path / "fd", tmp_path / "m.json"
    targets = [f"{adapters}:{name}" for name in ("Idle", "Slow", "Slower")]
    run = start(
        *("matrix", "-n", "2", *[arg for spec in targets for arg in ("--target", spec)], *FOREVER),
        *("--checks", "count,adjust.matches_reference", "--json", str(report), "--findings", str(findings)),
        merged=True,
    )
    output = Output(run)
    output.wait_for(f"{targets[0]}: 2 checks", "slow count: wrong 5 times", "slower count: wrong 5 times")
    code, out = output.interrupt()
    assert code == 130, out
    assert "interrupted: 1 target(s) finished, 2 in progress" in out and "Traceback" not in out
    data = json.loads(report.read_text())
    assert data["interrupted"] is True
    assert [t["spec"] for t in data["targets"]] == targets
    count, adjust = data["checks"]
    for spec in targets[1:]:
        partial = count["results"][spec]
        assert partial["interrupted"] is True and partial["status"] == "divergence", partial
        assert adjust["results"][spec]["status"] == "not run"
        saved = [f["saved"] for f in partial["findings"]]
        assert saved and all(Path(path).is_file() for path in saved)
        assert all(f"reproduce with: mmharness replay {path}" in out for path in saved)
    assert {p.name for p in findings.iterdir()} == {"signal_adapters_Slow", "signal_adapters_Slower"}


def test_ctrl_c_keeps_the_checks_that_ran_on_the_target_in_progress(tmp_path, start, adapters):
    """Serially, the target in progress keeps its finished checks and the partial one."""
    findings, report = tmp_path / "fd", tmp_path / "m.json"
    spec = f"{adapters}:Slow"
    run = start(
        *("matrix", "--target", spec, "--max-examples", "30", "--json", str(report)),
        *("--checks", "adjust.matches_reference,count,adjust.zero_keeps_all", "--findings", str(findings)),
        merged=True,
    )
    output = Output(run)
    output.wait_for("slow count: wrong 5 times")
    code, out = output.interrupt()
    assert code == 130, out
    data = json.loads(report.read_text())
    assert [t["spec"] for t in data["targets"]] == [spec]
    adjust, count, zero = (c["results"][spec] for c in data["checks"])
    assert adjust["interrupted"] is False and adjust["status"] != "passed" and adjust["examples"] > 0
    assert count["interrupted"] is True and count["status"] == "divergence"
    assert zero["status"] == "not run"
    saved = [f["saved"] for cell in (adjust, count) for f in cell["findings"]]
    assert len(saved) >= 2 and all(Path(path).is_file() for path in saved)
    assert "interrupted: 0 target(s) finished, 1 in progress" in out


@pytest.mark.parametrize("stop", ["signal", "deadline"])
def test_findings_reported_with_a_stop_end_the_round_keeping_them(monkeypatch, stop):
    """Hypothesis reports a stop (or the deadline's limit) met while replaying several failures in one
    group with them: the round must end as for the stop alone, the findings kept as first seen (in a
    matrix worker the group escaped, and its per-signature classes could not be sent back)."""
    from mmharness import interrupts, runner
    from mmharness.checks import all_checks
    from mmharness.checks.outcome import Failure
    from mmharness.targets.specs import resolve

    check = all_checks()["embed_mask.matches_reference"]
    search = runner._Search(check, resolve("reference"), "cpu", 10, deadline=1.0)
    failure = Failure("rows differ")
    ender = interrupts.Stop("SIGUSR1") if stop == "signal" else runner._Hung()

    def test(known, first_seen, first_example, *, database):
        def prop():
            first_seen[failure.signature] = 3
            first_example[failure.signature] = (failure, None)
            found = runner._found_type(failure.signature)(failure, None)
            raise runner.BaseExceptionGroup("found 2 distinct failures", [found, ender])

        return prop

    monkeypatch.setattr(search, "test", test)
    if stop == "signal":
        with pytest.raises(interrupts.Stop):
            search.round(None)
    else:
        assert search.round(None) is False
        assert search.spent == search.budget
    assert list(search.findings) == [failure.signature]
    assert not search.findings[failure.signature].shrunk
