"""The example database: a failing example found once is replayed first next time, under its own key."""

from __future__ import annotations

import pytest
from hypothesis.database import DirectoryBasedExampleDatabase, InMemoryExampleDatabase
from mmharness.checks import all_checks
from mmharness.checks.outcome import DIVERGENCE
from mmharness.database import NONE, DatabaseError, KeyedDatabase, default_spec, open_database
from mmharness.runner import run_check
from mmharness.targets.specs import resolve

CHECKS = all_checks()


def test_a_failure_found_once_is_replayed_first(tmp_path):
    database = DirectoryBasedExampleDatabase(str(tmp_path))
    check, target = CHECKS["prefill.cache_independent"], resolve("mutant:prefill_cache_warmth")
    first = run_check(check, target, profile="dev", database=database, stop_at=(DIVERGENCE,))
    assert first.status == DIVERGENCE
    # both runs only to their first divergence (unshrunk: the first saves the example as found); the
    # second asks whether the saved examples come first, not for the rest
    again = run_check(check, target, profile="dev", database=database, stop_at=(DIVERGENCE,))
    assert again.status == DIVERGENCE
    # the first example: without the saved ones this mutant still fails by the third (the dev
    # profile's first draws are small), so only 1 shows that they came first
    assert again.first_failure_at == 1, "the saved examples come first"


def test_each_check_target_and_device_has_its_own_key():
    shared = InMemoryExampleDatabase()
    one, two = KeyedDatabase(shared, "chunk.a", "t", "cpu"), KeyedDatabase(shared, "chunk.b", "t", "cpu")
    one.save(b"k", b"value")
    assert list(one.fetch(b"k")) == [b"value"] and list(two.fetch(b"k")) == []


def test_specs():
    assert default_spec("ci") == NONE and open_database(NONE) is None
    assert default_spec("dev").endswith("examples")
    assert open_database("github:owner/repo") is not None
    with pytest.raises(DatabaseError, match="github:OWNER/REPO"):
        open_database("github:nothing")
    with pytest.raises(DatabaseError, match="expected none, a directory"):
        open_database("s3://bucket")


def test_a_directory_that_cannot_be_written_is_refused_naming_the_option(tmp_path):
    (tmp_path / "a-file").write_text("")
    blocked = str(tmp_path / "a-file" / "db")
    with pytest.raises(DatabaseError, match=r"^--database .*/a-file/db: cannot write there"):
        open_database(blocked)
    with pytest.raises(DatabaseError, match=r"^--mm-database .*/a-file: not a directory"):
        open_database(str(tmp_path / "a-file"), option="--mm-database")
    assert isinstance(open_database(str(tmp_path / "new" / "db")), DirectoryBasedExampleDatabase)
    assert (tmp_path / "new" / "db").is_dir() and not list((tmp_path / "new" / "db").iterdir())


def test_the_cli_refuses_an_unwritable_database_before_any_check_runs(tmp_path, capsys):
    from mmharness.cli import main

    (tmp_path / "a-file").write_text("")
    blocked = str(tmp_path / "a-file" / "db")
    code = main(["check", "--checks", "count", "--findings", str(tmp_path / "f"), "--database", blocked])
    out, err = capsys.readouterr()
    assert code == 2
    assert err.strip() == (
        f"mmharness: error: --database {blocked}: cannot write there (Not a directory);"
        " give a writable directory, or none"
    )
    assert "PASS" not in out
