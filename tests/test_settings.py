"""Engine settings from the engine's own declarations (``mmharness.targets.settings`` and each engine's
``settings`` module), read without running them; ``--env NAME=VALUE``; the re-fetch of a release
unpacked for another member list."""

from __future__ import annotations

import ast
import os
import shutil
import textwrap
import zipfile
from pathlib import Path

import pytest
from mmharness.checks import all_checks
from mmharness.checks.outcome import COULD_NOT_TEST, DIVERGENCE, HAZARD
from mmharness.cli import main
from mmharness.engines.sglang import settings as sglang_settings
from mmharness.engines.sglang.shims import SGLangShims
from mmharness.engines.vllm import settings as vllm_settings
from mmharness.engines.vllm.shims import VLLMShims
from mmharness.runner import PASSED, run_check
from mmharness.targets import releases, settings
from mmharness.targets.base import HarnessGap, TargetError
from mmharness.targets.settings import Scope, Unknown
from mmharness.targets.stubs import Record, Stub

CHECKS = all_checks()
NEW = "SGLANG_SOME_NEW_SETTING"


@pytest.fixture(autouse=True)
def no_env_given(monkeypatch):
    """Each test starts with no ``--env`` values remembered, and the variables it sets undone."""
    for name in (NEW, "SGLANG_FLAG", "SGLANG_SIZE", "SGLANG_OLD", "VLLM_SIZE", "VLLM_MODE", "SGLANG_X"):
        monkeypatch.setenv(name, "")  # recorded, so that what a test (or --env) sets is undone
        monkeypatch.delenv(name)
    settings.apply([])
    yield
    settings.apply([])


# The evaluator ---------------------------------------------------------------------------------------


def _value(expression: str, environ: dict[str, str] | None = None, constants: dict | None = None):
    scope = Scope(environ or {}, constants or {})
    return settings.evaluate(ast.parse(expression, mode="eval").body, scope), scope.source()


@pytest.mark.parametrize(
    ("expression", "environ", "expected"),
    [
        ('int(os.getenv("X", "8"))', {}, 8),
        ('int(os.getenv("X", "8"))', {"X": "3"}, 3),
        ('bool(int(os.environ.get("X", "0")))', {"X": "1"}, True),
        ('os.environ.get("X", "False").lower() == "true"', {"X": "TRUE"}, True),
        ('os.getenv("X", "0").strip().lower() in ("1", "true")', {}, False),
        ('float(os.getenv("X", "1.5"))', {}, 1.5),
        ('int(os.environ["X"]) if "X" in os.environ else None', {}, None),
        ('int(os.environ["X"]) if "X" in os.environ else None', {"X": "4"}, 4),
        ('None if "X" not in os.environ else os.environ["X"].split(",")', {"X": "a,b"}, ["a", "b"]),
        ("64 * 1024", {}, 65536),
        ("2 ** 31", {}, 2**31),
        ('(os.getenv("X") or os.getenv("Y") or "0") == "1"', {"Y": "1"}, True),
    ],
)
def test_the_evaluator_reads_the_small_language(expression, environ, expected):
    assert _value(expression, environ)[0] == expected


@pytest.mark.parametrize(
    "expression",
    [
        'maybe_convert_int(os.environ.get("X", None))',  # a helper of the file: never run
        'os.path.expanduser(os.getenv("X", "~/.cache"))',
        "sys.modules[__name__].VLLM_DP_RANK",
        'int(os.getenv("X", "not a number"))',  # raises when read: no default to run with
        'os.environ["X"]',  # unset: KeyError
        "__import__('os').system('false')",
        "2 ** 100000",
        "[x for x in range(3)]",
    ],
)
def test_forms_outside_the_language_stay_unknown(expression):
    with pytest.raises(Unknown):
        _value(expression)


def test_where_the_value_came_from():
    assert _value('os.getenv("X", "1")')[1] == settings.FROM_DECLARATION
    assert _value('os.getenv("X", "1")', {"X": "2"})[1] == settings.FROM_ENVIRONMENT


# SGLang's declarations -------------------------------------------------------------------------------

