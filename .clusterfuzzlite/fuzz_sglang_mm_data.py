"""ClusterFuzzLite entry point: SGLang's payload parser ``sglang-mm-data`` (``mmharness fuzz``)."""

from mmharness.engines.sglang.fuzz import bundled_main

if __name__ == "__main__":
    bundled_main("sglang-mm-data")
