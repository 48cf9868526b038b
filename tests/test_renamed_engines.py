"""An engine shipped under another top-level name, found by its files' layout; ``--engine`` to say which.

A fork may ship as ``myfork/`` (SGLang's ``srt/...`` inside) or ``myvllm/`` (vLLM's ``v1/...``,
``multimodal/...``), importing itself as ``from myfork.srt... import``. The loader finds such a copy by
its layout and serves its imports of itself as the engine's own, so a renamed copy loads and answers
exactly as the original. Where a directory could be either engine, ``--engine`` (kept in
``$MMHARNESS_ENGINE`` for workers and replay lines) says which.

The offline tests use a toy layout; the ``network`` ones build renamed copies of the cached SGLang
0.5.23 and vLLM 0.33.0 at test time (no engine code is kept in the project).
"""

from __future__ import annotations

import importlib
import re
import shutil
from pathlib import Path

import pytest
from mmharness.checks import all_checks
from mmharness.checks.outcome import HAZARD
from mmharness.cli import main
from mmharness.targets import loader, specs
from mmharness.targets.base import TargetError
from mmharness.targets.specs import ENGINE_VARIABLE

CHECKS = all_checks()


@pytest.fixture(autouse=True)
def no_engine_chosen(monkeypatch):
    """Every test starts without ``$MMHARNESS_ENGINE`` and leaves none behind (``--engine`` sets it)."""
    monkeypatch.delenv(ENGINE_VARIABLE, raising=False)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exit:  # argparse's usage errors
        code = exit.code
    out, err = capsys.readouterr()
    return code, out, err


# A toy layout (offline) -------------------------------------------------------------------

TOY = loader.Layout(
    package="eng",
    marker="core",
    files={"eng.core.rules": "core/rules.py", "eng.core.helpers": "core/helpers.py"},
)


def toy_package(root: Path, name: str) -> Path:
    """A copy of the toy engine named ``name``: its rules import the helpers by the fork's own name,
    relatively, and a module the layout does not load by the engine's canonical name."""
    package = root / name
    (package / "core").mkdir(parents=True)
    (package / "version.py").write_text('__version__ = "1.2.3"\n')
    (package / "core" / "helpers.py").write_text("def double(x):\n    return 2 * x\n")
    (package / "core" / "rules.py").write_text(
        f"from {name}.core.helpers import double\n"
        f"import {name}.core.helpers as helpers\n"
        "from . import helpers as relative\n"
        "from eng.core.elsewhere import something\n"
        "def rule(x):\n"
        "    return double(x) + helpers.double(x) + relative.double(x)\n"
    )
    return package


def test_a_copy_under_any_name_is_found_by_its_layout(tmp_path):
    fork = toy_package(tmp_path / "site", "myeng")
    assert TOY.package_dir(fork) == fork  # the package itself
    assert TOY.package_dir(tmp_path / "site") == fork  # a directory holding it
    checkout = tmp_path / "checkout"
    toy_package(checkout / "python", "myeng")
    assert TOY.package_dir(checkout) == checkout / "python" / "myeng"  # a checkout's python/
    (tmp_path / "site" / "notes").mkdir()
    (tmp_path / "site" / "notes" / "core").mkdir()  # the marker without any of the files: not a copy
    assert TOY.package_dir(tmp_path / "site") == fork
    assert TOY.package_dir(tmp_path / "site" / "notes") is None


def test_the_engine_own_name_wins_and_two_other_copies_are_refused_by_name(tmp_path):
    site = tmp_path / "site"
    toy_package(site, "fork_a")
    toy_package(site, "fork_b")
    with pytest.raises(TargetError, match="2 copies of the eng package") as error:
        TOY.package_dir(site)
    assert str(site / "fork_a") in str(error.value) and str(site / "fork_b") in str(error.value)
    toy_package(site, "eng")
    assert TOY.package_dir(site) == site / "eng"


