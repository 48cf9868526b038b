"""The engine seam: nothing outside an engine's package names the engine, in code.

Docstrings and comments may use an engine as an example; identifiers and string
literals may not, except the list of shipped engine packages the spec registry
imports. A second engine is then an added package, not an edit everywhere.
No engine package names another either: what engines share (the stand-in of
an engine class, the base of a loaded target and its load tail) lives in
``mmharness.targets``, where every engine takes it from, and no engine
package defines its own copy.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest
from mmharness.targets import loaded, standin
from mmharness.targets.specs import engine_packages

ROOT = Path(__file__).parent.parent
ENGINE_NAMES = [name.rsplit(".", 1)[-1] for name in engine_packages()]
REGISTRY = ROOT / "harness" / "targets" / "specs.py"


def _code_tokens(path: Path) -> list[tuple[int, str]]:
    """``(line, text)`` of every identifier and string literal that is not documentation.

    Documentation is a string standing alone as a statement: a docstring, or
    the attribute docstring under an assignment.
    """
    source = path.read_text()
    docstrings = {
        node.value.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [
        (token.start[0], token.string)
        for token in tokens
        if token.type == tokenize.NAME or (token.type == tokenize.STRING and token.start[0] not in docstrings)
    ]


def _generic_files() -> list[Path]:
    engines = ROOT / "harness" / "engines"
    return sorted(
        path
        for directory in (ROOT / "harness", ROOT / "strategies")
        for path in directory.rglob("*.py")
        if engines not in path.parents or path.parent == engines
    )


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_no_generic_module_names_an_engine(engine):
    named = [
        f"{path.relative_to(ROOT)}:{line}: {text}"
        for path in _generic_files()
        for line, text in _code_tokens(path)
        if engine in text.lower() and not (path == REGISTRY and text == f'"mmharness.engines.{engine}"')
    ]
    assert named == []


def test_no_generic_module_names_an_engine_s_own_function():
    """What only an engine's code calls (SGLang's ``host_offload_event``, which explains a CUDA-only
    branch) reaches generic code through the engine's hooks (``branch_reasons``), never by name."""
    from mmharness.engines.sglang.adapter import BRANCH_REASONS

    names = {word for pattern in BRANCH_REASONS.values() for word in re.findall(r"[A-Za-z_]\w{3,}", pattern)}
    assert names
    named = [
        f"{path.relative_to(ROOT)}:{line}: {text}"
        for path in _generic_files()
        for line, text in _code_tokens(path)
        if any(name in text for name in names)
    ]
    assert named == []


def test_the_scan_sees_code_and_skips_docstrings(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('"""Mentions sglang in a docstring."""\nx = "sglang==1"\nsglang_thing = 1\n')
    assert [text for _, text in _code_tokens(sample) if "sglang" in text] == ['"sglang==1"', "sglang_thing"]


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_no_engine_package_names_another(engine):
    others = [name for name in ENGINE_NAMES if name != engine]
    package = ROOT / "harness" / "engines" / engine
    named = [
        f"{path.relative_to(ROOT)}:{line}: {text}"
        for path in sorted(package.rglob("*.py"))
        for line, text in _code_tokens(path)
        for other in others
        if other in text.lower()
    ]
    assert named == []


SHARED = (standin, loaded)
"""The generic modules holding what engines share."""


def _shared_names() -> set[str]:
    """The public classes and functions of ``SHARED``, and the load tail of an adapter (``Factory``'s)."""
    names = {
        name
        for module in SHARED
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == module.__name__
    }
    tail = {name for name, value in vars(loaded.Factory).items() if callable(value) and name[0] != "_"}
    return names | tail


def test_the_shared_names_are_what_engines_would_copy():
    assert {"StandIn", "parameters", "LoadedTarget", "Factory"} <= _shared_names()
    assert {"load", "from_path", "fetch", "from_release", "installed"} <= _shared_names()


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_an_engine_takes_what_engines_share_from_the_generic_modules(engine):
    """A top-level class or function of an engine package named as a shared one (private or not) is a
    copy, unless it is a class deriving from the shared one (a ``StandIn`` naming its engine in messages);
    the load tail is ``Factory``'s methods, bound to names."""
    shared = _shared_names()
    copies = [
        f"{path.relative_to(ROOT)}:{node.lineno}: {node.name}"
        for path in sorted((ROOT / "harness" / "engines" / engine).rglob("*.py"))
        for node in ast.parse(path.read_text()).body
        if isinstance(node, (ast.ClassDef, ast.FunctionDef))
        and node.name.lstrip("_") in shared
        and not (
            isinstance(node, ast.ClassDef)
            and any(ast.unparse(b).rsplit(".", 1)[-1] == node.name.lstrip("_") for b in node.bases)
        )
    ]
    assert copies == []
