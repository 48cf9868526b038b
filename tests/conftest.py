"""Fixtures shared by the tests that download SGLang releases."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def harness_cache(request, tmp_path_factory) -> Path:
    """Releases go to ``$MMHARNESS_CACHE``, else pytest's cache dir (shared by workers, kept between runs)."""
    if os.environ.get("MMHARNESS_CACHE"):
        return Path(os.environ["MMHARNESS_CACHE"])
    store = getattr(request.config, "cache", None)
    return Path(store.mkdir("mmharness")) if store is not None else tmp_path_factory.mktemp("mmharness")
