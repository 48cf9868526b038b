"""``mmharness bench``: every figure is measured, and each speed comes with its baseline from the same run."""

from __future__ import annotations

import pytest
from mmharness import bench
from mmharness.cli import main


@pytest.fixture(autouse=True)
def _cache_env(harness_cache, monkeypatch):
    monkeypatch.setenv("MMHARNESS_CACHE", str(harness_cache))


@pytest.mark.network
def test_check_speeds_stand_beside_the_hand_written_property_on_a_release():
    figures = bench.check_speeds("sglang==0.5.23", examples=20)
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


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--fuzz-seconds", "0"], "--fuzz-seconds must be >= 1"),
        (["--target", "nonsense"], "unknown target 'nonsense'"),
        (["-n", "none"], "--workers must be a number or auto"),
    ],
)
def test_bad_bench_options_are_usage_errors_before_anything_is_measured(capsys, argv, words):
    assert main(["bench", *argv]) == 2
    assert words in capsys.readouterr().err
