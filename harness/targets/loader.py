"""Load an engine's rule files by path, with every other engine import served by recorded stubs.

Only the files an engine's ``Layout`` names are executed (for SGLang: the rules
module, the splitter, the embedding cache, one model file); the engine's
``__init__.py`` never runs, so neither do its GPU dependencies.

How imports are kept private: each loaded module gets its own ``__builtins__``
whose ``__import__`` resolves the engine's names (``sglang.*``) inside one
``Namespace`` (the layout's files loaded for real, stub modules for the rest)
and hands every other name to Python's import. Nothing of the engine ever
enters ``sys.modules``, so two releases load side by side in one process, next
to an installed copy. The same ``__import__`` serves imports inside engine
functions at call time. A name read from a stub module is a faithful shim when
the engine package provides one (``Shims.shim_for``), else a recorded ``Stub``
(``mmharness.targets.stubs``), loud once the load is over.

A fork may ship the engine as another top-level package (``myfork/`` with the same
layout, importing ``myfork.srt...``): ``Layout.package_dir`` finds a package by its
files, not its name, and the namespace serves the fork's imports of itself as the
engine's own names, so an adapter finds its modules as it finds the engine's.

A fork may also move part of its scheduling code into a module of its own
(``srt/managers/mm_helpers.py``) that a loaded file imports. A layout's
``follow`` directories bound what is followed into the target's tree
(``Namespace.follows``): a module imported at load time by a loaded file lying
in one of them, with its own plain ``.py`` file there, not one of the layout's
``never`` files (those the harness reads, or loads in another layout), whose top
level only defines names (``work_on_import``: no bare call, loop or ``with``,
so no engine initialisation runs), is executed from the tree like the layout's
files, its own imports served the same way, recursively; anything else stays a
stub as before. A followed module that raises is served as a stub, the error
noted (``Record.unfollowed``). The cached releases hold no such file, so they
load exactly as before.

A load may opt in to serving named third-party top-level packages from recorded
stubs too, when they are not installed (the payload parsers import ``msgspec``,
``zmq``, ``PIL``, ``transformers`` at module level and never use them in the
functions fuzzed). The scheduling targets never opt in: their files need only
torch and numpy. A load may also transform each engine file's code before it
runs (the fuzzers instrument the parser files for coverage this way, since
atheris's import hook never sees files executed by path).

Compiling the files is most of a load; compiled code is cached (``marshal``,
keyed by the file's path and bytes) under the harness cache directory, each
entry checked against its digest before it runs (``compiled``).
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import functools
import hashlib
import importlib.util
import itertools
import logging
import marshal
import os
import re
import sys
import time
import types
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from importlib.util import MAGIC_NUMBER
from pathlib import Path
from typing import Any, Protocol

from mmharness.storage import cache_dir, read_verified, write_verified
from mmharness.targets.base import TargetError
from mmharness.targets.guarded import GUARDED_OS, exited
from mmharness.targets.stubs import Record, Stub

CodeTransform = Callable[[str, types.CodeType], types.CodeType]
"""``(engine module name, code) -> code`` applied to each engine file before it runs."""

PRIVATE_PREFIX = "_mmharness_engine"
_REAL_IMPORT = builtins.__import__
_loads = itertools.count(1)


# Where the files are -----------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Where an engine keeps the files a harness target loads, relative to its package directory."""

    package: str
    """The engine's top-level import name (``sglang``): its imports are served by the namespace."""
    marker: str
    """A directory every copy of the engine package holds (``srt``): tells its package dir apart."""
    files: Mapping[str, str]
    """Engine module name -> file relative to the package directory, in load order."""
    kind: str = "rules"
    """What the files hold, for error messages (``rules``, ``payload parsers``)."""
    follow: tuple[str, ...] = ()
    """Directories (relative to the package directory) whose modules a load follows: an engine module
    imported by a file in one of them, with its own file in one of them, runs from the target's tree
    instead of being stubbed (``Namespace.follows`` states the whole rule). Empty: nothing is followed."""
    never: frozenset[str] = frozenset()
    """Files (relative to the package directory) never followed: those the harness reads without running
    them, or loads in another layout, whose names the engine's shims stand in for."""

    @property
    def single_files(self) -> dict[str, str]:
        """A lone ``.py`` file is known by its name."""
        return {Path(rel).name: name for name, rel in self.files.items()}

    def holds(self, directory: Path) -> bool:
        """Whether ``directory`` is a copy of the engine package under any name: the marker dir and one of
        the layout's files (a fork may ship as another top-level package, ``myfork/``)."""
        try:
            return (directory / self.marker).is_dir() and any(
                (directory / rel).is_file() for rel in self.files.values()
            )
        except OSError:  # unreadable: not a package the harness can load
            return False

    def candidates(self, given: Path) -> list[Path]:
        """The engine package directories at ``given``, by any name: ``given`` itself, else those it (or
        its ``python/``) holds."""
        if self.holds(given):
            return [given]
        found: list[Path] = []
        for parent in (given, given / "python"):
            try:
                children = sorted(child for child in parent.iterdir() if child.is_dir())
            except OSError:
                continue
            found += [child for child in children if self.holds(child)]
        return found

    def package_dir(self, given: Path) -> Path | None:
        """The package directory for a path to it, to its parent, or to a checkout's root.

        A directory named as the layout's package (with its marker) wins, as it always did; else the one
        copy under another name (``candidates``). Several such copies are refused, each named: which to
        load is the user's to say, by pointing at it.
        """
        for candidate in (given / self.package, given / "python" / self.package, given):
            if candidate.name == self.package and (candidate / self.marker).is_dir():
                return candidate
        found = self.candidates(given)
        if len(found) > 1:
            names = ", ".join(str(path) for path in found)
            raise TargetError(
                f"{given} holds {len(found)} copies of the {self.package} package under other names"
                f" ({names}); point at the one to load"
            )
        return found[0] if found else None


