"""Target specs -> ``Target`` objects, through a registry of spec forms open to other packages.

Built in: ``reference`` and ``mutant:NAME``. Each registered engine
(``engines()``: an ``Engine``, ``mmharness.targets.engine``, in the
``mmharness.engines`` entry-point group) contributes its own forms (``sglang``,
``sglang==X``, a path) as its ``spec_forms``; a third-party package adds forms or
whole targets through the ``mmharness.targets`` entry-point group:

- an entry point whose object is a ``SpecForm`` (or a sequence of them) adds
  those forms, the way an engine package does;
- any other object is a target class or factory, and the entry point's name is
  its spec (``my-engine`` -> ``MyTarget()``).

A path spec is detected: each engine's path form claims it or not, and one claimed by two engines is
refused; ``$MMHARNESS_ENGINE`` (``--engine``) says which engine it is instead, in every process of the run.

``module:attr`` names a target class, factory or instance directly. A target
implements only the capabilities it declares (``mmharness.targets.base.METHODS``);
a mismatch is refused with the missing methods named, as is a hook it cannot be
asked as ``EngineHooks`` declares it.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cache

from mmharness.targets.base import (
    REQUIRED,
    Target,
    TargetError,
    hook_problems,
    missing_methods,
    with_defaults,
)
from mmharness.targets.engine import ENGINE_GROUP, Engine

ENTRY_POINT_GROUP = "mmharness.targets"
ENGINE_VARIABLE = "MMHARNESS_ENGINE"
"""Which engine a path spec is (``--engine NAME``): an environment variable, so that worker processes
and every other resolution of the same spec string in the run read it too."""
ENGINES_PACKAGE = "mmharness.engines"
"""Where the shipped engine packages live: each that no entry point names is read too (``engines()``)."""


def engine_packages() -> tuple[str, ...]:
    """The registered engines' packages (``engines()``), in its order."""
    return tuple(engine.package for engine in engines())


@dataclass(frozen=True)
class SpecForm:
    """One way of writing a target spec: how it looks, what it means, how to build its target."""

    pattern: str
    """How the form is written, for listings (``sglang==X``)."""
    description: str
    matches: Callable[[str], bool]
    resolve: Callable[[str], Target]
    paths: bool = False
    """Whether the form claims file-system paths (asked only of specs written like a path)."""
    files: bool = False
    """Whether, claiming paths, it takes a lone file too (not only a directory)."""
    engine: str | None = None
    """The registered engine the form belongs to (set by ``forms()``): what ``--engine`` selects."""


def engine_forms(
    package: str,
    name: str,
    adapter: str,
    *,
    example: str,
    path: str,
    claims: Callable[[str], bool],
    files: bool = False,
) -> tuple[SpecForm, ...]:
    """An engine package's three forms: installed, ``PACKAGE==X``, a path.

    ``adapter`` is the module whose ``installed()``, ``from_release(version)`` and
    ``from_path(path)`` build the targets (imported when a spec is resolved);
    ``path`` describes the path form and ``claims`` recognises it.
    """
    release = f"{package}=="

    def call(function: str, *args: str) -> Target:
        return getattr(importlib.import_module(adapter), function)(*args)

    return (
        SpecForm(
            package,
            f"the installed {package} package, imported normally",
            lambda s: s == package,
            lambda s: call("installed"),
        ),
        SpecForm(
            f"{release}X",
            f"{name} release X, downloaded once and loaded by path (e.g. {release}{example})",
            lambda s: s.startswith(release),
            lambda s: call("from_release", s.removeprefix(release)),
        ),
        SpecForm("PATH", path, claims, lambda s: call("from_path", s), paths=True, files=files),
    )


def _reference(spec: str) -> Target:
    from mmharness.targets.reference import ReferenceTarget

    return ReferenceTarget()


def _mutant(spec: str) -> Target:
    from mmharness.targets.mutants import MUTANTS, mutant

    name = spec.removeprefix("mutant:")
    if name not in MUTANTS:
        raise TargetError(f"unknown mutant {name!r}; `mmharness targets` lists all {len(MUTANTS)}")
    return mutant(name)


BUILT_IN = (
    SpecForm("reference", "the reference model (self-check)", lambda s: s == "reference", _reference),
    SpecForm(
        "mutant:NAME",
        "the engine model with one seeded bug (listed below)",
        lambda s: s.startswith("mutant:"),
        _mutant,
    ),
)


