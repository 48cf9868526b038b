"""``mmharness fuzz check:ID``: a check's Hypothesis test driven by atheris, with coverage of the
target's engine files guiding it, and what it finds saved as an ordinary, replayable finding.

The seeded bug (``tests/check_fuzz_target.py``) sits behind nested branches: the CI profile's 100
examples miss it, and the coverage-guided fuzzer climbs to it within a bounded run count.
"""

from __future__ import annotations

import json
import os
import py_compile
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from check_fuzz_target import NESTED_BUG
from mmharness import payload
from mmharness.checks import all_checks
from mmharness.checks.outcome import DIVERGENCE
from mmharness.cli import main
from mmharness.commands.options import NOTHING_RAN, USAGE_ERROR
from mmharness.fuzz import checks
from mmharness.fuzz.registry import check_targets
from mmharness.runner import PASSED, fuzz_target, replay, run_check
from mmharness.targets.specs import resolve

ROOT = Path(__file__).parent.parent
TESTS = Path(__file__).parent
CHECK = "chunk.matches_reference"
SPEC = "check_fuzz_target:NESTED_BUG"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# The seeded bug: missed by the CI profile, found by the coverage-guided mode ------------------


def test_the_ci_profile_misses_the_nested_bug():
    result = run_check(all_checks()[CHECK], NESTED_BUG, profile="ci")
    assert result.status == PASSED and result.examples_run == 100


@pytest.mark.fuzz
def test_the_coverage_guided_mode_finds_it_and_saves_a_finding_that_replays(tmp_path):
    """Deterministic: libFuzzer's seed and a run bound (it is found within about 7000 runs)."""
    findings, tmp = tmp_path / "findings", tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONHASHSEED": "0"}
    command = [sys.executable, "-m", "mmharness.cli", "fuzz", f"check:{CHECK}", "--target", SPEC]
    command += ["--findings", str(findings), "--", "-seed=1", "-atheris_runs=20000", "-use_value_profile=1"]
    done = subprocess.run(command, cwd=TESTS, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode != 0, done.stderr[-3000:]
    assert "coverage from" in done.stderr and "2 engine file(s)" in done.stderr
    (saved,) = findings.glob(f"{CHECK}-*.json")
    assert f"--- DIVERGENCE {CHECK} (rule R1) on {SPEC}" in done.stderr
    assert "shrunk case:" in done.stderr  # shrunk by the runner, as `check` shrinks
    assert f"reproduce with: mmharness replay {saved} --target {SPEC}" in done.stderr
    assert list(findings.glob("crash-*")), "libFuzzer's own crash file is beside it"
    assert list(tmp.iterdir()) == [], "the run's scratch directory is gone"
    document = payload.load_document(saved)
    assert document.provenance["check"] == CHECK and document.provenance["target"] == SPEC
    example = (document.case, document.params)
    assert replay(all_checks()[CHECK], NESTED_BUG, example).status == DIVERGENCE
    assert replay(all_checks()[CHECK], resolve("reference"), example).status == PASSED
    replayed = subprocess.run(
        [sys.executable, "-m", "mmharness.cli", "replay", str(saved), "--target", SPEC],
        cwd=TESTS,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert replayed.returncode == 1 and "DIVERGENCE" in replayed.stdout, replayed.stdout[-2000:]


# The pieces, without atheris ------------------------------------------------------------------


def test_a_fuzzer_failure_is_shrunk_saved_and_replays(tmp_path, capsys):
    """``fuzz_target`` on random bytes, then ``report_finding``: what the atheris callback does."""
    from hypothesis.database import InMemoryExampleDatabase

    check = all_checks()[CHECK]
    target = resolve("mutant:chunk_start_off_by_one")
    database = InMemoryExampleDatabase()
    one = fuzz_target(check, target, database=database)
    rng = random.Random(0)
    failure = next(
        found
        for found in (one(rng.randbytes(rng.choice([64, 128]))) for _ in range(500))
        if found is not None
    )
    assert failure.kind == DIVERGENCE and failure.example is not None
    result = checks.report_finding(
        check, target, "mutant:chunk_start_off_by_one", failure, database, tmp_path
    )
    (finding,) = [f for f in result.findings if f.signature == failure.signature]
    assert finding.shrunk and finding.saved and Path(finding.saved).parent == tmp_path
    err = capsys.readouterr().err
    assert f"reproduce with: mmharness replay {finding.saved} --target mutant:chunk_start_off_by_one" in err
    document = payload.load_document(finding.saved)
    assert replay(check, target, (document.case, document.params)).status == DIVERGENCE


def test_known_signatures_pass():
    check = all_checks()[CHECK]
    target = resolve("mutant:chunk_start_off_by_one")
    known: set[str] = set()
    one = fuzz_target(check, target, known=known)
    rng = random.Random(0)
    inputs = [rng.randbytes(96) for _ in range(200)]
    signatures = {found.signature for found in map(one, inputs) if found is not None}
    assert signatures
    known.update(signatures)
    assert not any(map(one, inputs))


def test_a_bundled_fuzzer_passes_the_findings_its_bundled_baseline_knows(tmp_path, capsys, monkeypatch):
    """A ClusterFuzzLite build ships the release's baseline (build.sh writes it at build time): the
    bundled entry point hands its signatures for the check to the fuzzer as known, so the fuzzer looks
    past them; a bundle without one knows nothing."""
    spec = "mutant:chunk_start_off_by_one"
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    written = bundle / checks.BUNDLED_BASELINE
    assert run(capsys, "check", "--target", spec, "--checks", CHECK, "--write-baseline", str(written))[0] == 1
    handed: list[set[str]] = []
    monkeypatch.setattr(checks, "main", lambda argv, *, check, target, spec, known: handed.append(known))
    monkeypatch.setattr(sys, "_MEIPASS", str(bundle), raising=False)
    checks.bundled_main(CHECK, spec)
    entries = json.loads(written.read_text())["entries"]
    assert handed[-1] and handed[-1] == {e["signature"] for e in entries if e["check"] == CHECK}
    written.unlink()
    checks.bundled_main(CHECK, spec)
    assert handed[-1] == set()


def test_only_the_engine_files_are_instrumented():
    assert checks.coverage_files(resolve("reference")) == []  # the harness's reference is no engine
    (model,) = checks.coverage_files(resolve("mutant:chunk_start_off_by_one"))
    assert model.endswith("engine_model.py")
    assert [Path(f).name for f in checks.coverage_files(NESTED_BUG)] == [
        "engine_model.py",
        "check_fuzz_target.py",
    ]


# The command line -----------------------------------------------------------------------------


def test_every_check_is_listed_as_a_fuzz_target(capsys):
    code, out, _ = run(capsys, "fuzz", "--list")
    rows = [line.split() for line in out.splitlines()]
    assert code == 0 and rows[0] == ["case-parser", "-"]
    assert [row for row in rows if row[0].startswith("check:")] == [[name, "any"] for name in check_targets()]
    assert [f"check:{CHECK}", "any"] in rows


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["fuzz", "check:no.such"], "fuzz: check:no.such: no such check"),
        (["fuzz", "no-such-parser"], "fuzz: no-such-parser: no such fuzz target"),
        (["fuzz", f"check:{CHECK}", "--target", "mutant:nope"], "unknown mutant 'nope'"),
        (["fuzz", f"check:{CHECK}", "--", "-atheris_runs=-1"], "-atheris_runs must be in [0, 2147483647]"),
    ],
)
def test_bad_fuzz_arguments_are_usage_errors(capsys, tmp_path, argv, message):
    code, _, err = run(capsys, *argv[:2], "--findings", str(tmp_path), *argv[2:])
    assert code == USAGE_ERROR and message in err


