"""The Hypothesis internals in ``mmharness.hypothesis_compat``, on the installed Hypothesis: the range they
are supported in is ``pyproject.toml``'s, and each still does what the harness needs of it (a failure
here after a Hypothesis upgrade means the module must change, not the harness around it)."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from mmharness import hypothesis_compat
from mmharness.database import Choices
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def test_the_supported_range_is_the_declared_dependency_and_holds_the_installed_hypothesis():
    tomllib = pytest.importorskip("tomllib")
    declared = [Requirement(r) for r in tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]]
    (hypothesis,) = [r for r in declared if r.name == "hypothesis"]
    assert hypothesis.specifier == SpecifierSet(hypothesis_compat.SUPPORTED)
    assert importlib.metadata.version("hypothesis") in SpecifierSet(hypothesis_compat.SUPPORTED)


def _failing_above(limit: int, drawn: list[int], database, *, phases) -> object:
    @settings(database=database, max_examples=200, phases=phases, deadline=None)
    @given(st.integers(0, 10_000))
    def test(x: int) -> None:
        drawn.append(x)
        assert x < limit

    return test


def test_a_seeded_test_keeps_its_database_and_draws_the_same_cases():
    runs = []
    for _ in range(2):
        drawn: list[int] = []
        database = Choices()
        test = _failing_above(10, drawn, database, phases=[Phase.generate])
        with pytest.raises(AssertionError):
            hypothesis_compat.seeded(test, 1234, database)()
        assert database.saved, "the seeded test saved nothing: its database was turned off"
        runs.append(drawn)
    assert runs[0] == runs[1]


def test_the_sequences_handed_as_the_secondary_corpus_are_replayed_and_shrunk():
    found = Choices()
    with pytest.raises(AssertionError):
        hypothesis_compat.seeded(_failing_above(10, [], found, phases=[Phase.generate]), 1, found)()
    replayed: list[int] = []
    given_back = Choices([found.saved[-1]])
    test = _failing_above(10, replayed, given_back, phases=[Phase.reuse, Phase.shrink])
    with pytest.raises(AssertionError):
        hypothesis_compat.seeded(test, 1, given_back)()
    assert replayed[0] >= 10, "the given sequence was not replayed first"
    assert min(x for x in replayed if x >= 10) == 10, "the replayed failure was not shrunk"


def test_only_the_secondary_key_is_secondary():
    assert hypothesis_compat.is_secondary(b"\x01\x02.secondary")
    assert not hypothesis_compat.is_secondary(b"\x01\x02")
    assert not hypothesis_compat.is_secondary(b"\x01\x02.pareto")
