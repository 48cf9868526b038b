"""A process group of one: what engine code loaded by path gets for its distributed calls.

The harness runs an engine's rules in one process, as a server with one rank
(tensor parallel size 1) runs them. Engine code still reaches distributed code
(a fork all-reduces its cache-miss flags across tensor-parallel ranks before
encoding): through names of its own modules the harness does not load
(``get_tp_group()``, ``tensor_model_parallel_all_reduce``: an engine's shims serve
them from ``GroupOfOne``) and through ``torch.distributed`` directly
(``TorchDistributed``, served in the loaded modules' place of the real one by
``serve``). On one rank every collective is the identity, and that is what
these are: ``all_reduce`` leaves its tensor, ``all_gather`` gives back the one
tensor (or fills the one-element output list), ``broadcast`` and ``barrier`` do
nothing. Each collective reached is recorded (``Collectives``), and so is each
place engine code compares a world size: a path for more than one rank is one
this run did not take, and the notes say so, naming it. A point-to-point call
(``send``, ``recv``) needs another rank: a ``HarnessGap``.

Nothing here names an engine; torch is imported only inside functions.
"""

from __future__ import annotations

import sys
import types
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from mmharness.targets.base import HarnessGap


@dataclass
class Collectives:
    """What engine code of one load asked of its process group of one."""

    reached: Counter = field(default_factory=Counter)
    """Each collective reached, by the name engine code called it by (``get_tp_group().all_reduce``)."""
    multi_rank: dict[str, str] = field(default_factory=dict)
    """Each place a world size was compared -> where it came from: a path for more ranks, untested."""

    def reach(self, name: str) -> None:
        self.reached[name] += 1

    def notes(self) -> list[str]:
        """The collectives reached and the multi-rank paths not taken, as a target's notes say them."""
        notes = []
        if self.reached:
            called = ", ".join(f"{name} ({count}x)" for name, count in sorted(self.reached.items()))
            notes.append(f"collectives reached, served by a process group of one (the identity): {called}")
        for site, source in sorted(self.multi_rank.items()):
            notes.append(
                f"a path for more than one rank is untested: {site} compares {source} (1 here: only the"
                " one-rank path ran)"
            )
        return notes


class WorldSize(int):
    """A world size of 1 that records where engine code compares it: the other branch needs more ranks."""

    source: str
    collectives: Collectives

    def __new__(cls, source: str, collectives: Collectives) -> WorldSize:
        size = super().__new__(cls, 1)
        size.source = source
        size.collectives = collectives
        return size

    def _compared(self) -> None:
        frame = sys._getframe(2)
        code = frame.f_code
        site = f"{code.co_name} ({code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno})"
        self.collectives.multi_rank.setdefault(site, self.source)

    def __eq__(self, other: object) -> bool:
        self._compared()
        return int(self) == other

    def __ne__(self, other: object) -> bool:
        self._compared()
        return int(self) != other

    def __lt__(self, other: Any) -> bool:
        self._compared()
        return int(self) < other

    def __le__(self, other: Any) -> bool:
        self._compared()
        return int(self) <= other

    def __gt__(self, other: Any) -> bool:
        self._compared()
        return int(self) > other

    def __ge__(self, other: Any) -> bool:
        self._compared()
        return int(self) >= other

    __hash__ = int.__hash__

    def __repr__(self) -> str:
        return "1"


class GroupHandle:
    """A coordinator's ``device_group`` or ``cpu_group``: a group of one, which ``TorchDistributed`` takes."""

    def __init__(self, name: str) -> None:
        self.name = name

    def size(self) -> int:
        return 1

    def rank(self) -> int:
        return 0

    def __repr__(self) -> str:
        return f"<process group of one: {self.name}>"


class _Done:
    """The handle of an ``async_op=True`` collective: already complete."""

    def wait(self, *args: Any, **kwargs: Any) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


def _two(args: tuple) -> tuple[Any, Any]:
    """The first two positional arguments (``None`` for those not given)."""
    first, second = (*args, None, None)[:2]
    return first, second


