"""Harness faults are never engine verdicts (``mmharness.targets.faults``, docs/rules.md "Verdicts").

Offline: how an error is attributed (the raise's frame, an attribute of an object the harness built, a
stand-in's refusal marked as the engine's, the cause chain), with engine code simulated by functions
whose module has a loaded engine's private name.

Fault injection (``network``: the cached releases sglang==0.5.23 and vllm==0.33.0, the reference-compatible
code): every function and method of the harness's supply modules (shims, stand-ins, the item and tensor
builders, the encoder stand-in, the vLLM driver's steps; enumerated from the modules, so a new one is
covered) that a few passing examples of each check reach is made to raise in turn, its code swapped for
one raising a clear ``RuntimeError`` (the error most easily read as an engine's refusal), and each
example that reached it is run again: the verdict must be *could not test* naming that function, never
a divergence or a hazard.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import types
from collections.abc import Callable, Iterator

import pytest
from mmharness.checks import all_checks
from mmharness.checks.outcome import COULD_NOT_TEST, Failure, observe
from mmharness.runner import run_check, run_example
from mmharness.targets import faults
from mmharness.targets.base import HarnessGap

CHECKS = all_checks()
ENGINE_MODULE = "_mmharness_engine9.sglang.srt.managers.mm_utils"


def _engine_function(source: str, **names):
    """A function as loaded engine code is: its module named in a load's private namespace."""
    namespace = {"__name__": ENGINE_MODULE, **names}
    exec(compile(source, "/tree/sglang/srt/managers/mm_utils.py", "exec"), namespace)
    return namespace["engine"]


def _gap(call: Callable[[], object]) -> HarnessGap | None:
    try:
        call()
    except Exception as error:
        return faults.gap(error)
    raise AssertionError("the call did not raise")


# Attribution (offline) ------------------------------------------------------------------------


def test_a_raise_in_supply_code_the_engine_called_is_the_harness_gap_naming_it():
    from mmharness import tensors

    engine = _engine_function("def engine(case):\n    return tensors.placeholder_id(case)\n", tensors=tensors)
    gap = _gap(lambda: engine(None))
    assert gap is not None and gap.what == "tensors.placeholder_id"
    assert "a fault in what the harness supplies, not the engine's" in str(gap)


@pytest.mark.parametrize(
    "raising",
    [
        'raise RuntimeError("Insufficient multimodal embedding length: 3 < 4")',
        'raise NotImplementedError("some items are precomputed and some are not")',
        'raise ValueError("image grid has 2 rows for 1 item")',
        "return [1][3]",
    ],
)
def test_the_engines_own_errors_stay_its_outcome(raising):
    engine = _engine_function(f"def engine():\n    {raising}\n")
    assert _gap(engine) is None


def test_a_stand_in_refusing_what_the_engine_handed_it_is_the_engines_outcome():
    from mmharness.engines.sglang import shims

    engine = _engine_function("def engine(mask):\n    shims.maybe_assert_sum(mask, 2, 'mask')\n", shims=shims)
    torch = pytest.importorskip("torch")
    assert _gap(lambda: engine(torch.ones(3))) is None


def test_an_error_class_marked_the_engines_own_stays_its_outcome_wherever_raised():
    """A stand-in for a call that would end the process raises in place of the exit the engine asked for."""

    class EngineExit(Exception):
        pass

    namespace = {"__name__": "mmharness.targets.guarded", "EngineExit": EngineExit}
    exec("def _exit(code=0):\n    raise EngineExit(f'engine code called os._exit({code})')\n", namespace)
    engine = _engine_function("def engine():\n    _exit(0)\n", _exit=namespace["_exit"])
    assert _gap(engine).what == "targets.guarded._exit"  # unmarked: the harness's raise
    setattr(EngineExit, faults.ENGINES_OWN, True)
    assert _gap(engine) is None


def test_an_attribute_the_engine_reads_on_what_the_harness_built_is_a_gap():
    torch = pytest.importorskip("torch")
    from mmharness.engines.sglang import inputs

    feature = faults.supplied(torch.zeros(2, 4), inputs.FEATURE)
    engine = _engine_function("def engine(feature):\n    return feature.transport_mode\n")
    gap = _gap(lambda: engine(feature))
    assert gap is not None and gap.what == "item.feature.transport_mode"
    assert "which the harness supplies as a plain Tensor" in str(gap)
    text = inputs.mm_inputs([])
    gap = _gap(lambda: engine(text))
    assert gap is not None and gap.what == "the harness's Namespace.transport_mode"
    # the same read on the engine's own tensor (not one the harness built) is the engine's outcome
    assert _gap(lambda: engine(torch.zeros(2, 4))) is None


