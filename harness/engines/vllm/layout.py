"""Where vLLM keeps the pieces the step driver runs, by release.

Everything lives under ``vllm/v1`` (the V1 engine) and ``vllm/multimodal``:
the placeholder ranges and feature specs (``multimodal/inputs.py``), the
window helper (``multimodal/utils.py``, ``get_mm_features_in_window`` in recent
releases), the request (``v1/request.py``), the encoder cache manager and the
scheduler (``v1/core``), and the two gathers: the GPU model runner's
``_gather_mm_embeddings`` (V1) and model runner V2's ``gather_mm_embeddings``
(``v1/worker/gpu/mm/encoder_runner.py``, not in every release). Two model files
are loaded for their processors' field configs, which split a processor's
output into items by grid (R5): Qwen2-VL's (``image_grid_thw``) and Kimi-K2.5's
(``grid_thws``, from 0.20 on).
"""

from __future__ import annotations

from mmharness.targets.loader import Layout

PACKAGE = "vllm"
INPUTS = "vllm.multimodal.inputs"
UTILS = "vllm.multimodal.utils"
WORKER_UTILS = "vllm.v1.worker.utils"
REQUEST = "vllm.v1.request"
CACHE_MANAGER = "vllm.v1.core.encoder_cache_manager"
SCHEDULER = "vllm.v1.core.sched.scheduler"
RUNNER_V1 = "vllm.v1.worker.gpu_model_runner"
RUNNER_V2 = "vllm.v1.worker.gpu.mm.encoder_runner"
QWEN2_VL = "vllm.model_executor.models.qwen2_vl"
KIMI_K25 = "vllm.model_executor.models.kimi_k25"

RULES = Layout(
    package=PACKAGE,
    marker="v1",
    files={
        INPUTS: "multimodal/inputs.py",
        UTILS: "multimodal/utils.py",
        WORKER_UTILS: "v1/worker/utils.py",
        REQUEST: "v1/request.py",
        CACHE_MANAGER: "v1/core/encoder_cache_manager.py",
        SCHEDULER: "v1/core/sched/scheduler.py",
        RUNNER_V1: "v1/worker/gpu_model_runner.py",
        RUNNER_V2: "v1/worker/gpu/mm/encoder_runner.py",
        "vllm.utils.collection_utils": "utils/collection_utils.py",
        QWEN2_VL: "model_executor/models/qwen2_vl.py",
        KIMI_K25: "model_executor/models/kimi_k25.py",
    },
    kind="multimodal scheduling code",
)

SETTINGS_FILE = "envs.py"
"""Read (never run) for the settings the release declares (``mmharness.engines.vllm.settings``)."""

RELEASE_MEMBERS = (
    *(f"{PACKAGE}/{rel}" for rel in (*RULES.files.values(), SETTINGS_FILE)),
    f"{PACKAGE}/_version.py",
    f"{PACKAGE}/version.py",
)
"""What is kept of a release's wheel (hundreds of MB): the files the driver runs, and the version."""