def test_a_renamed_copy_is_served_as_the_engine_it_is(tmp_path):
    toy_package(tmp_path / "site", "myeng")
    source = loader.locate(tmp_path / "site", TOY)
    assert source.package == "myeng" and source.release == "1.2.3"
    engine = loader.load(source, TOY)
    assert engine.errors == {}
    assert sorted(engine.modules) == ["eng.core.helpers", "eng.core.rules"]  # the engine's module names
    rules = engine.modules["eng.core.rules"]
    assert rules.rule(1) == 6  # the fork's own import, its dotted form and the relative one: one module
    assert rules.double is engine.modules["eng.core.helpers"].double
    assert engine.record.stubbed == {"eng.core.elsewhere.something"}  # the engine's own name: a stub
    # a lone file where the layout puts it names its package too; one lying elsewhere, none
    lone = loader.locate(tmp_path / "site" / "myeng" / "core" / "rules.py", TOY)
    assert lone.package == "myeng" and lone.alias(TOY) == "myeng"
    elsewhere = tmp_path / "rules.py"
    shutil.copy(tmp_path / "site" / "myeng" / "core" / "rules.py", elsewhere)
    assert loader.locate(elsewhere, TOY).package is None


def test_the_engine_variable_names_a_registered_engine(monkeypatch, tmp_path):
    monkeypatch.setenv(ENGINE_VARIABLE, "nosuch")
    names = ", ".join(engine.name for engine in specs.engines())
    with pytest.raises(TargetError, match=f"unknown engine 'nosuch'.*registered engines are {names}"):
        specs.resolve(str(tmp_path))
    assert specs.resolve("reference").name == "reference"  # only path specs ask which engine


def test_an_unknown_engine_option_is_a_usage_error_naming_the_engines(capsys, tmp_path):
    code, _, err = run(capsys, "targets", str(tmp_path), "--engine", "nosuch")
    assert code == 2
    names = ", ".join(engine.name for engine in specs.engines())
    assert f"--engine 'nosuch': unknown engine; registered engines are {names}" in err


def test_replay_lines_repeat_the_engine(monkeypatch):
    from mmharness import report

    assert "--engine" not in report.replay_command("f.json", "./tree")
    monkeypatch.setenv(ENGINE_VARIABLE, "some-engine")
    assert report.replay_command("f.json", "./tree").endswith("--target ./tree --engine some-engine")


# Renamed copies of real releases (network) ------------------------------------------------------

RELEASES = {"sglang": "0.5.23", "vllm": "0.33.0"}
RENAMED = {"sglang": "myfork", "vllm": "myvllm"}
VERDICT_CHECKS = {
    "sglang": ["chunk.matches_reference", "chunk.row_mismatch_accepted"],
    "vllm": ["prefill.matches_reference", "prefill.whole_items"],
}
"""A check each engine passes, and one where it shows a hazard (docs/atlas*.md)."""


def renamed(release_root: Path, engine: str, into: Path) -> Path:
    """``into`` holding the release's package as ``RENAMED[engine]``, every import of itself rewritten."""
    name = RENAMED[engine]
    shutil.copytree(release_root / engine, into / name)
    own = re.compile(rf"\b{engine}\b(?=[.\s])")  # `from sglang.srt...`, `import sglang.srt...`, `sglang.x`
    for path in (into / name).rglob("*.py"):
        path.write_text(own.sub(name, path.read_text()))
    rules = (into / name).rglob("*.py")
    assert not any(re.search(rf"^\s*(from|import) {engine}\b", p.read_text(), re.M) for p in rules)
    return into


