"""The engine contract: an engine is an ``Engine`` registered in the ``mmharness.engines`` entry-point
group, and nothing else names it.

The shipped engines are found through the group (declared in pyproject.toml), or read from their
packages when the metadata lacks them; a toy third engine (``tests/toy_engine``), registered by
patching the entry points alone, gets its spec resolved and run by ``mmharness check``, listed by
``mmharness targets``, and its fuzz target listed and described by ``mmharness fuzz``; in a process
patched the same way (``PATCHED``), ``matrix`` and the pytest plugin run it too.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from mmharness.cli import main
from mmharness.fuzz import registry
from mmharness.targets import specs
from mmharness.targets.engine import ENGINE_GROUP, Engine

SHIPPED = {"sglang": "mmharness.engines.sglang", "vllm": "mmharness.engines.vllm"}
TESTS = Path(__file__).resolve().parent

PATCHED = f"""
import importlib.metadata, sys
real = importlib.metadata.entry_points
def entry_points(**params):
    found = real(**params)
    if params.get("group") != {ENGINE_GROUP!r}:
        return found
    return [*found, importlib.metadata.EntryPoint("toy", "toy_engine:ENGINE", {ENGINE_GROUP!r})]
importlib.metadata.entry_points = entry_points
"""
"""Registers the toy engine in a fresh process, as installing a package with the entry point would."""


def _forget() -> None:
    """The registry reads the entry points once; a test that changes them asks again."""
    specs.engines.cache_clear()
    specs.forms.cache_clear()


def _register(monkeypatch, *extra: EntryPoint, shipped: bool = True) -> None:
    """``importlib.metadata.entry_points`` with ``extra`` in the engine group (the shipped engines'
    entry points too, unless ``shipped`` is false)."""
    real = importlib.metadata.entry_points

    def entry_points(**params):
        if params.get("group") != ENGINE_GROUP:
            return real(**params)
        return [*(real(**params) if shipped else ()), *extra]

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    _forget()


@pytest.fixture(autouse=True)
def _fresh_registry():
    _forget()
    yield
    _forget()


@pytest.fixture
def toy(monkeypatch):
    _register(monkeypatch, EntryPoint("toy", "toy_engine:ENGINE", ENGINE_GROUP))


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_shipped_engines_are_registered_through_the_entry_point_group():
    declared = {e.name: e.value for e in importlib.metadata.entry_points(group=ENGINE_GROUP)}
    assert {name: f"{package}:ENGINE" for name, package in SHIPPED.items()}.items() <= declared.items()
    found = specs.engines()
    assert [engine.name for engine in found] == list(SHIPPED)
    assert all(isinstance(engine, Engine) for engine in found)
    assert tuple(SHIPPED.values()) == specs.engine_packages()
    for engine in found:
        module = importlib.import_module(engine.package)
        assert module.ENGINE is engine
        assert engine.spec_forms == tuple(module.SPEC_FORMS)
        assert engine.fuzz_targets == module.FUZZ_TARGETS


def test_without_metadata_the_shipped_engine_packages_are_read(monkeypatch):
    _register(monkeypatch, shipped=False)
    assert [engine.package for engine in specs.engines()] == list(SHIPPED.values())


def test_the_toy_engine_spec_resolves_and_its_check_runs(toy, capsys, tmp_path):
    assert "toy" in [engine.name for engine in specs.engines()]
    assert "toy_engine" in specs.engine_packages()
    code, out, _ = run(capsys, "check", "--target", "toy", "--checks", "R1", "--max-examples", "10",
                       "--findings", str(tmp_path))  # fmt: skip
    assert code == 0
    assert "PASS           chunk.matches_reference (R1)" in out


def test_the_toy_engine_form_is_listed(toy, capsys):
    code, out, _ = run(capsys, "targets")
    assert code == 0
    assert any(line.split()[:2] == ["toy", "the"] for line in out.splitlines())
    # the shipped engines' forms are still there, in their order
    assert out.index("sglang==X") < out.index("vllm==X")


def test_the_toy_fuzz_target_is_listed_and_described(toy, capsys):
    code, out, _ = run(capsys, "fuzz", "--list")
    assert code == 0
    rows = [line.split() for line in out.splitlines()]
    assert ["toy-parser", "toy"] in rows
    assert rows[0] == ["case-parser", "-"] and ["vllm-mm-kwargs", "vllm"] in rows
    assert registry.by_engine()["toy_engine"] == {"toy-parser": "toy_engine.fuzz"}
    code, out, _ = run(capsys, "fuzz", "toy-parser", "--describe")
    assert code == 0
    assert "fuzz target: toy-parser" in out and "target: toy" in out


def test_without_the_entry_point_the_toy_is_unknown(capsys):
    code, out, _ = run(capsys, "fuzz", "--list")
    assert code == 0 and "toy-parser" not in out
    assert run(capsys, "check", "--target", "toy", "--checks", "R1")[0] == 2


def test_a_fuzz_list_or_a_parser_is_needed(capsys):
    code, _, err = run(capsys, "fuzz")
    assert code == 2 and "--list" in err


def test_a_broken_engine_entry_point_is_reported_and_left_out(monkeypatch, capsys):
    _register(
        monkeypatch,
        EntryPoint("gone", "toy_engine_missing:ENGINE", ENGINE_GROUP),
        EntryPoint("notone", "toy_engine:_resolve", ENGINE_GROUP),
    )
    assert [engine.name for engine in specs.engines()] == list(SHIPPED)
    err = capsys.readouterr().err
    assert "engine entry point 'gone': importing toy_engine_missing:ENGINE raised ModuleNotFoundError" in err
    assert "engine entry point 'notone': toy_engine:_resolve is a function, not an Engine" in err


def run_patched(main: str, *argv: str, cwd: Path) -> subprocess.CompletedProcess:
    """``main`` (a statement ending the process) run with the toy engine registered, in ``cwd``."""
    path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    command = [sys.executable, "-c", PATCHED + main, *argv]
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_matrix_runs_the_toy_engine(tmp_path):
    out = tmp_path / "matrix.json"
    cli = "from mmharness.cli import main; sys.exit(main())"
    argv = ("matrix", "--target", "toy", "--checks", "R1", "--max-examples", "10", "--json", str(out))
    done = run_patched(cli, *argv, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "toy" in done.stdout and "chunk.matches_reference" in done.stdout
    assert '"toy"' in out.read_text()


def test_the_pytest_plugin_runs_the_toy_engine(tmp_path):
    argv = ("-p", "no:cacheprovider", "--mm-target", "toy", "--mm-checks", "R1", "-v")
    done = run_patched("import pytest; sys.exit(pytest.main())", *argv, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "chunk.matches_reference[cpu] PASSED" in done.stdout
