"""pytest plugin (entry point ``pytest11``): the harness's checks as pytest tests, when asked for.

Installed, it stays out of the way: unless an ``--mm-*`` option or the
``mm_target`` ini setting is given it adds no tests, loads no Hypothesis
profile and changes nothing. Asked (``pytest --mm-target SPEC``), it collects
one test per check and device from inside the package, from any directory;
with no paths on the command line those are the only tests collected, so a
fork's checkout runs the checks without its own suite. The target, the
checks, the findings directory and the example database are resolved on the
controlling process first, so a bad option is one clear usage error naming it,
under ``-n`` too. A failing check's report holds every finding with its saved
case and the command that replays it.

``--mm-against SPEC`` (or the ``mm_against`` ini setting, read only once the
plugin is asked: a project's default for its ``--mm-target`` runs) runs every
check against a known-good target, as ``mmharness check --against`` does: each
difference is a change (a regression fails its test), and a check that target
cannot run is skipped, naming it.

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
    *("--mm-findings", "--mm-strict", "--mm-database", "--mm-against"),
)
_SESSION = pytest.StashKey[Any]()
_CHECKS = pytest.StashKey[list]()


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
    group.addoption(
        "--mm-against",
        metavar="SPEC",
        help="a known-good target every case also runs on: each difference is a change (a regression"
        " fails), as `mmharness check --against`",
    )
    parser.addini("mm_target", "target spec the checks run against (as --mm-target)", default="")
    parser.addini(
        "mm_against", "known-good target the checks compare with, once asked (as --mm-against)", default=""
    )


def _asked(config: pytest.Config) -> bool:
    return any(config.getoption(option) for option in OPTIONS) or bool(config.getini("mm_target"))


def _spec(config: pytest.Config) -> str:
    return config.getoption("--mm-target") or config.getini("mm_target") or "reference"


def _against(config: pytest.Config) -> str | None:
    """The ``--mm-against`` spec (else the ``mm_against`` ini's); ``None``: no comparison."""
    return config.getoption("--mm-against") or config.getini("mm_against") or None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "mm_cuda: needs a CUDA device (mmharness skips it without one)")
    for option in ("--mm-target", "--mm-against"):  # given empty (an unset CI variable): not "not asked"
        if config.getoption(option) == "":
            raise pytest.UsageError(f"{option}: empty; give a target spec (reference, sglang==X, a path)")
    if not _asked(config):
        return
    from mmharness.session import Session
    from mmharness.targets.base import TargetError
    from mmharness.targets.specs import resolve

    spec = _spec(config)
    try:
        target = resolve(spec)
    except TargetError as error:
        raise pytest.UsageError(f"--mm-target {spec}: {error}") from None
    against_spec = _against(config)
    try:
        other = None if against_spec is None else resolve(against_spec)
    except TargetError as error:
        raise pytest.UsageError(f"--mm-against {against_spec}: {error}") from None
    # Every other option is refused here too, once, rather than failing each check's test.
    config.stash[_CHECKS] = _checks(config)
    _findings_writable(config)
    profile = config.getoption("--mm-profile") or "ci"
    config.stash[_SESSION] = Session(
        target,
        spec,
        profile=profile,
        database=_database(config),
        findings=_findings(config)[1],
        against=other,
        against_spec=against_spec,
    )
    if not config.option.file_or_dir:
        config.args = []  # the checks only, not the tests of the directory pytest was started in


def _checks(config: pytest.Config) -> list:
    """The checks ``--mm-checks`` names (all without the option), as the CLI's ``--checks`` reads them."""
    from mmharness.checks import SelectionError, selected

    try:
        return selected(config.getoption("--mm-checks"), "--mm-checks")
    except SelectionError as error:
        raise pytest.UsageError(str(error)) from None


def _findings(config: pytest.Config) -> tuple[str | None, Path]:
    """Where found cases are saved, and the option or variable that said so (``None``: the default)."""
    if config.getoption("--mm-findings"):
        return "--mm-findings", Path(config.getoption("--mm-findings"))
    if os.environ.get("MMHARNESS_FINDINGS"):
        return "MMHARNESS_FINDINGS", Path(os.environ["MMHARNESS_FINDINGS"])
    return None, Path("findings")


def _findings_writable(config: pytest.Config) -> None:
    """A findings directory the user named must take files (the default is made when a case is saved)."""
    from mmharness.report import writable

    option, directory = _findings(config)
    problem = option and writable(str(directory), directory=True)
    if problem:
        separator = "=" if option == "MMHARNESS_FINDINGS" else " "
        raise pytest.UsageError(f"{option}{separator}{directory}: {problem}")


def _database(config: pytest.Config) -> Any:
    from mmharness.database import DatabaseError, default_spec, open_database

    spec = config.getoption("--mm-database") or default_spec(config.getoption("--mm-profile") or "ci")
    try:
        return open_database(spec, option="--mm-database")
    except (DatabaseError, OSError) as error:
        raise pytest.UsageError(str(error)) from None


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    if _SESSION in config.stash:
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
        config = self.config
        device = config.getoption("--mm-device") or "cpu"
        checks = config.stash[_CHECKS]
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
        from mmharness.runner import SKIPPED, fails_run

        config = self.config
        session = config.stash[_SESSION]
        result = session.keep(session.run(self.check, self.device))
        self.result = result
        self.user_properties.append(("mm_status", result.status))
        if result.status == SKIPPED:
            pytest.skip(result.reason)
        if fails_run(result.status, strict=bool(config.getoption("--mm-strict"))):
            raise CheckFailed(result)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, CheckFailed):
            from mmharness.views import console

            return console.result_details(self.result, _spec(self.config), against=_against(self.config))
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Path, int, str]:
        against = _against(self.config)
        shown = _spec(self.config) + (f" against {against}" if against else "")
        return Path(__file__), 0, f"mmharness check {self.name} on {shown}"


@pytest.fixture(scope="session")
def mm_target(request: pytest.FixtureRequest):
    """The target named by ``--mm-target`` (the reference when none is given)."""
    if _SESSION in request.config.stash:
        return request.config.stash[_SESSION].target
    from mmharness.targets.specs import resolve

    return resolve(_spec(request.config))


@pytest.fixture(scope="session")
def mm_device(request: pytest.FixtureRequest) -> str:
    return request.config.getoption("--mm-device") or "cpu"


@pytest.fixture(scope="session")
def mm_profile(request: pytest.FixtureRequest) -> str:
    return request.config.getoption("--mm-profile") or "ci"