@dataclass(frozen=True)
class Source:
    """An engine's files to load: engine module name -> file, plus what the user pointed at."""

    files: dict[str, Path]
    origin: str
    release: str | None = None
    package_dir: Path | None = None
    """The engine package directory, when the user pointed at one (not at a lone file)."""
    package: str | None = None
    """The top-level name the package directory goes by (``package_dir.name``); when it is not the
    layout's (a fork shipped as ``myfork``), the load serves the fork's imports of itself as the layout's."""

    def alias(self, layout: Layout) -> str | None:
        """The fork's own top-level name, when it is not the layout's package name; else ``None``."""
        return self.package if self.package and self.package != layout.package else None


def locate(path: str | os.PathLike[str], layout: Layout, *, release: str | None = None) -> Source:
    """The layout's files under ``path`` (a directory holding the package, or one of the files)."""
    given = Path(path).expanduser()
    package = layout.package
    names = ", ".join(layout.single_files)
    if given.is_file():
        name = layout.single_files.get(given.name)
        if name is None:
            raise TargetError(
                f"{given} is not one of {package}'s {layout.kind} files; give {names},"
                f" or a directory holding {package}/"
            )
        return Source(
            {name: given.resolve()}, str(given), release, package=_package_above(given, layout, name)
        )
    if not given.is_dir():
        raise TargetError(f"{given} does not exist; give a directory holding {package}/ or one of {names}")
    package_dir = layout.package_dir(given)
    files = {
        name: (package_dir / rel).resolve()
        for name, rel in layout.files.items()
        if package_dir is not None and (package_dir / rel).is_file()
    }
    if not files:
        wanted = " or ".join(f"{package}/{rel}" for rel in layout.files.values())
        raise TargetError(
            f"{given} holds no {package} {layout.kind} (no {wanted}); point at a directory holding"
            f" {package}/ (an unpacked wheel, site-packages, a checkout's python/; or a copy of it under"
            f" another name) or at one of {names}"
        )
    found_as = package_dir.name if package_dir is not None else package
    return Source(files, str(given), release or release_of(package_dir, found_as), package_dir, found_as)


def _package_above(file: Path, layout: Layout, name: str) -> str | None:
    """The package a lone file lies in, when it lies where the layout puts it (``myfork/srt/.../x.py``):
    a renamed fork's file imports its package by that name."""
    rel = Path(layout.files[name])
    resolved = file.resolve()
    if resolved.parts[-len(rel.parts) :] != rel.parts or len(resolved.parts) <= len(rel.parts):
        return None
    return resolved.parents[len(rel.parts) - 1].name


_QUOTED = re.compile(r"""["']([^"']+)["']""")
PLACEHOLDER_VERSION = "0.0.0"
"""What a version file falls back to when it cannot find the real version."""


