"""Where LMDeploy's PyTorch engine keeps the multimodal scheduling pieces the harness drives, by release.

Everything lives under ``lmdeploy/pytorch``: the prefix-cache clamp and span identities on the
scheduler's sequence (``messages.py``, its state records in ``prefix_cache_state.py``), the
long-context chunk planner (``long_context.py``, from the release that moved it out of
``engine/inputs_maker.py``) and one item, one half-open range (``multimodal/data_type.py``).
"""

from __future__ import annotations

from mmharness.targets.loader import Layout

PACKAGE = "lmdeploy"
DATA_TYPE = "lmdeploy.pytorch.multimodal.data_type"
PREFIX_STATE = "lmdeploy.pytorch.prefix_cache_state"
MESSAGES = "lmdeploy.pytorch.messages"
LONG_CONTEXT = "lmdeploy.pytorch.long_context"

RULES = Layout(
    package=PACKAGE,
    marker="pytorch",
    files={
        DATA_TYPE: "pytorch/multimodal/data_type.py",
        PREFIX_STATE: "pytorch/prefix_cache_state.py",
        MESSAGES: "pytorch/messages.py",
        LONG_CONTEXT: "pytorch/long_context.py",
    },
    kind="multimodal scheduling code",
)

RELEASE_MEMBERS = (
    *(f"{PACKAGE}/{rel}" for rel in RULES.files.values()),
    f"{PACKAGE}/version.py",
)
"""What is kept of a release's wheel (over 100 MB): the files the driver runs, and the version."""
