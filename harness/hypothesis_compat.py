"""The Hypothesis internals mmharness relies on, in one module: neither has a public form.

- ``seeded``: a test under a fixed seed that keeps its example database. ``@seed`` turns the database
  off (a seed reproduces a run; it is not meant to save one) and ``@settings`` may decorate a test only
  once, so the database goes back onto the settings Hypothesis reads from the test.
- ``is_secondary``: whether a key is that of Hypothesis's secondary corpus (sequences that failed once,
  replayed and then shrunk; a failure from the primary corpus is taken as shrunk already), where
  ``database.Choices`` hands over the sequences it was given.

``SUPPORTED`` is the Hypothesis range they hold for, ``pyproject.toml``'s requirement;
``tests/test_hypothesis_compat.py`` holds the two to each other and exercises both on the installed one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SUPPORTED = ">=6.100,<7"
"""The Hypothesis releases these internals are known in (``pyproject.toml``'s ``hypothesis`` range)."""
_SECONDARY = b".secondary"
_SETTINGS = "_hypothesis_internal_use_settings"


def seeded(test: Callable[..., None], seed: int, database: Any) -> Callable[..., None]:
    """``test`` (a ``@given`` test) under a fixed seed, keeping its ``database`` (``None``: none)."""
    from hypothesis import seed as fixed_seed
    from hypothesis import settings

    seeded: Any = fixed_seed(seed)(test)
    if database is not None:
        setattr(seeded, _SETTINGS, settings(getattr(seeded, _SETTINGS), database=database))
    return seeded


def is_secondary(key: bytes) -> bool:
    """Whether Hypothesis fetches ``key`` for a test's secondary corpus."""
    return key.endswith(_SECONDARY)
