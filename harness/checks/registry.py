"""The registry of named checks, in the manner of schemathesis's checks.

A check is an id, the rule it guards, its family, the target capabilities it
needs, a strategy of examples and a property. An example is ``(case, params)``:
the case plus the few extra draws (a schedule, a permutation) a property needs,
kept as JSON so a shrunk example can be saved and replayed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mmharness.model import Case

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy
    from mmharness.targets.base import Target

DIFFERENTIAL = "differential"
METAMORPHIC = "metamorphic"
ROBUSTNESS = "robustness"
HAZARD = "hazard"
FAMILIES = (DIFFERENTIAL, METAMORPHIC, ROBUSTNESS, HAZARD)

Params = dict[str, Any]
Example = tuple[Case, Params]
Property = Callable[["Target", Case, Params], None]


@dataclass(frozen=True)
class Check:
    id: str
    rule: str
    family: str
    needs: frozenset[str]
    examples: Callable[[str], SearchStrategy[Example]]
    """Given a device name, the strategy of examples for this check."""
    property: Property
    doc: str
    needs_cuda: bool = False
    params: tuple[str, ...] = ()
    """The keys its examples carry beside the case (validated when a saved example is replayed)."""
    sweeps: bool = False
    """Whether each drawn case is also checked under other windows (``mmharness.windows``)."""

    def __reduce__(self) -> tuple:
        """Pickled by id (a worker process sends results back): its strategy and property are code."""
        return registered, (self.id,)


def registered(check_id: str) -> Check:
    return all_checks()[check_id]


CHECKS: dict[str, Check] = {}
_MODULES = (
    "chunk",
    "precomputed",
    "prefill",
    "options",
    "stateful",
    "embed_mask",
    "tokens",
    "grids",
    "devices",
    "resume",
)


def check(
    check_id: str,
    *,
    rule: str,
    family: str,
    needs: set[str],
    examples: Callable[[str], SearchStrategy[Example]],
    needs_cuda: bool = False,
    params: tuple[str, ...] = (),
    sweeps: bool = False,
) -> Callable[[Property], Property]:
    """Register the decorated function as the property of a check."""
    if family not in FAMILIES:
        raise ValueError(f"{check_id}: unknown family {family!r}")

    def register(prop: Property) -> Property:
        if check_id in CHECKS:
            raise ValueError(f"check {check_id!r} registered twice")
        CHECKS[check_id] = Check(
            check_id,
            rule,
            family,
            frozenset(needs),
            examples,
            prop,
            (prop.__doc__ or "").strip().splitlines()[0].replace("``", ""),
            needs_cuda,
            params,
            sweeps,
        )
        return prop

    return register


def all_checks() -> dict[str, Check]:
    """Every registered check, by id (the check modules are imported on first use)."""
    import importlib

    for name in _MODULES:
        importlib.import_module(f"mmharness.checks.{name}")
    return dict(sorted(CHECKS.items()))


class SelectionError(ValueError):
    """A ``--checks``-style option that names no check or an unknown one; the message names the option."""


def selected(groups: list[str] | None, option: str) -> list[Check]:
    """The checks an option names, as ``--checks`` and ``--mm-checks`` read it: comma-separated, repeatable;
    all when the option is absent (``None``), but never when it was given and names nothing."""
    ids = [part.strip() for group in groups or [] for part in group.split(",") if part.strip()]
    if groups is not None and not ids:
        raise SelectionError(f"{option} names no check; `mmharness checks` lists them")
    try:
        return select(ids or None)
    except KeyError as error:
        raise SelectionError(
            f"{option}: unknown check {error.args[0]!r}; `mmharness checks` lists them"
        ) from None


def select(ids: list[str] | None) -> list[Check]:
    """The checks named by ``ids`` (exact ids or a family/rule/prefix), all when ``None``."""
    known = all_checks()
    if not ids:
        return list(known.values())
    chosen: dict[str, Check] = {}
    for wanted in ids:
        matches = [
            c for c in known.values() if wanted in (c.id, c.family, c.rule) or c.id.startswith(wanted + ".")
        ]
        if not matches:
            raise KeyError(wanted)
        chosen.update((c.id, c) for c in matches)
    return list(chosen.values())
