"""Load an engine's rule files by path, with every other engine import served by recorded stubs.

Only the files that hold the multimodal scheduling rules are executed: the rules
module (``srt/managers/mm_schedule.py``, else ``srt/managers/mm_utils.py``), the
splitter's ``mm_utils.py``, the embedding cache ``srt/mem_cache/multimodal_cache.py``
and ``srt/models/kimi_k3.py``. ``sglang/__init__.py`` never runs, so neither do
the engine's GPU dependencies.

How imports are kept private: each loaded module gets its own ``__builtins__``
whose ``__import__`` resolves ``sglang.*`` names inside one ``Namespace`` (the
rule files loaded for real, stub modules for the rest) and hands every other name
to Python's import. Nothing named ``sglang*`` ever enters ``sys.modules``, so two
releases load side by side in one process, next to an installed ``sglang``. The
same ``__import__`` serves imports inside engine functions at call time.

A load may opt in to serving named third-party top-level packages from recorded
stubs too, when they are not installed (the payload parsers import ``msgspec``,
``zmq``, ``PIL``, ``transformers`` at module level and never use them in the
functions fuzzed). The scheduling targets never opt in: their files need only
torch and numpy. A load may also transform each engine file's code before it
runs (the fuzzers instrument the parser files for coverage this way, since
atheris's import hook never sees files executed by path).

Compiling the files is most of a load; compiled code is cached (``marshal``,
keyed by the file's path and bytes) under the harness cache directory.
"""

from __future__ import annotations

import builtins
import hashlib
import importlib.util
import itertools
import marshal
import os
import re
import sys
import time
import types
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from importlib.util import MAGIC_NUMBER
from pathlib import Path
from typing import Any

from harness.targets import shims
from harness.targets.base import TargetError

ENGINE = "sglang"
RULES_MODULES = ("sglang.srt.managers.mm_schedule", "sglang.srt.managers.mm_utils")
"""Where the rules live, newest layout first (0.5.18+ moved them to ``mm_schedule``)."""
SPLITTER_MODULE = "sglang.srt.managers.mm_utils"
CACHE_MODULE = "sglang.srt.mem_cache.multimodal_cache"
KIMI_MODULE = "sglang.srt.models.kimi_k3"

ENGINE_FILES: dict[str, str] = {
    "sglang.srt.managers.mm_schedule": "srt/managers/mm_schedule.py",
    "sglang.srt.managers.mm_utils": "srt/managers/mm_utils.py",
    CACHE_MODULE: "srt/mem_cache/multimodal_cache.py",
    KIMI_MODULE: "srt/models/kimi_k3.py",
}
"""The engine files loaded for real, relative to the ``sglang/`` package directory."""

SINGLE_FILES = {Path(rel).name: name for name, rel in ENGINE_FILES.items() if name != CACHE_MODULE}
"""A lone ``.py`` file is known by its name: ``mm_schedule.py``, ``mm_utils.py``, ``kimi_k3.py``."""

PARSER_FILES: dict[str, str] = {
    "sglang.srt.managers.io_struct": "srt/managers/io_struct.py",
    "sglang.srt.multimodal.processors.base_processor": "srt/multimodal/processors/base_processor.py",
}
"""The request payload parsers (fuzz targets), relative to ``sglang/``; loaded only by the fuzzers."""

CodeTransform = Callable[[str, types.CodeType], types.CodeType]
"""``(engine module name, code) -> code`` applied to each engine file before it runs."""

PRIVATE_PREFIX = "_mmharness_engine"
_REAL_IMPORT = builtins.__import__
_loads = itertools.count(1)


