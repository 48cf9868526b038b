"""What every target over engine files loaded by the harness shares, whatever the engine.

``LoadedTarget`` holds a load (``loader.Engine``) and answers the parts of the
``Target`` protocol that come from the load rather than from the engine's
rules: the ``describe()`` fields of the load (release, source, files and
their ``digests``, errors, shims and stubs), the note on files that did not
load, and the watching of every call into the engine (a stub or item
attribute the harness cannot answer, reached during the call, turns its
outcome into a ``HarnessGap``).
``Factory`` builds an engine's targets from its layout: the module-level
``load``, ``from_path``, ``fetch``, ``from_release`` and ``installed`` an
engine's adapter exposes (``specs.engine_forms`` calls the last three).
An engine's adapter subclasses the one and makes one of the other; what stays
in it is what only that engine has.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path as FilePath
from typing import Any, ClassVar, Generic, TypeVar

from mmharness.targets import loader
from mmharness.targets.base import HarnessGap, PathName, Target
from mmharness.targets.settings import Declarations
from mmharness.targets.stubs import Record


class LoadedTarget(Target):
    """A target over one load of an engine's files: by path, or the installed package imported normally.

    A subclass sets ``capabilities``, ``missing``, ``unloaded`` and ``paths``
    from what the load holds and gives its own ``describe()`` fields
    (``engine_fields``) and notes (``release_notes``, ``stand_in_notes``).
    """

    engine_label: ClassVar[str] = "the engine"
    """Who reached a stub, in a gap's message."""
    paths: tuple[PathName, ...] = ("batched",)

    def __init__(self, engine: loader.Engine, name: str) -> None:
        self.engine = engine
        self.name = name
        self.digests = file_digests({**engine.source.files, **engine.followed})
        """The sha256 of each engine file read, by its path in the package, as the load found them (a
        module followed into the target's tree included: its code is the target's too)."""
        self.left_out: set[str] = set()
        """Why the cases a check drew and left out (``leave_out``) never reach this engine: untested, so
        the notes (and the fork report) say so."""

    def leave_out(self, why: str) -> None:
        self.left_out.add(why)

    def declared_settings(self) -> Declarations | None:
        """None to declare for a load without engine shims (``NoShims``); an engine whose shims read
        settings gives their declarations. ``None``: shims of another kind, whose settings are unseen."""
        return Declarations() if isinstance(self.engine.shims, loader.NoShims) else None

    # describe ---------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """The load's fields, the engine's own (``engine_fields``), then the notes, errors and stubs."""
        engine, record = self.engine, self.engine.record
        return {
            "target": self.name,
            "release": engine.source.release or "unknown",
            "source": engine.source.origin,
            "loaded": "installed package (imported normally)" if engine.installed else "by path",
            **self.package_field(),
            "files": [
                *(str(engine.source.files[n]) for n in engine.source.files if n in engine.modules),
                *map(str, engine.followed.values()),
            ],
            **self.followed_fields(),
            "digests": self.digests,
            **self.engine_fields(),
            "notes": self.notes(),
            "load_errors": engine.errors,
            "load_ms": round(engine.load_seconds * 1000, 1),
            "settings": {
                name: f"{value!r} ({source})" for name, (value, source) in sorted(record.settings.items())
            },
            "shims": sorted(record.shimmed),
            "stubbed": sorted(record.stubbed),
            "stubs_reached": sorted(set(record.reached)),
        }

    def package_field(self) -> dict[str, str]:
        """``package``, only for a fork shipped under another top-level name than the engine's: the name
        its files were found under, and the one they are loaded (and their modules named) as."""
        source = self.engine.source
        canonical = next(iter(source.files), "").partition(".")[0]
        if not source.package or source.package == canonical:
            return {}
        return {"package": f"{source.package} (loaded as {canonical})"}

    def followed_fields(self) -> dict[str, dict[str, str]]:
        """``followed`` (each module run from the target's tree that no layout names: its file, and the
        module whose import brought it in) and ``not_followed`` (a module there that stayed a stub, and
        why); each only when it has entries, so a release's description is as it always was."""
        engine, record = self.engine, self.engine.record
        fields: dict[str, dict[str, str]] = {}
        if engine.followed:
            fields["followed"] = {
                name: f"{path} (imported by {record.followed[name]})"
                for name, path in sorted(engine.followed.items())
            }
        if record.unfollowed:
            fields["not_followed"] = dict(sorted(record.unfollowed.items()))
        return fields

    def engine_fields(self) -> dict[str, Any]:
        """The engine's own ``describe()`` fields, ``capability_fields`` where it shows them."""
        return self.capability_fields()

    def capability_fields(self) -> dict[str, Any]:
        """``capabilities``, ``missing`` and ``unloaded`` as ``describe()`` shows them (sorted)."""
        return {
            "capabilities": sorted(self.capabilities),
            "missing": dict(sorted(self.missing.items())),
            "unloaded": dict(sorted(self.unloaded.items())),
        }

    def notes(self) -> list[str]:
        """What a user should know before reading this target's verdicts (``check`` prints them): what
        the release lacks (``release_notes``), the files that did not load, the engine settings its code
        read, then what the harness serves in the engine's place (``stand_in_notes``)."""
        notes = self.release_notes()
        if self.engine.errors:
            notes.append("files that did not load: " + ", ".join(sorted(self.engine.errors)))
        record = self.engine.record
        if self.engine.followed:
            run = ", ".join(f"{name} (imported by {record.followed[name]})" for name in self.engine.followed)
            notes.append(f"modules of the target's own tree run from its code (no layout names them): {run}")
        if record.unfollowed:
            stubbed = "; ".join(f"{name} ({why})" for name, why in sorted(record.unfollowed.items()))
            notes.append(f"modules of the target's tree served from stubs: {stubbed}")
        notes += sorted(f"{why}: drawn and left out, so untested" for why in self.left_out)
        if record.settings_note:
            notes.append(record.settings_note)
        if record.settings:
            read = ", ".join(
                f"{name}={value!r} ({source})" for name, (value, source) in sorted(record.settings.items())
            )
            notes.append(f"settings read, each tested at this value only (set another with --env): {read}")
        return notes + self.stand_in_notes()

    def release_notes(self) -> list[str]:
        return []

    def stand_in_notes(self) -> list[str]:
        return []

    # watching calls ---------------------------------------------------------------------

    @contextmanager
    def watched(self) -> Iterator[None]:
        """Turn a stub or item gap reached during the call into a ``HarnessGap``, caught or not."""
        record = self.engine.record
        reached, misses = len(record.reached), set(record.item_misses)
        try:
            yield
        except HarnessGap:
            raise
        except Exception as error:
            gap = self._gap(reached, misses)
            if gap is not None:
                raise gap from error
            raise
        gap = self._gap(reached, misses)
        if gap is not None:
            raise gap

    def _gap(self, reached: int, misses: set[str]) -> HarnessGap | None:
        """The gap of what was reached since ``reached`` stubs and ``misses`` item misses, or ``None``."""
        record = self.engine.record
        new = record.reached[reached:] + sorted(record.item_misses - misses)
        if not new:
            return None
        return HarnessGap(
            f"{self.engine_label} reached what the harness only stubs: {', '.join(dict.fromkeys(new))}",
            what=new[0],
        )


