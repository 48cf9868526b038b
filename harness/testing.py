"""The engine contract as a test kit: what an engine package's own test suite asserts of itself.

    from mmharness import testing
    from my_engine import ENGINE

    def test_my_engine_keeps_the_contract():
        testing.check_engine(ENGINE, "my-engine==1.0")

``check_engine`` runs every ``assert_*`` here in turn; each raises ``ContractError`` (an
``AssertionError``, so any test runner reports it) naming what the engine lacks, and can be run alone.
The contract is ``mmharness.api``'s: an ``Engine`` registered in the ``mmharness.engines`` entry-point
group, targets keeping ``Target`` and its ``EngineHooks``, fuzz targets with an entry point each.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from mmharness import reach
from mmharness.targets import base, specs
from mmharness.targets.engine import ENGINE_GROUP, Engine
from mmharness.targets.loaded import LoadedTarget
from mmharness.targets.settings import Declarations

if TYPE_CHECKING:
    from mmharness.runner import Result

DESCRIBED = ("target",)
"""What every target's ``describe()`` holds: its name (listings and reports key by it)."""
LOADED_DESCRIBED = ("release", "source", "files", "digests")
"""What a loaded target's holds besides: read by baselines, ``matrix``, ``--coverage`` and the fuzzers."""
FUZZ_ENTRY = ("main", "describe")
"""What a fuzz target's module defines besides ``DEFAULT_TARGET`` (``Engine.fuzz_targets``)."""


class ContractError(AssertionError):
    """An engine that breaks the contract; the message says where."""


def _expect(holds: bool, message: str) -> None:
    if not holds:
        raise ContractError(message)


def check_engine(engine: Engine, spec: str, *, check_id: str | None = None, max_examples: int = 5) -> Result:
    """Every assertion below, on ``engine`` and the target ``spec`` (one of its forms) names; the result
    of the check run on it (``check_id``, else the first it can run)."""
    assert_registered(engine)
    assert_fuzz_targets(engine)
    target = assert_resolves(engine, spec)
    assert_target(target)
    return assert_check_ends_in_verdict(target, check_id=check_id, max_examples=max_examples)


def assert_registered(engine: Engine) -> None:
    """The registry finds the engine through its entry point, as its package's ``ENGINE``."""
    found = {registered.name: registered for registered in specs.engines()}
    _expect(
        engine.name in found,
        f"engine {engine.name!r} is not registered in the {ENGINE_GROUP!r} entry-point group"
        f" (registered: {', '.join(found) or 'none'})",
    )
    _expect(found[engine.name] is engine, f"the engine registered as {engine.name!r} is another Engine")
    module = importlib.import_module(engine.package)
    _expect(
        getattr(module, "ENGINE", None) is engine, f"{engine.package}.ENGINE is not the registered engine"
    )


def assert_resolves(engine: Engine, spec: str) -> base.Target:
    """Each of the engine's spec forms is described, ``spec`` is written in one, and resolves to a target."""
    own = [form for form in specs.forms() if form.engine == engine.name]
    _expect(bool(own), f"engine {engine.name!r} has no spec forms")
    for form in own:
        _expect(
            bool(form.pattern and form.description),
            f"a spec form of {engine.name!r} has no pattern or description",
        )
    patterns = ", ".join(form.pattern for form in own)
    _expect(
        any(form.matches(spec) for form in own),
        f"{spec!r} is written in none of the spec forms of {engine.name!r} ({patterns})",
    )
    try:
        return specs.resolve(spec)
    except base.TargetError as error:
        raise ContractError(f"{spec!r} does not resolve: {error}") from error


def assert_target(target: base.Target) -> None:
    """The target keeps ``Target``: its own members, every hook callable as declared, a method per declared
    capability, every absent capability explained, and what its hooks answer of the right kind."""
    lacking = [name for name in base.REQUIRED if not hasattr(target, name)]
    _expect(not lacking, f"target lacks {', '.join(lacking)}")
    _expect(isinstance(target, base.Target), f"{target.name} is no Target (mmharness.api.Target)")
    problems = base.hook_problems(target) + base.missing_methods(target)
    _expect(not problems, f"{target.name}: {'; '.join(problems)}")
    absent = base.ALL_CAPABILITIES - target.capabilities
    unexplained = sorted(c for c in absent if not str(target.missing.get(c, "")).strip())
    _expect(not unexplained, f"{target.name} lacks {', '.join(unexplained)} without saying why (missing)")
    stray = sorted(set(target.unloaded) - set(target.missing))
    _expect(not stray, f"{target.name}: unloaded names capabilities it does not miss: {', '.join(stray)}")
    paths = base.paths_of(target)
    _expect(bool(paths) and all(isinstance(p, str) and p for p in paths), f"{target.name}: paths {paths!r}")
    _expect(all(isinstance(note, str) for note in target.notes()), f"{target.name}: notes() are not all text")
    assert_described(target)
    _assert_coverage_hooks(target)
    settings = target.declared_settings()
    _expect(settings is None or isinstance(settings, Declarations), f"{target.name}: declared_settings()")