def release_of(package_dir: Path | None, package: str) -> str | None:
    """The release a package directory holds: its dist-info, else ``_version.py``/``version.py``."""
    if package_dir is None:
        return None
    for metadata in sorted(package_dir.parent.glob(f"{package}-*.dist-info/METADATA")):
        for line in metadata.read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    for name in ("_version.py", "version.py"):
        version_file = package_dir / name
        if not version_file.is_file():
            continue
        for line in version_file.read_text(errors="replace").splitlines():
            if line.startswith(("__version__", "version")):
                quoted = _QUOTED.findall(line)
                if quoted and not quoted[-1].startswith(PLACEHOLDER_VERSION):
                    return quoted[-1]
    return None


# Compiled code cache -----------------------------------------------------------------


BYTECODE_FORMAT = b"mmharness-bytecode-2\0"
"""Part of each entry's key: entries are ``storage.write_verified`` (a digest before the code) from this
format on, apart from the bare ``marshal`` data an older harness keeps under the older keys."""


def compiled(path: Path) -> types.CodeType:
    """The file's code object, from the bytecode cache when its path and bytes are unchanged.

    An entry runs only once its digest matches what it holds (``storage.read_verified``): one cut by a
    full disk or with a flipped bit (which ``marshal`` may well read as other code) is compiled again
    and replaced."""
    source = path.read_bytes()
    key = hashlib.sha256(BYTECODE_FORMAT + MAGIC_NUMBER + os.fsencode(path) + b"\0" + source)
    cached = cache_dir() / "bytecode" / f"{key.hexdigest()[:40]}.bin"
    data = read_verified(cached)
    if data is not None:
        with contextlib.suppress(ValueError, EOFError, TypeError):  # whole, yet unreadable: compiled again
            return marshal.loads(data)
    code = compile(source, str(path), "exec", dont_inherit=True)
    with contextlib.suppress(OSError):  # a read-only or full cache only costs compile time
        write_verified(cached, marshal.dumps(code))
    return code


# The private namespace ---------------------------------------------------------------


class Shims(Protocol):
    """An engine package's faithful stand-ins, asked by name for each name a stub module serves."""

    def shim_for(self, name: str) -> Any | None:
        """The shim for ``name``, or ``None`` for a recorded ``Stub``."""


