"""The command line: exit codes, one-line usage errors, saved findings that replay."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest
from mmharness import steps
from mmharness.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_reference_follows_every_rule_it_can_be_asked(capsys, tmp_path):
    """The README's main job: every check on the reference passes or is skipped (its hazards shown). A
    refusal of the reference's own splitter once read as the harness's fault (could not test)."""
    code, out, _ = run(capsys, "check", "--max-examples", "20", "--findings", str(tmp_path))
    assert code == 0, out
    assert "COULD-NOT-TEST" not in out and "DIVERGENCE" not in out
    assert ", 0 diverged, " in out and " 0 could not test, " in out


def test_reference_passes(capsys, tmp_path):
    code, out, _ = run(capsys, "check", "--checks", "R1", "--max-examples", "20", "--findings", str(tmp_path))
    assert code == 0
    assert "PASS           chunk.matches_reference (R1)" in out
    assert out.rstrip().endswith("4 passed, 0 diverged, 0 hazards, 0 could not test, 0 skipped")


def test_mutant_fails_and_its_finding_replays(capsys, tmp_path):
    target = "mutant:chunk_start_off_by_one"
    code, out, _ = run(
        capsys,
        "check",
        "--target",
        target,
        "--checks",
        "chunk.matches_reference",
        "--findings",
        str(tmp_path),
    )
    assert code == 1
    assert "DIVERGENCE     chunk.matches_reference (R1)" in out
    assert "signature: requests[...] chunk[...]: fewer rows" in out
    assert "expected: tensor[" in out and "actual:   tensor[" in out
    saved = sorted(tmp_path.glob("chunk.matches_reference-*.json"))
    assert len(saved) == 2, "each way of failing is saved with its own shrunk case"
    for path in saved:
        assert f"reproduce with: mmharness replay {path} --target {target}" in out
        document = json.loads(path.read_text())
        assert document["check"] == "chunk.matches_reference" and document["target"] == target
        assert run(capsys, "replay", str(path))[0] == 1  # the target saved in the case
        assert run(capsys, "replay", str(path), "--target", "reference")[0] == 0


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["check", "--target", "nonsense"], "unknown target 'nonsense'"),
        (["check", "--target", "mutant:nope"], "unknown mutant 'nope'"),
        (["check", "--checks", "chunk.nope"], "unknown check 'chunk.nope'"),
        (["check", "--max-examples", "0"], "--max-examples must be in [1, 1000000], got 0"),
        (["check", "--baseline", "/nonexistent/report.json"], "--baseline /nonexistent/report.json"),
        (["replay", "/nonexistent/case.json"], "/nonexistent/case.json"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(capsys, argv, words):
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("mmharness: error: ")
    assert words in err


def test_hazards_fail_only_under_strict(capsys, tmp_path):
    args = ["check", "--checks", "precomputed.partial_fallback", "--findings", str(tmp_path)]
    code, out, _ = run(capsys, *args)
    assert code == 0 and "HAZARD         precomputed.partial_fallback" in out
    assert "1 hazard(s) of the rules themselves: the reference is the rules" in out
    assert run(capsys, *args, "--strict")[0] == 1


def test_an_engines_hazard_reads_as_the_engines(capsys, tmp_path):
    """Only the reference's hazards are the rules' own; an engine's are said to be met in it."""
    args = ["check", "--target", "mutant:chunk_start_off_by_one", "--checks", "precomputed.partial_fallback"]
    code, out, _ = run(capsys, *args, "--findings", str(tmp_path))
    assert code == 0 and "1 hazard(s): the target follows the rules" in out
    assert "of the rules themselves" not in out


def test_reports_and_baseline(capsys, tmp_path):
    report, junit = tmp_path / "report.json", tmp_path / "junit.xml"
    args = [
        "check",
        "--target",
        "mutant:count_inclusive_end",
        "--checks",
        "count",
        "--findings",
        str(tmp_path),
    ]
    assert run(capsys, *args, "--json", str(report), "--junit", str(junit))[0] == 1
    data = json.loads(report.read_text())
    assert data["results"][0]["status"] == "divergence"
    assert data["results"][0]["findings"][0]["signature"]
    assert "<failure" in junit.read_text()
    code, out, _ = run(capsys, *args, "--baseline", str(report))
    assert code == 0 and "(tolerated: in the baseline)" in out  # known finding tolerated


