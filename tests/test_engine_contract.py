"""The engine contract: an engine is an ``Engine`` registered in the ``mmharness.engines`` entry-point
group, and nothing else names it.

The shipped engines are found through the group (declared in pyproject.toml), or read from their
packages when the metadata lacks them; a toy third engine (``tests/toy_engine``), registered by
patching the entry points alone, gets its spec resolved and run by ``mmharness check``, listed by
``mmharness targets``, and its fuzz target listed and described by ``mmharness fuzz``; in a process
patched the same way (``PATCHED``), ``matrix`` and the pytest plugin run it too. The toy and both
shipped engines pass the contract kit (``mmharness.testing``), and the kit catches each way of breaking
the contract. Nothing here assumes no other engine is installed.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from mmharness import testing
from mmharness.checks.outcome import COULD_NOT_TEST, DIVERGENCE, HAZARD
from mmharness.cli import main
from mmharness.fuzz import registry
from mmharness.runner import PASSED
from mmharness.targets import specs
from mmharness.targets.base import PREFILL
from mmharness.targets.engine import ENGINE_GROUP, Engine
from toy_engine.adapter import ToyTarget

SHIPPED = {
    "lmdeploy": "mmharness.engines.lmdeploy",
    "sglang": "mmharness.engines.sglang",
    "vllm": "mmharness.engines.vllm",
}
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
    """``importlib.metadata.entry_points`` with ``extra`` in the engine group (the installed engines'
    entry points too, unless ``shipped`` is false; the toy's only where ``extra`` has it, even where it
    is installed)."""
    real = importlib.metadata.entry_points

    def entry_points(**params):
        if params.get("group") != ENGINE_GROUP:
            return real(**params)
        installed = [entry for entry in real(**params) if entry.name != "toy"] if shipped else []
        return [*installed, *extra]

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
    names = [engine.name for engine in found]
    assert [name for name in names if name in SHIPPED] == list(SHIPPED)  # an installed third engine may join
    assert names == sorted(names)
    assert all(isinstance(engine, Engine) for engine in found)
    assert set(SHIPPED.values()) <= set(specs.engine_packages())
    for engine in (engine for engine in found if engine.name in SHIPPED):
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


def test_without_the_entry_point_the_toy_is_unknown(capsys, monkeypatch):
    _register(monkeypatch)
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
    names = [engine.name for engine in specs.engines()]
    assert set(SHIPPED) <= set(names) and not {"gone", "notone"} & set(names)
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


# The contract kit ---------------------------------------------------------------------------------


def test_the_toy_engine_passes_the_contract_kit(toy):
    import toy_engine

    result = testing.check_engine(toy_engine.ENGINE, "toy", max_examples=10)
    assert result.check.id == "chunk.matches_reference" and result.status == PASSED


@pytest.mark.network
@pytest.mark.parametrize(
    ("name", "spec"),
    [("lmdeploy", "lmdeploy==0.18.0"), ("sglang", "sglang==0.5.23"), ("vllm", "vllm==0.33.0")],
)
def test_the_shipped_engines_pass_the_contract_kit(name, spec, harness_cache, monkeypatch):
    monkeypatch.setenv("MMHARNESS_CACHE", str(harness_cache))
    engine = next(engine for engine in specs.engines() if engine.name == name)
    result = testing.check_engine(engine, spec, max_examples=3)
    assert result.status in (PASSED, DIVERGENCE, HAZARD, COULD_NOT_TEST)


def _toy_target(cls=None):
    """The toy engine's target, or one of ``cls`` (a ``ToyTarget`` subclass) over the same load."""
    import toy_engine

    target = toy_engine._resolve("toy")
    return target if cls is None else cls(target.engine, "toy")


class _WrongHook(ToyTarget):
    def unreceived(self):  # generic code passes the case
        return None


class _Unexplained(ToyTarget):
    def __init__(self, engine, name):
        super().__init__(engine, name)
        del self.missing[PREFILL]


class _NoMethod(ToyTarget):
    def __init__(self, engine, name):
        super().__init__(engine, name)
        self.capabilities |= {PREFILL}
        del self.missing[PREFILL]


class _Undescribed(ToyTarget):
    def describe(self):
        return {k: v for k, v in super().describe().items() if k != "digests"}


class _UnknownReason(ToyTarget):
    def branch_reasons(self):
        return {"GPU only": r"\bmy_event\b"}


@pytest.mark.parametrize(
    ("cls", "said"),
    [
        (_WrongHook, r"unreceived: not callable as unreceived\(case"),
        (_Unexplained, "lacks prefill without saying why"),
        (_NoMethod, r"chunked_prefill_embedding \(for prefill\)"),
        (_Undescribed, r"describe\(\) lacks digests"),
        (_UnknownReason, r"branch_reasons\(\): branch reasons \['GPU only'\] unknown"),
    ],
)
def test_the_kit_names_what_a_target_breaks(cls, said):
    testing.assert_target(_toy_target())
    with pytest.raises(testing.ContractError, match=said):
        testing.assert_target(_toy_target(cls))


def test_the_kit_names_an_unregistered_engine(monkeypatch):
    import toy_engine

    _register(monkeypatch)

    with pytest.raises(testing.ContractError, match="'toy' is not registered in the 'mmharness\\.engines'"):
        testing.assert_registered(toy_engine.ENGINE)


def test_the_kit_names_another_engine_of_the_name_or_a_spec_of_another_engine(toy):
    import toy_engine

    stray = Engine("toy", "toy_engine", toy_engine.ENGINE.spec_forms)
    with pytest.raises(testing.ContractError, match="registered as 'toy' is another Engine"):
        testing.assert_registered(stray)
    said = r"'reference' is written in none of the spec forms of 'toy' \(toy\)"
    with pytest.raises(testing.ContractError, match=said):
        testing.assert_resolves(toy_engine.ENGINE, "reference")


def test_the_kit_names_a_fuzz_target_without_a_default_target_of_its_engine(toy, monkeypatch):
    import toy_engine
    import toy_engine.fuzz

    monkeypatch.setattr(toy_engine.fuzz, "DEFAULT_TARGET", "reference")
    with pytest.raises(testing.ContractError, match=r"DEFAULT_TARGET \('reference'\) is no spec of 'toy'"):
        testing.assert_fuzz_targets(toy_engine.ENGINE)
    clash = Engine("toy", "toy_engine", toy_engine.ENGINE.spec_forms, {"check:x": "toy_engine.fuzz"})
    with pytest.raises(testing.ContractError, match="a reserved name"):
        testing.assert_fuzz_targets(clash)


def test_the_kit_refuses_a_check_that_ends_in_a_skip():
    with pytest.raises(testing.ContractError, match=r"prefill\.matches_reference on toy ended skipped"):
        testing.assert_check_ends_in_verdict(_toy_target(), check_id="prefill.matches_reference")