class NoShims:
    """The shims of an engine that needs none: every name a stub module serves is a recorded ``Stub``."""

    def __init__(self, record: Record | None = None) -> None:
        """``record``: the load's, as ``Factory.shims`` hands it (unused: nothing is shimmed)."""

    def shim_for(self, name: str) -> None:
        return None


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
    """One load's engine modules: the layout's files executed for real, stub modules for the rest."""

    package: str
    files: dict[str, Path]
    record: Record = field(default_factory=Record)
    shims: Shims = field(default_factory=NoShims)
    modules: dict[str, types.ModuleType] = field(default_factory=dict)
    tag: str = field(default_factory=lambda: f"{PRIVATE_PREFIX}{next(_loads)}")
    stub_packages: frozenset[str] = frozenset()
    """Third-party top-level packages served from stubs (the missing ones among those opted in)."""
    stub_missing: bool = False
    """Serve every third-party package that is not installed from stubs (loud ones, see ``loud``)."""
    transform: CodeTransform | None = None
    loud: bool = True
    """Whether stubs raise when used after the load (see ``mmharness.targets.stubs``)."""
    aliases: frozenset[str] = frozenset()
    """Other top-level names served as ``package``: a renamed fork's own (``myfork.srt.x`` is the engine
    module ``sglang.srt.x``), so adapters find its modules by the engine's names."""
    root: Path | None = None
    """The target's package directory, where followed modules are found; ``None`` (a lone file): none."""
    follow: tuple[str, ...] = ()
    """``Layout.follow``: the directories whose modules are followed."""
    never: frozenset[str] = frozenset()
    """``Layout.never``: files never followed."""
    loading: bool = True
    """Set to ``False`` when the load is over: an import made at call time is never followed."""

    def __post_init__(self) -> None:
        self.followed: dict[str, Path] = {}
        """Engine module name -> its file, for each module followed into the target's tree."""
        self._followable: dict[str, Path | None] = {}
        self._listings: dict[str, frozenset[str]] = {}
        self._importers: dict[str, bool] = {}
        self.builtins = dict(vars(builtins))
        self.builtins["__import__"] = self.import_
        # Engine modules that log through ``logging.getLogger(__name__)`` log under the tag: keep it quiet.
        quiet = logging.getLogger(self.tag)
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False

    def _stub(self, name: str, resolve: Callable[[str, str], Any] | None = None) -> Stub:
        return Stub(name, self.record if self.loud else None, resolve)

    def synthesise(self, module: str, name: str) -> Any:
        """What a stub module answers for ``name``: a faithful shim, else a recorded ``Stub``.

        Names of a stubbed third-party package never get engine shims.
        """
        qualified = f"{module}.{name}"
        if module.partition(".")[0] in self.stub_packages:
            self.record.stubbed.add(qualified)
            return self._stub(qualified)
        shim = self.shims.shim_for(name)
        if shim is not None:
            self.record.shimmed.add(qualified)
            return shim
        self.record.stubbed.add(qualified)
        return self._stub(qualified, self._resolve_below)

    def _resolve_below(self, owner: str, name: str) -> Any:
        """An attribute of a stub: a shim by name (the stub may be a module), else a stub of its own."""
        shim = self.shims.shim_for(name)
        if shim is not None:
            self.record.shimmed.add(f"{owner}.{name}")
            return shim
        qualified = f"{owner}.{name}"
        if self.record.armed and self.loud:
            raise self.record.reach(qualified)
        return self._stub(qualified, self._resolve_below)

    def import_(
        self,
        name: str,
        globals: dict[str, Any] | None = None,
        locals: Any = None,
        fromlist: tuple[str, ...] | list[str] | None = (),
        level: int = 0,
    ) -> Any:
        """``__import__`` for engine code: the engine's names from this namespace, the rest as usual."""
        top = name.partition(".")[0]
        importer = (globals or {}).get("__mm_engine_name__")
        if level:
            name = _resolve_relative(name, (globals or {}).get("__package__") or "", level)
        elif top in self.aliases:
            name = self.package + name[len(top) :]
        elif top == "os" and (name == "os" or not fromlist):  # ``os`` itself: its ending calls guarded
            return GUARDED_OS
        elif top not in (self.package, *self.stub_packages):
            if not (self.stub_missing and not _importable(top)):
                return _REAL_IMPORT(name, globals, locals, fromlist, level)
            self.stub_packages = self.stub_packages | {top}
        elif top != self.package:
            self.record.packages.add(top)
        module = self.module(name, importer)
        if not fromlist:
            return self.module(name.partition(".")[0])
        for attr in fromlist:
            child = f"{name}.{attr}"
            if attr not in module.__dict__ and (child in self.files or self.follows(child, importer)):
                self.module(child, importer)
        return module

    def module(self, name: str, importer: str | None = None) -> types.ModuleType:
        """The engine module ``name``, loading, following (``follows``, imported by ``importer``) or
        stubbing it (and its parents) on first use."""
        found = self.modules.get(name)
        if found is not None:
            return found
        parent, _, leaf = name.rpartition(".")
        if name in self.files:
            module = self._execute(name)
        elif importer is not None and self.follows(name, importer):
            module = self._follow(name, importer)
        else:
            module = self.modules[name] = StubModule(name, self)
        if parent:
            setattr(self.module(parent), leaf, module)
        return module

    def follows(self, name: str, importer: str | None) -> bool:
        """Whether the engine module ``name``, imported by the engine module ``importer``, runs from the
        target's tree rather than from a stub.

        All of: the load is still running (an import made at call time, the engine's way of deferring a
        heavy module, stays stubbed); ``importer`` is a file the load runs that lies in one of the
        layout's ``follow`` directories (the scheduling code's neighbourhood, not a model file's); and
        ``name`` has its own file there (``_followable``). Releases as the harness caches them hold no
        such file, so they load as they always did.
        """
        if not self.loading or importer is None:
            return False
        if importer not in self._importers:
            rules_side = self._file_of(importer) is not None and self._in_follow(self._rel(importer))
            self._importers[importer] = bool(rules_side)
        return self._importers[importer] and self._followable_file(name) is not None

    def _rel(self, name: str) -> str | None:
        """The file an engine module of the package would have, relative to the package directory."""
        if not name.startswith(f"{self.package}."):
            return None
        return name[len(self.package) + 1 :].replace(".", "/") + ".py"

    def _in_follow(self, rel: str | None) -> str | None:
        """``rel`` when it lies in one of the ``follow`` directories and is not one of ``never``."""
        if rel is None or rel in self.never:
            return None
        return rel if any(rel.startswith(f"{directory}/") for directory in self.follow) else None

    def _file_of(self, name: str) -> Path | None:
        return self.files.get(name) or self.followed.get(name)

    def _followable_file(self, name: str) -> Path | None:
        """The file of ``name`` in the target's tree when the module may be followed: a plain module
        (never a package's ``__init__``, which gathers and registers) in a ``follow`` directory, not one
        of ``never``, whose top level only defines names (``work_on_import``); else ``None``, and a file
        refused for the work its top level does is noted in ``record.unfollowed``."""
        if name in self._followable:
            return self._followable[name]
        rel = self._in_follow(self._rel(name))
        path = self.root / rel if self.root is not None and rel is not None and self._listed(rel) else None
        if path is not None and not path.is_file():
            path = None
        if path is not None:
            work = work_on_import(path)
            if work is not None:
                self.record.unfollowed[name] = f"stubbed: its top level does work on import ({work})"
                path = None
        self._followable[name] = path
        return path

    def _listed(self, rel: str) -> bool:
        """Whether ``rel``'s directory lists its name: one listing a directory, not a stat a name
        (every name a ``from ... import`` takes is asked about)."""
        directory, _, file = rel.rpartition("/")
        if directory not in self._listings:
            try:
                self._listings[directory] = frozenset(os.listdir(Path(self.root or ".") / directory))
            except OSError:
                self._listings[directory] = frozenset()
        return file in self._listings[directory]

    def _follow(self, name: str, importer: str) -> types.ModuleType:
        """Run a followed module from the tree; one that raises is served as a stub, the error noted."""
        path = self._followable_file(name)
        assert path is not None  # follows() said so
        self.followed[name] = path
        self.record.followed[name] = importer
        try:
            return self._execute(name)
        except Exception as error:  # the fork's module cannot run here: a stub, as before, said why
            del self.followed[name], self.record.followed[name]
            raised = f"{type(error).__name__}: {error}".splitlines()[0]
            self.record.unfollowed[name] = f"stubbed: raised {raised}"
            module = self.modules[name] = StubModule(name, self)
            return module

    def _execute(self, name: str) -> types.ModuleType:
        path = self._file_of(name)
        assert path is not None
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


