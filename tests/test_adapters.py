"""Third-party targets: the documented toy adapter, installed as a package of its own through the entry point.

The package is installed the way any distribution is seen by Python: a module
and its ``.dist-info`` (with ``entry_points.txt``) on ``sys.path``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mmharness.checks import all_checks
from mmharness.runner import PASSED, SKIPPED, run_check
from mmharness.targets.base import TargetError
from mmharness.targets.specs import resolve

EXAMPLE = Path(__file__).parent.parent / "docs" / "examples" / "toy_adapter.py"


@pytest.fixture
def installed(tmp_path: Path) -> dict[str, str]:
    shutil.copy(EXAMPLE, tmp_path / "toy_adapter.py")
    dist = tmp_path / "toy_adapter-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-adapter\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[mmharness.targets]\ntoy = toy_adapter:ToyTarget\n")
    return {**os.environ, "PYTHONPATH": str(tmp_path)}


def mmharness(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", "import sys; from mmharness.cli import main; sys.exit(main())", *args]
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, check=False)


def test_an_installed_adapter_is_listed_and_checked(installed, tmp_path):
    listing = mmharness(installed, tmp_path, "targets")
    assert "toy " in listing.stdout and "third-party target (toy_adapter:ToyTarget)" in listing.stdout
    # every check through the entry point, 10 examples each: its checks' verdicts at 30 examples are the
    # in-process test's below
    findings = str(tmp_path / "f")
    run = mmharness(
        installed, tmp_path, "check", "--target", "toy", "--findings", findings, "--max-examples", "10"
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "PASS           chunk.matches_reference (R1)" in run.stdout
    skipped = "SKIP           precomputed.matches_reference (R2)  toy lacks precomputed: the toy engine"
    assert skipped in run.stdout


def test_the_example_adapter_passes_its_checks_in_process(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE.parent))
    target = resolve("toy_adapter:ToyTarget")
    for check in all_checks().values():
        result = run_check(check, target, max_examples=30)
        expected = PASSED if check.needs <= target.capabilities and not check.needs_cuda else SKIPPED
        if check.family in ("hazard", "robustness") and result.status != SKIPPED:
            continue  # the toy serves malformed input as it comes: hazards, by design
        assert result.status == expected, (check.id, result.reason)


PARTIAL = """
class Partial:
    name = "partial"
    capabilities = frozenset({"chunk", "count"})

    def describe(self):
        return {}

    def embedding_chunk(self, embedding, case, request):
        raise NotImplementedError
"""


def test_a_target_declaring_what_it_does_not_implement_is_refused_by_name(tmp_path, monkeypatch):
    (tmp_path / "partial_adapter.py").write_text(PARTIAL)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TargetError, match=r"missing count_mm_tokens \(for count\)"):
        resolve("partial_adapter:Partial")


def test_a_target_whose_hook_takes_other_arguments_is_refused_by_name(tmp_path, monkeypatch):
    hook = "\n    def unreceived(self):\n        return None\n"
    hooked = PARTIAL.replace('{"chunk", "count"}', '{"chunk"}') + hook
    (tmp_path / "hooked_adapter.py").write_text(hooked)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TargetError, match=r"unreceived: not callable as unreceived\(case"):
        resolve("hooked_adapter:Partial")


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("import sys\nsys.exit(3)\n", "importing {module} called sys.exit(3)"),
        ("raise SystemExit('bye')\n", "importing {module} called sys.exit('bye')"),
        ("import sys\nsys.exit()\n", "importing {module} called sys.exit()"),
        ("raise ValueError('no\\nway')\n", "importing {module} raised ValueError: no way"),
        (
            "import sys\nclass Target:\n    def __init__(self):\n        sys.exit(3)\n",
            "Target() called sys.exit(3)",
        ),
    ],
    ids=["exit-3", "exit-bye", "exit", "error", "constructor-exits"],
)
def test_an_adapter_that_exits_or_fails_while_loading_is_one_usage_error(
    tmp_path, monkeypatch, capsys, request, source, said
):
    from mmharness.cli import main

    module = f"exiting_{request.node.callspec.id.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    code = main(["check", "--target", f"{module}:Target", "--findings", str(tmp_path / "f")])
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert err == f"mmharness: error: {module}:Target: {said.format(module=module)}\n"
    assert "PASS" not in out


def test_an_entry_point_that_exits_while_loading_is_refused_by_its_name(tmp_path, monkeypatch, capsys):
    from mmharness.cli import main
    from mmharness.targets.specs import forms

    (tmp_path / "exiting_plugin.py").write_text("import sys\nsys.exit(3)\n")
    dist = tmp_path / "exiting_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: exiting-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[mmharness.targets]\nexiting = exiting_plugin:Target\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    forms.cache_clear()
    try:
        code = main(["check", "--target", "exiting", "--findings", str(tmp_path / "f")])
        out, err = capsys.readouterr()
        assert code == 2, out + err
        assert "mmharness: error: exiting: importing exiting_plugin:Target called sys.exit(3)\n" in err
        assert resolve("reference").name, "every other target still loads"
    finally:
        forms.cache_clear()
