"""SGLang's request payload parsers, loaded by path for the fuzzers (rule R7 of docs/rules.md).

Two engine files hold what turns a user's request into multimodal items:
``managers/io_struct.py`` (``GenerateReqInput.normalize_batch_and_arguments``,
which shapes ``image_data``/``video_data``/``audio_data`` per request, and
``__getitem__``, which splits a batch into requests) and
``multimodal/processors/base_processor.py`` (``validate_mm_data`` and
``collect_mm_items_from_processor_output``). They are loaded with the same
private-namespace loader as the scheduling rules; unlike those, they import
third-party packages at module level that the harness does not install
(``msgspec``, ``zmq``, ``PIL``, ``transformers``), so this load opts in to
serving those from recorded stubs when they are missing. The functions fuzzed
never touch them; ``describe()`` lists every stubbed package and name.

Which parsers a release has is detected, never assumed: a fuzz target whose
function a release lacks gets a one-line ``TargetError`` naming it.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any

from mmharness.engines.sglang import adapter, layout
from mmharness.engines.sglang.layout import PROCESSOR_MODULE, REQUEST_MODULE
from mmharness.targets import loader
from mmharness.targets.base import TargetError

REQUEST_CLASS = "GenerateReqInput"
PROCESSOR_CLASS = "BaseMultimodalProcessor"

STUB_PACKAGES = ("PIL", "decord", "msgspec", "pydantic", "transformers", "zmq")
"""Third-party packages these files import at module level (0.4.x to 0.5.23); stubbed when missing."""

PARSER_SPECS = "sglang==X, a directory holding sglang/, io_struct.py or base_processor.py"


def parsers_source(path: str | Path, *, release: str | None = None) -> loader.Source:
    """The parser files under ``path`` (a directory holding ``sglang/``, or one parser file)."""
    return loader.locate(path, layout.PARSERS, release=release)


@dataclass
class Parsers:
    """One release's payload parsers, executed in a private namespace."""

    name: str
    engine: loader.Engine

    @property
    def release(self) -> str:
        return self.engine.source.release or "unknown"

    @property
    def files(self) -> dict[str, Path]:
        """Engine module name -> file, for the modules that loaded."""
        return {n: p for n, p in self.engine.source.files.items() if n in self.engine.modules}

    def _member(self, module: str, cls: str, attr: str | None, purpose: str) -> Any:
        found: Any = self.engine.modules.get(module)
        where = layout.PARSERS.files[module]
        for step in (cls, attr):
            if step is not None and found is not None:
                found = getattr(found, step, None)
        if found is None:
            error = self.engine.errors.get(module)
            what = f"{cls}.{attr}" if attr else cls
            reason = f"{where} did not load ({error})" if error else f"{where} has no {what}"
            if module not in self.engine.source.files:
                reason = f"{where} is not part of {self.engine.source.origin}"
            raise TargetError(f"{self.name}: {reason}; {purpose} needs it")
        return found

    def request_type(self, purpose: str) -> type:
        """``GenerateReqInput``, with its ``normalize_batch_and_arguments``."""
        self._member(REQUEST_MODULE, REQUEST_CLASS, "normalize_batch_and_arguments", purpose)
        return self._member(REQUEST_MODULE, REQUEST_CLASS, None, purpose)

    def validator(self, purpose: str) -> Callable[..., Any]:
        """``BaseMultimodalProcessor.validate_mm_data`` (a static method)."""
        return self._member(PROCESSOR_MODULE, PROCESSOR_CLASS, "validate_mm_data", purpose)

    def collector(self, purpose: str) -> Callable[..., Any]:
        """``collect_mm_items_from_processor_output``, bound to a stand-in processor."""
        self._member(PROCESSOR_MODULE, PROCESSOR_CLASS, "collect_mm_items_from_processor_output", purpose)
        return self.processor.collect_mm_items_from_processor_output

    @cached_property
    def processor(self) -> Any:
        """A ``BaseMultimodalProcessor`` built without its ``__init__``.

        The real ``__init__`` starts thread and process pools and reads two dozen
        server settings. The collector reads only a few attributes of ``self``
        (``ATTR_NAME_TO_MODALITY``, ``FEATURE_NAMES`` in the releases seen); each
        one that is not a class attribute is taken from its assignment in
        ``__init__``, evaluated in the engine module's own namespace, so the
        tables are the release's own, never copied here.
        """
        cls = self._member(PROCESSOR_MODULE, PROCESSOR_CLASS, None, "the stand-in processor")
        module = self.engine.modules[PROCESSOR_MODULE]
        tree = _class_tree(Path(module.__file__ or ""), PROCESSOR_CLASS)
        method = _method(tree, "collect_mm_items_from_processor_output")
        wanted = {name for name in _self_attributes(method) if not hasattr(cls, name)}
        values = _init_values(tree, wanted, module)
        missing = wanted - values.keys()
        if missing:
            raise TargetError(
                f"{self.name}: cannot build a stand-in {PROCESSOR_CLASS}: the collector reads"
                f" self.{', self.'.join(sorted(missing))}, which __init__ does not assign from an"
                " expression the harness can evaluate"
            )
        stand_in = type(f"StandIn{PROCESSOR_CLASS}", (cls,), {"__module__": cls.__module__})
        stand_in.__abstractmethods__ = frozenset()
        processor = object.__new__(stand_in)
        processor.__dict__.update(values)
        return processor

    def describe(self) -> dict[str, Any]:
        engine = self.engine
        functions = {}
        for module, cls, attr in (
            (REQUEST_MODULE, REQUEST_CLASS, "normalize_batch_and_arguments"),
            (REQUEST_MODULE, REQUEST_CLASS, "_normalize_image_data"),
            (REQUEST_MODULE, REQUEST_CLASS, "__getitem__"),
            (PROCESSOR_MODULE, PROCESSOR_CLASS, "validate_mm_data"),
            (PROCESSOR_MODULE, PROCESSOR_CLASS, "_validate_one_modality"),
            (PROCESSOR_MODULE, PROCESSOR_CLASS, "collect_mm_items_from_processor_output"),
        ):
            fn = getattr(getattr(engine.modules.get(module), cls, None), attr, None)
            if callable(fn):
                functions[f"{cls}.{attr}"] = f"{attr}{inspect.signature(fn)}"
        return {
            "target": self.name,
            "release": self.release,
            "source": engine.source.origin,
            "files": [str(path) for path in self.files.values()],
            "functions": functions,
            "load_errors": engine.errors,
            "load_ms": round(engine.load_seconds * 1000, 1),
            "stubbed_packages": sorted(engine.record.packages),
            "shims": sorted(engine.record.shimmed),
            "stubbed": sorted(engine.record.stubbed),
        }