@cache
def forms() -> tuple[SpecForm, ...]:
    """Every spec form: built in, the shipped engines', then the entry points' (in name order)."""
    found = list(BUILT_IN)
    for engine in engines():
        found += [form if form.engine else replace(form, engine=engine.name) for form in engine.spec_forms]
    for entry in _entry_points():
        try:
            obj = entry.load()
        except (Exception, SystemExit) as error:  # a broken plugin must not break every other target
            happened = _what_happened(f"importing {entry.value}", error)
            print(f"mmharness: entry point {entry.name!r}: {happened}", file=sys.stderr)
            found.append(_broken_target(entry.name, entry.value, happened))
            continue
        if isinstance(obj, SpecForm):
            found.append(obj)
        elif isinstance(obj, (list, tuple)) and all(isinstance(f, SpecForm) for f in obj):
            found += obj
        else:
            found.append(_named_target(entry.name, entry.value, obj))
    return tuple(found)


def _entry_points(group: str = ENTRY_POINT_GROUP) -> list:
    from importlib.metadata import entry_points

    return sorted(entry_points(group=group), key=lambda e: e.name)


@cache
def engines() -> tuple[Engine, ...]:
    """Every registered engine: the ``mmharness.engines`` entry points' ``Engine``s, in name order.

    An entry point that fails to load, or names something other than an ``Engine``, is reported on
    stderr and left out (its engine's targets and fuzzers are then unknown, the others' unharmed).
    A shipped engine package (under ``mmharness.engines``) that no entry point names is read too, for
    its ``ENGINE``: the package run from a checkout without its metadata, or with metadata older than
    the group, still has its engines.
    """
    found: list[Engine] = []
    registered = _entry_points(ENGINE_GROUP)
    named = {entry.value for entry in registered}
    shipped = [entry for entry in _shipped_engines() if entry.value not in named]
    for entry in sorted(registered + shipped, key=lambda e: e.name):
        try:
            obj = entry.load()
        except (Exception, SystemExit) as error:  # a broken engine must not break the others
            happened = _what_happened(f"importing {entry.value}", error)
            print(f"mmharness: engine entry point {entry.name!r}: {happened}", file=sys.stderr)
            continue
        if not isinstance(obj, Engine):
            print(
                f"mmharness: engine entry point {entry.name!r}: {entry.value} is a {type(obj).__name__},"
                " not an Engine (mmharness.targets.engine); left out",
                file=sys.stderr,
            )
            continue
        if any(engine.name == obj.name for engine in found):
            print(f"mmharness: engine {obj.name!r} registered twice; {entry.value} left out", file=sys.stderr)
            continue
        found.append(obj)
    return tuple(found)


def _shipped_engines() -> list:
    """The engine packages under ``mmharness.engines``, as entry points would name their ``ENGINE``s."""
    from importlib.metadata import EntryPoint

    package = importlib.import_module(ENGINES_PACKAGE)
    return [
        EntryPoint(name=info.name, value=f"{ENGINES_PACKAGE}.{info.name}:ENGINE", group=ENGINE_GROUP)
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name)
        if info.ispkg
    ]


def _named_target(name: str, where: str, obj: object) -> SpecForm:
    return SpecForm(
        name,
        f"third-party target ({where})",
        lambda s: s == name,
        lambda s: _instantiate(s, name, obj),
    )


def _broken_target(name: str, where: str, happened: str) -> SpecForm:
    """An entry point that failed to load: its name, asked for, is refused with what happened."""

    def refuse(spec: str) -> Target:
        raise TargetError(f"{spec}: {happened}")

    return SpecForm(
        name, f"third-party target ({where}), which failed to load: {happened}", lambda s: s == name, refuse
    )


def _what_happened(doing: str, error: BaseException) -> str:
    """One line: ``importing m called sys.exit(3)``, ``importing m raised ValueError: why``."""
    if isinstance(error, SystemExit):
        code = "" if error.code is None else repr(error.code)
        return f"{doing} called sys.exit({code})"
    said = " ".join(str(error).split())
    return f"{doing} raised {type(error).__name__}" + (f": {said}" if said else "")


def resolve(spec: str) -> Target:
    """The target a spec names; ``TargetError`` with what to do instead when it names none.

    Loading a target runs other people's code; one that ends the process
    (``sys.exit``) while loading is refused like any other that cannot load.
    """
    try:
        return _resolve(spec)
    except SystemExit as error:
        raise TargetError(f"{spec}: {_what_happened('loading the target', error)}") from error


_LOADED: dict[tuple[str, tuple[tuple[str, str], ...]], Target] = {}


def loaded(spec: str) -> Target:
    """``resolve``, once per spec and ``--env`` values in a process (until ``forget_loaded``): a worker
    runs many checks, columns or replays on the same targets, and loading one is most of a short run's
    cost."""
    from mmharness.targets.settings import given

    key = (spec, tuple(given().items()))
    if key not in _LOADED:
        _LOADED[key] = resolve(spec)
    return _LOADED[key]


def forget_loaded() -> None:
    """Load every target afresh from now on: a run in this process (a serial ``matrix``) must not reuse
    what an earlier one loaded, whose files may since have changed."""
    _LOADED.clear()