@pytest.fixture(scope="module")
def copies(harness_cache, tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """Engine -> (the cached release's directory, a directory holding its renamed copy)."""
    found = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MMHARNESS_CACHE", str(harness_cache))
        for engine, version in RELEASES.items():
            root = Path(importlib.import_module(f"mmharness.engines.{engine}.adapter").fetch(version))
            found[engine] = (root, renamed(root, engine, tmp_path_factory.mktemp(f"renamed-{engine}")))
    return found


@pytest.fixture(scope="module")
def both(copies, tmp_path_factory) -> Path:
    """One directory holding the renamed SGLang and the renamed vLLM: either engine."""
    into = tmp_path_factory.mktemp("both")
    for engine, (_, copy) in copies.items():
        (into / RENAMED[engine]).symlink_to(copy / RENAMED[engine])
    return into


def _same_load(description: dict) -> dict:
    """What a load's description says regardless of where its files lie and what their bytes are."""
    kept = ("release", "loaded", "capabilities", "missing", "unloaded", "load_errors", "shims", "stubbed")
    return {
        **{key: description.get(key) for key in kept},
        "files": [Path(f).name for f in description["files"]],
        "modules": sorted(description["digests"]),  # by the engine's module paths, renamed or not
    }


@pytest.mark.network
@pytest.mark.parametrize("engine", RELEASES)
def test_a_renamed_release_loads_as_the_original(copies, engine):
    original_dir, copy = copies[engine]
    original, fork = specs.resolve(str(original_dir)), specs.resolve(str(copy))
    assert type(fork) is type(original)
    assert fork.capabilities == original.capabilities and fork.paths == original.paths
    assert _same_load(fork.describe()) == _same_load(original.describe())
    assert fork.describe()["package"] == f"{RENAMED[engine]} (loaded as {engine})"
    assert "package" not in original.describe()
    assert fork.engine.record.reached == []
    # the package dir itself, and a checkout's python/, find it too
    assert type(specs.resolve(str(copy / RENAMED[engine]))) is type(original)


@pytest.mark.network
def test_a_lone_rules_file_of_a_renamed_copy_loads_as_the_original(copies):
    original_dir, copy = copies["sglang"]
    rules = "srt/managers/mm_schedule.py"
    original = specs.resolve(str(original_dir / "sglang" / rules))
    fork = specs.resolve(str(copy / "myfork" / rules))
    assert fork.capabilities == original.capabilities
    assert _same_load(fork.describe()) == _same_load(original.describe())


@pytest.mark.network
def test_targets_shows_the_package_the_files_were_found_under(capsys, copies):
    code, out, _ = run(capsys, "targets", str(copies["vllm"][1]))
    assert code == 0
    assert "package: myvllm (loaded as vllm)" in out.splitlines()


@pytest.mark.network
@pytest.mark.parametrize("engine", RELEASES)
def test_a_renamed_release_gives_the_original_verdicts(copies, engine):
    from mmharness.runner import run_check

    original_dir, copy = copies[engine]
    original, fork = specs.resolve(str(original_dir)), specs.resolve(str(copy))
    for check_id in VERDICT_CHECKS[engine]:
        # findings as found (shrink=False): the same draws meet them, and shrinking was most of the time
        runs = (run_check(CHECKS[check_id], t, max_examples=20, shrink=False) for t in (original, fork))
        verdicts = [(result.status, sorted(f.signature for f in result.findings)) for result in runs]
        assert verdicts[0] == verdicts[1], check_id
        if check_id == VERDICT_CHECKS[engine][1]:
            assert verdicts[1][0] == HAZARD  # a verdict with a finding, not only passes


@pytest.mark.network
def test_a_directory_of_both_engines_needs_engine_to_say_which(both, monkeypatch):
    with pytest.raises(TargetError, match=r"several engines \(sglang, vllm\); say which with --engine NAME"):
        specs.resolve(str(both))
    for engine in RELEASES:
        monkeypatch.setenv(ENGINE_VARIABLE, engine)
        assert specs.resolve(str(both)).describe()["package"] == f"{RENAMED[engine]} (loaded as {engine})"


@pytest.mark.network
def test_engine_holds_in_workers_and_replay_lines(capsys, both, tmp_path, monkeypatch):
    """Each worker resolves the spec again, and a saved finding's replay line must load the same engine."""
    code, out, err = run(capsys, "check", "--target", str(both), "--checks", "prefill.whole_items")
    assert code == 2 and "several engines" in err
    argv = ["--target", str(both), "--engine", "vllm"]
    findings = tmp_path / "findings"
    code, out, err = run(
        capsys, "check", *argv, "--checks", "prefill.whole_items", "--max-examples", "20", "-n", "2",
        "--findings", str(findings),
    )  # fmt: skip
    assert code == 0, err
    assert "HAZARD         prefill.whole_items" in out
    replay = [line.strip() for line in out.splitlines() if "reproduce with:" in line]
    assert replay and replay[0].endswith(f"--target {both} --engine vllm")
    saved = next(findings.glob("prefill.whole_items-*.json"))
    monkeypatch.delenv(ENGINE_VARIABLE)
    code, out, _ = run(capsys, "replay", str(saved), "--engine", "vllm")
    assert code == 0 and "HAZARD         prefill.whole_items" in out