def test_baseline_records_how_a_check_failed(capsys, tmp_path):
    baseline = tmp_path / "baseline.json"
    target = "mutant:count_inclusive_end"
    args = ["check", "--target", target, "--checks", "count", "--findings", str(tmp_path)]
    assert run(capsys, *args, "--write-baseline", str(baseline))[0] == 1
    data = json.loads(baseline.read_text())
    assert data["format"] == "mmharness.baseline/1"
    (entry,) = data["entries"]
    assert entry["check"] == "count.matches_reference" and entry["kind"] == "divergence"
    assert run(capsys, *args, "--baseline", str(baseline))[0] == 0
    entry["signature"] = "MM tokens in extend: some other way of failing"
    baseline.write_text(json.dumps(data))
    code, out, _ = run(capsys, *args, "--baseline", str(baseline))
    assert code == 1, "a new way of failing in a known-failing check is new"
    assert f"count.matches_reference [cpu] {entry['signature']}: its case now fails otherwise" in out
    del entry["case"]  # as a baseline from before cases were kept: then only the search can tell
    baseline.write_text(json.dumps(data))
    code, out, _ = run(capsys, *args, "--baseline", str(baseline))
    assert "stale baseline entry (did not reproduce): count.matches_reference [cpu] MM tokens" in out


def test_could_not_test_has_its_own_exit_code(capsys, tmp_path, monkeypatch):
    (tmp_path / "gappy_adapter.py").write_text(GAPPY_ADAPTER)
    monkeypatch.syspath_prepend(str(tmp_path))
    args = ["check", "--target", "gappy_adapter:Gappy", "--checks", "count", "--findings", str(tmp_path)]
    code, out, _ = run(capsys, *args)
    assert code == 3
    assert "COULD-NOT-TEST count.matches_reference" in out and "signature: could not test: a_stub" in out
    assert run(capsys, *args, "--strict")[0] == 1
    junit = tmp_path / "junit.xml"
    run(capsys, *args, "--junit", str(junit))
    assert "<error" in junit.read_text()


GAPPY_ADAPTER = """
from mmharness.targets.base import COUNT, HarnessGap


class Gappy:
    name = "gappy"
    capabilities = frozenset({COUNT})

    def describe(self):
        return {"target": self.name}

    def count_mm_tokens(self, case):
        raise HarnessGap("the adapter reached a_stub", what="a_stub")
"""


def test_listings(capsys):
    code, out, _ = run(capsys, "targets")
    assert code == 0 and "reference" in out and "mutant:chunk_start_off_by_one" in out
    code, out, _ = run(capsys, "checks")
    assert code == 0 and "prefill.cache_independent" in out and "R3" in out