_DEFINES = (
    ast.Import,
    ast.ImportFrom,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Assign,
    ast.AnnAssign,
    ast.AugAssign,
    ast.Pass,
    ast.Raise,
)


def work_on_import(path: Path) -> str | None:
    """Where a module's top level does more than define names, or ``None`` when it only defines them.

    Defining is: imports, functions, classes, assignments (a call on the right, ``logger =
    logging.getLogger(__name__)``, included), docstrings, ``raise``, and ``if``/``try`` blocks made of
    these (an ``if __name__ == "__main__":`` block never runs on import). Anything else (a bare call
    that registers, initialises or starts something; a loop; a ``with``) is work on import: such a
    module is not followed. A file that does not parse is left to the stub too.
    """
    try:
        tree = ast.parse(path.read_bytes(), str(path))
    except (OSError, SyntaxError, ValueError) as error:
        return f"does not parse: {type(error).__name__}"
    return _work_in(tree.body)


def _work_in(body: list[ast.stmt]) -> str | None:
    for statement in body:
        if isinstance(statement, _DEFINES):
            continue
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # a docstring
        if isinstance(statement, ast.If):
            if _is_main_guard(statement.test):
                continue
            found = _work_in(statement.body) or _work_in(statement.orelse)
        elif isinstance(statement, ast.Try):
            handlers = (handler.body for handler in statement.handlers)
            blocks = [statement.body, *handlers, statement.orelse, statement.finalbody]
            found = next(filter(None, map(_work_in, blocks)), None)
        else:
            found = f"line {statement.lineno}: {ast.unparse(statement).splitlines()[0][:60]}"
        if found is not None:
            return found
    return None


def _is_main_guard(test: ast.expr) -> bool:
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    )


def _resolve_relative(name: str, package: str, level: int) -> str:
    base = package.rsplit(".", level - 1)[0] if level > 1 else package
    return f"{base}.{name}" if name else base


# Loading -----------------------------------------------------------------------------


@dataclass
class Engine:
    """One loaded engine: its real modules, what failed to load, what was faked, and its shims."""

    source: Source
    modules: dict[str, types.ModuleType]
    errors: dict[str, str]
    record: Record
    shims: Any
    load_seconds: float
    installed: bool = False
    followed: dict[str, Path] = field(default_factory=dict)
    """The modules followed into the source's tree (``Layout.follow``): engine module name -> file."""

    def module(self, name: str) -> types.ModuleType | None:
        return self.modules.get(name)