SGLANG_ENVIRON = """
import os
from enum import IntEnum


class EnvField:
    def __init__(self, default, secret=False):
        self.default = default

    def get(self):
        ...

    def is_set(self):
        ...

    def __bool__(self):
        raise RuntimeError("use get()")


class EnvBool(EnvField):
    pass


class EnvInt(EnvField):
    pass


class EnvStr(EnvField):
    pass


class EnvFloat(EnvField):
    pass


class EnvTuple(EnvField):
    pass


class _Alias:
    def __init__(self, default, deprecated_name, secret=False):
        ...


class EnvBoolWithAlias(_Alias, EnvBool):
    pass


class Level(IntEnum):
    OFF = 0
    WARN = 1


def _default_hip():
    return False


class Envs:
    SGLANG_FLAG = EnvBool(True)
    SGLANG_SIZE = EnvInt(8 * 1024)
    SGLANG_NAME = EnvStr("x")
    SGLANG_RATIO = EnvFloat(0.5)
    SGLANG_LIST = EnvTuple(tuple())
    SGLANG_LEVEL = EnvInt(Level.WARN)
    SGLANG_HIP = EnvBool(_default_hip)
    SGLANG_DIR = EnvStr(lambda: os.path.expanduser("~"))
    SGLANG_CACHE = EnvStr(os.path.expanduser("~/.cache"))
    SGLANG_NEW = EnvBoolWithAlias(False, deprecated_name="SGLANG_OLD")


envs = Envs()
"""


@pytest.fixture
def environ_file(tmp_path) -> Path:
    path = tmp_path / "environ.py"
    path.write_text(SGLANG_ENVIRON)
    return path


def test_sglang_declarations_are_read_with_their_defaults(environ_file):
    declared = sglang_settings.read(environ_file)
    assert set(declared.settings) == {
        "SGLANG_FLAG", "SGLANG_SIZE", "SGLANG_NAME", "SGLANG_RATIO", "SGLANG_LIST",
        "SGLANG_LEVEL", "SGLANG_HIP", "SGLANG_DIR", "SGLANG_CACHE", "SGLANG_NEW",
    }  # fmt: skip
    defaults = {name: declared.settings[name].read({}).value for name in ("SGLANG_FLAG", "SGLANG_SIZE")}
    assert defaults == {"SGLANG_FLAG": True, "SGLANG_SIZE": 8192}
    assert declared.settings["SGLANG_NAME"].read({}).value == "x"
    assert declared.settings["SGLANG_RATIO"].read({}).value == 0.5
    assert declared.settings["SGLANG_LIST"].read({}).value == ()
    assert declared.settings["SGLANG_LEVEL"].read({}).value == 1
    for computed in ("SGLANG_HIP", "SGLANG_DIR", "SGLANG_CACHE"):  # defaults computed at run time
        with pytest.raises(Unknown):
            declared.settings[computed].read({})
    assert declared.settings["SGLANG_HIP"].read({"SGLANG_HIP": "yes"}).value is True, "set: parsed"
    assert "__bool__" in declared.methods and "get" in declared.methods


def test_sglang_environment_values_parse_as_the_field_type_does(environ_file):
    declared = sglang_settings.read(environ_file).settings
    assert declared["SGLANG_FLAG"].read({"SGLANG_FLAG": "No"}).value is False
    assert declared["SGLANG_SIZE"].read({"SGLANG_SIZE": "3"}) == settings.Value(3, settings.FROM_ENVIRONMENT)
    assert declared["SGLANG_LIST"].read({"SGLANG_LIST": "a, b,,"}).value == ("a", "b")
    invalid = declared["SGLANG_SIZE"].read({"SGLANG_SIZE": "many"})
    assert invalid.value == 8192 and "not a valid EnvInt" in invalid.source, "invalid: the default"
    assert declared["SGLANG_NEW"].read({"SGLANG_OLD": "1"}).value is True, "the deprecated name is read"


def test_sglang_shims_serve_envs_and_note_each_read(environ_file, monkeypatch):
    record = Record()
    shims = SGLangShims(record, None, sglang_settings.read(environ_file))
    envs = shims.shim_for("envs")
    assert envs.SGLANG_FLAG.get() is True
    assert envs.SGLANG_FLAG.is_set() is False
    with pytest.raises(RuntimeError, match="get"):
        bool(envs.SGLANG_FLAG)  # the release refuses truth tests of a field
    monkeypatch.setenv("SGLANG_SIZE", "5")
    assert envs.SGLANG_SIZE.get() == 5
    assert record.settings == {
        "SGLANG_FLAG": (True, settings.FROM_DECLARATION),
        "SGLANG_SIZE": (5, settings.FROM_ENVIRONMENT),
    }
    loading = envs.SGLANG_UNDECLARED  # while the files load: a silent stub
    assert isinstance(loading, Stub)
    record.armed = True
    with pytest.raises(HarnessGap, match="SGLANG_UNDECLARED") as gap:
        envs.SGLANG_UNDECLARED.get()
    assert gap.value.what == "sglang.srt.environ.envs.SGLANG_UNDECLARED"
    with pytest.raises(HarnessGap, match=r"SGLANG_DIR.*--env SGLANG_DIR=VALUE"):
        envs.SGLANG_DIR.get()
    assert record.reached[-2:] == [
        "sglang.srt.environ.envs.SGLANG_UNDECLARED",
        "sglang.srt.environ.envs.SGLANG_DIR",
    ]


