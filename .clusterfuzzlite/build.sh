#!/bin/bash -eu
# Builds mmharness's fuzz targets for ClusterFuzzLite (and OSS-Fuzz): the case parser, and
# the engines' parsers (SGLang's payload parsers, vLLM's split of processor outputs) loaded
# by path from releases fetched here, at build time, since fuzzers run without network.
# Each target is a small script (.clusterfuzzlite/fuzz_*.py) packaged by
# compile_python_fuzzer; the seeds in corpus/ become its seed corpus, and the known
# findings (corpus/fuzz-baseline.json) ship with it, so only new findings are crashes.
# Then every check the SGLang release can run, as `mmharness fuzz check:ID` runs it (coverage
# from the release's loaded files): a script per check, generated at the end (fuzz_check_*), with
# the release's known findings (a baseline written by `mmharness check` at build time).
#
# MMHARNESS_FUZZ_RELEASE picks the SGLang release the engine fuzzers load (default 0.5.23),
# MMHARNESS_FUZZ_VLLM_RELEASE the vLLM one (default 0.33.0; only the driver's files are kept).
RELEASE="${MMHARNESS_FUZZ_RELEASE:-0.5.23}"
VLLM_RELEASE="${MMHARNESS_FUZZ_VLLM_RELEASE:-0.33.0}"

# torch's CPU build only: the engine fuzzers make small tensors, and nothing needs CUDA.
pip3 install --index-url https://download.pytorch.org/whl/cpu "torch>=2.1,<2.14"
pip3 install .

# The release's parser files, unpacked into a cache shipped beside the fuzzers.
export MMHARNESS_CACHE="$OUT/mmharness-cache"
python3 -c "from mmharness.engines.sglang.adapter import fetch; fetch('$RELEASE')"
python3 -c "from mmharness.engines.vllm.adapter import fetch; fetch('$VLLM_RELEASE')"

# What the release is known for, found by the checks' own search (exit 1 when it has a divergence):
# bundled with each check's fuzzer, so a fuzzer looks past the release's known findings for new ones.
mmharness check --target "sglang==$RELEASE" --write-baseline "$OUT/fuzz-check-baseline.json" > /dev/null \
  || [ $? -eq 1 ]

for fuzzer in .clusterfuzzlite/fuzz_*.py; do
  name="$(basename "$fuzzer" .py)"
  compile_python_fuzzer "$fuzzer" --add-data "$OUT/mmharness-cache:mmharness-cache" \
    --add-data "corpus/fuzz-baseline.json:."
  seeds="corpus/$(echo "${name#fuzz_}" | tr _ -)"
  if [ -d "$seeds" ]; then
    zip -j -q "$OUT/${name}_seed_corpus.zip" "$seeds"/*.json
  fi
done

# The checks: one generated script per check the SGLang release's target can run on CPU.
for check in $(python3 -c "from mmharness.fuzz.checks import runnable; print(*runnable('sglang==$RELEASE'))"); do
  script="$SRC/fuzz_check_$(echo "$check" | tr '.-' '__').py"
  printf '%s\n' \
    "\"\"\"ClusterFuzzLite entry point: the check $check on sglang==$RELEASE (mmharness fuzz check:$check).\"\"\"" \
    "from mmharness.fuzz.checks import bundled_main" \
    "" \
    "if __name__ == \"__main__\":" \
    "    bundled_main(\"$check\", \"sglang==$RELEASE\")" > "$script"
  # Checks and engines are found by name at run time (importlib, entry points): bundle them all.
  compile_python_fuzzer "$script" --add-data "$OUT/mmharness-cache:mmharness-cache" \
    --add-data "$OUT/fuzz-check-baseline.json:." --collect-submodules mmharness --copy-metadata mmharness
done
