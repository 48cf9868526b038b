"""Faults injected into ``matrix --shard``/``merge``, the release cache, ``atlas``, ``targets --nearest``
and ``fuzz``: a signal at a phase, a full disk, a cut or garbled file. Each test holds the command to
``docs/guarantees.md``: a run that did not finish never exits 0, every finding found before the fault
is on disk and replays, the report says what did not finish, a cached file runs only once verified,
and an error is one line (``fault_injection``: the faults and the invariants)."""

from __future__ import annotations

import json
import random
import shutil
import zipfile
from pathlib import Path

import pytest
from fault_injection import Output, cli, cut, interrupt_at, no_space, one_line, replays, unfinished

TARGETS = '''
"""Targets for the fault tests."""
import os
import sys
import time

from mmharness.targets.base import COUNT
from mmharness.targets.reference import ReferenceTarget


class EnvBug(ReferenceTarget):
    """One token too many, only under MMH_FAULT_BUG=1: a setting a shard is run with (--env)."""

    name = "env-bug"
    capabilities = frozenset({COUNT})

    def count_mm_tokens(self, case):
        return super().count_mm_tokens(case) + (os.environ.get("MMH_FAULT_BUG") == "1")
'''
SLOW_IMPORT = """
import sys
import time

print("slow_import: loading", file=sys.stderr, flush=True)
time.sleep(120)
"""
COUNT = ("--checks", "count.matches_reference", "--max-examples", "30")
MUTANTS = ["mutant:chunk_start_off_by_one", "reference", "mutant:count_inclusive_end"]
BOTH = ("--checks", "chunk.matches_reference,count.matches_reference", "--max-examples", "20")


@pytest.fixture
def targets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The module of the fault tests' targets, importable in-process and by a subprocess started here."""
    (tmp_path / "fault_targets.py").write_text(TARGETS)
    (tmp_path / "slow_import.py").write_text(SLOW_IMPORT)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "fault_targets"


def _no_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh process's settings (a merge on another machine): none of an earlier command's ``--env``."""
    from mmharness.targets import settings

    monkeypatch.delenv("MMH_FAULT_BUG", raising=False)
    settings.apply([])


def _shards(capsys, tmp_path: Path, specs: list[str], count: int, *extra: str) -> list[str]:
    paths = []
    for index in range(1, count + 1):
        paths.append(str(tmp_path / f"shard-{index}.json"))
        argv = [word for spec in specs for word in ("--target", spec)]
        cli(capsys, "matrix", *argv, *extra, "--shard", f"{index}/{count}", "--json", paths[-1])
    return paths


def _saved(report: Path) -> list[tuple[str, str]]:
    """Every search finding's saved file in a matrix report, with its target."""
    data = json.loads(report.read_text())
    return [
        (one.get("saved"), spec)
        for check in data["checks"]
        for spec, cell in check["results"].items()
        for one in cell["findings"]
        if one["by"] == "search"
    ]


# matrix --shard and merge -----------------------------------------------------------------------------


def test_merge_shrinks_saves_and_replays_under_the_shards_env(capsys, tmp_path, monkeypatch, targets):
    """A class that fails only under a shard's ``--env`` is shrunk and saved by the merge, its replay
    line carries the setting, and the saved case fails again under it."""
    (shard,) = _shards(capsys, tmp_path, [f"{targets}:EnvBug"], 1, *COUNT, "--env", "MMH_FAULT_BUG=1")
    _no_settings(monkeypatch)
    merged, findings = tmp_path / "merged.json", tmp_path / "found"
    code, out, _ = cli(capsys, "merge", shard, "--json", str(merged), "--findings", str(findings))
    assert code == 1, out
    ((saved, spec),) = _saved(merged)
    assert f"reproduce with: mmharness replay {saved} --target {spec} --env MMH_FAULT_BUG=1" in out
    cell = json.loads(merged.read_text())["checks"][0]["results"][spec]
    assert cell["findings"][0].get("shrunk", True), "shrunk by the merge, under the shard's setting"
    _no_settings(monkeypatch)
    replays([saved], spec, capsys)  # the case brings its setting back


