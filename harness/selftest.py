"""The harness's self-test logic: does a target get caught, and after how many examples?

Shared by ``tests/test_self.py`` (each mutant must be killed) and
``benchmarks/mutant_kills.py`` (the examples-to-kill figures).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from mmharness.checks import all_checks
from mmharness.checks.outcome import DIVERGENCE, HAZARD
from mmharness.runner import run_check
from mmharness.targets.mutants import MUTANTS, mutant
from mmharness.targets.reference import ReferenceTarget


@dataclass(frozen=True)
class Kill:
    mutant: str
    examples: int | None
    """Fewest examples any killing check needed to reach its first failure; None if it survived."""
    killed_by: tuple[str, ...]


@cache
def reference_status(check_id: str, profile: str = "ci") -> str:
    """The reference's own status: a hazard of the rules themselves is no kill."""
    return run_check(all_checks()[check_id], ReferenceTarget(), profile=profile).status


def kill(name: str, *, profile: str = "ci", first: bool = False) -> Kill:
    """Run the checks of the mutant's rule (then, if none kills it, the rest) against it.

    A kill is a status that fails the run and that the reference does not share:
    a divergence, or a hazard for a hazard mutant (which fails only under ``--strict``).
    ``first``: stop at the first check that kills, each check at its first killing
    failure, unshrunk (whether it is killed, not by what: the self-test).
    """
    target, rule = mutant(name), MUTANTS[name].rule
    killing = (DIVERGENCE, HAZARD) if MUTANTS[name].hazard else (DIVERGENCE,)
    checks = list(all_checks().values())
    kills: list[tuple[int, str]] = []
    for group in ([c for c in checks if c.rule == rule], [c for c in checks if c.rule != rule]):
        for check in group:
            shared = reference_status(check.id, profile)
            stop_at = [kind for kind in killing if kind != shared] if first else ()
            result = run_check(check, target, profile=profile, stop_at=stop_at)
            if result.status in killing and shared != result.status:
                kills.append((result.first_failure_at, check.id))
                if first:
                    break
        if kills:
            break
    return Kill(name, min(kills)[0] if kills else None, tuple(sorted(c for _, c in kills)))