def test_help_does_not_import_torch():
    code = (
        "import sys; from mmharness.cli import main\n"
        "try: main(['--help'])\n"
        "except SystemExit: pass\n"
        "assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_replay_refuses_bad_params_in_one_line(capsys, tmp_path):
    case = tmp_path / "bad.json"
    case.write_text(
        '{"format": "mmharness.case/1", "check": "prefill.permutation", "params": {"permutation": [0, 7]},'
        ' "requests": [{"seq_len": 1, "prefix_len": 0, "extend_len": 1}, {"seq_len": 1, "prefix_len": 0,'
        ' "extend_len": 1}]}'
    )
    code, _, err = run(capsys, "replay", str(case))
    assert code == 2 and "params.permutation is not a permutation" in err and err.count("\n") == 1


def test_unloadable_adapter_and_unwritable_outputs_are_usage_errors(capsys, tmp_path, monkeypatch):
    (tmp_path / "broken_adapter.py").write_text("raise RuntimeError('no GPU here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code, _, err = run(capsys, "check", "--target", "broken_adapter:Target")
    assert code == 2 and "RuntimeError: no GPU here" in err
    code, _, err = run(capsys, "check", "--json", str(tmp_path), "--checks", "R1")
    assert code == 2 and err.startswith(f"mmharness: error: --json {tmp_path}")


def test_baseline_of_another_target_is_refused(capsys, tmp_path):
    report = tmp_path / "report.json"
    args = ["check", "--checks", "count", "--findings", str(tmp_path)]
    assert run(capsys, *args, "--target", "mutant:count_inclusive_end", "--json", str(report))[0] == 1
    code, _, err = run(capsys, *args, "--target", "mutant:chunk_end_inclusive", "--baseline", str(report))
    assert code == 2 and "recorded for target 'mutant:count_inclusive_end'" in err


def test_matrix_json_becomes_an_atlas(capsys, tmp_path):
    matrix_json, atlas_md = tmp_path / "matrix.json", tmp_path / "atlas.md"
    args = ["matrix", "--target", "reference", "--target", "mutant:count_inclusive_end", "--checks", "count"]
    code, out, _ = run(capsys, *args, "--json", str(matrix_json))
    assert code == 1 and "count.matches_reference [divergence] mutant:count_inclusive_end (1)" in out
    assert run(capsys, "atlas", str(matrix_json), "-o", str(atlas_md))[0] == 0
    text = atlas_md.read_text()
    assert text.startswith("# Release atlas") and "mmharness matrix --target reference" in text
    assert "### Not yet explained: MM tokens in extend" in text
    (tmp_path / "not-a-matrix.json").write_text("[1, 2]")
    code, _, err = run(capsys, "atlas", str(tmp_path / "not-a-matrix.json"))
    assert code == 2 and err.count("\n") == 1 and "attribute" not in err
    assert f"{tmp_path / 'not-a-matrix.json'}: not a matrix report" in err and "a JSON array" in err
    (tmp_path / "report.json").write_text('{"format": "mmharness.report/2", "results": []}')
    code, _, err = run(capsys, "atlas", str(tmp_path / "report.json"))
    assert code == 2 and "not a matrix report" in err and "'mmharness.report/2'" in err


def test_a_failing_program_is_saved_with_its_steps_and_replays(capsys, tmp_path):
    target = "mutant:resume_from_last_chunk"
    args = ["check", "--target", target, "--checks", "prefill.stateful", "--findings", str(tmp_path)]
    # --first-failure: the program as found (shrinking it and the search's other findings, most of the
    # run's time, are not what a saved program needs)
    code, out, _ = run(capsys, *args, "--first-failure")
    assert code == 1 and '"steps": [' in out
    (path,) = tmp_path.glob("prefill.stateful-*.json")
    document = json.loads(path.read_text())
    assert document["params"]["steps"][0]["op"] in (*steps.CHUNKS, steps.SKIP, steps.CACHE)
    assert document["note"].startswith("divergence")
    assert run(capsys, "replay", str(path))[0] == 1
    assert run(capsys, "replay", str(path), "--target", "reference")[0] == 0
    bad = tmp_path / "bad.json"
    document["params"]["steps"] = [{"op": "prefill", "requests": [9], "lengths": [1]}]
    bad.write_text(json.dumps(document))
    code, _, err = run(capsys, "replay", str(bad))
    assert code == 2 and "params.steps[0]: requests" in err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["check", "--checks", "R4", "--json", "/proc/x"], "--json /proc/x: cannot write there"),
        (["check", "--checks", "R4", "--junit", "/proc/x"], "--junit /proc/x: cannot write there"),
        (["check", "--checks", "R4", "--json", "/dev/full"], "--json /dev/full: not a regular file"),
        (["matrix", "--target", "reference", "--json", "/proc/x"], "--json /proc/x: cannot write there"),
        (
            ["matrix", "--target", "reference", "--checks", "count", "--findings", "/proc/x"],
            "--findings /proc/x: cannot write there",
        ),
        (["fuzz", "case-parser", "--findings", "/proc/x"], "--findings /proc/x: cannot write there"),
        (["check", "--baseline", "/dev/zero"], "--baseline /dev/zero: a baseline larger than 16 MiB"),
        (["fuzz", "case-parser", "--baseline", "/dev/zero"], "a fuzz baseline larger than 16 MiB"),
    ],
)
def test_outputs_and_inputs_are_refused_before_the_run(capsys, argv, words):
    code, out, err = run(capsys, *argv)
    assert code == 2 and words in err and err.count("\n") == 1
    assert "PASS" not in out, "refused before any check ran"


