"""SGLang's settings, from its own ``srt/environ.py``, read as syntax (never run), and the shims that
serve them.

From 0.5.3 SGLang declares its environment variables as typed fields of one class, ``Envs``
(``SGLANG_X = EnvBool(False)``, ``EnvInt(8)``, ``EnvStr("x")``, ``EnvFloat``, ``EnvTuple``,
``EnvJSON``, and ``...WithAlias(default, deprecated_name=...)``), and code reads them through the
module's instance, ``envs.SGLANG_X.get()``. Older code (and some newer) calls
``get_bool_env_var("SGLANG_X")`` / ``get_int_env_var`` from ``sglang.srt.utils`` with the default in
the call. A fork adding a switch to the rules declares it in the same file, so its default is the
fork's own.

The file imports torch lazily and defines defaults computed at run time (a lambda, a platform
probe); those are ``Unknown`` (``mmharness.targets.settings``): reading one at call time is a harness
gap naming the setting unless the environment (or ``--env``) sets it. How a value set in the
environment is parsed, and what the field answers (``get()``, ``value``, ``is_set()``,
``get_set_value_or``, truth tests refused where the release refuses them), follows SGLang's
documented behaviour of its fields; which of those methods a release has is read from its
``EnvField`` class.
"""

from __future__ import annotations

import ast
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mmharness.engines.sglang.layout import SETTINGS_FILE
from mmharness.targets import settings
from mmharness.targets.loader import Source
from mmharness.targets.settings import Declaration, Declarations, Unknown, Value
from mmharness.targets.stubs import Record

REGISTRY_CLASS = "Envs"
FIELD_BASE = "EnvField"
ALIAS_KEYWORD = "deprecated_name"
ENVS = "sglang.srt.environ.envs"
"""Where code reads the settings from, naming a setting in a gap or a stub."""


# Parsing a value from the environment, per declared type ------------------------------------------


def _bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "1", "yes", "y"):
        return True
    if lowered in ("false", "0", "no", "n"):
        return False
    raise ValueError(f"{text!r} is not a boolean")