def chosen_engine() -> str | None:
    """The engine ``$MMHARNESS_ENGINE`` (``--engine``) names, checked; ``None`` when unset."""
    name = os.environ.get(ENGINE_VARIABLE, "").strip()
    if not name:
        return None
    known = [engine.name for engine in engines()]
    if name not in known:
        raise TargetError(
            f"unknown engine {name!r} (${ENGINE_VARIABLE}, --engine): registered engines are"
            f" {', '.join(known) or 'none'}"
        )
    return name


def _resolve(spec: str) -> Target:
    every = forms()
    for form in every:
        if not form.paths and form.matches(spec):
            return form.resolve(spec)
    if is_path(spec):
        path_forms = [form for form in every if form.paths]
        engine = chosen_engine()
        if engine is not None:
            # Said, not detected: the engine's path form loads it, and its own error says what it lacks.
            chosen = [form for form in path_forms if form.engine == engine]
            if not chosen:
                raise TargetError(f"engine {engine!r} (--engine) takes no path specs; {spec} is one")
            return chosen[0].resolve(spec)
        claimed = [form for form in path_forms if form.matches(spec)]
        claiming = list(dict.fromkeys(form.engine for form in claimed if form.engine))
        if len(claiming) > 1:  # detecting one would be a guess: the first engine by name
            raise TargetError(
                f"{spec} holds the files of several engines ({', '.join(claiming)}); say which with"
                f" --engine NAME (or ${ENGINE_VARIABLE}), or point at the engine's package directory"
            )
        if claimed:
            return claimed[0].resolve(spec)
        if not os.path.exists(os.path.expanduser(spec)):
            raise TargetError(
                f"{spec} does not exist; give a directory holding an engine package or a rules file"
            )
        if os.path.isfile(os.path.expanduser(spec)):
            path_forms = [form for form in path_forms if form.files]
        if len(path_forms) == 1:
            return path_forms[0].resolve(spec)  # its own error says what that path lacks
        wanted = "; ".join(form.description for form in path_forms)
        raise TargetError(f"{spec} holds no engine files the harness knows; give {wanted}")
    if ":" in spec:
        module_name, _, attr = spec.partition(":")
        return _instantiate(spec, attr, _import_attr(spec, module_name, attr))
    raise TargetError(f"unknown target {spec!r}: expected {_spec_forms(every)}, or module:attr")


def _spec_forms(every: Sequence[SpecForm]) -> str:
    return ", ".join(form.pattern for form in every)


def is_path(spec: str) -> bool:
    """A spec naming a file or directory (existing, or written like one) rather than a module."""
    written_like_a_path = os.sep in spec or spec.endswith(".py") or spec.startswith((".", "~"))
    return written_like_a_path or os.path.exists(spec)


def _import_attr(spec: str, module_name: str, attr: str) -> object:
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # `module:attr` in the current directory, as `python -m` finds it
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as error:  # a user's module may fail in any way while importing, exit too
        raise TargetError(f"{spec}: {_what_happened(f'importing {module_name}', error)}") from error
    obj = getattr(module, attr, None)
    if obj is None:
        raise TargetError(f"target {spec!r}: module {module_name!r} has no attribute {attr!r}")
    return obj


def _instantiate(spec: str, attr: str, obj: object) -> Target:
    try:
        target = obj() if isinstance(obj, type) or (callable(obj) and not _looks_like_target(obj)) else obj
    except TargetError:
        raise
    except (Exception, SystemExit) as error:
        raise TargetError(f"{spec}: {_what_happened(f'{attr}()', error)}") from error
    lacking = [a for a in REQUIRED if not hasattr(target, a)]
    if lacking:
        raise TargetError(
            f"target {spec!r}: {attr!r} is not a target: it lacks {', '.join(lacking)}"
            " (see mmharness.targets.base.Target)"
        )
    target = with_defaults(target)
    missing = missing_methods(target)
    if missing:
        raise TargetError(
            f"target {spec!r}: declares capabilities it does not implement: missing {', '.join(missing)}"
        )
    wrong = hook_problems(target)
    if wrong:
        raise TargetError(f"target {spec!r}: {'; '.join(wrong)} (see mmharness.api.EngineHooks)")
    return target


def _looks_like_target(obj: object) -> bool:
    return all(hasattr(obj, a) for a in REQUIRED)


def listing() -> list[tuple[str, str]]:
    """Every spec form and mutant with a one-line description, for ``mmharness targets``."""
    from mmharness.targets.mutants import MUTANTS

    rows = [(form.pattern, form.description) for form in forms()]
    rows += [(f"mutant:{m.name}", f"[{m.rule}] {m.description}") for m in MUTANTS.values()]
    rows.append(("module:attr", "your own adapter: a Target class, factory or instance"))
    return rows
