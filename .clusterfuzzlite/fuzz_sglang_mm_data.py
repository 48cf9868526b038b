"""ClusterFuzzLite entry point: SGLang's payload parser ``sglang-mm-data`` (``mmharness fuzz``)."""

import os
import sys
from pathlib import Path

from mmharness.engines.sglang import fuzz
from mmharness.fuzz import Baseline

if __name__ == "__main__":
    bundle = getattr(sys, "_MEIPASS", None)  # set when packaged by compile_python_fuzzer
    if bundle is not None:  # the release fetched at build time and the known findings ship beside it
        os.environ.setdefault("MMHARNESS_CACHE", str(Path(bundle) / "mmharness-cache"))
    known = Path(bundle or "corpus") / "fuzz-baseline.json"
    baseline = Baseline.load(known) if known.is_file() else None
    release = os.environ.get("MMHARNESS_FUZZ_RELEASE", "0.5.23")
    fuzz.main(sys.argv, parser="sglang-mm-data", target=f"sglang=={release}", baseline=baseline)
