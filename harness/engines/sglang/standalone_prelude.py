"""The first half of SGLang's standalone file (``standalone``): the stand-ins for the modules the rule
files import at load time, written out where a maintainer can read them, and the engine's own files
loaded by path from ``ENGINE_ROOT`` in the order they import each other. A ``str.format`` template:
``{root}``, ``{hidden}``, ``{dtype}`` and ``{seeded}`` (the seeded constructor) are filled in."""

PRELUDE = '''
import enum
import importlib.util
import logging
import os
import sys
import types
from pathlib import Path

import pytest
import torch

ENGINE_ROOT = Path(os.environ.get("ENGINE_ROOT", "{root}"))
HIDDEN = {hidden}
DTYPE = torch.{dtype}

{seeded}

# Stand-ins. The rule files import these modules at load time; the real ones pull in the whole
# server (the scheduler, CUDA transports, transformers). Each gives only what the rules read.


class Modality(enum.Enum):
    """schedule_batch.Modality: the members the rules branch on."""

    IMAGE = enum.auto()
    MULTI_IMAGES = enum.auto()
    VIDEO = enum.auto()
    AUDIO = enum.auto()


class MultimodalDataItem:
    """schedule_batch.MultimodalDataItem: the fields the rules read; model-specific data as attributes."""

    def __init__(self, *, modality, hash, pad_value, offsets, **more):
        self.modality, self.hash, self.pad_value, self.offsets = modality, hash, pad_value, offsets
        self.feature = more.get("feature")
        self.precomputed_embeddings = more.get("precomputed_embeddings")
        self.model_specific_data = dict(more.get("model_specific_data", {{}}))

    def __getattr__(self, name):
        data = self.__dict__.get("model_specific_data", {{}})
        if name in data:
            return data[name]
        raise AttributeError(name)

    def is_image(self):
        return self.modality in (Modality.IMAGE, Modality.MULTI_IMAGES)

    def is_video(self):
        return self.modality is Modality.VIDEO

    def is_audio(self):
        return self.modality is Modality.AUDIO

    def is_precomputed_embedding(self):
        return self.precomputed_embeddings is not None

    def can_defer_cuda_ipc_feature_reconstruction(self):
        return False  # no CUDA IPC transport here

    def acknowledge_deferred_cuda_ipc_feature(self, *args):
        pass


def get_mm_items_offset(input_ids, mm_token_id):
    """BaseMultimodalProcessor.get_mm_items_offset: the inclusive (start, end) runs of mm_token_id."""
    runs = []
    for position, token in enumerate(input_ids.tolist()):
        if token == mm_token_id and runs and runs[-1][1] == position - 1:
            runs[-1] = (runs[-1][0], position)
        elif token == mm_token_id:
            runs.append((position, position))
    return runs


def maybe_assert_sum(tensor, expected, msg=""):
    """utils.async_probe.maybe_assert_sum, always on (the engine's probe is opt-in)."""
    assert int(tensor.sum()) == expected, f"{{msg}}: {{int(tensor.sum())}} != {{expected}}"


def _stand_in(name, **names):
    module = types.ModuleType(name)
    module.__path__ = []  # a package: the engine's own files are loaded under it by path
    module.__dict__.update(names)
    sys.modules[name] = module
    return module


def _load(name, relative):
    """One of the engine's files, run as the module `name`."""
    spec = importlib.util.spec_from_file_location(name, ENGINE_ROOT / "sglang" / relative)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def mm_schedule():
    """SGLang's rules module, its imports answered by the stand-ins above or the engine's own files."""
    if not (ENGINE_ROOT / "sglang/srt/managers/mm_schedule.py").is_file():
        pytest.fail(f"ENGINE_ROOT={{ENGINE_ROOT}} holds no sglang/srt/managers/mm_schedule.py")
    for package in ("managers", "mem_cache", "multimodal", "multimodal.processors"):
        _stand_in(f"sglang.srt.{{package}}")
    _stand_in("sglang")
    _stand_in("sglang.srt")
    _stand_in("sglang.utils", logger=logging.getLogger("sglang"))
    never = lambda: False  # noqa: E731  (not ROCm, NPU or XPU: the batched CUDA/CPU path)
    _stand_in("sglang.srt.utils", is_hip=never, is_npu=never, is_xpu=never)
    _stand_in("sglang.srt.utils.async_probe", maybe_assert_sum=maybe_assert_sum)
    one_rank = types.SimpleNamespace(tp_size=1, tp_rank=0, attn_tp_rank=0, attn_tp_size=1)
    schedule = types.SimpleNamespace(chunked_prefill_size=-1)
    _stand_in("sglang.srt.runtime_context", get_parallel=lambda: one_rank, get_schedule=lambda: schedule)
    _stand_in("sglang.srt.multimodal.transport.cuda_ipc", BORROW_CUDA_IPC_FEATURE_KEY="borrow_cuda_ipc")
    _stand_in("sglang.srt.mem_cache.allocator", BaseTokenToKVPoolAllocator=type("Allocator", (), {{}}))
    _stand_in("sglang.srt.managers.schedule_batch", Modality=Modality, MultimodalDataItem=MultimodalDataItem)
    offsets = {{"get_mm_items_offset": staticmethod(get_mm_items_offset)}}
    processor = type("BaseMultimodalProcessor", (), offsets)
    _stand_in("sglang.srt.multimodal.processors.base_processor", BaseMultimodalProcessor=processor)
    if importlib.util.find_spec("transformers") is None:
        _stand_in("transformers", PretrainedConfig=type("PretrainedConfig", (), {{}}))
    _load("sglang.srt.mem_cache.multimodal_cache", "srt/mem_cache/multimodal_cache.py")
    # EVS's package: its __init__ also imports the EVS processor; the rules need only its result type.
    evs = _stand_in("sglang.srt.multimodal.evs")
    if (ENGINE_ROOT / "sglang/srt/multimodal/evs/evs_module.py").is_file():
        _load("sglang.srt.multimodal.evs.evs_core", "srt/multimodal/evs/evs_core.py")
        evs_module = _load("sglang.srt.multimodal.evs.evs_module", "srt/multimodal/evs/evs_module.py")
        evs.EVSEmbeddingResult = evs_module.EVSEmbeddingResult
    module = _load("sglang.srt.managers.mm_schedule", "srt/managers/mm_schedule.py")
    module.init_mm_embedding_cache(1 << 40)  # a cache that holds everything, as a server's default does
    return module
'''
"""The file's loading part: the stand-ins and the engine's files in the order they import each other."""
