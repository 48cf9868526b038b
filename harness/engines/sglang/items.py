"""The fields of a release's ``MultimodalDataItem``, read from its own ``schedule_batch.py``.

The item type changed over releases (``precomputed_features`` until 0.4.9,
``precomputed_embeddings`` after; ``feature`` replaced per-modality tensors in
0.5; 0.5.23 added ``identity`` and ``pad_values``). ``schedule_batch.py``
imports half the engine, so it is never executed: its class body is parsed
and each annotated field with its default (a literal, ``None``, or
``field(default_factory=dict|list)``) becomes a field of the harness's item
type for that load. Where the file is not at hand (a lone rules file), the
item type answers only the fields every release shares, and any other
attribute the engine reads becomes a *could not test* verdict naming it.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

ITEM_CLASS = "MultimodalDataItem"
_FACTORIES: dict[str, Callable[[], Any]] = {"dict": dict, "list": list, "set": set, "tuple": tuple}


@dataclass(frozen=True)
class ItemSchema:
    """A release's item fields (name -> default factory) and method names, and where they were read."""

    fields: dict[str, Callable[[], Any]]
    methods: frozenset[str]
    origin: str

    def defaults(self) -> dict[str, Any]:
        return {name: make() for name, make in self.fields.items()}


def read_schema(path: Path) -> ItemSchema | None:
    """The schema of the ``MultimodalDataItem`` class in ``path``; ``None`` if there is none."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return _read_schema(path, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=64)
def _read_schema(path: Path, mtime_ns: int, size: int) -> ItemSchema | None:
    """Parsing the whole file was half a load's time (a module of thousands of lines): the class alone is
    parsed, cut out at the top-level lines around it, and the whole file only where that does not parse
    (then a top-level class of that name is the same either way)."""
    try:
        source = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    for text in (_class_source(source), source):
        try:
            tree = ast.parse(text or "", filename=str(path))
        except (SyntaxError, ValueError):
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == ITEM_CLASS:
                return _schema(node, str(path))
    return None


def _class_source(source: str) -> str | None:
    """The lines of ``class MultimodalDataItem`` up to the next top-level statement; ``None`` if absent."""
    lines = source.splitlines(keepends=True)
    start = next((n for n, line in enumerate(lines) if line.startswith(f"class {ITEM_CLASS}")), None)
    if start is None:
        return None
    end = next(
        (
            n
            for n in range(start + 1, len(lines))
            if lines[n][:1] not in ("", " ", "\t", "\n", "\r", "#", ")", "]", "}")
        ),
        len(lines),
    )
    return "".join(lines[start:end])


def _schema(node: ast.ClassDef, origin: str) -> ItemSchema:
    fields: dict[str, Callable[[], Any]] = {}
    methods = set()
    for statement in node.body:
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            name = statement.target.id
            if not name.startswith("_"):
                fields[name] = _default(statement.value)
        elif isinstance(statement, ast.FunctionDef):
            methods.add(statement.name)
    return ItemSchema(fields, frozenset(methods), origin)


def _default(value: ast.expr | None) -> Callable[[], Any]:
    """A factory for a field's default: literals as written, ``field(default_factory=X)``, else None."""
    if value is None:
        return _none
    try:
        literal = ast.literal_eval(value)
    except ValueError:
        pass
    else:
        try:
            hash(literal)
        except TypeError:  # mutable: a fresh object each time, as a default must be
            return lambda: copy.deepcopy(literal)
        return lambda: literal
    if isinstance(value, ast.Call):
        for keyword in value.keywords:
            if keyword.arg == "default_factory" and isinstance(keyword.value, ast.Name):
                return _FACTORIES.get(keyword.value.id, _none)
            if keyword.arg == "default":
                return _default(keyword.value)
    return _none


def _none() -> None:
    return None