def cache_dir() -> Path:
    """Where downloaded releases and compiled code live: ``$MMHARNESS_CACHE``, else XDG's cache."""
    explicit = os.environ.get("MMHARNESS_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "mmharness"


# Where the files are -----------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """An engine's rule files: engine module name -> file, plus what the user pointed at."""

    files: dict[str, Path]
    origin: str
    release: str | None = None


def locate(path: str | os.PathLike[str], *, release: str | None = None) -> Source:
    """The rule files under ``path`` (a directory holding ``sglang/``, or one rule file)."""
    given = Path(path).expanduser()
    if given.is_file():
        name = SINGLE_FILES.get(given.name)
        if name is None:
            raise TargetError(
                f"{given} is not an SGLang rules file; give mm_schedule.py, mm_utils.py or"
                " kimi_k3.py, or a directory holding sglang/"
            )
        return Source({name: given.resolve()}, str(given), release)
    if not given.is_dir():
        raise TargetError(f"{given} does not exist; give a directory holding sglang/ or a rules file")
    package = _package_dir(given)
    files = {
        name: (package / rel).resolve()
        for name, rel in ENGINE_FILES.items()
        if package is not None and (package / rel).is_file()
    }
    if not any(name in files for name in (*RULES_MODULES, KIMI_MODULE)):
        raise TargetError(
            f"{given} holds no SGLang rules (no sglang/srt/managers/mm_schedule.py or"
            " mm_utils.py); point at a directory holding sglang/ (an unpacked wheel,"
            " site-packages, a fork's python/) or at one rules file"
        )
    return Source(files, str(given), release or _release_of(package))


def _package_dir(given: Path) -> Path | None:
    """The ``sglang/`` package directory for a path to it, to its parent, or to a fork's root."""
    for candidate in (given / "sglang", given / "python" / "sglang", given):
        if candidate.name == ENGINE and (candidate / "srt").is_dir():
            return candidate
    return None


_QUOTED = re.compile(r"""["']([^"']+)["']""")
PLACEHOLDER_VERSION = "0.0.0"
"""What ``sglang/version.py`` falls back to when it cannot find the real version."""


def _release_of(package: Path | None) -> str | None:
    """The release a package directory holds: its dist-info, else ``_version.py``/``version.py``."""
    if package is None:
        return None
    for metadata in sorted(package.parent.glob("sglang-*.dist-info/METADATA")):
        for line in metadata.read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    for name in ("_version.py", "version.py"):
        version_file = package / name
        if not version_file.is_file():
            continue
        for line in version_file.read_text(errors="replace").splitlines():
            if line.startswith(("__version__", "version")):
                quoted = _QUOTED.findall(line)
                if quoted and not quoted[-1].startswith(PLACEHOLDER_VERSION):
                    return quoted[-1]
    return None


# Compiled code cache -----------------------------------------------------------------


def compiled(path: Path) -> types.CodeType:
    """The file's code object, from the bytecode cache when its path and bytes are unchanged."""
    source = path.read_bytes()
    key = hashlib.sha256(MAGIC_NUMBER + os.fsencode(path) + b"\0" + source).hexdigest()[:40]
    cached = cache_dir() / "bytecode" / f"{key}.bin"
    try:
        return marshal.loads(cached.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        pass
    code = compile(source, str(path), "exec", dont_inherit=True)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(f".{os.getpid()}.tmp")
        partial.write_bytes(marshal.dumps(code))
        os.replace(partial, cached)
    except OSError:
        pass  # a read-only cache only costs compile time
    return code


# The private namespace ---------------------------------------------------------------


class StubModule(types.ModuleType):
    """An engine module the harness does not load: a name read from it is a shim or a ``Stub``."""

    def __init__(self, name: str, namespace: Namespace) -> None:
        super().__init__(name)
        self.__dict__["_mm_namespace"] = namespace

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        namespace: Namespace = self.__dict__["_mm_namespace"]
        value = namespace.synthesise(self.__name__, name)
        setattr(self, name, value)
        return value


@dataclass
class Namespace:
    """One load's engine modules: the rule files executed for real, stub modules for the rest."""

    files: dict[str, Path]
    record: shims.Record = field(default_factory=shims.Record)
    modules: dict[str, types.ModuleType] = field(default_factory=dict)
    tag: str = field(default_factory=lambda: f"{PRIVATE_PREFIX}{next(_loads)}")
    stub_packages: frozenset[str] = frozenset()
    """Third-party top-level packages served from stubs (the missing ones among those opted in)."""
    transform: CodeTransform | None = None

    def __post_init__(self) -> None:
        self.builtins = dict(vars(builtins))
        self.builtins["__import__"] = self.import_
        self.item_type = type(
            "MultimodalDataItem",
            (shims.MultimodalDataItem,),
            {"_mm_record": self.record, "__module__": shims.__name__},
        )

    def synthesise(self, module: str, name: str) -> Any:
        """What a stub module answers for ``name``: a faithful shim, else a recorded ``Stub``.

        Names of a stubbed third-party package never get engine shims.
        """
        qualified = f"{module}.{name}"
        if module.partition(".")[0] in self.stub_packages:
            self.record.stubbed.add(qualified)
            return shims.Stub(qualified)
        shim = shims.shim_for(name, self.record, self.item_type)
        if shim is not None:
            self.record.shimmed.add(qualified)
            return shim
        self.record.stubbed.add(qualified)
        return shims.Stub(qualified, self._resolve_below)

    def _resolve_below(self, owner: str, name: str) -> Any:
        """An attribute of a stub: a shim by name (the stub may be a module), else an unrecorded stub."""
        shim = shims.shim_for(name, self.record, self.item_type)
        if shim is not None:
            self.record.shimmed.add(f"{owner}.{name}")
            return shim
        return shims.Stub(f"{owner}.{name}", self._resolve_below)

    def import_(
        self,
        name: str,
        globals: dict[str, Any] | None = None,
        locals: Any = None,
        fromlist: tuple[str, ...] | list[str] | None = (),
        level: int = 0,
    ) -> Any:
        """``__import__`` for engine code: ``sglang.*`` from this namespace, the rest as usual."""
        if level:
            name = _resolve_relative(name, (globals or {}).get("__package__") or "", level)
        elif name.partition(".")[0] not in (ENGINE, *self.stub_packages):
            return _REAL_IMPORT(name, globals, locals, fromlist, level)
        elif name.partition(".")[0] != ENGINE:
            self.record.packages.add(name.partition(".")[0])
        module = self.module(name)
        if not fromlist:
            return self.module(name.partition(".")[0])
        for attr in fromlist:
            child = f"{name}.{attr}"
            if child in self.files and attr not in module.__dict__:
                self.module(child)
        return module

    def module(self, name: str) -> types.ModuleType:
        """The engine module ``name``, loading or stubbing it (and its parents) on first use."""
        found = self.modules.get(name)
        if found is not None:
            return found
        parent, _, leaf = name.rpartition(".")
        if name in self.files:
            module = self._execute(name)
        else:
            module = self.modules[name] = StubModule(name, self)
        if parent:
            setattr(self.module(parent), leaf, module)
        return module

    def _execute(self, name: str) -> types.ModuleType:
        path = self.files[name]
        code = compiled(path)
        if self.transform is not None:
            code = self.transform(name, code)
        private = f"{self.tag}.{name}"
        module = types.ModuleType(private)
        module.__file__ = str(path)
        module.__package__ = name.rpartition(".")[0]
        module.__dict__["__builtins__"] = self.builtins
        module.__dict__["__mm_engine_name__"] = name
        self.modules[name] = module
        # Present only while executing: dataclasses and typing look a class's module up there.
        sys.modules[private] = module
        try:
            exec(code, module.__dict__)
        except BaseException:
            del self.modules[name]
            raise
        finally:
            sys.modules.pop(private, None)
        return module


def _resolve_relative(name: str, package: str, level: int) -> str:
    base = package.rsplit(".", level - 1)[0] if level > 1 else package
    return f"{base}.{name}" if name else base


# Loading -----------------------------------------------------------------------------


@dataclass
class Engine:
    """One loaded engine: its real modules, what failed to load, and what was faked."""

    source: Source
    modules: dict[str, types.ModuleType]
    errors: dict[str, str]
    record: shims.Record
    item_type: type
    modality: Any
    load_seconds: float
    installed: bool = False

    def module(self, name: str) -> types.ModuleType | None:
        return self.modules.get(name)

    @property
    def rules(self) -> types.ModuleType | None:
        """The module holding the rules: ``mm_schedule`` where it exists, else ``mm_utils``."""
        for name in RULES_MODULES:
            module = self.modules.get(name)
            if module is not None and hasattr(module, "get_embedding_and_mask"):
                return module
        return None


def load(
    source: Source,
    *,
    stub_packages: Collection[str] = (),
    transform: CodeTransform | None = None,
) -> Engine:
    """Execute the source's engine files in a fresh private namespace.

    A file that fails to execute is kept out and its error recorded (the adapter
    then lacks what it held); ``sys.modules`` is left as it was found.
    ``stub_packages`` names third-party top-level packages to serve from recorded
    stubs when they are not installed (an installed one is used for real);
    ``transform`` rewrites each file's code before it runs.
    """
    import torch  # noqa: F401 - every engine file imports it; its import is not the load's cost

    started = time.perf_counter()
    missing = frozenset(name for name in stub_packages if not _importable(name))
    namespace = Namespace(dict(source.files), stub_packages=missing, transform=transform)
    errors: dict[str, str] = {}
    for name in sorted(source.files, key=_load_order):
        try:
            namespace.module(name)
        except Exception as error:  # an engine file we cannot run: report it, keep the rest
            errors[name] = f"{type(error).__name__}: {error}".splitlines()[0]
    real = {name: namespace.modules[name] for name in source.files if name in namespace.modules}
    return Engine(
        source=source,
        modules=real,
        errors=errors,
        record=namespace.record,
        item_type=namespace.item_type,
        modality=shims.Modality,
        load_seconds=time.perf_counter() - started,
    )


def _importable(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a broken or half-installed package counts as missing
        return False


def _load_order(name: str) -> int:
    order = (CACHE_MODULE, *RULES_MODULES, KIMI_MODULE)
    return order.index(name) if name in order else len(order)


def load_installed() -> Engine:
    """The installed ``sglang``, imported normally (its own item type, cache and context)."""
    import importlib

    started = time.perf_counter()
    try:
        importlib.import_module(ENGINE)
    except Exception as error:
        raise TargetError(_installed_hint(error)) from None
    modules: dict[str, types.ModuleType] = {}
    errors: dict[str, str] = {}
    for name in ENGINE_FILES:
        try:
            modules[name] = importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name != name:
                errors[name] = f"{type(error).__name__}: {error}"
        except Exception as error:
            errors[name] = f"{type(error).__name__}: {error}".splitlines()[0]
    rules = [modules[n] for n in RULES_MODULES if n in modules]
    if not rules:
        first = next(iter(errors.values()), "no rules module")
        raise TargetError(_installed_hint(RuntimeError(first)))
    schedule_batch = importlib.import_module("sglang.srt.managers.schedule_batch")
    files = {name: Path(module.__file__ or name) for name, module in modules.items()}
    return Engine(
        source=Source(files, ENGINE, _installed_version()),
        modules=modules,
        errors=errors,
        record=shims.Record(),
        item_type=schedule_batch.MultimodalDataItem,
        modality=schedule_batch.Modality,
        load_seconds=time.perf_counter() - started,
        installed=True,
    )


def _installed_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version(ENGINE)
    except metadata.PackageNotFoundError:
        return None


def _installed_hint(error: BaseException) -> str:
    version = _installed_version()
    release = f"sglang=={version}" if version else "sglang==X (e.g. sglang==0.5.23)"
    reason = f"{type(error).__name__}: {error}".splitlines()[0]
    return (
        f"the installed sglang does not import ({reason}); use {release} to load that release"
        " by path, or a path spec (a directory holding sglang/)"
    )