def test_one_file_for_two_outputs_is_a_usage_error(capsys, tmp_path):
    same, spelled_otherwise = tmp_path / "out", f"{tmp_path}/./out"
    args = ["check", "--checks", "count", "--findings", str(tmp_path / "f")]
    code, out, err = run(capsys, *args, "--json", str(same), "--junit", spelled_otherwise)
    assert code == 2 and err.count("\n") == 1 and "PASS" not in out
    assert f"--json and --junit name the same file {spelled_otherwise}" in err
    code, _, err = run(capsys, *args[:3], "--findings", str(same), "--write-baseline", str(same))
    assert code == 2 and "--findings and --write-baseline name the same file" in err
    matrix = ["matrix", "--target", "reference", "--checks", "count"]
    code, _, err = run(capsys, *matrix, "--json", str(same), "--findings", str(same))
    assert code == 2 and "--json and --findings name the same file" in err


def test_a_findings_directory_from_the_environment_is_named_as_such(capsys, monkeypatch):
    monkeypatch.setenv("MMHARNESS_FINDINGS", "/proc/x")
    code, out, err = run(capsys, "check", "--checks", "count")
    assert code == 2 and err.count("\n") == 1 and "PASS" not in out
    assert err.startswith("mmharness: error: $MMHARNESS_FINDINGS /proc/x: cannot write there")
    for given in (["--findings", "/proc/y"], ["--findings=/proc/y"], ["--find", "/proc/y"]):
        code, _, err = run(capsys, "check", "--checks", "count", *given)
        assert code == 2 and err.startswith("mmharness: error: --findings /proc/y: cannot write there")
    code, _, err = run(capsys, "fuzz", "case-parser")
    assert code == 2 and err.startswith("mmharness: error: $MMHARNESS_FINDINGS /proc/x: cannot write there")
    code, _, err = run(capsys, "fuzz", "case-parser", "--findings", "/proc/y")
    assert code == 2 and err.startswith("mmharness: error: --findings /proc/y: cannot write there")


