"""``mmharness bench``: every figure is measured, and each speed comes with its baseline from the same run."""

from __future__ import annotations

from pathlib import Path

import pytest
from mmharness import bench
from mmharness.cli import main


@pytest.fixture(autouse=True)
def _cache_env(harness_cache, monkeypatch):
    monkeypatch.setenv("MMHARNESS_CACHE", str(harness_cache))


@pytest.mark.network
def test_check_speeds_stand_beside_the_hand_written_property_on_a_release():
    figures = bench.check_speeds("sglang==0.5.23", examples=5)  # what is figured, not how fast
    baseline, *checks = figures
    assert baseline.name.startswith("hand-written") and baseline.value > 0
    assert {f.name for f in checks} == {
        f"{check} on {where}" for check in bench.CHECKS for where in ("reference", "sglang==0.5.23")
    }
    for figure in checks:
        assert figure.baseline == "hand-written"
        assert figure.ratio == pytest.approx(figure.value / baseline.value)
    swept = next(f for f in checks if f.name == "chunk.matches_reference on sglang==0.5.23")
    examples_per_s = float(swept.note.split()[0])
    assert swept.value > examples_per_s, "a check that sweeps windows checks more cases than examples"


def test_a_figure_prints_its_ratio_and_its_baseline():
    figure = bench.Figure("check x, 2 workers", 7.5, "s", "1 worker", 0.6, "note")
    assert bench.line(figure).split() == [
        "check",
        "x,",
        "2",
        "workers",
        "7.50",
        "s",
        "(0.60x",
        "1",
        "worker)",
        "[note]",
    ]


@pytest.fixture
def offline(monkeypatch):
    """Any release download fails, as it does without a network (cached or not: every load asks ``fetch``)."""
    from mmharness.targets import releases
    from mmharness.targets.base import TargetError

    def fetch(package, version, members, *, example):
        raise TargetError(f"{package}=={version}: cannot download (offline, for this test)")

    monkeypatch.setattr(releases, "fetch", fetch)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--fuzz-seconds", "0"], "--fuzz-seconds must be in [1, 2147483647], got 0"),
        (["--fuzz-seconds", "-1"], "--fuzz-seconds must be in [1, 2147483647], got -1"),
        (["--fuzz-seconds", "2147483648"], "--fuzz-seconds must be in [1, 2147483647], got 2147483648"),
        (["--examples", "0"], "--examples must be in [1, 1000000], got 0"),
        (["--json", "/proc/x"], "--json /proc/x: cannot write there"),
        (["--target", "nonsense"], "unknown target 'nonsense'"),
        (["-n", "none"], "--workers must be a number or auto"),
    ],
)
def test_bad_bench_options_are_usage_errors_before_anything_is_downloaded(capsys, offline, argv, words):
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1
    assert "cannot download" not in err and "--max-examples" not in err


def test_good_bench_options_reach_the_download(capsys, offline):
    """The other side of the test above: offline, the default release is what fails (and nothing ran)."""
    assert main(["bench", "--no-atlas", "--fuzz-seconds", "1"]) == 2
    captured = capsys.readouterr()
    assert "sglang==0.5.23: cannot download (offline, for this test)" in captured.err
    assert captured.out == ""


def test_an_engine_target_gets_the_case_parser_and_its_own_engine_fuzzers_only():
    from mmharness.engines.sglang import FUZZ_TARGETS as SGLANG
    from mmharness.engines.sglang.adapter import SGLangTarget
    from mmharness.engines.vllm import FUZZ_TARGETS as VLLM
    from mmharness.engines.vllm.adapter import VLLMTarget
    from mmharness.targets.reference import ReferenceTarget

    assert bench.engine_of(object.__new__(SGLangTarget)) == "mmharness.engines.sglang"
    assert bench.engine_of(object.__new__(VLLMTarget)) == "mmharness.engines.vllm"
    assert bench.engine_of(ReferenceTarget()) is None
    measured, skipped = bench.fuzz_plan("mmharness.engines.sglang")
    assert measured == ["case-parser", *SGLANG] and set(skipped) == set(VLLM)
    assert all(why.startswith("skipped: a vllm fuzz target") for why in skipped.values())
    measured, skipped = bench.fuzz_plan("mmharness.engines.vllm")
    assert measured == ["case-parser", *VLLM] and set(skipped) == set(SGLANG)
    measured, skipped = bench.fuzz_plan(None)
    assert measured == ["case-parser"] and set(skipped) == {*SGLANG, *VLLM}


def test_fuzz_rates_run_each_fuzzer_in_a_scratch_dir_it_removes(monkeypatch):
    """The commands ``fuzz_rates`` runs for an SGLang release (atheris faked: nothing runs for real)."""
    import importlib.util
    import subprocess

    from mmharness.engines.sglang import FUZZ_TARGETS as SGLANG

    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "atheris" else found(name, *a)
    )
    runs = []

    def fake_run(command, *, env, cwd, **kwargs):
        runs.append((command, env, cwd))
        assert env["TMPDIR"] == env["MMHARNESS_FINDINGS"] == cwd, "whatever the run leaves stays in one place"
        return subprocess.CompletedProcess(command, 0, "", "stat::average_exec_per_sec: 1234\n")

    monkeypatch.setattr(bench.subprocess, "run", fake_run)
    figures = bench.fuzz_rates("sglang==0.5.23", 3, engine="mmharness.engines.sglang")
    assert [command[4] for command, _, _ in runs] == ["case-parser", *SGLANG]
    for command, _, cwd in runs:
        assert ("--target" in command) == (command[4] != "case-parser")
        assert "-max_total_time=3" in command
        assert not Path(cwd).exists(), "the bench's scratch dir is removed"
    measured = {f.name: f for f in figures if not f.note}
    assert set(measured) == {"fuzz case-parser", *(f"fuzz {name} on sglang==0.5.23" for name in SGLANG)}
    assert {f.value for f in measured.values()} == {1234}
    (skipped,) = (f for f in figures if f.note)
    assert skipped.name == "fuzz vllm-mm-kwargs" and skipped.note.startswith("skipped: a vllm fuzz target")


def test_the_atlas_is_timed_after_each_release_was_loaded_once(monkeypatch):
    """A release's first load compiles its engine files into the cache, a one-time cost that is not the
    atlas's: every cached release is loaded before the matrix is timed, and only the matrix is."""
    import subprocess
    import sys

    from mmharness.targets import releases

    ran = []
    monkeypatch.setattr(releases, "cached", lambda engine: ["sglang==0.5.22", "sglang==0.5.23"])
    monkeypatch.setattr(bench, "_seconds", lambda command: ran.append(command) or 7.0)
    (figure,) = bench.atlas_time("sglang==0.5.23", 2)
    assert figure.value == 7.0 and figure.name == "atlas over 2 cached releases, 2 workers"
    warm, timed = ran
    assert warm[1:] == ["-c", bench._LOAD_EACH, "sglang==0.5.22", "sglang==0.5.23"]
    assert timed[3:] == ["matrix", "-n", "2", "--target", "sglang==0.5.22", "--target", "sglang==0.5.23"]
    loaded = subprocess.run(
        [sys.executable, "-c", bench._LOAD_EACH, "reference", "no/such/fork"], check=False
    )
    assert loaded.returncode == 0, "a release that does not load is the matrix's to report"