def test_a_harness_fault_the_engine_wrapped_in_its_own_error_is_still_the_harness_gap():
    from mmharness import tensors

    engine = _engine_function(
        "def engine(case):\n"
        "    try:\n        return tensors.placeholder_id(case)\n"
        "    except Exception as error:\n        raise RuntimeError('encoding failed') from error\n",
        tensors=tensors,
    )
    gap = _gap(lambda: engine(None))
    assert gap is not None and gap.what == "tensors.placeholder_id"


def test_the_harness_own_targets_raises_are_their_outcomes():
    torch = pytest.importorskip("torch")
    from mmharness.targets.reference import ReferenceTarget

    outcome = observe(lambda: ReferenceTarget().adjust_embedding_length(torch.zeros(2, 4), 3))
    assert outcome.raised and str(outcome.error).startswith("Insufficient multimodal embedding length")
    assert faults.gap(outcome.error) is None


def test_observe_makes_a_supply_fault_could_not_test():
    from mmharness import tensors

    engine = _engine_function("def engine(case):\n    return tensors.placeholder_id(case)\n", tensors=tensors)
    with pytest.raises(Failure) as raised:
        observe(lambda: engine(None))
    assert (
        raised.value.kind == COULD_NOT_TEST
        and raised.value.signature == "could not test: tensors.placeholder_id"
    )


# Fault injection (the cached releases) ---------------------------------------------------------

SUPPLY = (
    "mmharness.engines.sglang.shims",
    "mmharness.engines.sglang.inputs",
    "mmharness.engines.sglang.distributed",
    "mmharness.engines.sglang.cache_watch",
    "mmharness.engines.sglang.settings",
    "mmharness.engines.sglang.forms",
    "mmharness.engines.vllm.driver",
    "mmharness.engines.vllm.shims",
    "mmharness.engines.vllm.settings",
    "mmharness.targets.base:Encoder",
    "mmharness.targets.distributed",
    "mmharness.targets.standin",
    "mmharness.targets.settings",
    "mmharness.targets.loaded",
    "mmharness.tensors",
    "mmharness.item_data",
)
"""The harness's code that engine code runs on or is driven by: each module's every function is a helper
(``module:Class``: that class's methods only; the rest of ``targets.base`` is the verdicts' own machinery)."""
CALLED = {"__call__", "__getattr__", "__init__", "__new__", "__getitem__", "__iter__", "__len__", "__bool__"}
"""The special methods engine code reaches on a stand-in (``__repr__`` and the like serve the report)."""
CHECK_IDS = {
    "sglang": (
        "chunk.matches_reference",
        "precomputed.matches_reference",
        "prefill.matches_reference",
        "prefill.path_independent",
        "prefill.stateful",
        "embed_mask.matches_reference",
        "count.matches_reference",
        "adjust.matches_reference",
        "grid.one_grid_rule",
        "grid.split_matches_reference",
    ),
    "vllm": (
        "prefill.matches_reference",
        "embed_mask.matches_reference",
        "prefill.whole_items",
        "prefill.draft_lookahead",
        "grid.split_matches_reference",
        "prefill.stateful",
    ),
}
EXAMPLES = 4


@dataclasses.dataclass(frozen=True)
class Helper:
    """A harness function (or one nested in it) and the top-level function whose code holds it."""

    code: types.CodeType
    owner: types.FunctionType

    @property
    def name(self) -> str:
        return f"{self.owner.__module__.removeprefix('mmharness.')}.{self.code.co_qualname}"


def _functions(module: types.ModuleType) -> Iterator[types.FunctionType]:
    """The module's functions and its classes' methods (a decorated one unwrapped: its own code)."""
    members = []
    for value in vars(module).values():
        if inspect.isclass(value) and value.__module__ == module.__name__:
            for name, member in vars(value).items():
                if not name.startswith("__") or name in CALLED:
                    members += [getattr(member, "__func__", member), getattr(member, "fget", None)]
        else:
            members.append(value)
    for member in members:
        fn = inspect.unwrap(member) if callable(member) else member
        if inspect.isfunction(fn) and fn.__module__ == module.__name__:
            yield fn


def _nested(code: types.CodeType) -> Iterator[types.CodeType]:
    """The functions and lambdas defined inside ``code`` (comprehensions are no helpers)."""
    for const in code.co_consts:
        if isinstance(const, types.CodeType) and (const.co_name == "<lambda>" or const.co_name[0] != "<"):
            yield const
            yield from _nested(const)


def helpers() -> dict[types.CodeType, Helper]:
    """Every function and method of the supply modules, and every function or lambda nested in one."""
    import importlib

    found: dict[types.CodeType, Helper] = {}
    for entry in SUPPLY:
        name, _, only = entry.partition(":")
        module = importlib.import_module(name)
        for fn in _functions(module):
            if only and not fn.__qualname__.startswith(f"{only}."):
                continue
            for code in (fn.__code__, *_nested(fn.__code__)):
                found.setdefault(code, Helper(code, fn))
    return found


