"""Engine settings (environment variables the engine reads), from the engine's own declarations, read
without running them.

Engines declare their settings in one file (a registry class of typed fields, or a dict of lambdas
reading ``os.environ``) whose defaults decide branches of the rules. Running that file would import
half the engine, so it is read as syntax instead: each engine package parses its own file into
``Declaration``s (``mmharness.engines.NAME.settings``), and the expressions a declaration holds are
evaluated here by ``evaluate``, a tiny evaluator that knows literals, arithmetic, comparisons,
``os.getenv``/``os.environ.get``/``os.environ[...]``/``NAME in os.environ`` and a few conversions
(``int``, ``float``, ``bool``, ``str``, ``str.lower`` ...). Anything else is ``Unknown``: the harness
never guesses a default, so reading such a setting stays a harness gap naming it (as does a setting
declared nowhere), and ``--env NAME=VALUE`` is how a user supplies the value.

As in the engine, a value set in the process environment wins over the declared default; ``--env``
sets one for a run (``apply``: into ``os.environ`` before any target loads, so worker processes
inherit it) and ``given()`` is what command lines that reproduce a run repeat.

Every setting the loaded code reads is noted in the load's ``Record`` (``note_read``), with where its
value came from, and shown by the target's ``describe()``.
"""

from __future__ import annotations

import ast
import operator
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from mmharness.targets.base import HarnessGap
from mmharness.targets.stubs import Record, Stub

FROM_ENV_OPTION = "--env"
FROM_ENVIRONMENT = "environment"
FROM_DECLARATION = "declared default"
FROM_CALL = "the call's default"


class Unknown(Exception):
    """A declaration the harness cannot evaluate without running engine code (the message says why)."""


class SettingGap(HarnessGap, AttributeError):
    """Engine code read, at call time, a setting whose value the harness does not know.

    An ``AttributeError`` too, as a stub's gap is (``getattr(envs, NAME, default)`` in engine code).
    """


# --env -----------------------------------------------------------------------------------------

_GIVEN: dict[str, str] = {}
"""``--env`` values of this process's run, in the order given (a later one for a name wins)."""


