"""pytest plugin (entry point ``pytest11``): the harness's checks as pytest tests, when asked for.

Installed, it stays out of the way: unless an ``--mm-*`` option or the
``mm_target`` ini setting is given it adds no tests, loads no Hypothesis
profile and changes nothing. Asked (``pytest --mm-target SPEC``), it collects
one test per check and device from inside the package, from any directory;
with no paths on the command line those are the only tests collected, so a
fork's checkout runs the checks without its own suite. The target is resolved
on the controlling process first, so a bad spec is one clear usage error,
under ``-n`` too. A failing check's report holds every finding with its saved
case and the command that replays it.

It also offers the ``mm_target``, ``mm_device`` and ``mm_profile`` fixtures
(for a project's own tests around a target) and the ``mm_cuda`` marker, whose
tests it skips where no CUDA device is visible.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

OPTIONS = (
    *("--mm-target", "--mm-device", "--mm-profile", "--mm-checks"),
    *("--mm-findings", "--mm-strict", "--mm-database"),
)
_TARGET = pytest.StashKey[Any]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mmharness", "mmharness: multimodal scheduling checks")
    group.addoption("--mm-target", metavar="SPEC", help="run the harness's checks against this target")
    group.addoption("--mm-device", choices=("cpu", "cuda"), help="device of the cases (default cpu)")
    group.addoption("--mm-profile", choices=("ci", "dev", "deep"), help="example budget (default ci)")
    group.addoption("--mm-checks", action="append", metavar="IDS", help="checks: ids, families, rules")
    group.addoption("--mm-findings", metavar="DIR", help="where failing checks save their shrunk cases")
    group.addoption("--mm-strict", action="store_true", default=None, help="hazards and could-not-test fail")
    group.addoption(
        "--mm-database",
        metavar="SPEC",
        help="failing examples kept and replayed: none, a directory, github:OWNER/REPO, redis://HOST",
    )
    parser.addini("mm_target", "target spec the checks run against (as --mm-target)", default="")


def _asked(config: pytest.Config) -> bool:
    return any(config.getoption(option) for option in OPTIONS) or bool(config.getini("mm_target"))


def _spec(config: pytest.Config) -> str:
    return config.getoption("--mm-target") or config.getini("mm_target") or "reference"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "mm_cuda: needs a CUDA device (mmharness skips it without one)")
    if not _asked(config):
        return
    from mmharness.targets.base import TargetError
    from mmharness.targets.specs import resolve

    spec = _spec(config)
    try:
        config.stash[_TARGET] = resolve(spec)
    except TargetError as error:
        raise pytest.UsageError(f"--mm-target {spec}: {error}") from None
    if not config.option.file_or_dir:
        config.args = []  # the checks only, not the tests of the directory pytest was started in


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    if _TARGET in config.stash:
        items[:0] = CheckSuite.from_parent(session, name="mmharness").collect()
    if any(item.get_closest_marker("mm_cuda") for item in items):
        from mmharness.runner import cuda_available

        if not cuda_available():
            skip = pytest.mark.skip(reason="no CUDA device")
            for item in items:
                if item.get_closest_marker("mm_cuda"):
                    item.add_marker(skip)


class CheckSuite(pytest.Collector):
    """The selected checks, one test per check and device."""

    def collect(self) -> list[pytest.Item]:
        from mmharness.checks import select

        config = self.config
        ids = [i.strip() for group in config.getoption("--mm-checks") or [] for i in group.split(",")]
        try:
            checks = select([i for i in ids if i] or None)
        except KeyError as error:
            raise pytest.UsageError(f"--mm-checks: unknown check {error.args[0]!r}") from None
        device = config.getoption("--mm-device") or "cpu"
        return [CheckItem.from_parent(self, name=f"{c.id}[{device}]", check=c, device=device) for c in checks]


class CheckFailed(Exception):
    """A check failed the run; carries its result for the report."""


class CheckItem(pytest.Item):
    def __init__(self, *, check: Any, device: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.check = check
        self.device = device
        self.result = None

    def runtest(self) -> None:
        from mmharness import report
        from mmharness.runner import SKIPPED, fails_run, run_check

        config = self.config
        spec = _spec(config)
        from mmharness.database import default_spec, open_database

        profile = config.getoption("--mm-profile") or "ci"
        result = run_check(
            self.check,
            config.stash[_TARGET],
            profile=profile,
            device=self.device,
            database=open_database(config.getoption("--mm-database") or default_spec(profile)),
        )
        findings = Path(config.getoption("--mm-findings") or os.environ.get("MMHARNESS_FINDINGS", "findings"))
        for finding in result.findings:
            if finding.example is not None:
                finding.saved = report.save(result, finding, spec, findings)
        self.result = result
        self.user_properties.append(("mm_status", result.status))
        if result.status == SKIPPED:
            pytest.skip(result.reason)
        if fails_run(result.status, strict=bool(config.getoption("--mm-strict"))):
            raise CheckFailed(result)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, CheckFailed):
            from mmharness import report

            return report.failure_details(self.result, _spec(self.config))
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Path, int, str]:
        return Path(__file__), 0, f"mmharness check {self.name} on {_spec(self.config)}"


@pytest.fixture(scope="session")
def mm_target(request: pytest.FixtureRequest):
    """The target named by ``--mm-target`` (the reference when none is given)."""
    if _TARGET in request.config.stash:
        return request.config.stash[_TARGET]
    from mmharness.targets.specs import resolve

    return resolve(_spec(request.config))


@pytest.fixture(scope="session")
def mm_device(request: pytest.FixtureRequest) -> str:
    return request.config.getoption("--mm-device") or "cpu"


@pytest.fixture(scope="session")
def mm_profile(request: pytest.FixtureRequest) -> str:
    return request.config.getoption("--mm-profile") or "ci"