def test_a_deeply_nested_baseline_is_a_usage_error(capsys, tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    for argv in (["check", "--baseline", str(deep)], ["fuzz", "case-parser", "--baseline", str(deep)]):
        code, _, err = run(capsys, *argv)
        assert code == 2 and "nested too deeply" in err


def test_reports_are_written_atomically(capsys, tmp_path):
    report = tmp_path / "report.json"
    report.write_text("old")
    args = ["check", "--checks", "count", "--json", str(report), "--findings", str(tmp_path)]
    assert run(capsys, *args)[0] == 0
    assert json.loads(report.read_text())["format"] == "mmharness.report/2"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [], "no temporary file left"


def test_a_run_where_everything_was_skipped_is_not_a_success(capsys, tmp_path):
    lone = tmp_path / "kimi_k3.py"
    lone.write_text("x = 1\n")  # a model file without Kimi-K3's class: the target lacks every capability
    code, _, err = run(capsys, "check", "--target", str(lone), "--checks", "R1")
    assert code == 2 and "holds no SGLang rules" in err
    code, _, err = run(capsys, "check", "--target", "reference", "--device", "cpu", "--checks", "R6")
    assert code == 4 and "nothing ran: every check was skipped" in err
    saved = tmp_path / "cuda-case.json"
    case = {"format": "mmharness.case/1", "check": "device.cpu_equals_cuda", "device": "cpu", "requests": []}
    saved.write_text(json.dumps(case))
    code, _, _ = run(capsys, "replay", str(saved))
    assert code == 4, "a replay that ran nothing does not read as fixed"


def test_fuzz_flags_are_checked_and_scratch_directories_cleaned(capsys, tmp_path):
    code, _, err = run(capsys, "fuzz", "case-parser", "--", "-atheris_runs=abc")
    assert code == 2 and "-atheris_runs takes an integer" in err


def test_a_case_without_a_check_says_so(capsys, tmp_path):
    case = tmp_path / "case.json"
    case.write_text('{"format": "mmharness.case/1", "requests": []}')
    code, _, err = run(capsys, "replay", str(case))
    assert code == 2 and 'names no check (it has no "check" key)' in err


def test_hypothesis_state_goes_to_the_cache_not_the_current_directory(tmp_path):
    command = [sys.executable, "-c", "import sys; from mmharness.cli import main; sys.exit(main())"]
    args = ["check", "--checks", "count", "--max-examples", "5", "--findings", str(tmp_path / "f")]
    subprocess.run([*command, *args], cwd=tmp_path, check=True, capture_output=True)
    assert not (tmp_path / ".hypothesis").exists()


def test_a_matrix_saves_findings_with_replay_lines(capsys, tmp_path):
    args = ["matrix", "--target", "reference", "--target", "mutant:count_inclusive_end", "--checks", "count"]
    code, out, _ = run(capsys, *args, "--findings", str(tmp_path))
    assert code == 1
    (saved,) = (tmp_path / "mutant_count_inclusive_end").glob("count.matches_reference-*.json")
    assert f"reproduce with: mmharness replay {saved} --target mutant:count_inclusive_end" in out


def test_files_that_cannot_be_used_say_why_in_one_line(capsys, tmp_path):
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (3 << 20))
    code, _, err = run(capsys, "replay", str(big))
    assert code == 2 and f"the file holds {3 << 20} bytes, over the limit of 1048576 bytes" in err
    broken = tmp_path / "fork" / "sglang" / "srt" / "managers"
    broken.mkdir(parents=True)
    (broken / "mm_schedule.py").write_text("def broken(:\n")
    code, _, err = run(capsys, "check", "--target", str(tmp_path / "fork"))
    assert code == 2 and "could not load its rules files (mm_schedule.py: SyntaxError" in err


