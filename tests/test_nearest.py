"""``mmharness targets SPEC --nearest``: the candidates ranked by how like the target they behave on a
fixed sample (each check's ci cases, compared as ``check --against`` compares), the identical ones named,
and the nearest's changes, each shrunk.

Offline: the engine model's mutants (a target is identical to itself; another mutant's bug is a change).
On releases (``network``): a path copy of SGLang 0.5.23, unmodified and with one seeded change, among
0.5.21, 0.5.22 and 0.5.23, whose rule files all differ by digest.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from mmharness import nearest
from mmharness.cli import main
from mmharness.targets.reference import ReferenceTarget

OFF_BY_ONE, INCLUSIVE = "mutant:chunk_start_off_by_one", "mutant:chunk_end_inclusive"
NEIGHBOURS = ("0.5.21", "0.5.22", "0.5.23")
RULE_FILES = ("sglang/srt/managers/mm_schedule.py", "sglang/srt/managers/mm_utils.py")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def ranking(out: str) -> list[tuple[str, str, str]]:
    """The ranked table's rows: (candidate, checks changed, first changes)."""
    rows = re.findall(r"^(\d+)\s+(\S+)(?: \([^)]*\))?\s+(\d+ of \d+)\s+\d+\s+(.*)$", out, flags=re.M)
    return [(spec, changed, kinds) for _, spec, changed, kinds in rows]


def test_a_target_is_identical_to_itself_and_nearest_to_itself(capsys, tmp_path):
    argv = ["targets", OFF_BY_ONE, "--nearest", "--checks", "R1", "--max-examples", "10", "-n", "2"]
    argv += ["--candidate", "reference", "--candidate", INCLUSIVE, "--candidate", OFF_BY_ONE]
    code, out, _ = run(capsys, *argv, "--json", str(tmp_path / "nearest.json"))
    assert code == nearest.NO_REGRESSION, out
    rows = ranking(out)
    assert rows[0] == (OFF_BY_ONE, "0 of 4", "identical")
    assert {spec for spec, _, _ in rows} == {"reference", INCLUSIVE, OFF_BY_ONE}
    assert all(kinds != "identical" for _, _, kinds in rows[1:])
    assert f"identical on every sample case of every check both run: {OFF_BY_ONE}\n" in out
    assert f"nearest: {OFF_BY_ONE} (no change)" in out
    document = json.loads((tmp_path / "nearest.json").read_text())
    assert (document["format"], document["exit"], document["regression"]) == (nearest.FORMAT, 0, False)
    assert (document["nearest"], document["identical"], document["changes"]) == (OFF_BY_ONE, [OFF_BY_ONE], [])
    first, *others = document["candidates"]
    assert (first["rank"], first["spec"], first["identical"], first["checks_changed"]) == (
        1,
        OFF_BY_ONE,
        True,
        0,
    )
    assert [c["outcome"] for c in first["compared"]] == [nearest.SAME] * 4
    assert all(not c["identical"] and c["checks_changed"] > 0 and c["first_changes"] for c in others)


def test_only_fixes_from_the_nearest_exit_0_and_the_json_says_so(capsys, tmp_path):
    """The reference against a buggy candidate: its changes are fixes, which no CI step should fail on."""
    argv = [
        "targets",
        "reference",
        "--nearest",
        "--candidate",
        OFF_BY_ONE,
        "--checks",
        "chunk.matches_reference",
    ]
    code, out, _ = run(capsys, *argv, "--max-examples", "20", "--json", str(tmp_path / "nearest.json"))
    assert code == nearest.NO_REGRESSION, out
    assert ranking(out) == [(OFF_BY_ONE, "1 of 1", "1 fix")] and "include a regression" not in out
    document = json.loads((tmp_path / "nearest.json").read_text())
    assert (document["exit"], document["regression"], document["nearest"]) == (0, False, OFF_BY_ONE)
    assert document["changes"] and {c["change"] for c in document["changes"]} == {"fix"}
    assert all(c["replay"] is None and c["shrunk"] for c in document["changes"]), "nothing saved: no replay"