def _raising(code: types.CodeType) -> types.CodeType:
    """A code object named as ``code`` (and with as many free variables) that raises a clear error."""
    free = code.co_freevars
    source = (
        "def make():\n"
        + (f"    {' = '.join(free)} = None\n" if free else "")
        + "    def helper(*args, **kwargs):\n"
        + (f"        if False:\n            print({', '.join(free)})\n" if free else "")
        + "        raise RuntimeError('injected fault: a clear refusal, raised by the harness itself')\n"
        + "    return helper\n"
    )
    namespace: dict = {}
    exec(source, namespace)
    raising = namespace["make"]().__code__
    return raising.replace(co_name=code.co_name, co_qualname=code.co_qualname, co_filename=code.co_filename)


def _swapped(code: types.CodeType, old: types.CodeType, new: types.CodeType) -> types.CodeType:
    if code is old:
        return new
    consts = tuple(_swapped(c, old, new) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_consts=consts)


def _reached(check, target, wanted: dict[types.CodeType, Helper]) -> list[tuple[tuple, set]]:
    """Each passing example of a short search, with the helpers it reached (a profiler's calls)."""
    examples: list[tuple] = []

    def recording(target_, case, params):
        examples.append((case, params))
        check.property(target_, case, params)

    run_check(dataclasses.replace(check, property=recording), target, max_examples=EXAMPLES, shrink=False)
    passing = []
    for example in examples:
        seen: set[types.CodeType] = set()

        def profile(frame, event, arg, seen=seen):
            if event == "call" and frame.f_code in wanted:
                seen.add(frame.f_code)

        sys.setprofile(profile)
        try:
            run_example(check, target, example)
        except Failure:
            continue
        finally:
            sys.setprofile(None)
        passing.append((example, seen))
    return passing


def _inject(monkeypatch, helper: Helper) -> None:
    monkeypatch.setattr(
        helper.owner, "__code__", _swapped(helper.owner.__code__, helper.code, _raising(helper.code))
    )


def _verdicts(monkeypatch, target, engine: str) -> tuple[dict[str, str], set[str]]:
    """Each helper reached -> the verdict of an example that reached it, run with that helper raising;
    and the helpers whose fault the code swallowed (the example still passed)."""
    wanted = helpers()
    first: dict[types.CodeType, tuple] = {}
    for check_id in CHECK_IDS[engine]:
        check = CHECKS[check_id]
        for example, seen in _reached(check, target, wanted):
            for code in seen:
                first.setdefault(code, (check, example))
    verdicts, swallowed = {}, set()
    for code, (check, example) in first.items():
        helper = wanted[code]
        with monkeypatch.context() as patch:
            _inject(patch, helper)
            try:
                run_example(check, target, example)
            except Failure as failure:
                verdicts[helper.name] = (failure.kind, failure.signature)
            else:
                swallowed.add(helper.name)
    return verdicts, swallowed


def _assert_could_not_test_naming(verdicts: dict, names: set[str]) -> None:
    wrong = {
        name: (kind, signature)
        for name, (kind, signature) in verdicts.items()
        if kind != COULD_NOT_TEST or name.rpartition(".")[2] not in signature
    }
    assert not wrong, wrong
    assert names <= set(verdicts), sorted(names - set(verdicts))


@pytest.mark.network
def test_each_sglang_helper_that_raises_is_could_not_test_naming_it(sglang_release, monkeypatch):
    verdicts, swallowed = _verdicts(monkeypatch, sglang_release("0.5.23"), "sglang")
    _assert_could_not_test_naming(
        verdicts,
        {
            "targets.base.Encoder.__call__",
            "engines.sglang.inputs.Builder.batch",
            "engines.sglang.inputs.Builder.embedder.<locals>.embed",
            "engines.sglang.inputs.TextEmbedding.__call__",
            "engines.sglang.inputs.features",
            "engines.sglang.shims.MultimodalDataItem.__init__",
            "engines.sglang.forms.Found.call",
            "tensors.placeholder_id",
            "tensors.block",
        },
    )
    assert len(verdicts) >= 30 and len(swallowed) <= 3, (len(verdicts), sorted(swallowed))


@pytest.mark.network
def test_each_vllm_helper_and_driver_step_that_raises_is_could_not_test_naming_it(
    vllm_release_dir, monkeypatch
):
    from mmharness.engines.vllm import adapter

    target = adapter.from_path(str(vllm_release_dir), name="vllm==0.33.0", release="0.33.0")
    verdicts, swallowed = _verdicts(monkeypatch, target, "vllm")
    _assert_could_not_test_naming(
        verdicts,
        {
            "targets.base.Encoder.__call__",
            "engines.vllm.driver.Driver.run",
            "engines.vllm.driver.Driver._schedule",
            "engines.vllm.driver.Driver._encode",
            "engines.vllm.driver.Driver._gather",
            "engines.vllm.driver.Driver._split",
            "targets.standin.StandIn.__getattr__",
        },
    )
    assert len(verdicts) >= 15 and len(swallowed) <= 3, (len(verdicts), sorted(swallowed))
