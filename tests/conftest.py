"""Fixtures shared by the tests that download SGLang releases; the `fuzz` marker's skip without atheris."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``fuzz`` run atheris, which the README's test command (``.[test]``) does not install."""
    if importlib.util.find_spec("atheris") is not None:
        return
    skip = pytest.mark.skip(reason="needs atheris: pip install -e '.[fuzz]'")
    for item in items:
        if item.get_closest_marker("fuzz"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def harness_cache(request, tmp_path_factory) -> Path:
    """Releases go to ``$MMHARNESS_CACHE``, else pytest's cache dir (shared by workers, kept between runs)."""
    if os.environ.get("MMHARNESS_CACHE"):
        return Path(os.environ["MMHARNESS_CACHE"])
    store = getattr(request.config, "cache", None)
    return Path(store.mkdir("mmharness")) if store is not None else tmp_path_factory.mktemp("mmharness")


def reference_summary() -> str:
    """What pytest reports for every check run against the reference: passed, then skipped.

    Skipped: a check needing CUDA where there is none, and a check of an engine
    option the reference does not model.
    """
    from mmharness.checks import all_checks
    from mmharness.runner import cuda_available
    from mmharness.targets.reference import ReferenceTarget

    checks = all_checks().values()
    skipped = sum(
        (check.needs_cuda and not cuda_available()) or not check.needs <= ReferenceTarget.capabilities
        for check in checks
    )
    return f"{len(checks) - skipped} passed" + (f", {skipped} skipped" if skipped else "")
