"""Fixtures shared by the tests that download SGLang releases; the `fuzz` marker's skip without atheris;
the Hypothesis profile of the project's own property tests."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from hypothesis import settings

# No per-example time limit in the project's own @given tests: a loaded shared machine makes a 200 ms
# deadline flaky, and speed is measured by benchmarks, not asserted by tests.
settings.register_profile("mmharness-tests", deadline=None)
settings.load_profile("mmharness-tests")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``fuzz`` run atheris, which the README's test command (``.[test]``) does not install."""
    if importlib.util.find_spec("atheris") is not None:
        return
    skip = pytest.mark.skip(reason="needs atheris: pip install -e '.[fuzz]'")
    for item in items:
        if item.get_closest_marker("fuzz"):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _environment_restored():
    """A command run in-process (``main([...])``) sets ``--engine`` and ``--env`` in ``os.environ`` for
    the rest of its process, as a real run wants; here the next test must not inherit them."""
    from mmharness.targets import settings as engine_settings

    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)
    engine_settings.apply([])


@pytest.fixture
def start(tmp_path: Path):
    """``start(*args, ...)``: the CLI in a subprocess in the test's directory (``fault_injection.launched``);
    whatever the test's outcome, nothing is left running."""
    from fault_injection import launched

    with launched(tmp_path) as run:
        yield run


@pytest.fixture(scope="session")
def harness_cache(request, tmp_path_factory) -> Path:
    """Releases go to ``$MMHARNESS_CACHE``, else pytest's cache dir (shared by workers, kept between runs)."""
    if os.environ.get("MMHARNESS_CACHE"):
        return Path(os.environ["MMHARNESS_CACHE"])
    store = getattr(request.config, "cache", None)
    return Path(store.mkdir("mmharness")) if store is not None else tmp_path_factory.mktemp("mmharness")


@pytest.fixture(scope="session")
def sglang_release(harness_cache):
    """``sglang_release(version)``: that release's target, downloaded into the session cache once."""
    from mmharness.engines.sglang.adapter import from_release

    loaded: dict = {}

    def get(version: str):
        if version not in loaded:
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv("MMHARNESS_CACHE", str(harness_cache))
                loaded[version] = from_release(version)
        return loaded[version]

    return get


@pytest.fixture(scope="session")
def vllm_release_dirs(harness_cache):
    """``vllm_release_dirs(version)``: that vLLM release's kept files, downloaded into the session cache
    once."""
    from mmharness.engines.vllm import adapter

    def get(version: str) -> Path:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("MMHARNESS_CACHE", str(harness_cache))
            return Path(adapter.fetch(version))

    return get


@pytest.fixture(scope="session")
def vllm_release_dir(vllm_release_dirs) -> Path:
    """vLLM 0.33.0's kept files: the newest release with both runners, which the tests hold to the
    rules and seed copies of (0.34.0, with model runner V2 alone, is pinned beside it)."""
    return vllm_release_dirs("0.33.0")


@pytest.fixture
def seeded_copy(tmp_path):
    """``seeded_copy(root, edits)``: a copy of an unpacked release with each ``(file, original, bug)``
    edit made (``file`` relative to ``root``; the original text must occur once), for seeded bugs."""

    def copy(root: Path, edits) -> Path:
        import shutil

        into = tmp_path / "seeded"
        shutil.copytree(root, into)
        for file, original, bug in edits:
            path = into / file
            source = path.read_text()
            assert source.count(original) == 1, f"{file} no longer holds the text this bug is seeded into"
            path.write_text(source.replace(original, bug))
        return into

    return copy


def reference_summary(selection: str | None = None) -> str:
    """What pytest reports for every check (or those ``selection`` names, as ``--mm-checks`` reads it)
    run against the reference: passed, then skipped.

    Skipped: a check needing CUDA where there is none, and a check of an engine
    option the reference does not model.
    """
    from mmharness.checks import all_checks, selected
    from mmharness.runner import cuda_available
    from mmharness.targets.reference import ReferenceTarget

    checks = all_checks().values() if selection is None else selected([selection], "--mm-checks")
    skipped = sum(
        (check.needs_cuda and not cuda_available()) or not check.needs <= ReferenceTarget.capabilities
        for check in checks
    )
    return f"{len(checks) - skipped} passed" + (f", {skipped} skipped" if skipped else "")