def _class_tree(path: Path, name: str) -> ast.ClassDef:
    tree = ast.parse(path.read_bytes(), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise TargetError(f"{path}: no class {name}")


def _method(tree: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def _self_attributes(method: ast.FunctionDef | None) -> set[str]:
    if method is None:
        return set()
    return {
        node.attr
        for node in ast.walk(method)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
    }


def _init_values(tree: ast.ClassDef, wanted: set[str], module: ModuleType) -> dict[str, Any]:
    """``self.NAME = <expression>`` in ``__init__``, for each wanted name: the first one, evaluated."""
    init = _method(tree, "__init__")
    values: dict[str, Any] = {}
    for node in ast.walk(init) if init is not None else ():
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target = node.targets[0]
        if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)):
            continue
        if target.value.id != "self" or target.attr not in wanted or target.attr in values:
            continue
        expression = ast.Expression(node.value)
        try:
            code = compile(expression, module.__file__ or "<engine>", "eval")
            values[target.attr] = eval(code, module.__dict__)
        except Exception:  # an expression reading runtime state: the caller reports it missing
            continue
    return values


def from_source(
    source: loader.Source, *, name: str, transform: loader.CodeTransform | None = None
) -> Parsers:
    engine = loader.load(
        source,
        layout.PARSERS,
        shims=adapter.shims_for(source),
        stub_packages=STUB_PACKAGES,
        transform=transform,
        loud=False,
    )
    if not engine.modules:
        errors = "; ".join(f"{n}: {e}" for n, e in engine.errors.items())
        raise TargetError(f"{name}: no payload parser file could be loaded ({errors})")
    return Parsers(name, engine)


def resolve(spec: str, *, transform: loader.CodeTransform | None = None) -> Parsers:
    """The parsers a target spec names: ``sglang==X`` (downloaded once) or a path."""
    if spec.startswith("sglang=="):
        version = spec.removeprefix("sglang==")
        root = adapter.fetch(version)
        try:
            source = parsers_source(root, release=version)
        except TargetError:
            raise TargetError(f"{spec} has no payload parsers (io_struct.py, base_processor.py)") from None
        return from_source(source, name=spec, transform=transform)
    if spec in ("reference", "sglang") or spec.startswith("mutant:"):
        raise TargetError(f"fuzz target {spec!r}: the payload fuzzers take {PARSER_SPECS}")
    return from_source(parsers_source(spec), name=spec, transform=transform)