class GroupOfOne:
    """A group coordinator (``get_tp_group()``'s kind) of one rank: rank 0, world size 1.

    Its collectives are out of place, as a coordinator's are: ``all_reduce``
    and ``all_gather`` return their input. A name it does not know is a
    ``HarnessGap`` naming it.
    """

    def __init__(self, name: str, collectives: Collectives) -> None:
        self._name = name
        self._collectives = collectives
        self.rank = self.rank_in_group = self.local_rank = self.first_rank = self.last_rank = 0
        self.next_rank = self.prev_rank = 0
        self.ranks = [0]
        self.is_first_rank = self.is_last_rank = True
        self.device_group = GroupHandle(f"{name}.device_group")
        self.cpu_group = GroupHandle(f"{name}.cpu_group")

    @property
    def world_size(self) -> WorldSize:
        return WorldSize(f"{self._name}.world_size", self._collectives)

    def _reach(self, op: str) -> None:
        self._collectives.reach(f"{self._name}.{op}")

    def all_reduce(self, input_: Any, *args: Any, **kwargs: Any) -> Any:
        self._reach("all_reduce")
        return input_

    def all_gather(self, input_: Any, *args: Any, **kwargs: Any) -> Any:
        self._reach("all_gather")
        return input_

    def all_gather_into_tensor(self, output: Any, input_: Any, *args: Any, **kwargs: Any) -> None:
        self._reach("all_gather_into_tensor")
        output.copy_(input_.reshape(output.shape))

    def reduce_scatter(self, input_: Any, *args: Any, **kwargs: Any) -> Any:
        self._reach("reduce_scatter")
        return input_

    def reduce_scatter_tensor(self, output: Any, input_: Any, *args: Any, **kwargs: Any) -> None:
        self._reach("reduce_scatter_tensor")
        output.copy_(input_.reshape(output.shape))

    def gather(self, input_: Any, *args: Any, **kwargs: Any) -> Any:
        self._reach("gather")
        return input_

    def broadcast(self, input_: Any, *args: Any, **kwargs: Any) -> Any:
        self._reach("broadcast")
        return input_

    def broadcast_object(self, obj: Any = None, *args: Any, **kwargs: Any) -> Any:
        self._reach("broadcast_object")
        return obj

    def broadcast_object_list(self, obj_list: list, *args: Any, **kwargs: Any) -> list:
        self._reach("broadcast_object_list")
        return obj_list

    def broadcast_tensor_dict(self, tensor_dict: Any = None, *args: Any, **kwargs: Any) -> Any:
        self._reach("broadcast_tensor_dict")
        return tensor_dict

    def barrier(self, *args: Any, **kwargs: Any) -> None:
        self._reach("barrier")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        raise HarnessGap(
            f"the engine used {self._name}.{name}, which the harness's process group of one does not serve",
            what=f"{self._name}.{name}",
        )

    def __repr__(self) -> str:
        return f"<process group of one: {self._name}>"


_PASSED_THROUGH = frozenset(
    ("ReduceOp", "ProcessGroup", "Backend", "GroupMember", "Work", "ReduceOptions", "group", "DeviceMesh")
)
"""Types and constants of ``torch.distributed`` (in signatures, as arguments): the real ones."""


