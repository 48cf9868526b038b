"""Target specs (DESIGN §5) -> ``Target`` objects, with one-line errors for bad specs."""

from __future__ import annotations

import importlib
import os

from harness.targets.base import Target, TargetError

SPEC_FORMS = "reference, mutant:NAME, sglang, sglang==X, a path, or module:attr"


def resolve(spec: str) -> Target:
    """The target a spec names; ``TargetError`` with what to do instead when it names none."""
    if spec == "reference":
        from harness.targets.reference import ReferenceTarget

        return ReferenceTarget()
    if spec.startswith("mutant:"):
        from harness.targets.mutants import MUTANTS, mutant

        name = spec.removeprefix("mutant:")
        if name not in MUTANTS:
            raise TargetError(
                f"unknown mutant {name!r}; `mmharness targets` lists all {len(MUTANTS)}"
            )
        return mutant(name)
    if spec == "sglang" or spec.startswith("sglang=="):
        from harness.targets import sglang

        if spec == "sglang":
            return sglang.installed()
        return sglang.from_release(spec.removeprefix("sglang=="))
    if _is_path(spec):
        from harness.targets import sglang

        return sglang.from_path(spec)
    if ":" in spec:
        return _user_adapter(spec)
    raise TargetError(f"unknown target {spec!r}: expected {SPEC_FORMS}")


def _is_path(spec: str) -> bool:
    """A spec naming a file or directory (existing, or written like one) rather than a module."""
    written_like_a_path = os.sep in spec or spec.endswith(".py") or spec.startswith((".", "~"))
    return written_like_a_path or os.path.exists(spec)


def _user_adapter(spec: str) -> Target:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # a user's module may fail in any way while importing
        raise TargetError(
            f"target {spec!r}: cannot import {module_name!r}: {type(error).__name__}: {error}"
        ) from error
    obj = getattr(module, attr, None)
    if obj is None:
        raise TargetError(f"target {spec!r}: module {module_name!r} has no attribute {attr!r}")
    try:
        target = obj() if isinstance(obj, type) else obj
    except Exception as error:
        raise TargetError(f"target {spec!r}: {attr}() raised {type(error).__name__}: {error}") from error
    if not isinstance(target, Target):
        raise TargetError(
            f"target {spec!r}: {attr!r} does not implement harness.targets.base.Target"
        )
    return target


def listing() -> list[tuple[str, str]]:
    """Every built-in target spec with a one-line description, for ``mmharness targets``."""
    from harness.targets.mutants import MUTANTS

    rows = [
        ("reference", "the reference model (self-check)"),
        ("sglang", "the installed sglang package, imported normally"),
        ("sglang==X", "SGLang release X, downloaded once and loaded by path (e.g. sglang==0.5.23)"),
        ("PATH", "a dir holding sglang/ (wheel, site-packages, fork's python/), or a rules file"),
    ]
    rows += [(f"mutant:{m.name}", f"[{m.rule}] {m.description}") for m in MUTANTS.values()]
    return rows