def test_the_nearest_changes_are_shrunk_judged_and_saved(capsys, tmp_path):
    """Against the reference alone, the mutant's bug is its regressions, each with a shrunk case."""
    argv = [
        "targets",
        OFF_BY_ONE,
        "--nearest",
        "--candidate",
        "reference",
        "--checks",
        "chunk.matches_reference",
    ]
    report = tmp_path / "out" / "nearest.json"
    code, out, _ = run(
        capsys, *argv, "--max-examples", "20", "--findings", str(tmp_path), "--json", str(report)
    )
    assert code == nearest.REGRESSED, out
    assert out.rstrip().endswith("exit 1: the changes from reference include a regression")
    assert ranking(out) == [("reference", "1 of 1", "1 regression")]
    assert re.search(r"^nearest: reference, 1 of 1 checks changed \(\d+ regression\)", out, flags=re.M)
    assert f"--- DIVERGENCE chunk.matches_reference (rule R1) on {OFF_BY_ONE} against reference" in out
    assert "    signature: regression: requests[...] chunk[...]" in out and "shrunk case:" in out
    saved = sorted(tmp_path.glob("chunk.matches_reference-*.json"))
    assert saved
    assert f"reproduce with: mmharness replay {saved[0]} --target {OFF_BY_ONE} --against reference" in out
    document = json.loads(report.read_text())
    assert (document["exit"], document["regression"], document["nearest"]) == (1, True, "reference")
    assert document["candidates"][0]["first_changes"] == {"regression": 1}
    changes = document["changes"]
    assert changes and all(c["change"] == "regression" and c["kind"] == "divergence" for c in changes)
    assert {c["saved"] for c in changes} == {str(path) for path in saved}
    replay = f"mmharness replay {saved[0]} --target {OFF_BY_ONE} --against reference"
    assert replay in [c["replay"] for c in changes]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["targets", "--candidate", "reference"], "--candidate needs --nearest"),
        (["targets", "reference", "--max-examples", "5"], "--max-examples needs --nearest"),
        (["targets", "reference", "--json", "x.json"], "--json needs --nearest"),
        (["targets", "--nearest"], "--nearest needs a target"),
        (["targets", "reference", "--nearest"], "reference is no engine's target"),
        (["targets", "reference", "--nearest", "--candidate", "mutant:nope"], "--candidate mutant:nope: "),
        (["targets", "reference", "--nearest", "--candidate", "reference", "--checks", ""], "names no check"),
    ],
)
def test_what_nearest_cannot_use_is_one_usage_error(capsys, argv, words):
    code, out, err = run(capsys, *argv)
    assert code == 2 and not out.strip()
    assert words in err and len(err.strip().splitlines()) == 1


def test_a_target_of_no_engine_has_no_default_candidates():
    with pytest.raises(nearest.NearestError, match="name candidates with --candidate SPEC"):
        nearest.engine_candidates(ReferenceTarget(), "reference")


def test_the_ranking_puts_fewer_changed_checks_then_more_cases_alike_first():
    def candidate(spec: str, *compared: nearest.Compared, error: str | None = None) -> nearest.Candidate:
        return nearest.Candidate(spec, compared=compared, error=error)

    same = nearest.Compared("a", nearest.SAME, 20)
    early = nearest.Compared("b", nearest.CHANGED, 1, "neutral", "neutral change (rows): x")
    late = nearest.Compared("b", nearest.CHANGED, 15, "fix", "fix: y")
    skipped = nearest.Compared("c", nearest.NOT_COMPARED, reason="lacks c")
    given = [
        candidate("broken", error="no such release"),
        candidate("early", same, early, skipped),
        candidate("nothing", skipped),
        candidate("late", same, late),
        candidate("twin", same, skipped),
    ]
    ranked = sorted(given, key=nearest.Candidate.distance)
    assert [c.spec for c in ranked] == ["twin", "late", "early", "broken", "nothing"]
    assert [c.identical for c in ranked] == [True, False, False, False, False]
    found = nearest.Nearest("target", ranked, 20)
    assert found.nearest.spec == "twin" and [c.spec for c in found.identical] == ["twin"]
    assert nearest.exit_code(found) == nearest.NO_REGRESSION
    lines = nearest.ranking_lines(found)
    assert lines[1].split() == ["1", "twin", "0", "of", "1", "20", "identical"]
    assert lines[3].split()[-2:] == ["1", "neutral"]
    assert "could not load: no such release" in lines[4] and lines[5].endswith("nothing compared")


# On releases -----------------------------------------------------------------------------------------


@pytest.fixture
def fork_of_0523(sglang_release, seeded_copy, harness_cache, monkeypatch):
    """``fork(edits)``: a path copy of SGLang 0.5.23 with each edit of its rules file made (none: as
    released); the candidates load from the session's cache."""
    monkeypatch.setenv("MMHARNESS_CACHE", str(harness_cache))
    for version in NEIGHBOURS:
        sglang_release(version)
    root = Path(sglang_release("0.5.23").describe()["source"])

    def fork(*edits: tuple[str, str]) -> str:
        return str(
            seeded_copy(root, [("sglang/srt/managers/mm_schedule.py", old, new) for old, new in edits])
        )

    return fork


def _digests(root: Path) -> dict[str, str]:
    return {name: hashlib.sha256((root / name).read_bytes()).hexdigest() for name in RULE_FILES}


