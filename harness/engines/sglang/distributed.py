"""SGLang's distributed names, served from a process group of one (``mmharness.targets.distributed``).

SGLang's code reaches its tensor-parallel group through names of modules the
harness does not load (``sglang.srt.distributed``, ``parallel_state``,
``layers.dp_attention``): group getters (``get_tp_group()``: a coordinator with
``device_group``, ``cpu_group``, ``all_reduce``, ``all_gather``, ...), rank and
world-size getters, and collectives as functions
(``tensor_model_parallel_all_reduce``). On one rank, as the harness runs the
rules, each is what a server of tensor parallel size 1 gets: rank 0, world size
1 (a ``WorldSize`` that records where it is compared: the path for more ranks
is untested), collectives the identity, each recorded.
"""

from __future__ import annotations

import re
from typing import Any

from mmharness.targets.distributed import Collectives, GroupOfOne, WorldSize

GROUPS = {
    "get_tp_group": "tp",
    "get_tensor_model_parallel_group": "tp",
    "get_world_group": "world",
    "get_pp_group": "pp",
    "get_attention_tp_group": "attn_tp",
    "get_attn_tp_group": "attn_tp",
    "get_attention_dp_group": "attn_dp",
    "get_moe_ep_group": "moe_ep",
    "get_moe_tp_group": "moe_tp",
}
"""Group getters -> the group's name in notes."""

_SIZE = re.compile(r"^get_(?P<group>\w+?)_(world_size|size)$")
_RANK = re.compile(r"^get_(?P<group>\w+?)_rank$")
_COLLECTIVE = re.compile(
    r"^(?P<group>tensor_model_parallel|attention_tp|attn_tp|moe_tensor_parallel|moe_expert_parallel)"
    r"_(?P<op>all_reduce|all_gather|gather|reduce_scatter|broadcast)$"
)
ALWAYS_TRUE = frozenset(("model_parallel_is_initialized",))
"""Getters a server of one rank answers true: its groups exist (SGLang initialises them for tp 1 too)."""
_QUESTIONS_OF_PARALLEL = frozenset(("configured_tp_size",))
"""Sizes under other names than ``get_*_size``."""


def shim(name: str, collectives: Collectives, groups: dict[str, GroupOfOne]) -> Any:
    """The one-rank stand-in for ``name``, or ``None`` when it is not a distributed name."""
    if name in GROUPS:
        group = groups.setdefault(GROUPS[name], GroupOfOne(f"{name}()", collectives))
        return lambda *args, **kwargs: group
    if name in ALWAYS_TRUE:
        return lambda *args, **kwargs: True
    if name in _QUESTIONS_OF_PARALLEL or (_SIZE.match(name) and "parallel" in name) or _is_tp_size(name):
        return lambda *args, **kwargs: WorldSize(f"{name}()", collectives)
    if _RANK.match(name) and ("parallel" in name or "_tp_" in name or "_dp_" in name):
        return lambda *args, **kwargs: 0
    match = _COLLECTIVE.match(name)
    if match is not None:

        def collective(input_: Any, *args: Any, **kwargs: Any) -> Any:
            collectives.reach(name)
            return input_

        return collective
    if name == "broadcast_tensor_dict":

        def broadcast(tensor_dict: Any = None, *args: Any, **kwargs: Any) -> Any:
            collectives.reach(name)
            return tensor_dict

        return broadcast
    return None


def _is_tp_size(name: str) -> bool:
    """``get_attention_tp_size``, ``get_attention_dp_size``: sizes of the attention groups."""
    return name.startswith("get_") and name.endswith(("_tp_size", "_dp_size", "_cp_size", "_pp_size"))