def test_sglang_env_helpers_take_their_default_from_the_call(monkeypatch):
    record = Record()
    shims = SGLangShims(record, None)  # no declarations: the helpers need none
    get_bool, get_int = shims.shim_for("get_bool_env_var"), shims.shim_for("get_int_env_var")
    assert get_bool("SGLANG_X", default="true") is True, "a true default is not read as false"
    assert get_bool("SGLANG_X") is False
    monkeypatch.setenv("SGLANG_X", "1")
    assert get_bool("SGLANG_X") is True
    monkeypatch.setenv("SGLANG_X", " ")
    assert get_int("SGLANG_X", 7) == 7
    monkeypatch.setenv("SGLANG_X", "12")
    assert get_int("SGLANG_X", 7) == 12
    assert record.settings["SGLANG_X"] == (12, settings.FROM_ENVIRONMENT)
    assert record.settings_note and "not at hand" in record.settings_note


# vLLM's declarations ---------------------------------------------------------------------------------

VLLM_ENVS = """
import os
import sys
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    VLLM_SIZE: int = 4


def maybe_convert_int(value):
    return None if value is None else int(value)


def env_with_choices(env_name, default, choices, case_sensitive=True):
    ...


environment_variables: dict[str, Callable[[], Any]] = {
    "VLLM_SIZE": lambda: int(os.getenv("VLLM_SIZE", "4")),
    "VLLM_FLAG": lambda: os.environ.get("VLLM_FLAG", "False").lower() in ("true", "1"),
    "VLLM_OPTIONAL": lambda: int(os.environ["VLLM_OPTIONAL"]) if "VLLM_OPTIONAL" in os.environ else None,
    "VLLM_MODE": env_with_choices("VLLM_MODE", "auto", ["auto", "eager"], case_sensitive=False),
    "VLLM_CONVERTED": lambda: maybe_convert_int(os.environ.get("VLLM_CONVERTED", None)),
    "VLLM_PATH": lambda: os.path.expanduser(os.getenv("VLLM_PATH", "~/.cache/vllm")),
    "VLLM_RANK_LOCAL": lambda: int(os.getenv("VLLM_RANK_LOCAL", sys.modules[__name__].VLLM_RANK)),
}


def __getattr__(name):
    return environment_variables[name]()
"""


@pytest.fixture
def envs_file(tmp_path) -> Path:
    path = tmp_path / "envs.py"
    path.write_text(VLLM_ENVS)
    return path


def test_vllm_declarations_are_evaluated_without_running_them(envs_file):
    declared = vllm_settings.read(envs_file).settings
    assert declared["VLLM_SIZE"].read({}).value == 4
    assert declared["VLLM_SIZE"].read({"VLLM_SIZE": "9"}) == settings.Value(9, settings.FROM_ENVIRONMENT)
    assert declared["VLLM_FLAG"].read({"VLLM_FLAG": "True"}).value is True
    assert declared["VLLM_OPTIONAL"].read({}).value is None
    assert declared["VLLM_MODE"].read({}).value == "auto"
    assert declared["VLLM_MODE"].read({"VLLM_MODE": "EAGER"}).value == "EAGER"
    with pytest.raises(Unknown, match="ValueError"):
        declared["VLLM_MODE"].read({"VLLM_MODE": "fast"})  # vLLM refuses a value not among the choices
    for unknown in ("VLLM_CONVERTED", "VLLM_PATH", "VLLM_RANK_LOCAL"):
        with pytest.raises(Unknown):
            declared[unknown].read({})


def test_vllm_shims_answer_declared_names_and_leave_the_rest(envs_file, monkeypatch):
    record = Record()
    shims = VLLMShims(record, vllm_settings.read(envs_file))
    monkeypatch.setenv("VLLM_SIZE", "6")
    assert shims.shim_for("VLLM_SIZE") == 6
    assert shims.shim_for("init_logger") is not None, "the fixed shims still answer"
    assert shims.shim_for("VLLM_NOT_DECLARED") is None, "undeclared: the loader's stub (a gap when used)"
    assert isinstance(shims.shim_for("VLLM_PATH"), Stub), "unknown at load time: a silent stub"
    record.armed = True
    with pytest.raises(HarnessGap, match="VLLM_PATH") as gap:
        shims.shim_for("VLLM_PATH")
    assert gap.value.what == "vllm.envs.VLLM_PATH"
    assert record.settings["VLLM_SIZE"] == (6, settings.FROM_ENVIRONMENT)
    assert record.settings["VLLM_PATH"][0] == "unknown"


