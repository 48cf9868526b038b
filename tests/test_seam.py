"""The engine seam: nothing outside an engine's package names the engine, in code.

Docstrings and comments may use an engine as an example; identifiers and string
literals may not, except the list of shipped engine packages the spec registry
imports. A second engine is then an added package, not an edit everywhere.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest
from mmharness.targets.specs import ENGINES

ROOT = Path(__file__).parent.parent
ENGINE_NAMES = [name.rsplit(".", 1)[-1] for name in ENGINES]
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
