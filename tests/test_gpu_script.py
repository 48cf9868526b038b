"""``scripts/gpu_check.py``: every check on both devices; with no GPU visible every CUDA cell says so."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from mmharness.checks import all_checks
from mmharness.runner import cuda_available

SCRIPT = Path(__file__).parent.parent / "scripts" / "gpu_check.py"


def _script():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.network
def test_every_check_runs_on_both_devices_against_each_target(harness_cache, tmp_path, monkeypatch, capsys):
    from mmharness.targets.specs import resolve

    monkeypatch.setenv("MMHARNESS_CACHE", str(harness_cache))
    resolve("sglang==0.5.23")  # unpacked beforehand, as the script expects
    report = tmp_path / "gpu.json"
    _script().main(
        [str(harness_cache), "--examples", "3", "--target", "sglang==0.5.23", "--json", str(report)]
    )
    rows = json.loads(report.read_text())["results"]
    assert len(rows) == 2 * 2 * len(all_checks())
    cuda = [row for row in rows if row["device"] == "cuda"]
    if not cuda_available():

        def cell(row: dict) -> tuple[str, str]:
            return row["target"], row["check"]

        ran_on_cpu = {cell(row) for row in rows if row["device"] == "cpu" and row["status"] != "skipped"}
        assert all(row["status"] == "skipped" for row in cuda)
        assert all(row["reason"] == "no CUDA device" for row in cuda if cell(row) in ran_on_cpu)
        assert "skipped: no CUDA device" in capsys.readouterr().out
    assert all(row["status"] != "divergence" for row in rows if row["target"] == "reference")


def test_a_folder_without_releases_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MMHARNESS_CACHE", str(tmp_path))  # restored after: the script sets it
    assert _script().main([str(tmp_path)]) == 2
    assert "no sglang release unpacked" in capsys.readouterr().err
