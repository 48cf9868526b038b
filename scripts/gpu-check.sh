#!/usr/bin/env bash
# The CUDA run on a GPU machine without network: mmharness installed without dependencies
# (torch, Hypothesis, pytest and pytest-xdist must be there), then every check on CPU and CUDA.
# Usage: scripts/gpu-check.sh RELEASES_DIR [--examples N] [--json FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet --no-deps --no-build-isolation -e .
pytest -q -p no:cacheprovider -n 0 -m mm_cuda tests/test_cuda.py
exec python scripts/gpu_check.py "$@"
