"""vLLM's settings, from its own ``envs.py``, read as syntax (never run).

vLLM declares each environment variable it reads as an entry of one dict, ``environment_variables``
(``"VLLM_X": lambda: int(os.getenv("VLLM_X", "0"))``, or ``env_with_choices("VLLM_X", default,
[choices])``), and code reads ``envs.VLLM_X`` (``import vllm.envs as envs``), which calls the entry.
Running ``envs.py`` would run vLLM's imports; instead each lambda's body is evaluated by the harness's
small evaluator (``mmharness.targets.settings.evaluate``) against the process environment, so a value
set there (or by ``--env``) wins over the default as in the engine. An entry outside that language (a
helper function, a path computed from the home directory) is ``Unknown``: reading it at call time is a
harness gap naming it (the harness does not run vLLM's code to find its value out).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mmharness.engines.vllm.layout import SETTINGS_FILE
from mmharness.targets import settings
from mmharness.targets.loader import Source
from mmharness.targets.settings import Declaration, Declarations, Scope, Unknown, Value
from mmharness.targets.stubs import Record

REGISTRY = "environment_variables"
CHOICES = "env_with_choices"


def declarations(source: Source) -> Declarations:
    """The settings a load's source declares: its package's ``envs.py``, or why there is none."""
    return settings.declarations_in(source.package_dir, SETTINGS_FILE, interpret)


def read(path: Path) -> Declarations:
    """The declarations in ``path`` (an ``envs.py``); a missing file: none, saying so."""
    return settings.read_file(path, interpret)


def interpret(tree: ast.Module, path: str) -> Declarations:
    """The declarations a parsed ``envs.py`` holds."""
    found = Declarations(where=path)
    table = _registry(tree)
    if table is None:
        found.problems.append(f"no {REGISTRY} dict in {path}")
        return found
    constants = settings.constants(tree)
    for key, value in zip(table.keys, table.values, strict=True):
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            found.settings[key.value] = _declaration(key.value, value, constants)
    return found


def _registry(tree: ast.Module) -> ast.Dict | None:
    """The ``environment_variables = {...}`` literal (annotated or not), the last one written."""
    found = None
    for statement in tree.body:
        if isinstance(statement, ast.AnnAssign):
            target, value = statement.target, statement.value
        elif isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target, value = statement.targets[0], statement.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == REGISTRY and isinstance(value, ast.Dict):
            found = value
    return found


def _declaration(name: str, node: ast.expr, constants: Mapping[str, Any]) -> Declaration:
    def read(environ: Mapping[str, str]) -> Value:
        scope = Scope(environ, constants)
        if isinstance(node, ast.Lambda) and not node.args.args:
            value = settings.evaluate(node.body, scope)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == CHOICES:
            value = _with_choices(node, scope)
        else:
            raise Unknown(f"declared by {ast.unparse(node)[:60]}, which the harness does not evaluate")
        return Value(value, scope.source())

    kind = "lambda" if isinstance(node, ast.Lambda) else type(node).__name__
    return Declaration(name, read, kind)


def _with_choices(node: ast.Call, scope: Scope) -> Any:
    """``env_with_choices(NAME, DEFAULT, [CHOICES], case_sensitive=...)``: the variable or its default,
    which must be one of the choices (vLLM refuses any other value with a ``ValueError``)."""
    if len(node.args) < 3 or any(k.arg not in ("case_sensitive",) for k in node.keywords):
        raise Unknown(f"an unexpected form of {CHOICES}")
    name, default, choices = (settings.evaluate(arg, scope) for arg in node.args[:3])
    sensitive = True
    for keyword in node.keywords:
        sensitive = bool(settings.evaluate(keyword.value, scope))
    if len(node.args) > 3:
        sensitive = bool(settings.evaluate(node.args[3], scope))
    value = scope.getenv(name, default)
    if value is None:
        return None
    allowed = [str(choice) if sensitive else str(choice).lower() for choice in choices]
    if (value if sensitive else str(value).lower()) not in allowed:
        raise Unknown(f"reading it raises ValueError: {value!r} is not one of {list(choices)}")
    return value


class Settings:
    """The settings of one load: a declared name read from a stub module answers its value now."""

    def __init__(self, declarations: Declarations, record: Record) -> None:
        self.declarations = declarations
        self.record = record
        if declarations.absent is not None:
            record.settings_note = (
                f"vLLM's settings declarations are not at hand ({declarations.absent}): a setting the"
                " code reads from vllm.envs is a could-not-test"
            )

    def shim_for(self, name: str) -> Any | None:
        """A declared setting's value (a stub or gap when it cannot be computed), else ``None``."""
        if name not in self.declarations:
            return None
        try:
            return settings.read(self.declarations, name, self.record).value
        except Unknown as why:
            return settings.unknown_use(
                self.record, f"vllm.envs.{name}", settings.unknown_message(name, why, self.declarations)
            )
