"""The few faithful stand-ins vLLM's loaded files need at call time; every other name is a stub.

Each answers as vLLM does on a single CPU process: no pinned memory, a quiet
logger, integer ceiling division, a lazy import done at once.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any

from mmharness.engines.vllm.settings import Settings, declarations
from mmharness.targets.loader import Source
from mmharness.targets.settings import Declarations

ENGINE_LOGGER = "mmharness.engine.vllm"
_quiet = logging.getLogger(ENGINE_LOGGER)
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


def init_logger(name: str) -> logging.Logger:
    """vLLM's warnings (a rejected request) reach the harness as outcomes, not as log lines."""
    return _quiet


def cdiv(a: int, b: int) -> int:
    return -(a // -b)


def lazy_loader(local_name: str, parent_globals: dict[str, Any], name: str) -> Any:
    """vLLM's ``LazyLoader`` imports its module on first use; the harness imports it now."""
    return importlib.import_module(name)


def _false(*args: Any, **kwargs: Any) -> bool:
    return False


SHIMS: dict[str, Any] = {
    "init_logger": init_logger,
    "cdiv": cdiv,
    "PIN_MEMORY": False,
    "is_pin_memory_available": _false,
    "LazyLoader": lazy_loader,
    "VLLM_MEDIA_LOADING_THREAD_COUNT": 1,  # a module-level thread pool's size (0.12)
}


class VLLMShims:
    """The shims of one load: the settings its ``envs.py`` declares first, then the fixed table."""

    def __init__(self, record: Any, declared: Declarations | None = None) -> None:
        self.record = record
        self.settings = Settings(declared or Declarations(absent="none handed to the load"), record)

    def shim_for(self, name: str) -> Any | None:
        setting = self.settings.shim_for(name)
        return setting if setting is not None else SHIMS.get(name)


def for_source(source: Source) -> Callable[[Any], VLLMShims]:
    """The shims of a load from ``source``, with the settings its package declares (``envs.py``)."""
    declared = declarations(source)
    return lambda record: VLLMShims(record, declared)
