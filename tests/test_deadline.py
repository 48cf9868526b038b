"""A deadline per case: a case that does not finish is a divergence of its own, saved and replayable.

The timer itself (``mmharness.deadline``), the runner's verdict and its bounded
shrinking (in process, with a small budget for runs that hit the deadline), and
``mmharness check``/``replay`` on a user adapter whose prefill loops forever.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from mmharness import deadline, runner
from mmharness.checks import all_checks
from mmharness.checks.outcome import DIVERGENCE
from mmharness.deadline import SIGNATURE, DidNotFinish, NoProgress, limit

pytestmark = pytest.mark.skipif(not deadline.available(), reason="no real-time timer in this thread")

CHECK = "prefill.matches_reference"
LOOPING = """
from typing import ClassVar

from mmharness.api import PREFILL
from mmharness.targets.reference import ReferenceTarget


class Looping(ReferenceTarget):
    \"\"\"The reference, except that its prefill never returns for a request of two items.\"\"\"

    name = "looping"
    capabilities = frozenset({PREFILL})
    missing: ClassVar[dict[str, str]] = {}

    def chunked_prefill_embedding(self, case, encoder, *, cache=None, path="batched"):
        if any(len(request.items) == 2 for request in case.requests):
            while True:
                pass
        return super().chunked_prefill_embedding(case, encoder, cache=cache, path=path)
"""


def spin() -> None:
    while True:
        pass


def swallowing(times: int) -> int:
    """An engine loop that swallows the interrupt ``times`` times, then lets it through."""
    swallowed = 0
    while True:
        try:
            spin()
        except BaseException:
            swallowed += 1
            if swallowed >= times:
                raise


def assert_disarmed(handler) -> None:
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is handler


# the timer ------------------------------------------------------------------------


def test_a_loop_is_interrupted_at_its_deadline_and_the_timer_put_back():
    before = signal.getsignal(signal.SIGALRM)
    start = time.monotonic()
    with pytest.raises(DidNotFinish) as stopped, limit(0.2):
        spin()
    assert 0.2 <= time.monotonic() - start < 5
    assert stopped.value.message == "did not finish in 0.2 s"
    assert stopped.value.signature == SIGNATURE == "did not finish in N s"
    assert "in spin (test_deadline.py:" in stopped.value.actual
    assert_disarmed(before)


def test_an_interrupt_the_engine_swallows_comes_again():
    before = signal.getsignal(signal.SIGALRM)
    start = time.monotonic()
    with pytest.raises(DidNotFinish), limit(0.1):
        swallowing(3)
    assert time.monotonic() - start < 10  # the first, then one every REPEAT seconds
    assert_disarmed(before)


def test_a_block_that_finishes_in_time_leaves_nothing_behind():
    before = signal.getsignal(signal.SIGALRM)
    with limit(0.05) as timer:
        pass
    time.sleep(0.1)  # nothing fires later
    assert not timer.fired
    assert_disarmed(before)


def test_time_spent_importing_is_the_harness_s_and_the_case_gets_its_deadline_again(tmp_path, monkeypatch):
    import importlib

    (tmp_path / "slow_to_import.py").write_text("import time\n\ntime.sleep(0.5)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "slow_to_import", raising=False)
    with limit(0.2) as timer:  # torch's import, the first time a case needs it, is such a one
        importlib.import_module("slow_to_import")
        time.sleep(0.1)
    assert not timer.fired
    monkeypatch.delitem(sys.modules, "slow_to_import")
    with pytest.raises(DidNotFinish), limit(0.2):
        importlib.import_module("slow_to_import")
        spin()


def test_no_deadline_where_none_is_asked_for_or_none_can_be_set():
    with limit(None) as off, limit(0) as zero:
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert not off.armed and not zero.armed
    seen = []

    def in_a_thread() -> None:  # signals belong to the main thread: quietly no limit there
        with limit(0.01) as timer:
            time.sleep(0.05)
        seen.append((deadline.available(), timer.armed, timer.fired))

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join()
    assert seen == [(False, False, False)]


def test_a_timer_already_running_is_left_alone():
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with limit(0.05) as timer:
            time.sleep(0.1)  # past our deadline: none was set
        assert not timer.armed
        time.sleep(0.4)
        assert fired == [signal.SIGALRM]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# the runner -----------------------------------------------------------------------


@pytest.fixture
def looping(tmp_path, monkeypatch):
    (tmp_path / "looping_adapter.py").write_text(LOOPING)
    monkeypatch.syspath_prepend(str(tmp_path))
    from mmharness.targets.specs import resolve

    return resolve("looping_adapter:Looping")


def test_a_case_that_hangs_is_a_divergence_found_shrunk_as_far_as_the_budget_allows(looping, monkeypatch):
    monkeypatch.setattr(runner, "HUNG_SECONDS", 2.0)  # 10 runs of 0.2 s
    check = all_checks()[CHECK]
    start = time.monotonic()
    result = runner.run_check(check, looping, deadline=0.2, max_examples=50)
    assert time.monotonic() - start < 30
    assert result.status == DIVERGENCE
    assert result.deadline == 0.2
    (finding,) = [f for f in result.findings if f.signature == SIGNATURE]
    assert finding.failure.message == "did not finish in 0.2 s"
    assert not finding.shrunk and "shrinking stopped after 10 runs hit the 0.2 s deadline" in finding.unshrunk
    case, _ = finding.example
    assert any(len(request.items) == 2 for request in case.requests)
    replayed = runner.replay(check, looping, finding.example, deadline=0.2)
    assert (replayed.status, replayed.deadline) == (DIVERGENCE, 0.2)
    assert replayed.findings[0].signature == SIGNATURE


def test_the_deadline_comes_from_the_argument_the_environment_or_the_profile(monkeypatch):
    monkeypatch.delenv(runner.DEADLINE_ENV, raising=False)
    assert runner.deadline_for("ci", "cpu") == 10.0
    assert runner.deadline_for("ci", "cuda") == runner.CUDA_DEADLINE
    assert runner.deadline_for("ci", "cpu", 0) is None
    monkeypatch.setenv(runner.DEADLINE_ENV, "2.5")
    assert runner.deadline_for("deep", "cuda") == 2.5
    assert runner.deadline_for("deep", "cpu", 1) == 1
    monkeypatch.setenv(runner.DEADLINE_ENV, "soon")
    with pytest.raises(ValueError, match="MMHARNESS_DEADLINE must be a number of seconds"):
        runner.deadline_for()


def test_an_engine_a_target_finds_stuck_is_a_divergence_named_so(looping, monkeypatch):
    def stuck(case, encoder, *, cache=None, path="batched"):
        raise NoProgress("the scheduler scheduled no token in step 3", signature="no token scheduled")

    monkeypatch.setattr(looping, "chunked_prefill_embedding", stuck)
    result = runner.run_check(all_checks()[CHECK], looping, max_examples=5)
    assert result.status == DIVERGENCE
    (stuck,) = [f for f in result.findings if f.kind == DIVERGENCE]  # on a hash collision: the hazard
    assert stuck.signature == "no progress: no token scheduled"
    assert stuck.failure.message == "no progress: the scheduler scheduled no token in step 3"


# the command ----------------------------------------------------------------------


def mmharness(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", "import sys; from mmharness.cli import main; sys.exit(main())", *args]
    env = {k: v for k, v in os.environ.items() if k not in ("MMHARNESS_DEADLINE", "MMHARNESS_FINDINGS")}
    env["PYTHONPATH"] = str(cwd)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_check_gives_the_deadline_verdict_saves_the_case_and_replay_gives_it_again(tmp_path):
    (tmp_path / "looping_adapter.py").write_text(LOOPING)
    spec, findings = "looping_adapter:Looping", tmp_path / "findings"
    # A run that hangs fails here by mmharness()'s subprocess timeout; no wall-clock bound of its own,
    # which a loaded machine would break. --first-failure: the case as found, since shrinking a looping
    # case spends runner.HUNG_SECONDS (30 s) of deadlines, a bound the in-process test above shows.
    run = mmharness(
        tmp_path,
        "check",
        "--target",
        spec,
        "--checks",
        CHECK,
        "--deadline",
        "1",
        "--findings",
        str(findings),
        "--first-failure",
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"DIVERGENCE     {CHECK} (R3)" in run.stdout
    assert "did not finish in 1 s" in run.stdout and "signature: did not finish in N s" in run.stdout
    notes = {path: json.loads(path.read_text())["note"] for path in findings.glob("*.json")}
    (saved,) = [path for path, note in notes.items() if note == "divergence: did not finish in 1 s"]
    assert f"reproduce with: mmharness replay {saved} --target {spec} --deadline 1" in run.stdout

    replayed = mmharness(tmp_path, "replay", str(saved), "--deadline", "1")
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert f"DIVERGENCE     {CHECK} (R3)  after 1 examples: did not finish in 1 s" in replayed.stdout
    assert "signature: did not finish in N s" in replayed.stdout


def test_a_matrix_gives_its_targets_the_deadline(looping, monkeypatch):
    """``matrix --deadline`` reaches every target's checks (a parameter, as for check and replay)."""
    from mmharness.matrix import run_matrix

    monkeypatch.setattr(runner, "HUNG_SECONDS", 2.0)
    start = time.monotonic()
    matrix = run_matrix(["looping_adapter:Looping"], [all_checks()[CHECK]], max_examples=20, deadline=0.2)
    assert time.monotonic() - start < 60
    (cell,) = matrix.cells.values()
    assert SIGNATURE in {seen.signature for seen in cell.findings}