def load(
    source: Source,
    layout: Layout,
    *,
    shims: Callable[[Record], Shims] | None = None,
    stub_packages: Collection[str] = (),
    stub_missing: bool = False,
    transform: CodeTransform | None = None,
    loud: bool = True,
) -> Engine:
    """Execute the source's engine files in a fresh private namespace, in the layout's order.

    A file that fails to execute is kept out and its error recorded (the adapter
    then lacks what it held); ``sys.modules`` is left as it was found. The modules
    followed into the source's tree (``Layout.follow``, ``Namespace.follows``) are
    among the engine's modules, and in ``record.followed`` with their importer.
    ``shims`` makes the engine's stand-ins for this load's record;
    ``stub_packages`` names third-party top-level packages to serve from recorded
    stubs when they are not installed (an installed one is used for real);
    ``stub_missing`` does so for any package that is not installed;
    ``transform`` rewrites each file's code before it runs; ``loud`` arms the
    stubs once the files have loaded.
    """
    import torch  # noqa: F401 - every engine file imports it; its import is not the load's cost

    started = time.perf_counter()
    record = Record()
    engine_shims = shims(record) if shims is not None else NoShims()
    missing = frozenset(name for name in stub_packages if not _importable(name))
    namespace = Namespace(
        layout.package,
        dict(source.files),
        record=record,
        shims=engine_shims,
        stub_packages=missing,
        stub_missing=stub_missing,
        transform=transform,
        loud=loud,
        aliases=frozenset(filter(None, [source.alias(layout)])),
        root=source.package_dir,
        follow=layout.follow,
        never=layout.never,
    )
    errors: dict[str, str] = {}
    order = list(layout.files)
    for name in sorted(source.files, key=lambda n: order.index(n) if n in order else len(order)):
        try:
            namespace.module(name)
        except (Exception, SystemExit) as error:  # an engine file we cannot run: report it, keep the rest
            errors[name] = exited(error) or load_error(error)
    namespace.loading = False
    record.armed = loud
    real = {
        name: namespace.modules[name]
        for name in [*source.files, *namespace.followed]
        if name in namespace.modules
    }
    return Engine(
        source=source,
        modules=real,
        errors=errors,
        record=record,
        shims=engine_shims,
        load_seconds=time.perf_counter() - started,
        followed=dict(namespace.followed),
    )


_PRIVATE_NAME = re.compile(rf"\b{PRIVATE_PREFIX}\d+\.")


def load_error(error: BaseException) -> str:
    """A file's load error in one line, in the engine's own module names: the private namespace a load
    runs in (``_mmharness_engine1.sglang...``) is no name the fork's maintainer knows."""
    return _PRIVATE_NAME.sub("", f"{type(error).__name__}: {error}".splitlines()[0])


@functools.cache
def _importable(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a broken or half-installed package counts as missing
        return False


def load_installed(layout: Layout, shims: Any, *, example: str) -> Engine:
    """The installed engine package, imported normally; ``example`` is a release to suggest instead."""
    import importlib

    started = time.perf_counter()

    def hint(error: BaseException) -> str:
        package = layout.package
        version = installed_version(package)
        release = f"{package}=={version}" if version else f"{package}==X (e.g. {package}=={example})"
        reason = f"{type(error).__name__}: {error}".splitlines()[0]
        return (
            f"the installed {package} does not import ({reason}); use {release} to load that release"
            f" by path, or a path spec (a directory holding {package}/)"
        )

    try:
        importlib.import_module(layout.package)
    except Exception as error:
        raise TargetError(hint(error)) from None
    modules: dict[str, types.ModuleType] = {}
    errors: dict[str, str] = {}
    for name in layout.files:
        try:
            modules[name] = importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name != name:
                errors[name] = f"{type(error).__name__}: {error}"
        except Exception as error:
            errors[name] = f"{type(error).__name__}: {error}".splitlines()[0]
    if not modules:
        first = next(iter(errors.values()), f"none of its {layout.kind} files")
        raise TargetError(hint(RuntimeError(first)))
    files = {name: Path(module.__file__ or name) for name, module in modules.items()}
    return Engine(
        source=Source(files, layout.package, installed_version(layout.package)),
        modules=modules,
        errors=errors,
        record=Record(),
        shims=shims,
        load_seconds=time.perf_counter() - started,
        installed=True,
    )


def installed_version(package: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None