def test_without_declarations_vllm_behaves_as_before():
    record = Record()
    shims = VLLMShims(record)
    assert shims.shim_for("VLLM_MEDIA_LOADING_THREAD_COUNT") == 1
    assert record.settings_note and "not at hand" in record.settings_note


# --env ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("given", ["NOEQUALS", "=1", "1X=2", "A-B=1"])
def test_a_malformed_env_is_a_usage_error_naming_the_flag(given, capsys):
    assert main(["targets", "reference", "--env", given]) == 2
    assert "--env" in capsys.readouterr().err


def test_env_sets_the_environment_and_the_replay_command(monkeypatch):
    from mmharness import report

    monkeypatch.delenv("SGLANG_X", raising=False)
    assert main(["targets", "reference", "--env", "SGLANG_X=a b"]) == 0
    assert os.environ["SGLANG_X"] == "a b"
    assert settings.source_of("SGLANG_X") == settings.FROM_ENV_OPTION
    command = report.replay_command("case.json", "sglang==0.5.23")
    assert "--env 'SGLANG_X=a b'" in command


# A fork of a release with a setting of its own -------------------------------------------------------

READ_LINE = "    device = input_ids.device\n"


def _fork(root: Path, into: Path, setting: str, *, declare: bool) -> Path:
    """A copy of an unpacked release whose chunked prefill raises when ``setting`` is on."""
    shutil.copytree(root, into)
    rules = into / "sglang" / "srt" / "managers" / "mm_schedule.py"
    text = rules.read_text()
    assert text.count(READ_LINE) == 1 and text.count("import torch\n") >= 1
    text = text.replace("import torch\n", "import torch\nfrom sglang.srt.environ import envs\n", 1)
    text = text.replace(
        READ_LINE,
        READ_LINE + f"    if envs.{setting}.get():\n        raise RuntimeError('{setting} is on')\n",
    )
    rules.write_text(text)
    if declare:
        environ = into / "sglang" / "srt" / "environ.py"
        declared = environ.read_text()
        assert declared.count("class Envs:\n") == 1
        environ.write_text(
            declared.replace("class Envs:\n", f"class Envs:\n    {setting} = EnvBool(False)\n")
        )
    return into


@pytest.fixture(scope="module")
def release_0_5_23(tmp_path_factory) -> Path:
    """sglang 0.5.23 unpacked with its ``environ.py`` (a copy unpacked without it is fetched again)."""
    from mmharness.engines.sglang import adapter

    with pytest.MonkeyPatch.context() as patch:
        if not os.environ.get("MMHARNESS_CACHE"):
            patch.setenv("MMHARNESS_CACHE", str(tmp_path_factory.mktemp("cache")))
        root = adapter.fetch("0.5.23")
    assert (root / "sglang" / "srt" / "environ.py").is_file()
    return root


@pytest.mark.network
def test_a_fork_setting_with_a_declared_default_lets_the_prefill_checks_run(release_0_5_23, tmp_path):
    from mmharness.targets.specs import resolve

    fork = _fork(release_0_5_23, tmp_path / "fork", NEW, declare=True)
    target = resolve(str(fork))
    for check_id in ("prefill.matches_reference", "prefill.cache_independent"):
        # Ends only at what fails the test; hazards (hash collisions) are kept unshrunk.
        result = run_check(CHECKS[check_id], target, max_examples=8, stop_at=(DIVERGENCE, COULD_NOT_TEST))
        assert result.status in (PASSED, HAZARD), (check_id, result.reason)
    assert target.describe()["settings"][NEW] == f"False ({settings.FROM_DECLARATION})"


