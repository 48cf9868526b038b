"""pytest plugin (entry point ``pytest11``): ``--mm-target``, ``--mm-device``, ``--mm-profile``.

It gives tests a ``mm_target`` fixture and registers Hypothesis profiles that set
``derandomize`` explicitly, so ``pytest -n auto`` collects and runs the same
examples on every worker.
"""

from __future__ import annotations

import pytest

HYPOTHESIS_PROFILES = {"mm-ci": True, "mm-dev": False}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mmharness")
    group.addoption("--mm-target", default="reference", help="target spec the checks run against")
    group.addoption("--mm-device", default="cpu", choices=("cpu", "cuda"), help="device of the cases")
    group.addoption("--mm-profile", default="ci", choices=("ci", "dev", "deep"), help="check budget profile")


def pytest_configure(config: pytest.Config) -> None:
    from hypothesis import settings

    for name, derandomize in HYPOTHESIS_PROFILES.items():
        settings.register_profile(name, derandomize=derandomize, deadline=None, database=None)
    if not config.getoption("hypothesis_profile", default=None):
        settings.load_profile("mm-ci" if config.getoption("--mm-profile") == "ci" else "mm-dev")
    config.addinivalue_line("markers", "cuda: needs a CUDA device (skipped without one)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not any(item.get_closest_marker("cuda") for item in items):
        return
    from mmharness.runner import cuda_available

    if not cuda_available():
        skip = pytest.mark.skip(reason="no CUDA device")
        for item in items:
            if item.get_closest_marker("cuda"):
                item.add_marker(skip)


@pytest.fixture(scope="session")
def mm_target(request: pytest.FixtureRequest):
    """The target named by ``--mm-target``."""
    from mmharness.targets.base import TargetError
    from mmharness.targets.specs import resolve

    spec = request.config.getoption("--mm-target")
    try:
        return resolve(spec)
    except TargetError as error:
        pytest.exit(f"--mm-target: {error}", returncode=2)


@pytest.fixture(scope="session")
def mm_device(request: pytest.FixtureRequest) -> str:
    return request.config.getoption("--mm-device")


@pytest.fixture(scope="session")
def mm_profile(request: pytest.FixtureRequest) -> str:
    return request.config.getoption("--mm-profile")
