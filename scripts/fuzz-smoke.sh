#!/usr/bin/env bash
# A short atheris run of every parser fuzz target `mmharness fuzz --list` names (the case parser and
# each registered engine's, on its newest release; the checks' `check:ID` targets are smoked apart):
# known findings (corpus/fuzz-baseline.json, matched by exception class and file:function) are
# reported once and let through, so only a new finding fails. Used by .ci/run and `tox -e fuzz`.
#   scripts/fuzz-smoke.sh RUNS     (RUNS: libFuzzer runs per target; a fixed -seed keeps it reproducible)
set -euo pipefail
runs=${1:?usage: scripts/fuzz-smoke.sh RUNS}
baseline="$(dirname "$0")/../corpus/fuzz-baseline.json"
parsers=$(mmharness fuzz --list | awk '$2 != "any" { print $1 }')
test -n "$parsers"
for parser in $parsers; do
    echo "-- fuzz smoke: $parser, $runs runs"
    mmharness fuzz "$parser" --baseline "$baseline" -- -atheris_runs="$runs" -seed=1
done