@pytest.mark.network
def test_env_changes_the_value_the_fork_reads(release_0_5_23, tmp_path, capsys):
    fork = _fork(release_0_5_23, tmp_path / "fork", NEW, declare=True)
    argv = ["check", "--target", str(fork), "--checks", "prefill.matches_reference", "--max-examples", "5"]
    argv += ["--findings", str(tmp_path / "findings"), "--env", f"{NEW}=1"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "DIVERGENCE" in out and f"{NEW} is on" in out
    assert f"--env {NEW}=1" in out, "the reproducing command sets it too"
    from mmharness.targets.specs import resolve

    target = resolve(str(fork))  # --env is still set in this process, as in a worker's
    run_check(CHECKS["prefill.matches_reference"], target, max_examples=2)
    assert target.describe()["settings"][NEW] == f"True ({settings.FROM_ENV_OPTION})"


@pytest.mark.network
def test_an_undeclared_setting_is_could_not_test_naming_it(release_0_5_23, tmp_path):
    from mmharness.targets.specs import resolve

    fork = _fork(release_0_5_23, tmp_path / "fork", "SGLANG_NOT_DECLARED", declare=False)
    result = run_check(CHECKS["prefill.matches_reference"], resolve(str(fork)), max_examples=5)
    assert result.status == COULD_NOT_TEST
    assert "SGLANG_NOT_DECLARED" in result.reason and "--env" not in result.reason  # it could not help
    assert result.status != DIVERGENCE


# Releases unpacked for another member list -------------------------------------------------------------


RULES = "sglang/srt/managers/mm_utils.py"
ENVIRON = "sglang/srt/environ.py"


def _wheel(tmp_path: Path) -> Path:
    wheel = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(RULES, "def one():\n    return 1\n")
        archive.writestr(ENVIRON, textwrap.dedent("class Envs:\n    pass\n"))
        archive.writestr("sglang-9.9.9.dist-info/METADATA", "Name: sglang\nVersion: 9.9.9\n")
    return wheel


def test_a_release_unpacked_for_another_member_list_is_fetched_again_once(tmp_path, monkeypatch):
    monkeypatch.setenv("MMHARNESS_CACHE", str(tmp_path / "cache"))
    wheel = _wheel(tmp_path)
    target = releases.release_dir("sglang", "9.9.9")
    releases._unpack(wheel, target, "sglang", "9.9.9", (RULES,))
    marker = target / releases.COMPLETE
    marker.write_text("\n".join(line for line in marker.read_text().splitlines() if "members=" not in line))
    downloads = []

    def download(package, version, into):
        downloads.append(version)
        into.mkdir(parents=True)
        return Path(shutil.copy(wheel, into))

    monkeypatch.setattr(releases, "_download", download)
    members = (RULES, ENVIRON)
    assert releases.fetch("sglang", "9.9.9", members, example="0.5.23") == target
    assert downloads == ["9.9.9"] and (target / ENVIRON).is_file()
    assert releases.fetch("sglang", "9.9.9", members, example="0.5.23") == target
    assert downloads == ["9.9.9"], "fetched again once, not on every load"
    assert releases.fetch("sglang", "9.9.9", (ENVIRON, RULES), example="0.5.23") == target
    assert downloads == ["9.9.9"], "the same members in another order"
    assert releases.cached("sglang") == ["sglang==9.9.9"]


def test_without_the_index_the_old_copy_still_serves(tmp_path, monkeypatch):
    monkeypatch.setenv("MMHARNESS_CACHE", str(tmp_path / "cache"))
    target = releases.release_dir("sglang", "9.9.9")
    releases._unpack(_wheel(tmp_path), target, "sglang", "9.9.9", (RULES,))

    def offline(package, version, into):
        raise TargetError("cannot download: the package index is unreachable")

    monkeypatch.setattr(releases, "_download", offline)
    assert releases.fetch("sglang", "9.9.9", (RULES, ENVIRON), example="0.5.23") == target
    assert not (target / ENVIRON).exists()
    (target / RULES).write_text("damaged")
    with pytest.raises(TargetError, match="damaged"):
        releases.fetch("sglang", "9.9.9", (RULES, ENVIRON), example="0.5.23")


@pytest.mark.network
def test_a_loaded_target_declares_the_settings_its_shims_read(release_0_5_23, vllm_release_dir):
    """``Target.declared_settings``: an engine's own shims' declarations; none to declare without shims
    (``NoShims``); unseen (``None``) under shims of another kind."""
    from types import SimpleNamespace

    from mmharness.engines.sglang import adapter as sglang
    from mmharness.engines.vllm import adapter as vllm
    from toy_engine import _resolve

    for target, setting in (
        (sglang.from_path(str(release_0_5_23)), "SGLANG_"),
        (vllm.from_path(str(vllm_release_dir)), "VLLM_"),
    ):
        declared = target.declared_settings()
        assert declared is target.engine.shims.settings.declarations
        assert any(name.startswith(setting) for name in declared.settings)
        target.engine.shims = SimpleNamespace()  # the installed package's
        assert target.declared_settings() is None
    toy = _resolve("toy")
    assert toy.declared_settings() == settings.Declarations()
    toy.engine.shims = SimpleNamespace()
    assert toy.declared_settings() is None