def _tuple(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _json(text: str) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        raise Unknown("EnvJSON set to something that is not JSON (a file to read?)") from None


PARSERS: dict[str, Callable[[str], Any]] = {
    "EnvBool": _bool,
    "EnvInt": int,
    "EnvFloat": float,
    "EnvStr": str,
    "EnvTuple": _tuple,
    "EnvJSON": _json,
}
"""The field types SGLang declares, each by how it parses an environment value (invalid: the default)."""


# Reading the file ------------------------------------------------------------------------------------


class FieldTypes:
    """The release's field classes: the parser each one inherits, and the methods its fields answer."""

    def __init__(self, tree: ast.Module) -> None:
        self.bases: dict[str, list[str]] = {}
        self.methods: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                self.bases[node.name] = [base.id for base in node.bases if isinstance(base, ast.Name)]
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and self.is_field(node.name):
                self.methods |= {item.name for item in node.body if isinstance(item, ast.FunctionDef)}

    def _ancestry(self, name: str) -> list[str]:
        seen, stack = [], [name]
        while stack:
            current = stack.pop(0)
            if current in seen:
                continue
            seen.append(current)
            stack += self.bases.get(current, [])
        return seen

    def is_field(self, name: str) -> bool:
        return FIELD_BASE in self._ancestry(name)

    def parser(self, name: str) -> Callable[[str], Any] | None:
        return next((PARSERS[kind] for kind in self._ancestry(name) if kind in PARSERS), None)


def declarations(source: Source) -> Declarations:
    """The settings a load's source declares: its package's ``srt/environ.py``, or why there is none."""
    return settings.declarations_in(source.package_dir, SETTINGS_FILE, interpret)


def read(path: Path) -> Declarations:
    """The declarations in ``path`` (an ``srt/environ.py``); a missing file: none, saying so."""
    return settings.read_file(path, interpret)


def interpret(tree: ast.Module, path: str) -> Declarations:
    """The declarations a parsed ``srt/environ.py`` holds."""
    found = Declarations(where=path)
    registry = next(
        (node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == REGISTRY_CLASS), None
    )
    if registry is None:
        found.problems.append(f"no class {REGISTRY_CLASS} in {path}")
        return found
    types = FieldTypes(tree)
    constants = settings.constants(tree)
    for statement in registry.body:
        if not (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
            and isinstance(statement.value, ast.Call)
            and isinstance(statement.value.func, ast.Name)
            and types.is_field(statement.value.func.id)
        ):
            continue
        name, call = statement.targets[0].id, statement.value
        found.settings[name] = _declaration(name, call, types, constants)
    found.methods = frozenset(types.methods)
    return found


def _declaration(name: str, call: ast.Call, types: FieldTypes, constants: Mapping[str, Any]) -> Declaration:
    kind = call.func.id  # type: ignore[attr-defined]
    keywords = {k.arg: k.value for k in call.keywords if k.arg is not None}
    default_node = call.args[0] if call.args else keywords.get("default")
    alias_node = keywords.get(ALIAS_KEYWORD)
    alias = alias_node.value if isinstance(alias_node, ast.Constant) else None
    parser = types.parser(kind)

    def default() -> Any:
        if default_node is None:
            raise Unknown(f"{kind}() declared without a default")
        if isinstance(default_node, (ast.Lambda, ast.Name)) and not (
            isinstance(default_node, ast.Name) and default_node.id in constants
        ):
            raise Unknown("its default is computed at run time")
        return settings.evaluate(default_node, settings.Scope({}, constants))

    def read(environ: Mapping[str, str]) -> Value:
        variable = name if name in environ or alias is None or alias not in environ else alias
        text = environ.get(variable)
        if text is None:
            return Value(default(), settings.FROM_DECLARATION)
        if parser is None:
            raise Unknown(f"{kind} is a field type the harness does not know how to parse")
        source = settings.source_of(variable, environ) or settings.FROM_ENVIRONMENT
        try:
            return Value(parser(text), source)
        except ValueError:  # SGLang warns and falls back to the default
            return Value(default(), f"declared default ({variable}={text!r} is not a valid {kind})")

    return Declaration(name, read, kind)


# The shims --------------------------------------------------------------------------------------------


class Field:
    """``envs.NAME``: one declared setting, answering what the release's ``EnvField`` answers."""

    def __init__(self, name: str, owner: Envs) -> None:
        self.name = name
        self._owner = owner

    def get(self) -> Any:
        return self._owner.value_of(self.name)

    @property
    def value(self) -> Any:
        self._owner.method(self.name, "value")
        return self.get()

    @property
    def default(self) -> Any:
        declarations = self._owner.declarations
        try:
            return declarations.settings[self.name].read({}).value
        except Unknown as why:
            return self._owner.unknown(self.name, why)

    def is_set(self) -> bool:
        self._owner.method(self.name, "is_set")
        return self.name in os.environ

    def get_set_value_or(self, or_value: Any) -> Any:
        self._owner.method(self.name, "get_set_value_or")
        return self.get() if self.is_set() else or_value

    def _changes_environment(self, *args: Any, **kwargs: Any) -> Any:
        what = f"{ENVS}.{self.name}.set/override/clear"
        return settings.unknown_use(
            self._owner.record,
            what,
            f"the engine changed setting {self.name} at run time; the harness does not let engine code"
            " change its process environment",
        )

    set = override = clear = _changes_environment

    def __bool__(self) -> bool:
        if "__bool__" in self._owner.methods:
            raise RuntimeError(f"Please use `envs.{self.name}.get()` instead of `envs.{self.name}`")
        return True

    def __len__(self) -> int:
        if "__len__" in self._owner.methods:
            raise RuntimeError(f"Please use `envs.{self.name}.get()` instead of `envs.{self.name}`")
        raise TypeError("object of type 'EnvField' has no len()")

    def __repr__(self) -> str:
        return f"<mmharness shim of envs.{self.name}>"


class Envs:
    """``envs`` of ``sglang.srt.environ``: its declared settings (each a ``Field``); one the file does
    not declare, or whose value cannot be computed, is a ``Stub`` while the files load and a harness gap
    naming it at call time."""

    def __init__(self, declarations: Declarations, record: Record) -> None:
        self.declarations = declarations
        self.record = record
        self.methods = declarations.methods
        self._fields: dict[str, Field] = {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        if name not in self.declarations:
            return settings.unknown_use(
                self.record, f"{ENVS}.{name}", settings.undeclared_message(name, self.declarations)
            )
        if name not in self._fields:
            self._fields[name] = Field(name, self)
        return self._fields[name]

    def value_of(self, name: str) -> Any:
        try:
            return settings.read(self.declarations, name, self.record).value
        except Unknown as why:
            return self.unknown(name, why)

    def unknown(self, name: str, why: Unknown) -> Any:
        return settings.unknown_use(
            self.record, f"{ENVS}.{name}", settings.unknown_message(name, why, self.declarations)
        )

    def method(self, name: str, method: str) -> None:
        """A method or property the release's fields lack: an ``AttributeError``, as in the engine."""
        if self.methods and method not in self.methods:
            raise AttributeError(f"'EnvField' object ({name}) has no attribute '{method}'")


def _get_bool_env_var(record: Record) -> Callable[..., bool]:
    def get_bool_env_var(name: str, default: str = "false") -> bool:
        """True for ``true``/``1`` in any case, from the environment or else the call's default."""
        text = os.environ.get(name, default)
        value = str(text).lower() in ("true", "1")
        settings.note_read(record, name, value, settings.source_of(name) or settings.FROM_CALL)
        return value

    return get_bool_env_var


def _get_int_env_var(record: Record) -> Callable[..., int]:
    def get_int_env_var(name: str, default: int = 0) -> int:
        """The environment's integer; unset, blank or not an integer: the call's default."""
        text = os.environ.get(name)
        source = settings.source_of(name) or settings.FROM_CALL
        try:
            value = default if text is None or not text.strip() else int(text)
        except ValueError:
            value, source = default, f"{settings.FROM_CALL} ({name}={text!r} is not an integer)"
        settings.note_read(record, name, value, source)
        return value

    return get_int_env_var


class Settings:
    """The settings shims of one load: ``envs`` and the ``get_*_env_var`` helpers, by name."""

    def __init__(self, declarations: Declarations, record: Record) -> None:
        self.declarations = declarations
        if declarations.absent is not None:
            record.settings_note = (
                f"SGLang's settings declarations are not at hand ({declarations.absent}): a setting the"
                " rules read through envs is a could-not-test (its type and default are declared there)"
            )
        self._shims: dict[str, Any] = {
            "envs": Envs(declarations, record),
            "get_bool_env_var": _get_bool_env_var(record),
            "get_int_env_var": _get_int_env_var(record),
        }

    def shim_for(self, name: str) -> Any | None:
        return self._shims.get(name)