def _nearest_among_neighbours(capsys, spec: str, expected: int = nearest.NO_REGRESSION) -> str:
    argv = ["targets", spec, "--nearest", *(w for v in NEIGHBOURS for w in ("--candidate", f"sglang=={v}"))]
    # R2 and R5: the rules 0.5.22 (precomputed) and 0.5.23 (split) fixed, and where the reworded
    # refusal below is reached; the other checks would only add time.
    code, out, _ = run(capsys, *argv, "--max-examples", "20", "-n", "2", "--checks", "R2,R5")
    assert code == expected, out
    return out


@pytest.mark.network
def test_an_unmodified_copy_is_identical_to_its_release_alone(capsys, fork_of_0523, sglang_release):
    """0.5.21 and 0.5.22 differ from 0.5.23 in every rule file's digest, and in behaviour too: each
    changes checks on the sample (fixes and neutral changes), 0.5.22 fewer than 0.5.21."""
    sources = {v: Path(sglang_release(v).describe()["source"]) for v in NEIGHBOURS}
    newest = _digests(sources["0.5.23"])
    for version in ("0.5.21", "0.5.22"):
        assert all(_digests(sources[version])[name] != newest[name] for name in RULE_FILES)
    out = _nearest_among_neighbours(capsys, fork_of_0523())
    rows = ranking(out)
    assert [spec for spec, _, _ in rows] == ["sglang==0.5.23", "sglang==0.5.22", "sglang==0.5.21"]
    assert rows[0][2] == "identical" and all("regression" not in kinds for _, _, kinds in rows)
    assert "identical on every sample case of every check both run: sglang==0.5.23\n" in out
    assert "nearest: sglang==0.5.23 (no change)" in out


@pytest.mark.network
def test_a_copy_with_one_change_is_nearest_its_release_with_that_change(capsys, fork_of_0523):
    """A reworded partial-coverage error (R2 holds the message) is the one change from 0.5.23: a
    regression wherever that refusal is reached, shown with its shrunk case."""
    old = '"MM inputs where only some items are precomputed."'
    fork = fork_of_0523((old, '"Only some multimodal items are precomputed."'))
    out = _nearest_among_neighbours(capsys, fork, nearest.REGRESSED)
    rows = ranking(out)
    assert rows[0][0] == "sglang==0.5.23" and rows[0][2].endswith("regression")
    assert "identical on every" not in out
    assert re.search(r"^nearest: sglang==0\.5\.23, \d+ of \d+ checks changed \(\d+ regression\)", out, re.M)
    shown = re.findall(r"^--- DIVERGENCE (\S+) .* against sglang==0\.5\.23$", out, flags=re.M)
    assert "precomputed.matches_reference" in shown
    assert "actual NotImplementedError('Only some multimodal items are precomputed.')" in out
    assert "neutral change" not in out.split("nearest: ")[1], "the reword is the only change"


@pytest.mark.network
def test_the_default_candidates_are_the_cached_releases_of_the_engine(
    sglang_release, harness_cache, tmp_path, monkeypatch
):
    for version in ("0.5.22", "0.5.23"):
        sglang_release(version)
        (tmp_path / "releases").mkdir(exist_ok=True)
        (tmp_path / "releases" / f"sglang-{version}").symlink_to(
            harness_cache / "releases" / f"sglang-{version}"
        )
    monkeypatch.setenv("MMHARNESS_CACHE", str(tmp_path))
    target = sglang_release("0.5.23")
    assert nearest.engine_candidates(target, "sglang==0.5.23") == ["sglang==0.5.22"]
    assert nearest.engine_candidates(target, "/a/fork") == ["sglang==0.5.22", "sglang==0.5.23"]


def test_the_exit_code_is_1_only_for_a_regression_of_the_nearest_and_4_when_none_compared():
    def candidate(spec: str, change: str | None) -> nearest.Candidate:
        outcome = nearest.SAME if change is None else nearest.CHANGED
        return nearest.Candidate(spec, compared=(nearest.Compared("a", outcome, 3, change),))

    assert (
        nearest.exit_code(nearest.Nearest("t", [candidate("n", "fix"), candidate("far", "regression")], 5))
        == 0
    )
    assert nearest.exit_code(nearest.Nearest("t", [candidate("n", "regression")], 5)) == nearest.REGRESSED
    unusable = nearest.Candidate("broken", error="no such release")
    assert nearest.exit_code(nearest.Nearest("t", [unusable], 5)) == nearest.NONE_COMPARED
    document = nearest.as_json(nearest.Nearest("t", [unusable], 5), ["a"], code=4)
    assert document["nearest"] is None and document["candidates"][0]["rank"] is None