class TorchDistributed(types.ModuleType):
    """``torch.distributed`` as engine code sees it: initialised, one rank, collectives the identity.

    Collectives are in place, as torch's are (``all_reduce`` returns ``None``, or
    a completed handle with ``async_op=True``). Types and constants are the real
    ones (``ReduceOp.SUM``); any other function is a ``HarnessGap`` when called.
    """

    def __init__(self, collectives: Collectives) -> None:
        super().__init__("torch.distributed")
        self._collectives = collectives
        self.group = types.SimpleNamespace(WORLD=GroupHandle("WORLD"))

    def _done(self, op: str, kwargs: dict[str, Any]) -> Any:
        self._collectives.reach(f"torch.distributed.{op}")
        return _Done() if kwargs.get("async_op") else None

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def get_rank(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def get_world_size(self, *args: Any, **kwargs: Any) -> WorldSize:
        return WorldSize("torch.distributed.get_world_size()", self._collectives)

    def get_backend(self, *args: Any, **kwargs: Any) -> str:
        return "gloo"

    def new_group(self, *args: Any, **kwargs: Any) -> GroupHandle:
        return GroupHandle("new_group")

    def all_reduce(self, tensor: Any, *args: Any, **kwargs: Any) -> Any:
        return self._done("all_reduce", kwargs)

    def reduce(self, tensor: Any, *args: Any, **kwargs: Any) -> Any:
        return self._done("reduce", kwargs)

    def broadcast(self, tensor: Any, *args: Any, **kwargs: Any) -> Any:
        return self._done("broadcast", kwargs)

    def broadcast_object_list(self, object_list: list, *args: Any, **kwargs: Any) -> Any:
        return self._done("broadcast_object_list", kwargs)

    def barrier(self, *args: Any, **kwargs: Any) -> Any:
        return self._done("barrier", kwargs)

    def all_gather(self, *args: Any, **kwargs: Any) -> Any:
        outputs, tensor = _two(args)
        outputs = kwargs.get("tensor_list", outputs)
        tensor = kwargs.get("tensor", tensor)
        outputs[0].copy_(tensor)
        return self._done("all_gather", kwargs)

    def _into(self, op: str, args: tuple, kwargs: dict[str, Any], output_key: str, input_key: str) -> Any:
        """A collective writing into an output tensor (named ``output_key`` when passed by keyword): on
        one rank the output is the input, reshaped."""
        output, tensor = _two(args)
        output = kwargs.get(output_key, output)
        tensor = kwargs.get(input_key, tensor)
        output.copy_(tensor.reshape(output.shape))
        return self._done(op, kwargs)

    def all_gather_into_tensor(self, *args: Any, **kwargs: Any) -> Any:
        return self._into("all_gather_into_tensor", args, kwargs, "output_tensor", "input_tensor")

    def reduce_scatter_tensor(self, *args: Any, **kwargs: Any) -> Any:
        return self._into("reduce_scatter_tensor", args, kwargs, "output", "input")

    def all_to_all_single(self, *args: Any, **kwargs: Any) -> Any:
        return self._into("all_to_all_single", args, kwargs, "output", "input")

    def all_gather_object(self, object_list: list, obj: Any, *args: Any, **kwargs: Any) -> Any:
        object_list[0] = obj
        return self._done("all_gather_object", kwargs)

    def gather(self, tensor: Any, gather_list: list | None = None, *args: Any, **kwargs: Any) -> Any:
        gather_list = kwargs.get("gather_list", gather_list)
        if gather_list:
            gather_list[0].copy_(tensor)
        return self._done("gather", kwargs)

    def scatter(self, tensor: Any, scatter_list: list | None = None, *args: Any, **kwargs: Any) -> Any:
        scatter_list = kwargs.get("scatter_list", scatter_list)
        if scatter_list:
            tensor.copy_(scatter_list[0])
        return self._done("scatter", kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        import torch.distributed

        real = getattr(torch.distributed, name)  # a name torch lacks: torch's own AttributeError
        if name in _PASSED_THROUGH or isinstance(real, type):
            return real

        def unserved(*args: Any, **kwargs: Any) -> Any:
            raise HarnessGap(
                f"the engine called torch.distributed.{name}, which the harness's process group of one"
                " does not serve (it needs another rank, or is not a collective)",
                what=f"torch.distributed.{name}",
            )

        return unserved


def torch_with(dist: TorchDistributed) -> types.ModuleType:
    """``torch`` whose ``distributed`` is ``dist``: every other name the real module's (read through)."""
    import torch

    proxy = _TorchView("torch")
    proxy.__dict__.update({k: v for k, v in vars(torch).items() if k != "distributed"})
    proxy.__dict__["distributed"] = dist
    proxy.__dict__["_mm_real"] = torch
    return proxy


class _TorchView(types.ModuleType):
    """``torch`` with one attribute replaced; a name added to torch later (lazily) is read from it."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_mm_real"], name)


def serve(
    modules: Iterable[types.ModuleType], collectives: Collectives
) -> Callable[[str], types.ModuleType | None]:
    """Serve the process group of one to engine modules already loaded: their ``torch`` and
    ``torch.distributed`` (as a module-level name, or a function imported from it) replaced, and the
    ``__import__`` of their builtins wrapped so that a call-time ``import torch.distributed`` gets it too.

    Returns ``imported(name)``: the module served for ``torch``/``torch.distributed`` (what a loader
    hook consulted before its real import would hand engine code at load time).
    """
    import torch
    import torch.distributed

    dist = TorchDistributed(collectives)
    view = torch_with(dist)
    served = {"torch": view, "torch.distributed": dist}

    def imported(name: str) -> types.ModuleType | None:
        return served.get(name)

    seen_builtins: set[int] = set()
    for module in modules:
        names = module.__dict__
        for key, value in list(names.items()):
            if value is torch:
                names[key] = view
            elif value is torch.distributed:
                names[key] = dist
            elif callable(value) and getattr(value, "__module__", "").startswith("torch.distributed"):
                names[key] = getattr(dist, getattr(value, "__name__", key), value)
        held = names.get("__builtins__")
        if isinstance(held, dict) and id(held) not in seen_builtins and not _served(held):
            seen_builtins.add(id(held))
            held["__import__"] = _importing(held["__import__"], served)
    return imported


def _served(builtins: dict[str, Any]) -> bool:
    """Whether a load's builtins already import the served modules (a second target on one load)."""
    return bool(getattr(builtins.get("__import__"), "__mm_served__", False))


def _importing(inner: Callable[..., Any], served: dict[str, types.ModuleType]) -> Callable[..., Any]:
    """``__import__`` that hands engine code the served ``torch``/``torch.distributed``, else ``inner``'s."""

    def import_(
        name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0
    ) -> Any:
        if level == 0 and name in served:
            return served[name] if fromlist else served["torch"]
        return inner(name, globals, locals, fromlist, level)

    import_.__mm_served__ = True  # type: ignore[attr-defined]
    return import_