def test_merge_refuses_shards_run_under_other_settings(capsys, tmp_path, monkeypatch, targets):
    specs = ["reference", f"{targets}:EnvBug"]
    first = _shards(capsys, tmp_path, specs, 2, *COUNT, "--env", "MMH_FAULT_BUG=1")[0]
    _no_settings(monkeypatch)
    second = _shards(capsys, tmp_path / "plain", specs, 2, *COUNT)[1]
    code, out, err = cli(capsys, "merge", first, second)
    assert code == 2 and out == ""
    one_line(err, "shards of different matrices: --env", "MMH_FAULT_BUG=1")


@pytest.mark.network
def test_merge_refuses_a_path_target_changed_since_its_shard(capsys, tmp_path, vllm_release_dir):
    copy = tmp_path / "fork"
    shutil.copytree(vllm_release_dir, copy)
    argv = ("--checks", "grid.split_matches_reference", "--max-examples", "5")
    (shard,) = _shards(capsys, tmp_path, [str(copy)], 1, *argv)
    assert json.loads(Path(shard).read_text())["targets"][0]["digest"]
    edited = next(copy.rglob("inputs.py"))
    edited.write_text(edited.read_text() + "\n# edited after the shard ran\n")
    for replay in ([], ["--no-replay"]):
        code, out, err = cli(capsys, "merge", shard, *replay, "--json", str(tmp_path / "merged.json"))
        assert code == 2 and out == "" and not (tmp_path / "merged.json").exists()
        one_line(err, str(copy), "changed since its shard tested them")


def test_an_interrupted_merge_keeps_every_finding_on_disk(capsys, tmp_path, monkeypatch):
    """Ctrl-C as the merge shrinks its first class: every class's case is on disk already, each replays."""
    shards = _shards(capsys, tmp_path, MUTANTS, 2, *BOTH)
    merged, findings = tmp_path / "merged.json", tmp_path / "found"
    interrupt_at(monkeypatch, "mmharness.matrix._shrink_case")
    code, out, _ = cli(capsys, "merge", *shards, "--json", str(merged), "--findings", str(findings))
    assert code == 130, out
    unfinished(code)
    data = json.loads(merged.read_text())
    assert data["interrupted"] is True and data["replay"] == "interrupted"
    saved = _saved(merged)
    assert len(saved) >= 2 and all(path for path, _ in saved), saved
    for path, spec in saved:
        replays([path], spec, capsys)


def test_a_full_disk_as_a_merge_saves_is_one_line_and_keeps_what_it_wrote(capsys, tmp_path, monkeypatch):
    shards = _shards(capsys, tmp_path, MUTANTS, 2, *BOTH)
    findings = tmp_path / "found"
    no_space(monkeypatch, "mmharness.report.write", after=1)
    code, _, err = cli(capsys, "merge", *shards, "--findings", str(findings))
    unfinished(code)
    assert code == 2
    one_line(err, "cannot write", "No space left on device")
    (written,) = findings.rglob("*.json")
    monkeypatch.undo()
    replays([str(written)], f"mutant:{written.parent.name.removeprefix('mutant_')}", capsys)


def test_an_interrupted_matrix_lists_the_targets_it_never_began(capsys, tmp_path, monkeypatch):
    report = tmp_path / "m.json"
    interrupt_at(monkeypatch, "mmharness.matrix._column", call=2)
    argv = [word for spec in MUTANTS for word in ("--target", spec)]
    code, out, _ = cli(capsys, "matrix", *argv, *BOTH, "--json", str(report))
    assert code == 130
    data = json.loads(report.read_text())
    assert [t["spec"] for t in data["targets"]] == MUTANTS, "every target, begun or not"
    for spec in MUTANTS[1:]:
        assert {c["results"][spec]["status"] for c in data["checks"]} == {"not run"}
    assert f"interrupted: 1 target(s) finished, 2 not run, never begun: {', '.join(MUTANTS[1:])}" in out


def test_an_empty_shard_is_refused(capsys, tmp_path):
    report = tmp_path / "shard.json"
    code, out, err = cli(capsys, "matrix", "--target", "reference", "--shard", "2/2", "--json", str(report))
    assert code == 2 and out == "" and not report.exists()
    one_line(err, "--shard 2/2: this share has no targets", "run at most 1 shard(s)")