def file_digests(files: Mapping[str, FilePath]) -> dict[str, str]:
    """The sha256 of each engine file (engine module name -> file) by its path in the package
    (``sglang/srt/managers/mm_utils.py``), wherever the copy lies: what tells two copies of the same
    code apart from two of different code (baselines match by it). A file that cannot be read: ``""``."""
    found = {}
    for name, path in files.items():
        rel = name.replace(".", "/") + ("/__init__.py" if FilePath(path).name == "__init__.py" else ".py")
        try:
            found[rel] = hashlib.sha256(FilePath(path).read_bytes()).hexdigest()
        except OSError:
            found[rel] = ""
    return dict(sorted(found.items()))


_T = TypeVar("_T", bound=LoadedTarget)


@dataclass(frozen=True)
class Factory(Generic[_T]):
    """An engine's targets from its layout: by path, by release (downloaded once) or installed.

    ``members`` are the wheel paths a release keeps; ``example`` a release to
    suggest; ``absent`` why a release has no files of the layout; ``shims`` the
    stand-ins of a load from a source (none by default: ``NoShims``); ``installed_shims``
    those an installed package's target reads instead (its own classes), where it reads any.
    """

    target: Callable[[loader.Engine, str], _T]
    layout: loader.Layout
    members: tuple[str, ...]
    example: str
    absent: str
    shims: Callable[[loader.Source], Callable[[Record], loader.Shims]] = lambda source: loader.NoShims
    installed_shims: Callable[[], Any] | None = None

    def load(self, source: loader.Source, *, transform: loader.CodeTransform | None = None) -> loader.Engine:
        """The layout's files of ``source``; every other engine name, and a third-party package this
        host lacks, a stub."""
        shims = self.shims(source)
        return loader.load(source, self.layout, shims=shims, stub_missing=True, transform=transform)

    def from_path(self, path: str, *, name: str | None = None, release: str | None = None) -> _T:
        """The layout's files under ``path`` (``loader.locate``), named ``name`` or the path."""
        source = loader.locate(path, self.layout, release=release)
        return self.target(self.load(source), name or path)

    def fetch(self, version: str) -> FilePath:
        """The unpacked release ``version`` (downloaded once into the cache; only ``members`` kept)."""
        from mmharness.targets import releases

        return releases.fetch(self.layout.package, version, self.members, example=self.example)

    def from_release(self, version: str) -> _T:
        """Release ``version``, fetched once and loaded by path: the target ``PACKAGE==VERSION``."""
        from mmharness.targets import releases

        source = releases.source(self.layout, version, self.members, example=self.example, absent=self.absent)
        return self.target(self.load(source), f"{self.layout.package}=={version}")

    def installed(self) -> _T:
        """The installed package, imported normally: the target ``PACKAGE``."""
        engine = loader.load_installed(self.layout, None, example=self.example)
        if self.installed_shims is not None:
            engine.shims = self.installed_shims()
        return self.target(engine, self.layout.package)
