"""``vllm-mm-kwargs``: fuzzing how vLLM splits a processor's output into items (R7 on R5's input).

Each input is a processor output as a model's field config receives it: a
grid under Qwen2-VL's key (``image_grid_thw``) or Kimi-K2.5's (``grid_thws``),
of any row count and shape, patch features of any row count, and sometimes
precomputed embeddings beside them (Qwen2-VL's ``image_embeds``) sized by
another grid. The target runs the release's own field config and
``MultiModalKwargsItems.from_hf_inputs``. vLLM refuses what it cannot split
with a ``ValueError`` (``Cannot merge different batch sizes``, a grid of the
wrong rank); anything else escaping is a finding.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mmharness import fuzz
from mmharness.engines.vllm import layout
from mmharness.fuzz import FuzzBaseline, guarded
from mmharness.targets.base import TargetError

PARSER = "vllm-mm-kwargs"
DEFAULT_TARGET = "vllm==0.33.0"
EXPECTED = (ValueError,)
MAX_ROWS = 6
MAX_SIDE = 4
HIDDEN = 2


def _grid(draw: Any, rows: int) -> Any:
    """A grid of ``rows`` rows; now and then of another rank, or with negative sides."""
    import torch

    width = 3 if draw.ConsumeIntInRange(0, 7) else draw.ConsumeIntInRange(1, 4)
    low = -1 if not draw.ConsumeIntInRange(0, 7) else 0
    values = [draw.ConsumeIntInRange(low, MAX_SIDE) for _ in range(rows * width)]
    grid = torch.tensor(values, dtype=torch.int64).reshape(rows, width)
    return grid.reshape(-1) if not draw.ConsumeIntInRange(0, 15) else grid


def decode(data: bytes, keys: Sequence[str]) -> dict[str, Any]:
    """The processor output one input stands for (``keys``: the grid keys the release's models read)."""
    import atheris
    import torch

    draw = atheris.FuzzedDataProvider(data)
    key = keys[draw.ConsumeIntInRange(0, len(keys) - 1)]
    grid = _grid(draw, draw.ConsumeIntInRange(0, MAX_ROWS))
    patches = int(grid.clamp(min=0).prod(-1).sum()) if grid.ndim == 2 and grid.shape[-1] == 3 else 0
    rows = patches if draw.ConsumeBool() else draw.ConsumeIntInRange(0, 2 * MAX_SIDE**3)
    hf_inputs: dict[str, Any] = {key: grid, "pixel_values": torch.zeros(rows, HIDDEN)}
    if key == "image_grid_thw" and draw.ConsumeIntInRange(0, 3) == 0:
        other = _grid(draw, draw.ConsumeIntInRange(0, MAX_ROWS))
        hf_inputs["image_embeds"] = torch.zeros(draw.ConsumeIntInRange(0, 64), HIDDEN)
        hf_inputs[key] = other if draw.ConsumeBool() else grid
    return hf_inputs


def entry(target: Any, *, baseline: FuzzBaseline | None = None) -> Callable[[bytes], None]:
    """The ``TestOneInput`` against a loaded ``VLLMTarget`` with field configs."""
    configs = target.field_configs
    if not configs:
        raise TargetError(f"{target.name}: no Qwen2-VL or Kimi-K2.5 field config loaded; nothing to fuzz")
    split = target.engine.module(layout.INPUTS).MultiModalKwargsItems.from_hf_inputs
    keys = sorted(configs)
    source = target.engine.source.files
    files = {str(path): f"vllm/{layout.RULES.files[name]}" for name, path in source.items()}

    def parse(data: bytes) -> None:
        hf_inputs = decode(data, keys)
        key = next(k for k in keys if k in hf_inputs)
        with target.watched():
            split(hf_inputs, configs[key](hf_inputs))

    return guarded(
        PARSER,
        parse,
        EXPECTED,
        payload=lambda data: {k: list(v.shape) for k, v in decode(data, keys).items()},
        target={"spec": target.name, "release": target.engine.source.release or "unknown"},
        files=files,
        baseline=baseline,
    )


def describe(parser: str, target: str) -> dict[str, Any]:
    from mmharness.targets.specs import resolve

    loaded = resolve(target)
    return {
        "fuzz target": parser,
        "calls": "a field config, then MultiModalKwargsItems.from_hf_inputs",
        "field_configs": sorted(getattr(loaded, "field_configs", {})),
        **{k: v for k, v in loaded.describe().items() if k in ("target", "release", "files")},
    }


def main(
    argv: Sequence[str],
    *,
    parser: str = PARSER,
    target: str = DEFAULT_TARGET,
    baseline: FuzzBaseline | None = None,
    strict: bool = False,
    scratch: Path | None = None,
) -> None:
    """Fuzz the split; coverage comes from the inputs module and the model files (instrumented as loaded).

    ``strict`` and ``scratch`` (the run's own directory, removed after it) are the CLI's
    for every engine parser; this one has no silent acceptances to make strict and no
    dictionary to write.
    """
    import atheris
    from mmharness.engines.vllm import adapter
    from mmharness.targets.specs import resolve

    fuzzed = {layout.INPUTS, layout.QWEN2_VL, layout.KIMI_K25}
    spec = resolve(target)
    if not isinstance(spec, adapter.VLLMTarget):
        raise TargetError(f"{target}: {parser} needs a vLLM target (e.g. {DEFAULT_TARGET})")
    loaded = adapter.VLLMTarget(
        adapter.load(
            spec.engine.source,
            transform=lambda name, code: atheris.patch_code(code, True) if name in fuzzed else code,
        ),
        spec.name,
    )
    print(f"mmharness: fuzzing {parser} of {loaded.name} ({sorted(loaded.field_configs)})", file=sys.stderr)
    atheris.Setup(list(argv), entry(loaded, baseline=baseline))
    atheris.Fuzz()


def bundled_main(parser: str = PARSER) -> None:
    """The ClusterFuzzLite entry point; ``MMHARNESS_FUZZ_VLLM_RELEASE`` picks the release."""
    fuzz.bundled_main(parser, main, release=DEFAULT_TARGET, env="MMHARNESS_FUZZ_VLLM_RELEASE")
