"""embed_mask.matches_reference on sglang==0.5.23: a standalone reproducer written by mmharness.

Rule R3e end to end (docs/rules.md): the mask marks exactly the placeholder positions of the
window's input_ids, and the rows, in mask order, are those of the items at those positions (for an
EVS-pruned video: its placeholders as EVS moved them, to the rows each frame kept).

It imports torch, pytest and SGLang's own rule files, loaded by path from ENGINE_ROOT (a directory
holding the `sglang/` package: a wheel's tree, site-packages, a checkout's `python/`):

    ENGINE_ROOT=/path/to/tree python -m pytest THIS_FILE

It fails where the finding was made (sglang==0.5.23) and passes where the rule holds. Written by
`mmharness replay docs/findings/sglang_0_5_23_evs_chunk_window.json --standalone`.
"""

import enum
import importlib.util
import logging
import os
import sys
import types
from pathlib import Path

import pytest
import torch

ENGINE_ROOT = Path(os.environ.get("ENGINE_ROOT", "/root/.cache/mmharness/releases/sglang-0.5.23"))
HIDDEN = 4
DTYPE = torch.float32


def rows(seed: int, count: int) -> torch.Tensor:
    """[count, HIDDEN] small integers from a seeded generator: values the rule never reads, only moves."""
    generator = torch.Generator().manual_seed(seed)
    values = torch.randint(-64, 65, (count, HIDDEN), generator=generator)
    return values.to(DTYPE)


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
        self.model_specific_data = dict(more.get("model_specific_data", {}))

    def __getattr__(self, name):
        data = self.__dict__.get("model_specific_data", {})
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
    assert int(tensor.sum()) == expected, f"{msg}: {int(tensor.sum())} != {expected}"


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
        pytest.fail(f"ENGINE_ROOT={ENGINE_ROOT} holds no sglang/srt/managers/mm_schedule.py")
    for package in ("managers", "mem_cache", "multimodal", "multimodal.processors"):
        _stand_in(f"sglang.srt.{package}")
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
    _stand_in("sglang.srt.mem_cache.allocator", BaseTokenToKVPoolAllocator=type("Allocator", (), {}))
    _stand_in("sglang.srt.managers.schedule_batch", Modality=Modality, MultimodalDataItem=MultimodalDataItem)
    offsets = {"get_mm_items_offset": staticmethod(get_mm_items_offset)}
    processor = type("BaseMultimodalProcessor", (), offsets)
    _stand_in("sglang.srt.multimodal.processors.base_processor", BaseMultimodalProcessor=processor)
    if importlib.util.find_spec("transformers") is None:
        _stand_in("transformers", PretrainedConfig=type("PretrainedConfig", (), {}))
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


def test_embedding_and_mask(mm_schedule):
    """R3e over the batch: the rows and mask of its window(s)."""
    items = [
        MultimodalDataItem(
            modality=Modality.VIDEO,
            hash=0,
            pad_value=1000000,
            offsets=[(0, 0), (24, 24)],
            feature=torch.tensor([], dtype=torch.float32),
            model_specific_data={"pre_chunked_input_ids": [1000000] + [7] * 23 + [1000000]},
        ),
    ]
    encoded = [
        (torch.tensor([[-25, 31, 37, 31], [13, 10, 42, -52]], dtype=torch.float32), [0, 2]),
    ]  # per item: what its encoder computes (rows; frames kept, for an EVS-pruned video)
    evs = sys.modules["sglang.srt.multimodal.evs"]
    if hasattr(sys.modules["sglang.srt.multimodal.evs.evs_module"], "VideoEVSDataItem"):
        pytest.skip("this release's EVS code takes only its own VideoEVSDataItem (its EVS processor's)")

    def data_embedding_func(batch):
        found = [encoded[next(k for k, item in enumerate(items) if item is given)] for given in batch]
        embedding = torch.cat([found_rows for found_rows, _ in found])
        if any(frames for _, frames in found):  # the model prunes one video per call
            assert len(found) == 1, "EVS prunes one video per encoder call"
            return evs.EVSEmbeddingResult(embedding=embedding, num_tokens_per_frame=found[0][1])
        return embedding

    embedding, mask, _ = mm_schedule.get_embedding_and_mask(
        data_embedding_func=data_embedding_func,
        embedding_items=items,
        placeholder_tensor=torch.tensor([1000000], dtype=torch.int64),
        input_ids=torch.tensor([7] * 23),
        items_size=[0, 1],
        prefix_length=[1],
        extend_length=[23],
        items_offset_list=[[(0, 0), (24, 24)]],
    )
    expected_rows = torch.tensor([[-25, 31, 37, 31]], dtype=torch.float32)
    assert mask is not None, "no mask: the window was served as text"
    assert mask.reshape(-1).tolist() == [False] * 22 + [True]
    assert embedding is not None and torch.equal(embedding.reshape(-1, HIDDEN), expected_rows)