def assert_described(target: base.Target) -> None:
    """``describe()`` holds ``DESCRIBED`` (and ``LOADED_DESCRIBED`` for a ``LoadedTarget``)."""
    described = target.describe()
    _expect(isinstance(described, dict), f"{target.name}: describe() is not a dict")
    wanted = DESCRIBED + (LOADED_DESCRIBED if isinstance(target, LoadedTarget) else ())
    lacking = [field for field in wanted if field not in described]
    _expect(not lacking, f"{target.name}: describe() lacks {', '.join(lacking)}")
    _expect(
        described["target"] == target.name, f"{target.name}: describe()['target'] is {described['target']!r}"
    )


def _assert_coverage_hooks(target: base.Target) -> None:
    """What ``check --coverage`` reads: rule functions, excluded branches, reasons it knows."""
    functions = target.rule_functions()
    _expect(all(callable(f) for f in functions.values()), f"{target.name}: a rule function is not callable")
    excluded = list(target.excluded_branches())
    _expect(all(isinstance(e, reach.Excluded) for e in excluded), f"{target.name}: excluded_branches()")
    try:
        reach.reason_table(target.branch_reasons())
    except (ValueError, TypeError) as error:  # an unknown reason, a pattern that does not compile
        raise ContractError(f"{target.name}: branch_reasons(): {error}") from error


def assert_fuzz_targets(engine: Engine) -> None:
    """Each fuzz target is named (one word, no other's name) and its module has the entry point and a
    default target of the engine."""
    from mmharness.fuzz.registry import CASE_PARSER, CHECK_PREFIX

    forms = engine.spec_forms
    for name, module_name in engine.fuzz_targets.items():
        _expect(
            bool(name) and name.split() == [name], f"fuzz target {name!r} of {engine.name!r}: not one word"
        )
        _expect(
            name != CASE_PARSER and not name.startswith(CHECK_PREFIX),
            f"fuzz target {name!r}: a reserved name",
        )
        others = [e.name for e in specs.engines() if e is not engine and name in e.fuzz_targets]
        _expect(not others, f"fuzz target {name!r} is also {', '.join(others)}'s")
        module = importlib.import_module(module_name)
        lacking = [attr for attr in FUZZ_ENTRY if not callable(getattr(module, attr, None))]
        _expect(not lacking, f"fuzz target {name!r}: {module_name} lacks {', '.join(lacking)}")
        default = getattr(module, "DEFAULT_TARGET", None)
        _expect(
            isinstance(default, str) and any(form.matches(default) for form in forms),
            f"fuzz target {name!r}: {module_name}.DEFAULT_TARGET ({default!r}) is no spec of {engine.name!r}",
        )


def assert_check_ends_in_verdict(
    target: base.Target, *, check_id: str | None = None, max_examples: int = 5
) -> Result:
    """A check the target can run (``check_id``, else the first), run under the CI profile, ends in a
    verdict (passed, a divergence, a hazard or could not test), not in an error or a skip."""
    from mmharness import runner
    from mmharness.checks.outcome import COULD_NOT_TEST, DIVERGENCE, HAZARD
    from mmharness.checks.registry import all_checks

    checks = all_checks()
    _expect(check_id is None or check_id in checks, f"no check {check_id!r}")
    runnable = [c for c in checks.values() if runner.skip_reason(c, target, "cpu") is None]
    chosen = checks[check_id] if check_id is not None else next(iter(runnable), None)
    _expect(
        chosen is not None,
        f"{target.name} can run no check on a CPU (capabilities: {sorted(target.capabilities)})",
    )
    result = runner.run_check(chosen, target, profile="ci", max_examples=max_examples)
    verdicts = (runner.PASSED, DIVERGENCE, HAZARD, COULD_NOT_TEST)
    _expect(result.status in verdicts, f"{chosen.id} on {target.name} ended {result.status}: {result.reason}")
    return result