def test_a_full_disk_under_a_file_size_limit_is_one_line(tmp_path, start):
    """A real limit (``RLIMIT_FSIZE``) in a subprocess: the report cannot be written, so the run says so."""
    report = tmp_path / "m.json"
    run = start("matrix", "--target", MUTANTS[0], *BOTH, "--json", str(report), limit=1500)
    _, err = run.communicate(timeout=120)
    unfinished(run.returncode)
    assert run.returncode == 2
    one_line(err, f"--json {report}: cannot write", "File too large")
    assert list(tmp_path.iterdir()) == [], "no report, and no part of one"


# The release cache ------------------------------------------------------------------------------------

RULES = "sglang/srt/managers/mm_utils.py"
OTHER = "sglang/srt/managers/schedule_batch.py"
METADATA = "sglang-9.9.9.dist-info/METADATA"


@pytest.fixture
def release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A release unpacked into a fresh cache from a wheel of two files; downloads give that wheel
    (``downloads`` counts them) unless the test goes ``offline``."""
    from mmharness.targets import releases

    monkeypatch.setenv("MMHARNESS_CACHE", str(tmp_path / "cache"))
    wheel = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(RULES, "def one():\n    return 1\n")
        archive.writestr(OTHER, "def two():\n    return 2\n")
        archive.writestr(METADATA, "Name: sglang\nVersion: 9.9.9\n")
    target = releases.release_dir("sglang", "9.9.9")
    releases._unpack(wheel, target, "sglang", "9.9.9", (RULES, OTHER))
    downloads: list[str] = []

    def download(package, version, into):
        downloads.append(version)
        into.mkdir(parents=True)
        return Path(shutil.copy(wheel, into))

    monkeypatch.setattr(releases, "_download", download)

    class Release:
        root, members, count = target, (RULES, OTHER), downloads

        def fetch(self):
            return releases.fetch("sglang", "9.9.9", self.members, example="0.5.23")

        def offline(self):
            monkeypatch.setattr(releases, "_download", _offline)

    return Release()


MANIFEST = "mmharness-release-2.txt"


def _legacy(root: Path) -> None:
    """A release unpacked before manifests were sealed."""
    from mmharness.targets.releases import SEAL

    (root / SEAL).unlink()


def _cut_at_a_line(root: Path) -> None:
    cut(root / MANIFEST, lines=3)  # the wheel, the members and the first file: every line left reads


def _cut_mid_line(root: Path) -> None:
    kept = root / MANIFEST
    cut(kept, size=len(b"".join(kept.read_bytes().splitlines(keepends=True)[:3])) + 10)  # in a digest


def _cut_and_removed(root: Path) -> None:
    """Cut at a line boundary, and the files it no longer lists gone too: no file is left unlisted."""
    _cut_at_a_line(root)
    (root / OTHER).unlink()


def _emptied(root: Path) -> None:
    (root / RULES).write_text("")


def _unlisted(root: Path) -> None:
    (root / "sglang" / "srt" / "extra.py").write_text("x = 1\n")


DAMAGE = {
    "manifest cut at a line": _cut_at_a_line,
    "manifest cut mid-line": _cut_mid_line,
    "legacy manifest cut at a line": lambda root: (_legacy(root), _cut_at_a_line(root)),
    "legacy manifest cut mid-line": lambda root: (_legacy(root), _cut_mid_line(root)),
    "manifest cut, its files removed": _cut_and_removed,
    "legacy manifest cut, its files removed": lambda root: (_legacy(root), _cut_and_removed(root)),
    "a file emptied": _emptied,
    "a file it does not list": _unlisted,
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_release_is_fetched_again(release, damage):
    assert release.fetch() == release.root and release.count == [], "intact: no download"
    DAMAGE[damage](release.root)
    assert release.fetch() == release.root and release.count == ["9.9.9"]
    assert (release.root / RULES).read_text() == "def one():\n    return 1\n"
    assert release.fetch() == release.root and release.count == ["9.9.9"], "fetched again once"


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        ("manifest cut at a line", "mmharness-release-2.txt is cut or changed"),
        ("manifest cut mid-line", "mmharness-release-2.txt is cut or changed"),
        ("legacy manifest cut at a line", "mmharness-release-2.txt is cut: it does not end with"),
        ("legacy manifest cut mid-line", "mmharness-release-2.txt is cut or garbled at line 4"),
        ("manifest cut, its files removed", "mmharness-release-2.txt is cut or changed"),
        ("legacy manifest cut, its files removed", "mmharness-release-2.txt is cut: it does not end with"),
        ("a file emptied", f"{RULES} differs from the wheel's"),
        ("a file it does not list", "sglang/srt/extra.py is not in its manifest"),
    ],
)
def test_a_damaged_release_without_the_index_is_refused_in_one_line(release, damage, named):
    from mmharness.targets.base import TargetError

    DAMAGE[damage](release.root)
    release.offline()
    with pytest.raises(TargetError) as refused:
        release.fetch()
    one_line(str(refused.value), "sglang==9.9.9 is damaged", named, "package index is unreachable", prefix="")


@pytest.mark.network
def test_a_cut_manifest_of_a_real_release_is_no_false_skip(capsys, tmp_path, monkeypatch, vllm_release_dir):
    """A manifest cut at a line boundary, the file it no longer lists emptied: the release is refused
    (exit 2, naming the manifest), never loaded as one lacking that file's functions."""
    from mmharness.targets import releases

    cache = tmp_path / "cache" / "releases"
    shutil.copytree(vllm_release_dir, cache / vllm_release_dir.name)
    root = cache / vllm_release_dir.name
    (root / releases.SEAL).unlink(missing_ok=True)  # as a copy made before seals
    manifest = root / releases.COMPLETE
    lines = manifest.read_text().splitlines(keepends=True)
    dropped = lines.pop(3).split(" ", 1)[1].strip()
    manifest.write_text("".join(lines))
    (root / dropped).write_text("")
    monkeypatch.setenv("MMHARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(releases, "_download", _offline)
    version = vllm_release_dir.name.removeprefix("vllm-")
    code, out, err = cli(
        capsys, "check", "--target", f"vllm=={version}", "--checks", "grid", "--max-examples", "5"
    )
    assert code == 2 and out == ""
    one_line(err, f"vllm=={version} is damaged", dropped, "is not in its manifest")


def _offline(package: str, version: str, into: Path) -> Path:
    from mmharness.targets.base import TargetError

    raise TargetError(f"cannot download {package}=={version}: the package index is unreachable")


SOURCE = 'VALUE = "the compiled constant"\n\n\ndef answer():\n    return 42\n'


def _run(code) -> dict:
    scope: dict = {}
    exec(code, scope)
    return scope


def test_garbled_bytecode_is_compiled_again_never_run(tmp_path, monkeypatch):
    """Sixteen bit flips in a cached entry, each anywhere in it (its code's constants too): every one is
    compiled again, and the code that runs is the file's."""
    from mmharness.targets import loader

    monkeypatch.setenv("MMHARNESS_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "rules.py"
    path.write_text(SOURCE)
    loader.compiled(path)
    (entry,) = (tmp_path / "cache" / "bytecode").glob("*.bin")
    whole = entry.read_bytes()
    text = whole.index(b"the compiled constant")
    flips = [text + 3, text + 10, *random.Random(7).sample(range(len(whole)), 14)]
    for at in flips:
        garbled = bytearray(whole)
        garbled[at] ^= 1 << (at % 8)
        entry.write_bytes(bytes(garbled))
        scope = _run(loader.compiled(path))
        assert scope["VALUE"] == "the compiled constant" and scope["answer"]() == 42, f"flip at byte {at}"
        assert entry.read_bytes() == whole, "the entry is written again, whole"


def test_a_cut_or_unwritable_bytecode_entry_only_costs_a_compile(tmp_path, monkeypatch):
    from mmharness.targets import loader

    monkeypatch.setenv("MMHARNESS_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "rules.py"
    path.write_text(SOURCE)
    loader.compiled(path)
    (entry,) = (tmp_path / "cache" / "bytecode").glob("*.bin")
    cut(entry, size=40)
    assert _run(loader.compiled(path))["answer"]() == 42
    entry.unlink()
    no_space(monkeypatch, "os.replace")  # the entry cannot be put in place
    assert _run(loader.compiled(path))["answer"]() == 42
    assert list(entry.parent.iterdir()) == [], "no entry, and no part of one"


# targets --nearest and loading ------------------------------------------------------------------------


def test_an_interrupted_nearest_names_no_nearest(capsys, tmp_path, monkeypatch):
    """Ctrl-C as the second candidate begins: the first was measured, yet the second might be nearer."""
    report = tmp_path / "nearest.json"
    candidates = ["mutant:count_inclusive_end", "mutant:chunk_start_off_by_one"]
    interrupt_at(monkeypatch, "mmharness.nearest._candidate", call=2)
    argv = [word for spec in candidates for word in ("--candidate", spec)]
    code, out, _ = cli(capsys, "targets", "reference", "--nearest", *argv, "--json", str(report))
    assert code == 130
    assert "nearest:" not in out
    assert f"interrupted: 1 of 2 candidate(s) compared, not {candidates[1]}; no nearest is named" in out
    data = json.loads(report.read_text())
    assert data["nearest"] is None and data["not_compared"] == [candidates[1]] and data["exit"] == 130


def test_ctrl_c_while_a_target_loads_is_one_line(targets, start):
    output = Output(start("check", "--target", "slow_import:Target", merged=True))
    output.wait_for("slow_import: loading")
    code, out = output.interrupt()
    assert code == 130
    said = out.replace("slow_import: loading\n", "")
    one_line(said, "mmharness: interrupted while loading slow_import:Target")


# fuzz and check ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("describe", [True, False])
def test_a_fuzzed_check_that_cannot_run_fails_and_leaves_no_findings(capsys, tmp_path, monkeypatch, describe):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MMHARNESS_FINDINGS", raising=False)
    code, out, err = cli(capsys, "fuzz", "check:prefill.whole_items", *(["--describe"] if describe else []))
    assert code == 4
    assert "prefill.whole_items cannot run on reference: reference lacks whole_items" in err
    assert ("target: reference" in out) is describe
    assert not (tmp_path / "findings").exists(), "nothing was written: no findings directory"


def test_the_findings_directory_a_fuzz_run_made_is_removed_if_left_empty(tmp_path):
    """libFuzzer needs its artifact directory to exist; one the run made and wrote nothing into goes."""
    from mmharness.commands.fuzz import _removed_if_left_empty

    made, written, kept = tmp_path / "made", tmp_path / "written", tmp_path / "kept"
    kept.mkdir()
    for directory in (made, written, kept):
        with _removed_if_left_empty(directory):
            directory.mkdir(exist_ok=True)
            if directory is written:
                (directory / "crash-1").write_text("x")
    assert not made.exists() and (written / "crash-1").is_file() and kept.is_dir()


def test_a_matrix_that_finds_nothing_leaves_no_findings_directory(capsys, tmp_path):
    found = tmp_path / "found"
    code, _, _ = cli(capsys, "matrix", "--target", "reference", *COUNT, "--findings", str(found))
    assert code == 0
    assert not found.exists(), "nothing was written there"


def test_first_failure_with_no_shrink_says_what_they_do(capsys, tmp_path):
    argv = ["check", "--target", "mutant:count_inclusive_end", "--checks", "count.matches_reference"]
    code, out, err = cli(capsys, *argv, "--first-failure", "--no-shrink", "--findings", str(tmp_path / "f"))
    assert code == 1
    assert "--first-failure with --no-shrink: each check ends at its first failing case, kept as found" in err
    assert "case as found (the search stopped at its first failure)" in out


def test_the_guarantees_page_is_a_short_map_linked_from_the_architecture():
    root = Path(__file__).parent.parent
    assert len((root / "docs" / "guarantees.md").read_text().splitlines()) <= 60
    assert "docs/guarantees.md" in (root / "ARCHITECTURE.md").read_text()