def test_an_empty_findings_option_means_the_default(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["check", "--target", "mutant:count_inclusive_end", "--checks", "count", "--findings", ""]
    code, _, _ = run(capsys, *args)
    assert code == 1 and list((tmp_path / "findings").glob("count.matches_reference-*.json"))


def test_workers_give_the_serial_run_its_results_findings_and_replays(capsys, tmp_path):
    """Every option reaches the workers: --first-failure too (each check stops at its first failure
    in a worker as serially; it was once left out, and workers searched and saved on)."""

    def check(workers: str, where: str) -> tuple[int, dict, list[str]]:
        report = tmp_path / f"{where}.json"
        argv = [
            "check",
            "--target",
            "mutant:chunk_start_off_by_one",
            "--checks",
            "chunk,count",
            "--first-failure",
        ]
        code, _, _ = run(
            capsys, *argv, "-n", workers, "--findings", str(tmp_path / where), "--json", str(report)
        )
        saved = sorted(p.name for p in (tmp_path / where).iterdir())
        return code, json.loads(report.read_text().replace(str(tmp_path / where), "DIR")), saved

    serial, parallel = check("1", "serial"), check("2", "parallel")
    assert serial[0] == parallel[0] == 1
    assert serial[1]["results"] == parallel[1]["results"]
    assert serial[2] == parallel[2] and serial[2]
    files = [str(p) for p in sorted((tmp_path / "parallel").glob("*.json"))]
    code, out, _ = run(capsys, "replay", "-n", "auto", *files)
    assert code == 1 and out.count("--- DIVERGENCE") == len(files)

    def recorded(where: str) -> list[dict]:  # first sightings come from the workers, in their own order
        lines = (tmp_path / where / "ledger.ndjson").read_text().replace(str(tmp_path / where), "DIR")
        return [r for r in map(json.loads, lines.splitlines()) if r["record"] != "found"]

    assert recorded("serial") == recorded("parallel"), "one executor: the same records in or out of process"
    code, out, _ = run(capsys, "replay", str(tmp_path / "parallel" / "ledger.ndjson"))
    assert code == 1 and out.count("--- DIVERGENCE") == len(files), "the ledger replays what was saved"


@pytest.mark.parametrize(
    ("value", "words"), [("0", "--workers must be >= 1, got 0"), ("x", "a number or auto")]
)
def test_a_bad_worker_count_is_a_usage_error(capsys, value, words):
    code, _, err = run(capsys, "check", "-n", value)
    assert code == 2 and words in err


def test_a_mixed_device_case_replays_where_cuda_is_and_says_why_it_cannot_elsewhere(capsys, tmp_path):
    from mmharness.model import Case, Item, Request
    from mmharness.payload import dumps
    from mmharness.runner import cuda_available

    items = (Item(((0, 1),), 1, True), Item(((2, 3),), 2, True, device="cuda"))
    saved = tmp_path / "mixed.json"
    saved.write_text(dumps(Case((Request(4, 0, 4, items),)), check="device.mixed_precomputed"))
    code, out, _ = run(capsys, "replay", str(saved))
    if cuda_available():
        assert code == 0 and "PASS" in out
    else:
        assert code == 4 and "no CUDA device" in out


def test_baselines_record_their_depth_and_combine(capsys, tmp_path):
    """A baseline holds what its search reached: it says how deep, and several (other checks, other seeds)
    combine, so a deeper run against a shallow one is told why its findings may read as new."""
    mutant = ["--target", "mutant:chunk_start_off_by_one", "--findings", str(tmp_path / "f")]
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    code, _, _ = run(capsys, "check", *mutant, "--checks", "chunk.matches_reference", "--max-examples", "5",
                     "--write-baseline", str(one))  # fmt: skip
    assert code == 1
    assert json.loads(one.read_text())["search"] == {
        "profile": "ci",
        "seed": None,
        "against": None,
        "examples": 5,
    }
    run(capsys, "check", *mutant, "--checks", "prefill.matches_reference", "--write-baseline", str(two))
    both = ["--checks", "chunk.matches_reference,prefill.matches_reference"]
    code, out, _ = run(capsys, "check", *mutant, *both, "--baseline", str(one))
    assert code == 1, "the prefill findings are not in the first baseline"
    assert "written from 5 examples per check and this run searched up to" in out
    code, out, _ = run(capsys, "check", *mutant, *both, "--baseline", str(one), "--baseline", str(two))
    assert code == 0, out
    assert "tolerated by the baseline" in out


def test_a_finding_made_under_env_is_saved_with_it_and_replayed_under_it(capsys, tmp_path, monkeypatch):
    """A setting changes what a target does, so a finding's file records the run's ``--env`` values and
    ``replay`` sets them again; ``--env`` on the replay wins; files saved under different values are a
    usage error, since one process has one environment."""
    import os

    monkeypatch.delenv("MMH_TEST_SETTING", raising=False)
    target = "mutant:chunk_start_off_by_one"
    argv = ["check", "--target", target, "--checks", "chunk.matches_reference", "--findings", str(tmp_path)]
    code, out, _ = run(capsys, *argv, "--env", "MMH_TEST_SETTING=7")
    assert code == 1
    path = sorted(tmp_path.glob("chunk.matches_reference-*.json"))[0]
    assert json.loads(path.read_text())["env"] == {"MMH_TEST_SETTING": "7"}
    assert f"reproduce with: mmharness replay {path} --target {target} --env MMH_TEST_SETTING=7" in out

    os.environ.pop("MMH_TEST_SETTING")
    code, out, _ = run(capsys, "replay", str(path))
    assert code == 1 and os.environ["MMH_TEST_SETTING"] == "7"
    assert "saved under: --env MMH_TEST_SETTING=7" in out
    code, out, _ = run(capsys, "replay", str(path), "--env", "MMH_TEST_SETTING=3")
    assert code == 1 and os.environ["MMH_TEST_SETTING"] == "3" and "saved under" not in out

    other = tmp_path / "other.json"
    other.write_text(path.read_text().replace('"MMH_TEST_SETTING": "7"', '"MMH_TEST_SETTING": "8"'))
    code, _, err = run(capsys, "replay", str(path), str(other))
    assert code == 2 and "saved under different settings" in err and "replay them apart" in err


def test_first_failure_ends_each_check_at_its_first_failing_case_unshrunk(capsys, tmp_path):
    target = "mutant:chunk_start_off_by_one"
    args = ["check", "--target", target, "--checks", "chunk.matches_reference", "--findings", str(tmp_path)]
    code, out, _ = run(capsys, *args, "--first-failure")
    assert code == 1 and "case as found (the search stopped at its first failure)" in out
    assert "shrunk case" not in out
    (saved,) = tmp_path.glob("chunk.matches_reference-*.json")
    assert run(capsys, "replay", str(saved), "--target", target)[0] == 1
    baseline = tmp_path / "baseline.json"
    assert run(capsys, *args, "--first-failure", "--write-baseline", str(baseline))[0] == 1
    known = {e["signature"] for e in json.loads(baseline.read_text())["entries"]}
    report = tmp_path / "again.json"
    code, out, _ = run(capsys, *args, "--first-failure", "--baseline", str(baseline), "--json", str(report))
    again = {f["signature"] for r in json.loads(report.read_text())["results"] for f in r["findings"]}
    assert known and not known & again, "a known finding does not end the search: it passes by"
    assert code == (1 if again else 0)


def test_fail_fast_stops_at_the_first_failure_shrinks_it_and_says_what_did_not_run(capsys, tmp_path):
    target = "mutant:chunk_start_off_by_one"
    args = ["check", "--target", target, "--checks", "chunk.matches_reference,count", "--fail-fast"]
    code, out, _ = run(capsys, *args, "--findings", str(tmp_path / "a"))
    assert code == 1 and "--fail-fast: stopped after the first check that fails the run" in out
    assert "    shrunk case:" in out, "the first way of failing is shrunk"
    assert "not started: count.matches_reference [cpu]" in out
    code, out, _ = run(capsys, *args, "--shrink-time", "0", "--findings", str(tmp_path / "b"))
    assert code == 1 and "    shrunk case:" not in out and "case as found" in out, "no time to shrink"


def test_no_shrink_reports_every_way_it_fails_as_found_serially_and_in_workers(capsys, tmp_path):
    """``--no-shrink``: each way of failing kept as the search found it (several, not only the first,
    as ``--first-failure`` does), said so, and the same with workers (the option reaches them)."""
    argv = ["check", "--target", "mutant:prefill_encodes_outside_window", "--no-shrink"]
    argv += ["--checks", "prefill.encoder_calls,chunk.matches_reference"]
    reports, outs = {}, {}
    for workers in ("1", "2"):
        report = tmp_path / f"{workers}.json"
        code, outs[workers], _ = run(capsys, *argv, "-n", workers, "--json", str(report))
        assert code == 0, "hazards only"
        reports[workers] = json.loads(report.read_text())["results"]
    findings = [f for r in reports["1"] for f in r["findings"]]
    assert len(findings) >= 2 and all(f["shrunk"] is False for f in findings)
    assert "case as found (the search did not shrink it)" in outs["1"]
    assert reports["1"] == reports["2"]


def test_a_reader_that_leaves_early_is_no_error(tmp_path):
    """``mmharness targets | head -1``: the pipe closes under the command, which exits 0 quietly (a
    closed pipe is an ``OSError`` too: it must not reach the full-disk handler and re-raise)."""
    command = (
        f"{shlex.quote(sys.executable)} -c 'import sys; from mmharness.cli import main; sys.exit(main())'"
    )
    done = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {command} targets | head -1"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.startswith("reference"), done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr
