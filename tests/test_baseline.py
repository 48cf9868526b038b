"""Baselines know their target by what it runs: the digests of the engine files it loaded.

The offline tests build identities from files of their own; the ``network``
ones record a baseline for vLLM 0.33.0 (its cached release) and apply it to a
path copy of those files, then to a copy with one file changed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from mmharness import baseline
from mmharness.baseline import BaselineError
from mmharness.cli import main
from mmharness.targets.loaded import file_digests

SCHEDULER = "vllm/v1/core/sched/scheduler.py"


class Described:
    """A target that only describes itself: its files' digests, or only its files, or neither."""

    def __init__(self, **described: Any) -> None:
        self.described = described

    def describe(self) -> dict[str, Any]:
        return self.described


def engine_files(root: Path, texts: dict[str, str]) -> dict[str, Path]:
    """Engine module name -> file under ``root``, each holding its text."""
    files = {}
    for name, text in texts.items():
        path = root / (name.replace(".", "/") + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        files[name] = path
    return files


def identity_of(files: dict[str, Path], spec: str, release: str | None = None) -> dict:
    return baseline.identity(Described(release=release, digests=file_digests(files)), spec)


def write(path: Path, target: Any, entries: list | None = None) -> str:
    path.write_text(json.dumps({"format": baseline.FORMAT, "target": target, "entries": entries or []}))
    return str(path)


TEXTS = {"vllm.v1.request": "class Request: ...\n", "vllm.v1.core.sched.scheduler": "class Scheduler: ...\n"}


def test_each_loaded_file_is_digested_by_its_path_in_the_package(tmp_path):
    files = engine_files(tmp_path / "one", TEXTS)
    digests = file_digests(files)
    assert digests == {
        "vllm/v1/core/sched/scheduler.py": hashlib.sha256(
            TEXTS["vllm.v1.core.sched.scheduler"].encode()
        ).hexdigest(),
        "vllm/v1/request.py": hashlib.sha256(TEXTS["vllm.v1.request"].encode()).hexdigest(),
    }
    recorded = identity_of(files, "vllm==0.33.0", "0.33.0")
    assert recorded["spec"] == "vllm==0.33.0" and recorded["release"] == "0.33.0"
    assert recorded["files"] == digests and recorded["digest"] == baseline.whole_digest(digests)
    assert str(tmp_path) not in json.dumps(recorded), "where the copy lies is no part of what it runs"


def test_a_baseline_applies_to_another_spelling_of_the_same_files(tmp_path):
    recorded = identity_of(engine_files(tmp_path / "release", TEXTS), "vllm==0.33.0", "0.33.0")
    path = write(tmp_path / "baseline.json", recorded, [{"check": "c", "device": "cpu", "signature": "s"}])
    copy = engine_files(tmp_path / "copy", TEXTS)
    known = baseline.load(path, identity_of(copy, str(tmp_path / "copy")))
    assert {e.signature for e in known.entries} == {"s"}
    (note,) = known.notes
    assert (
        f"recorded for 'vllm==0.33.0': it applies to '{tmp_path / 'copy'}'" in note and "same 2 files" in note
    )
    assert baseline.load(path, recorded).notes == (), "the same spec and files: nothing to say"
    assert baseline.combined([known, baseline.load(path, recorded)]).notes == (note,)


def test_another_spec_over_other_files_is_refused_naming_each_file(tmp_path):
    recorded = identity_of(engine_files(tmp_path / "release", TEXTS), "vllm==0.33.0", "0.33.0")
    path = write(tmp_path / "baseline.json", recorded)
    changed = engine_files(tmp_path / "changed", {**TEXTS, "vllm.v1.request": "class Request: pass\n"})
    with pytest.raises(BaselineError) as error:
        baseline.load(path, identity_of(changed, str(tmp_path / "changed")))
    message = str(error.value)
    assert f"recorded for target 'vllm==0.33.0', not '{tmp_path / 'changed'}'" in message
    assert (
        "whose engine files differ (changed: vllm/v1/request.py)" in message and "--write-baseline" in message
    )
    other = engine_files(
        tmp_path / "other", {"vllm.v1.request": TEXTS["vllm.v1.request"], "vllm.v1.x": "x = 1\n"}
    )
    missing_and_added = r"not loaded now: vllm/v1/core/sched/scheduler\.py; loaded now only: vllm/v1/x\.py"
    with pytest.raises(BaselineError, match=missing_and_added):
        baseline.load(path, identity_of(other, "elsewhere"))
    with pytest.raises(
        BaselineError, match=r"not 'reference', whose engine files differ \(not loaded now: vllm"
    ):
        baseline.load(path, baseline.identity(Described(target="reference"), "reference"))


def test_the_same_spec_over_changed_files_applies_with_a_note_naming_them(tmp_path):
    """A fork's CI keeps one baseline for ``--target python`` while the files change (so does the mutation
    benchmark for ``--target .``): it still applies, never silently."""
    tree = tmp_path / "tree"
    recorded = identity_of(engine_files(tree, TEXTS), "python")
    path = write(tmp_path / "baseline.json", recorded, [{"check": "c", "device": "cpu", "signature": "s"}])
    edited = identity_of(engine_files(tree, {**TEXTS, "vllm.v1.request": "class Request: pass\n"}), "python")
    known = baseline.load(path, edited)
    assert {e.signature for e in known.entries} == {"s"}
    (note,) = known.notes
    assert note.startswith(f"{path} was recorded for 'python' before its engine files changed")
    assert "(changed: vllm/v1/request.py)" in note and "may not be this code's" in note


def test_a_baseline_recorded_by_spec_only_applies_by_spec_and_says_so(tmp_path):
    current = identity_of(engine_files(tmp_path / "release", TEXTS), "vllm==0.33.0", "0.33.0")
    old = {"spec": "vllm==0.33.0", "release": "0.33.0", "source": "/somewhere/else/scheduler.py"}
    path = write(tmp_path / "old.json", old, [{"check": "c", "device": "cpu", "signature": "s"}])
    known = baseline.load(path, current)
    assert {e.signature for e in known.entries} == {"s"}
    (note,) = known.notes
    assert "recorded for 'vllm==0.33.0' by its spec only" in note and "--write-baseline" in note
    with pytest.raises(BaselineError, match=r"recorded for target 'vllm==0\.33\.0', not 'other'"):
        baseline.load(path, {**current, "spec": "other"})
    report = tmp_path / "report.json"  # a --json report of the second format, its identity by spec
    report.write_text(
        json.dumps({"format": "mmharness.report/2", "target": "vllm==0.33.0", "identity": old, "results": []})
    )
    assert baseline.load(str(report), current).notes
    assert baseline.load(
        write(tmp_path / "oldest.json", "vllm==0.33.0"), current
    ).notes  # the target as a string


def test_targets_without_files_match_by_name(tmp_path):
    mutant = baseline.identity(Described(target="mutant:x", release="unknown"), "mutant:x")
    assert mutant == {"spec": "mutant:x", "release": None}
    path = write(tmp_path / "baseline.json", mutant)
    assert baseline.load(path, mutant).notes == ()
    with pytest.raises(BaselineError, match=r"recorded for target 'mutant:x', not 'mutant:y'"):
        baseline.load(path, {**mutant, "spec": "mutant:y"})


def test_an_adapter_listing_its_files_without_digests_is_known_by_their_content(tmp_path):
    one, two = tmp_path / "a" / "rules.py", tmp_path / "b" / "rules.py"
    for path in (one, two):
        path.parent.mkdir()
        path.write_text("RULES = 1\n")
    lone = baseline.identity(Described(files=[str(one)]), "my_adapter:Target")
    assert lone["files"] == {"rules.py": hashlib.sha256(b"RULES = 1\n").hexdigest()}
    moved = baseline.identity(Described(files=[str(two)]), "my_adapter:Target")
    assert baseline.applies("b.json", lone, moved) == []
    both = baseline.identity(Described(files=[str(one), str(two)]), "my_adapter:Target")
    assert set(both["files"]) == {str(one.resolve()), str(two.resolve())}, "two of a name: by path"


# vLLM 0.33.0 and copies of its files (network) -------------------------------------------


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.network
def test_the_vllm_release_baseline_applies_to_a_path_copy_of_its_files(
    vllm_release_dir, harness_cache, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("MMHARNESS_CACHE", str(harness_cache))
    written, copy = tmp_path / "baseline.json", tmp_path / "copy"
    args = [
        "check",
        "--checks",
        "prefill.matches_reference",
        "--max-examples",
        "3",
        "--findings",
        str(tmp_path),
    ]
    report = tmp_path / "report.json"
    release = ["--target", "vllm==0.33.0", "--write-baseline", str(written), "--json", str(report)]
    assert run(capsys, *args, *release)[0] == 0
    recorded = json.loads(written.read_text())["target"]
    assert recorded["spec"] == "vllm==0.33.0" and SCHEDULER in recorded["files"]
    assert json.loads(report.read_text())["identity"] == recorded, "a --json report is a baseline too"
    shutil.copytree(vllm_release_dir, copy)
    code, out, _ = run(
        capsys, *args, "--target", str(copy), "--baseline", str(written), "--baseline", str(report)
    )
    assert code == 0
    assert f"note: baseline {written} was recorded for 'vllm==0.33.0': it applies to '{copy}'" in out

    scheduler = copy / SCHEDULER
    scheduler.write_text(scheduler.read_text() + "\n# edited\n")
    code, _, err = run(capsys, *args, "--target", str(copy), "--baseline", str(written))
    assert code == 2 and err.count("\n") == 1
    assert f"recorded for target 'vllm==0.33.0', not '{copy}', whose engine files differ" in err
    assert f"(changed: {SCHEDULER})" in err

    old = tmp_path / "old.json"  # as written before digests: the target by its spec
    document = json.loads(written.read_text())
    document["target"] = {"spec": "vllm==0.33.0", "release": "0.33.0", "source": "/elsewhere"}
    old.write_text(json.dumps(document))
    code, out, _ = run(capsys, *args, "--target", "vllm==0.33.0", "--baseline", str(old))
    assert code == 0 and "recorded for 'vllm==0.33.0' by its spec only" in out


MUTANT = ["check", "--target", "mutant:chunk_start_off_by_one", "--checks", "chunk.matches_reference"]


def test_a_known_finding_whose_own_case_no_longer_fails_so_is_a_change_fatal_under_strict(capsys, tmp_path):
    """A known signature hides a change in code that already fails, so each entry's own case is replayed:
    the unchanged target reproduces every one; an entry whose case now passes (or fails only otherwise)
    is shown with its case saved and a replay line, in the JSON report, and fails the run under
    ``--strict`` only."""
    written, findings = tmp_path / "baseline.json", ["--findings", str(tmp_path / "f")]
    assert run(capsys, *MUTANT, *findings, "--write-baseline", str(written))[0] == 1
    document = json.loads(written.read_text())
    assert document["entries"] and all(e["case"]["requests"] for e in document["entries"])
    code, out, _ = run(capsys, *MUTANT, *findings, "--baseline", str(written), "--strict")
    assert code == 0 and "changed" not in out, "the target the baseline was written for reproduces it"

    entry = document["entries"][0]
    for request in entry["case"]["requests"]:
        request["items"] = []  # a case the off-by-one start cannot get wrong
    edited, report = tmp_path / "edited.json", tmp_path / "report.json"
    edited.write_text(json.dumps(document))
    code, out, _ = run(capsys, *MUTANT, *findings, "--baseline", str(edited), "--json", str(report))
    assert code == 0, "shown, not fatal, without --strict"
    assert "1 known finding(s) changed" in out
    assert f"chunk.matches_reference [cpu] {entry['signature']}: its case now passes" in out
    (change,) = json.loads(report.read_text())["baseline_changes"]
    assert change["signature"] == entry["signature"] and change["now"] == []
    assert f"reproduce with: mmharness replay {change['saved']} --target mutant:chunk_start_off_by_one" in out
    assert run(capsys, "replay", change["saved"])[0] == 0
    junit = tmp_path / "junit.xml"
    assert (
        run(capsys, *MUTANT, *findings, "--baseline", str(edited), "--strict", "--junit", str(junit))[0] == 1
    )
    assert f'name="chunk.matches_reference[cpu] known: {entry["signature"]}"' in junit.read_text()
    assert '<failure message="its case now passes' in junit.read_text()

    document["entries"][0] = {**json.loads(written.read_text())["entries"][0], "signature": "another way"}
    edited.write_text(json.dumps(document))
    code, out, _ = run(capsys, *MUTANT, *findings, "--baseline", str(edited))
    assert f"another way: its case now fails otherwise: divergence: {entry['signature']}" in out


def test_a_damaged_case_in_a_baseline_is_named_before_anything_runs(capsys, tmp_path):
    written = tmp_path / "baseline.json"
    run(capsys, *MUTANT, "--findings", str(tmp_path / "f"), "--write-baseline", str(written))
    document = json.loads(written.read_text())
    document["entries"][1]["case"]["requests"][0]["extend_len"] = -1
    written.write_text(json.dumps(document))
    code, _, err = run(capsys, *MUTANT, "--baseline", str(written))
    assert code == 2 and f"{written}: entries[1].case: requests[0].extend_len" in err


WINDOW_TEST = "end >= extend_prefix_len and start < extend_prefix_len + extend_seq_len"


@pytest.mark.network
def test_a_change_in_code_that_already_fails_is_seen_through_the_known_cases(
    sglang_release, harness_cache, tmp_path, capsys, monkeypatch
):
    """0.5.23 already fails R3 (its EVS skip). A bug seeded into the per-image window test (``and`` ->
    ``or``: every item counts as in its window) fails only in ways the baseline knows, so the search
    sees nothing new; the known case, replayed, now passes, and ``--strict`` fails the run."""
    monkeypatch.setenv("MMHARNESS_CACHE", str(harness_cache))
    copy = tmp_path / "copy"
    shutil.copytree(Path(sglang_release("0.5.23").describe()["source"]), copy)
    written = tmp_path / "baseline.json"
    args = ["check", "--target", str(copy), "--checks", "prefill.matches_reference"]
    args += ["--findings", str(tmp_path / "f")]
    assert run(capsys, *args, "--write-baseline", str(written))[0] == 1
    assert run(capsys, *args, "--baseline", str(written), "--strict")[0] == 0
    rules = copy / "sglang/srt/managers/mm_schedule.py"
    source = rules.read_text()
    assert source.count(WINDOW_TEST) == 1, "0.5.23's window test moved"
    rules.write_text(source.replace(WINDOW_TEST, WINDOW_TEST.replace(" and ", " or ")))
    code, out, _ = run(capsys, *args, "--baseline", str(written))
    assert code == 0 and "known finding(s) changed" in out and "its case now passes" in out
    assert run(capsys, *args, "--baseline", str(written), "--strict")[0] == 1


def test_a_baseline_serves_only_runs_of_its_own_mode_with_or_without_against(capsys, tmp_path):
    """``--against`` signs findings as changes (``regression: ...``), a plain run by the rules: a baseline
    of the other mode would tolerate nothing and call every case of its own changed, so it is refused,
    whether its mode is recorded or read from its signatures (a baseline from before it was recorded)."""
    plain, compared = tmp_path / "plain.json", tmp_path / "compared.json"
    against = ["--against", "reference"]
    run(capsys, *MUTANT, "--findings", str(tmp_path / "f"), "--write-baseline", str(plain))
    run(capsys, *MUTANT, *against, "--findings", str(tmp_path / "f"), "--write-baseline", str(compared))
    assert json.loads(compared.read_text())["search"]["against"] == "reference"
    assert run(capsys, *MUTANT, *against, "--baseline", str(compared), "--strict")[0] == 0
    both = [*MUTANT[:-1], "chunk.matches_reference,prefill.matches_reference", *against, "-n", "2"]
    workers = tmp_path / "workers.json"
    run(capsys, *both, "--findings", str(tmp_path / "f"), "--write-baseline", str(workers))
    code, out, _ = run(
        capsys, *both, "--findings", str(tmp_path / "f"), "--baseline", str(workers), "--strict"
    )
    assert code == 0 and "changed" not in out, (
        "in workers too, the cases are replayed against the same target"
    )
    code, _, err = run(capsys, *MUTANT, *against, "--baseline", str(plain))
    assert code == 2 and "written without --against and this run compares against reference" in err
    code, _, err = run(capsys, *MUTANT, "--baseline", str(compared))
    assert code == 2 and "written with --against and this run has no --against" in err
    for path in (plain, compared):  # as written before the mode was recorded
        document = json.loads(path.read_text())
        del document["search"]["against"]
        path.write_text(json.dumps(document))
    assert run(capsys, *MUTANT, *against, "--baseline", str(plain))[0] == 2
    code, _, err = run(capsys, *MUTANT, "--baseline", str(plain), "--baseline", str(compared))
    assert code == 2 and "written in different modes" in err
