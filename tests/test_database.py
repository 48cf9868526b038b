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
    first = run_check(check, target, profile="dev", database=database)
    assert first.status == DIVERGENCE
    again = run_check(check, target, profile="dev", database=database)
    assert again.status == DIVERGENCE
    assert again.first_failure_at <= 3, "the saved examples come first"


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
