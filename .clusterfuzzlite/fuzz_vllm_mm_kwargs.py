"""ClusterFuzzLite entry point: vLLM's split of processor outputs ``vllm-mm-kwargs`` (``mmharness fuzz``)."""

from mmharness.engines.vllm.fuzz import bundled_main

if __name__ == "__main__":
    bundled_main("vllm-mm-kwargs")