def test_a_check_the_target_cannot_run_runs_nothing(capsys, tmp_path):
    code, _, err = run(capsys, "fuzz", "check:device.cpu_equals_cuda", "--findings", str(tmp_path))
    assert code == NOTHING_RAN and "device.cpu_equals_cuda cannot run on reference" in err


def test_describe_names_the_files_whose_coverage_guides_the_fuzzer(capsys):
    code, out, _ = run(
        capsys, "fuzz", f"check:{CHECK}", "--target", "mutant:chunk_end_inclusive", "--describe"
    )
    assert code == 0
    assert f"fuzz target: check:{CHECK}" in out and "engine_model.py" in out


# ClusterFuzzLite ------------------------------------------------------------------------------


def test_build_sh_generates_a_fuzz_target_per_runnable_check(
    tmp_path, sglang_release, harness_cache, monkeypatch
):
    """build.sh's check loop, with a stand-in for compile_python_fuzzer: one script per check the
    release can run, each naming a registered check and calling ``bundled_main``."""
    sglang_release("0.5.23")  # in the cache
    monkeypatch.setenv("MMHARNESS_CACHE", str(harness_cache))
    text = (ROOT / ".clusterfuzzlite" / "build.sh").read_text()
    loop = text[text.index("# The checks: one generated script") :]
    src, compiled = tmp_path / "src", tmp_path / "compiled.txt"
    src.mkdir()
    script = f'compile_python_fuzzer() {{ echo "$1" >> {compiled}; }}\n{loop}'
    env = {**os.environ, "SRC": str(src), "OUT": str(tmp_path), "RELEASE": "0.5.23"}
    env["MMHARNESS_CACHE"] = str(harness_cache)
    subprocess.run(["bash", "-eu", "-c", script], check=True, env=env, cwd=ROOT, timeout=300)
    scripts = sorted(src.glob("fuzz_check_*.py"))
    assert compiled.read_text().split() == [str(s) for s in scripts]
    ids = set()
    for path in scripts:
        py_compile.compile(str(path), doraise=True)
        (check_id,) = re.findall(r'bundled_main\("([^"]+)", "sglang==0\.5\.23"\)', path.read_text())
        ids.add(check_id)
    assert ids == set(checks.runnable("sglang==0.5.23")) and ids <= set(all_checks())
    assert f"fuzz_check_{CHECK.replace('.', '_')}.py" in [s.name for s in scripts]
