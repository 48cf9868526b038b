"""``mmharness replay --standalone``: a finding as one pytest file that needs only the engine and torch.

Offline: the file's seeded constructor gives the harness's own rows, and a target no writer covers is
refused in one line (exit 2). With the ``network`` marker (the release cache): the EVS finding of
0.5.23 written as a file that imports nothing of mmharness (its AST; and it runs where importing
mmharness fails), failing on 0.5.23 and passing on 0.5.22; an R1 finding in a seeded copy failing
there and passing on the release; a file that does not fail where it was made, or a check the writer
does not cover, refused in one line; the finding page's file is the command's output.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mmharness import payload, standalone, tensors
from mmharness.cli import main
from mmharness.model import Case, Item, Request

EVS_FINDING = Case(
    (Request(25, 1, 23, (Item(((0, 0), (24, 24)), hash=0, modality="video", frame_rows=(0, 2)),)),),
    hidden=4,
)
"""The EVS finding ``check --target sglang==0.5.23 --profile ci`` saves: a window holding the video's
second frame as EVS moved it (to the rows that frame kept), between the processor's two spans."""

EVS_PREFILL = Case(
    (Request(4, 2, 1, (Item(((0, 0), (1, 1), (3, 3)), hash=0, modality="video", frame_rows=(0, 0, 3)),)),),
    hidden=4,
)
"""The same class as ``prefill.matches_reference`` saves it: frames 0 and 1 kept no rows, so the window
``[2, 3)`` holds the moved video's first row, between the processor's spans."""

HALF_IMAGE = Case((Request(8, 0, 4, (Item(((2, 5),), hash=3),)),), hidden=4)
"""One image whose span the window cuts in half: R1's chunk is its first two rows."""

ALLOWED_IMPORTS = {"enum", "importlib.util", "logging", "os", "sys", "types", "pathlib", "pytest", "torch"}


def saved(tmp_path: Path, case: Case, check: str, rule: str, target: str) -> str:
    path = tmp_path / f"{check}.json"
    path.write_text(payload.dumps(case, check=check, rule=rule, target=target, note="a finding"))
    return str(path)


def imported(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
    return names


def run_standalone(path: Path, root: Path) -> subprocess.CompletedProcess:
    """The file under plain pytest with ``mmharness`` unimportable and no plugin autoloaded."""
    env = {**os.environ, "ENGINE_ROOT": str(root), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    prelude = f"{standalone.BLOCKED}; import pytest; sys.exit(pytest.main(sys.argv[1:]))"
    command = [sys.executable, "-c", prelude, "-q", "-p", "no:cacheprovider", str(path)]
    return subprocess.run(command, env=env, cwd=path.parent, capture_output=True, text=True, timeout=300)


def test_the_seeded_constructor_gives_the_harness_rows():
    """A large tensor is written as ``rows(seed, count)``: the file's constructor must make the values
    the reference's expected rows were computed from."""
    import torch

    case = Case((), hidden=8)
    names = {"torch": torch, "HIDDEN": 8, "DTYPE": torch.float32}
    exec(standalone.SEEDED, names)
    assert standalone.block_source(case, 5, 20) == f"rows({tensors.row_seed(5, 20)}, 20)"
    assert torch.equal(names["rows"](tensors.row_seed(5, 20), 20), tensors.block(5, 20, case))
    small = standalone.block_source(case, 5, 2)
    assert small.startswith("torch.tensor([[") and torch.equal(eval(small, names), tensors.block(5, 2, case))


def test_a_target_without_a_writer_is_refused_in_one_line(tmp_path, capsys):
    path = saved(tmp_path, HALF_IMAGE, "chunk.matches_reference", "R1", "reference")
    out = tmp_path / "t.py"
    assert main(["replay", path, "--standalone", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "no standalone writer for check chunk.matches_reference on reference" in err
    assert not out.exists()


def test_output_without_standalone_or_not_importable_is_a_usage_error(tmp_path, capsys):
    path = saved(tmp_path, HALF_IMAGE, "chunk.matches_reference", "R1", "reference")
    assert main(["replay", path, "-o", str(tmp_path / "t.py")]) == 2
    assert "add --standalone" in capsys.readouterr().err
    assert main(["replay", path, "--standalone", "-o", str(tmp_path / "finding-0.5.23.py")]) == 2
    assert "pytest imports a test file by its name" in capsys.readouterr().err


EVS_FINDINGS = [
    (
        "embed_mask.matches_reference",
        "R3e",
        EVS_FINDING,
        "mask.reshape(-1).tolist() == [False] * 22 + [True]",
    ),
    (
        "prefill.matches_reference",
        "R3",
        EVS_PREFILL,
        "torch.equal(embedding.reshape(-1, HIDDEN), torch.tensor(",
    ),
]
"""Each check the EVS class fails on 0.5.23, its saved case, and the expected value the file asserts."""


@pytest.mark.network
@pytest.mark.parametrize(("check", "rule", "case", "asserted"), EVS_FINDINGS)
def test_the_evs_finding_fails_on_0_5_23_and_passes_on_0_5_22(
    tmp_path, sglang_release, check, rule, case, asserted
):
    roots = {v: Path(sglang_release(v).describe()["source"]) for v in ("0.5.23", "0.5.22")}
    path = saved(tmp_path, case, check, rule, "sglang==0.5.23")
    out = tmp_path / "test_evs_window.py"
    assert main(["replay", path, "--standalone", "-o", str(out)]) == 0
    source = out.read_text()
    assert imported(source) <= ALLOWED_IMPORTS, imported(source) - ALLOWED_IMPORTS
    assert f'ENGINE_ROOT = Path(os.environ.get("ENGINE_ROOT", "{roots["0.5.23"]}"))' in source
    assert f"assert {asserted}" in source  # the reference's value, written out
    failed = run_standalone(out, roots["0.5.23"])
    assert failed.returncode == 1 and "was served as text" in failed.stdout, failed.stdout
    passed = run_standalone(out, roots["0.5.22"])
    assert passed.returncode == 0 and "1 passed" in passed.stdout, passed.stdout


_SLICE = "    embedding_chunk = embedding[start_index:end_index]\n"


@pytest.mark.network
def test_an_r1_finding_fails_in_a_seeded_copy_and_passes_on_the_release(
    tmp_path, sglang_release, seeded_copy
):
    root = Path(sglang_release("0.5.23").describe()["source"])
    bug = "    embedding_chunk = embedding[start_index : end_index + 1]\n"
    seeded = seeded_copy(root, [("sglang/srt/managers/mm_schedule.py", _SLICE, bug)])
    path = saved(tmp_path, HALF_IMAGE, "chunk.matches_reference", "R1", str(seeded))
    out = tmp_path / "test_chunk.py"
    assert main(["replay", path, "--standalone", "-o", str(out)]) == 0
    source = out.read_text()
    assert imported(source) <= ALLOWED_IMPORTS
    assert "assert (start, end) == (0, 2)" in source
    assert run_standalone(out, seeded).returncode == 1
    assert run_standalone(out, root).returncode == 0


@pytest.mark.network
def test_a_file_that_does_not_fail_where_the_finding_was_made_is_not_written(
    tmp_path, sglang_release, capsys
):
    """R1 holds on 0.5.23 for this case: a file passing there would assert nothing of a bug."""
    sglang_release("0.5.23")  # in the cache
    path = saved(tmp_path, HALF_IMAGE, "chunk.matches_reference", "R1", "sglang==0.5.23")
    out = tmp_path / "test_chunk.py"
    assert main(["replay", path, "--standalone", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "does not reproduce the finding" in err and "exits 0" in err
    assert not out.exists()


@pytest.mark.network
def test_a_check_the_writer_does_not_cover_is_refused_naming_it(tmp_path, sglang_release, capsys):
    sglang_release("0.5.23")  # in the cache
    path = saved(tmp_path, HALF_IMAGE, "prefill.cache_independent", "R3", "sglang==0.5.23")
    out = tmp_path / "t.py"
    assert main(["replay", path, "--standalone", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no standalone writer for check prefill.cache_independent" in err
    assert not out.exists()


@pytest.mark.network
def test_the_finding_page_holds_the_file_the_command_writes(tmp_path, sglang_release, monkeypatch):
    """docs/findings/'s standalone file is the command's output for the case beside it (but for the
    default ENGINE_ROOT, which names the tree of the machine it was written on)."""
    sglang_release("0.5.23")  # in the cache
    root = Path(__file__).resolve().parent.parent
    monkeypatch.chdir(root)
    out = tmp_path / "test_page.py"
    case = "docs/findings/sglang_0_5_23_evs_chunk_window.json"
    assert main(["replay", case, "--standalone", "-o", str(out)]) == 0

    def lines(text: str) -> list[str]:
        return [line for line in text.splitlines() if not line.startswith("ENGINE_ROOT = ")]

    committed = (root / "docs/findings/sglang_0_5_23_evs_chunk_window.py").read_text()
    assert lines(out.read_text()) == lines(committed)
