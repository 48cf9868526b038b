"""``mmharness fuzz``: options checked first, and a run's scratch files gone however it ends.

libFuzzer ends its process itself (``exit`` when done, ``_Exit`` on a finding or a
signal), so the CLI fuzzes in a child process (``mmharness.fuzz.supervised``)
and the parent removes the scratch directory (new inputs, an engine parser's
dictionary, temporary files) and answers a SIGTERM 143, a SIGINT 130. Each test
gives the run a private ``TMPDIR``, so "nothing left" is exact.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from mmharness.commands.fuzz import _check_libfuzzer_args
from mmharness.commands.options import USAGE_ERROR
from mmharness.fuzz import supervised

ROOT = Path(__file__).parent.parent


def private_tmp(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    return tmp, {**os.environ, "TMPDIR": str(tmp)}


def mmharness(*args: str) -> list[str]:
    return [sys.executable, "-m", "mmharness.cli", *args]


def wait_for(predicate, process: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"the run never got going (exit {process.wait()})")
        time.sleep(0.1)


# libFuzzer's integer flags -------------------------------------------------------------------


@pytest.mark.parametrize(
    "arg",
    [
        "-max_total_time=-3",
        "-runs=-1",
        "-atheris_runs=-1",
        "-timeout=-5",
        "-max_len=-1",
        "-seed=-1",
        "-jobs=-2",
        "-rss_limit_mb=-1",
        "-max_total_time=2147483648",  # libFuzzer reads it as an int: it would wrap to a negative one
    ],
)
def test_a_negative_or_too_large_libfuzzer_integer_is_a_usage_error(tmp_path, arg):
    """Refused before atheris is even needed (a process of its own: accepted, the run would be unbounded)."""
    command = mmharness("fuzz", "case-parser", "--findings", str(tmp_path), "--", arg)
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    flag, _, value = arg.partition("=")
    assert done.returncode == USAGE_ERROR
    assert done.stderr == f"mmharness: error: {arg}: {flag} must be in [0, 2147483647], got {value}\n"


def test_libfuzzer_integers_in_range_and_other_arguments_pass():
    _check_libfuzzer_args(["-max_total_time=0", "-runs=10", "-seed=2147483647", "-dict=x.dict", "corpus"])


# The supervisor, without atheris -------------------------------------------------------------


def _kill_self(scratch: Path) -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)


def _raise(error: BaseException):
    def work(scratch: Path) -> None:
        raise error

    return work


@pytest.mark.parametrize(
    ("ending", "code"),
    [
        (lambda scratch: 3, 3),
        (lambda scratch: os._exit(77), 77),  # how libFuzzer ends a run with a finding
        (_raise(SystemExit(-1)), 255),  # how atheris ends a run after an uncaught exception
        (_raise(ValueError("a bug in the harness")), 1),
        (_kill_self, 143),  # killed by SIGTERM: 128 + 15
    ],
    ids=["returns", "_exit", "SystemExit", "raises", "killed"],
)
def test_the_scratch_directory_goes_however_the_child_ends(tmp_path, ending, code):
    seen = tmp_path / "seen"

    def work(scratch: Path):
        (scratch / "corpus").mkdir()
        (scratch / "words.dict").write_text('"x"\n')
        handle, _ = tempfile.mkstemp()  # temporary files land in the scratch directory too
        os.close(handle)
        seen.write_text(f"{scratch}\n{tempfile.gettempdir()}")
        return ending(scratch)

    assert supervised("mmharness-test-", work) == code
    scratch, tempdir = seen.read_text().splitlines()
    assert tempdir == scratch
    assert not Path(scratch).exists()


SLEEPER = """
import sys, time
from mmharness.fuzz import supervised

def work(scratch):
    (scratch / "corpus").mkdir()
    print("started", flush=True)
    time.sleep(120)

sys.exit(supervised("mmharness-test-", work))
"""


def sleeper(tmp_path: Path, *, sigint: signal.Handlers) -> tuple[Path, subprocess.Popen]:
    """SLEEPER started with SIGINT as given (a shell's background job starts with it ignored, so
    the tests set it whichever way pytest itself was started); once its child is working."""
    tmp, env = private_tmp(tmp_path)
    script = tmp_path / "sleeper.py"
    script.write_text(textwrap.dedent(SLEEPER))
    process = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
    )
    assert process.stdout.readline() == "started\n"
    assert [p.name[:15] for p in tmp.iterdir()] == ["mmharness-test-"]
    return tmp, process


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_the_parent_ends_the_child_and_answers_its_exit_code(tmp_path, signum, code):
    tmp, process = sleeper(tmp_path, sigint=signal.SIG_DFL)
    process.send_signal(signum)
    assert process.wait(timeout=60) == code
    assert list(tmp.iterdir()) == []


def test_a_signal_ignored_from_the_start_stays_ignored(tmp_path):
    """Forwarded to a child that ignores it too, SIGINT would leave the parent waiting for ever."""
    tmp, process = sleeper(tmp_path, sigint=signal.SIG_IGN)
    process.send_signal(signal.SIGINT)
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(timeout=1)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 143
    assert list(tmp.iterdir()) == []


# Real runs (atheris) -------------------------------------------------------------------------


@pytest.mark.fuzz
def test_sigterm_ends_a_fuzz_run_with_143_and_nothing_left(tmp_path):
    tmp, env = private_tmp(tmp_path)
    log = tmp_path / "stderr.txt"
    command = mmharness("fuzz", "case-parser", "--findings", str(tmp_path / "findings"), "--")
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [*command, "-max_total_time=600"], stdout=subprocess.DEVNULL, stderr=stderr, env=env
        )
        try:
            wait_for(lambda: "INITED" in log.read_text(), process)  # libFuzzer is fuzzing
            (scratch,) = tmp.iterdir()
            assert scratch.name.startswith("mmharness-case-parser-")
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=60) == 143
        finally:
            process.kill()
    assert list(tmp.iterdir()) == [], "no scratch directory or dictionary is left"


@pytest.mark.fuzz
@pytest.mark.parametrize("bound", ["-runs=50", "-atheris_runs=50"])  # libFuzzer's exit(), atheris's sys.exit
def test_a_finished_fuzz_run_leaves_nothing_in_tmp(tmp_path, bound):
    tmp, env = private_tmp(tmp_path)
    command = mmharness("fuzz", "case-parser", "--findings", str(tmp_path / "findings"))
    done = subprocess.run([*command, "--", bound], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert list(tmp.iterdir()) == []
    assert not (tmp_path / "findings").exists(), "a run that found nothing leaves no findings directory"


@pytest.mark.fuzz
def test_an_engine_fuzz_run_with_a_finding_leaves_no_dictionary_in_tmp(tmp_path):
    """The fake SGLang release of ``test_sglang_fuzz`` fails on a seed: a finding, exit 77 (libFuzzer's)."""
    from test_sglang_fuzz import fake_release

    release = fake_release(tmp_path / "release")
    tmp, env = private_tmp(tmp_path)
    findings = tmp_path / "findings"
    command = mmharness("fuzz", "sglang-image-data", "--target", str(release), "--findings", str(findings))
    done = subprocess.run([*command, "--", "-runs=2000", "-seed=1"], capture_output=True, text=True, env=env)
    assert done.returncode == 77, done.stderr[-2000:]
    assert "Dictionary:" in done.stderr, "the release's dictionary was written and used"
    assert {p.name.split("-")[0] for p in findings.iterdir()} == {"crash", "sglang"}, "input and record"
    assert list(tmp.iterdir()) == [], "no scratch directory or dictionary is left"