def test_deadline_is_refused_unless_a_number_of_seconds(tmp_path):
    run = mmharness(tmp_path, "check", "--deadline", "-1")
    assert run.returncode == 2 and "--deadline: must be 0 (no limit) or more seconds" in run.stderr


def test_a_stall_on_a_batch_with_a_hash_collision_is_the_collision_hazard():
    """Equal hashes promise equal content: breaking that promise earns a hazard at most, a stall included."""
    from mmharness.checks.common import collisions_as_hazards
    from mmharness.checks.outcome import HAZARD, Hazard
    from mmharness.model import Case, Item, Request

    a, b = Item(hash=7, spans=((0, 1),)), Item(hash=7, spans=((2, 4),))
    colliding = Case(requests=(Request(seq_len=5, prefix_len=0, extend_len=5, items=(a, b)),))
    with pytest.raises(Hazard) as hazard, collisions_as_hazards(colliding):
        raise NoProgress("the scheduler scheduled no token in step 2", signature="no token scheduled")
    assert hazard.value.kind == HAZARD and "no progress" in hazard.value.message
    plain = Case(requests=(Request(seq_len=5, prefix_len=0, extend_len=5, items=(a,)),))
    with pytest.raises(NoProgress), collisions_as_hazards(plain):
        raise NoProgress("stuck", signature="stuck")


def test_the_deadline_never_raises_inside_weakref_callbacks():
    """A ``WeakKeyDictionary``'s callback runs as a key dies, anywhere: an exception there is only
    printed ("Exception ignored in"), so the deadline fires a moment later instead."""
    import sys

    from mmharness.deadline import HERE, shelter

    namespace: dict = {"__name__": "weakref", "sys": sys}
    exec("def remove(k):\n    return sys._getframe()\n", namespace)
    assert shelter(namespace["remove"](None)) == HERE
    assert shelter(sys._getframe()) is None