def parse_assignment(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` as a pair; ``ValueError`` saying what is wrong (no ``=``, an empty or odd name)."""
    name, equals, value = text.partition("=")
    if not equals:
        raise ValueError(f"expected NAME=VALUE, got {text!r}")
    if not name or not name.replace("_", "a").isalnum() or name[0].isdigit():
        raise ValueError(f"not an environment variable name: {name!r} (in {text!r})")
    return name, value


def apply(assignments: Iterable[str]) -> dict[str, str]:
    """Set each ``NAME=VALUE`` in ``os.environ`` and remember them as this run's ``--env`` values.

    Replaces what an earlier call remembered (one command runs per process, but tests call several).
    """
    given: dict[str, str] = {}
    for text in assignments:
        name, value = parse_assignment(text)
        given[name] = value
    _GIVEN.clear()
    _GIVEN.update(given)
    os.environ.update(given)
    return dict(given)


def given() -> dict[str, str]:
    """This run's ``--env`` values (what a reproducing command line repeats)."""
    return dict(_GIVEN)


def env_options() -> list[str]:
    """``--env NAME=VALUE`` words for this run's values, for a command line that reproduces it."""
    return [word for name, value in _GIVEN.items() for word in (FROM_ENV_OPTION, f"{name}={value}")]


def source_of(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """Where a set variable's value came from (``--env`` or the environment); ``None`` when unset."""
    environ = os.environ if environ is None else environ
    if name not in environ:
        return None
    return FROM_ENV_OPTION if _GIVEN.get(name) == environ[name] else FROM_ENVIRONMENT


# Declarations and reads ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Value:
    """A setting's value as read, and where it came from (``--env``, environment, a default)."""

    value: Any
    source: str


@dataclass(frozen=True)
class Declaration:
    """One setting as its engine declares it: ``read(environ)`` is its value the way the engine would
    compute it now, or raises ``Unknown``."""

    name: str
    read: Callable[[Mapping[str, str]], Value]
    kind: str = ""
    """The engine's declared type, for messages (``EnvInt``, ``lambda``)."""


@dataclass
class Declarations:
    """One engine copy's settings, by name; ``where`` the file read, or ``absent`` why there is none."""

    settings: dict[str, Declaration] = field(default_factory=dict)
    where: str | None = None
    absent: str | None = None
    problems: list[str] = field(default_factory=list)
    """Why parts of the file were not read (a syntax error, an unexpected shape)."""
    methods: frozenset[str] = frozenset()
    """What the engine's setting objects answer, where they are objects (read from their classes)."""

    def __contains__(self, name: str) -> bool:
        return name in self.settings


def note_read(record: Record, name: str, value: Any, source: str) -> None:
    """Note in the load's record that the engine read ``name`` (``describe()`` shows the notes)."""
    record.settings[name] = (value, source)


def read(declarations: Declarations, name: str, record: Record) -> Value:
    """A declared setting's value now, noted in the record; ``Unknown`` (noted too) when it cannot be read."""
    declaration = declarations.settings[name]
    try:
        found = declaration.read(os.environ)
    except Unknown as why:
        note_read(record, name, "unknown", str(why))
        raise
    note_read(record, name, found.value, found.source)
    return found


def unknown_use(record: Record, what: str, message: str) -> Any:
    """A setting the harness cannot answer: at load time a silent ``Stub`` (the file must load), once
    the load is over a ``SettingGap`` (noted as reached, so a caught one still makes the call a gap)."""
    if record.armed:
        record.reached.append(what)
        raise SettingGap(message, what=what)
    record.stubbed.add(what)
    return Stub(what, record)


def undeclared_message(name: str, declarations: Declarations) -> str:
    """A setting read and declared nowhere: ``--env`` cannot help, since a declaration gives the type a
    set value is parsed as (and the methods the field answers), and the harness guesses neither."""
    if declarations.absent is not None:
        return (
            f"the engine read setting {name}, and its declarations are not at hand ({declarations.absent});"
            " give the whole package, with the file that declares its settings"
        )
    return (
        f"the engine read setting {name}, which {declarations.where} does not declare; the harness takes a"
        " setting's type and default from its declaration and guesses neither (declare it there)"
    )


def unknown_message(name: str, why: Unknown, declarations: Declarations) -> str:
    return (
        f"the engine read setting {name}, whose value the harness cannot compute without running"
        f" {declarations.where} ({why}); set it with --env {name}=VALUE"
    )


# The evaluator ---------------------------------------------------------------------------------------

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
    ast.BitOr: operator.or_,
    ast.BitAnd: operator.and_,
}
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_CONVERSIONS: dict[str, Callable[..., Any]] = {
    "int": int, "float": float, "bool": bool, "str": str,
    "tuple": tuple, "list": list, "set": set, "frozenset": frozenset,
}  # fmt: skip
_STRING_METHODS = frozenset(("lower", "upper", "strip", "lstrip", "rstrip", "casefold", "split", "isdigit"))
_LARGEST = 1 << 64
"""Arithmetic beyond this is not a setting's default (and would let a file make the harness work hard)."""


@dataclass
class Scope:
    """What an expression may see: the environment, the file's literal constants, and the variables
    it read (their names, for where the value came from)."""

    environ: Mapping[str, str]
    constants: Mapping[str, Any] = field(default_factory=dict)
    read: list[str] = field(default_factory=list)

    def getenv(self, name: Any, default: Any = None) -> Any:
        if not isinstance(name, str):
            raise Unknown("reads a variable whose name is computed")
        self.read.append(name)
        return self.environ.get(name, default)

    def source(self) -> str:
        """``--env`` or environment when a variable it read is set, else the declared default."""
        found = [source_of(name, self.environ) for name in self.read]
        return next((where for where in found if where is not None), FROM_DECLARATION)


def evaluate(node: ast.AST, scope: Scope) -> Any:
    """The value of a declaration's expression, or ``Unknown`` for any form outside the small language.

    An error the expression itself raises (``int("x")``) is ``Unknown`` too, saying so: the engine
    would raise it when read, which is no default to run the rules with.
    """
    try:
        return _evaluate(node, scope)
    except Unknown:
        raise
    except (ValueError, TypeError, KeyError, ArithmeticError, AttributeError) as error:
        raise Unknown(f"reading it raises {type(error).__name__}: {error}") from None


def _is_environ(node: ast.AST) -> bool:
    """``os.environ``."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "environ"
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
    )


def _is_getenv(func: ast.AST) -> bool:
    """``os.getenv`` or ``os.environ.get``."""
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr == "getenv":
        return isinstance(func.value, ast.Name) and func.value.id == "os"
    return func.attr == "get" and _is_environ(func.value)


def _evaluate(node: ast.AST, scope: Scope) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = [_evaluate(element, scope) for element in node.elts]
        return {ast.Tuple: tuple, ast.List: list, ast.Set: set}[type(node)](items)
    if isinstance(node, ast.Name):
        if node.id in scope.constants:
            return scope.constants[node.id]
        raise Unknown(f"uses {node.id}")
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        owner = scope.constants.get(node.value.id)
        if isinstance(owner, Mapping) and node.attr in owner:  # a class of constants (an enum's members)
            return owner[node.attr]
        raise Unknown(f"uses {node.value.id}.{node.attr}")
    if isinstance(node, ast.Subscript) and _is_environ(node.value):
        name = _evaluate(node.slice, scope)
        if scope.getenv(name) is None:
            raise Unknown(f"reading it raises KeyError when {name} is unset")
        return scope.environ[name]
    if isinstance(node, ast.Compare):
        return _compare(node, scope)
    if isinstance(node, ast.BoolOp):
        value: Any = None
        for operand in node.values:
            value = _evaluate(operand, scope)
            if bool(value) != isinstance(node.op, ast.And):
                return value
        return value
    if isinstance(node, ast.UnaryOp):
        operand = _evaluate(node.operand, scope)
        if isinstance(node.op, ast.Not):
            return not operand
        if isinstance(node.op, ast.USub) and isinstance(operand, (int, float)):
            return -operand
        if isinstance(node.op, ast.UAdd) and isinstance(operand, (int, float)):
            return operand
        raise Unknown("an operator on a value that is not a number")
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left, scope), _evaluate(node.right, scope)
        if isinstance(node.op, (ast.Pow, ast.LShift)) and (not isinstance(right, int) or abs(right) > 64):
            raise Unknown("an exponent out of range")
        result = _BINARY[type(node.op)](left, right)
        if isinstance(result, int) and abs(result) > _LARGEST:
            raise Unknown("a number out of range")
        return result
    if isinstance(node, ast.IfExp):
        return _evaluate(node.body if _evaluate(node.test, scope) else node.orelse, scope)
    if isinstance(node, ast.Call):
        return _call(node, scope)
    raise Unknown(f"a {type(node).__name__} expression")


def _compare(node: ast.Compare, scope: Scope) -> bool:
    left = _evaluate(node.left, scope)
    for op, right_node in zip(node.ops, node.comparators, strict=True):
        if type(op) not in _COMPARE:
            raise Unknown(f"a {type(op).__name__} comparison")
        if isinstance(op, (ast.In, ast.NotIn)) and _is_environ(right_node):
            present = scope.getenv(left) is not None
            if present != isinstance(op, ast.In):
                return False
            continue
        right = _evaluate(right_node, scope)
        if not _COMPARE[type(op)](left, right):
            return False
        left = right
    return True


def _call(node: ast.Call, scope: Scope) -> Any:
    func = node.func
    if any(isinstance(arg, ast.Starred) for arg in node.args) or any(k.arg is None for k in node.keywords):
        raise Unknown("a call with unpacked arguments")
    args = [_evaluate(arg, scope) for arg in node.args]
    keywords = {k.arg: _evaluate(k.value, scope) for k in node.keywords if k.arg is not None}
    if _is_getenv(func):
        if keywords.keys() - {"default", "key"} or not 1 <= len(args) + len(keywords) <= 2:
            raise Unknown("an unexpected form of os.getenv")
        name = args[0] if args else keywords.get("key")
        default = args[1] if len(args) > 1 else keywords.get("default")
        return scope.getenv(name, default)
    if isinstance(func, ast.Name) and func.id in _CONVERSIONS and func.id not in scope.constants:
        if keywords and not (func.id == "int" and keywords.keys() == {"base"}):
            raise Unknown(f"{func.id}() with keywords")
        return _CONVERSIONS[func.id](*args, **keywords)
    if isinstance(func, ast.Attribute) and func.attr in _STRING_METHODS and not keywords:
        owner = _evaluate(func.value, scope)
        if isinstance(owner, str):
            return getattr(owner, func.attr)(*args)
        raise Unknown(f".{func.attr}() of a value that is not a string")
    raise Unknown(f"calls {ast.unparse(func)}")


def constants(tree: ast.Module) -> dict[str, Any]:
    """The module's literal constants (``NAME = 8``) and classes of them (an enum's members, as a
    mapping), which a declaration may name; anything else it names is ``Unknown``."""
    found: dict[str, Any] = {}

    def literal(value: ast.AST) -> Any:
        return evaluate(value, Scope({}, found))

    for statement in tree.body:
        if isinstance(statement, ast.ClassDef):
            members: dict[str, Any] = {}
            for name, value in _assignments(statement.body):
                try:
                    members[name] = literal(value)
                except Unknown:
                    continue
            found[statement.name] = members
        for name, value in _assignments([statement]):
            if name.lstrip("_").isupper():
                try:
                    found[name] = literal(value)
                except Unknown:
                    continue
    return found


def _assignments(statements: list[ast.stmt]) -> Iterable[tuple[str, ast.expr]]:
    """``NAME = VALUE`` and ``NAME: T = VALUE`` among the statements."""
    for statement in statements:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target, value = statement.targets[0], statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            target, value = statement.target, statement.value
        else:
            continue
        if isinstance(target, ast.Name):
            yield target.id, value


Interpretation = Callable[[ast.Module, str], Declarations]
"""An engine's reading of its settings file's syntax tree (and the file's path, for messages)."""


def declarations_in(package_dir: Path | None, relative: str, interpret: Interpretation) -> Declarations:
    """The settings declared in ``package_dir / relative``, read by the engine's ``interpret``; a lone
    file (no package directory) or a missing or unparsable file: none, saying why."""
    if package_dir is None:
        return Declarations(absent=f"a lone file: no {relative} beside it")
    return read_file(package_dir / relative, interpret)


def read_file(path: Path, interpret: Interpretation) -> Declarations:
    """``path``'s declarations, parsed once per file version and process (a 130 kB file is most of a
    warm load's settings cost)."""
    try:
        stat = path.stat()
    except OSError:
        return Declarations(absent=f"no {path.name} in this copy")
    return _read(path, stat.st_mtime_ns, stat.st_size, interpret)


@lru_cache(maxsize=64)
def _read(path: Path, mtime_ns: int, size: int, interpret: Interpretation) -> Declarations:
    try:
        tree = parse(path)
    except (OSError, SyntaxError, ValueError) as error:
        return Declarations(absent=f"{path} does not parse ({type(error).__name__})")
    return interpret(tree, str(path))


def parse(path: os.PathLike[str] | str) -> ast.Module:
    """The file's syntax tree (``OSError``, ``SyntaxError`` and ``ValueError`` to the caller)."""
    with open(path, "rb") as handle:
        return ast.parse(handle.read(), filename=str(path))
