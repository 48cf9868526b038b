"""Real-code mutation score: single-point mutants of a release's files, each checked by the harness.

Usage::

    pip install -e '.[mutation]'
    python benchmarks/mutation_score.py [--engine sglang|vllm] [--release X | --release ENGINE==X]
        [--file PATH-IN-RELEASE ...] [--function NAME ...] [--baseline-seeds K] [--deadline S]
        [--checks IDS] [--max-examples N] [-n 2] [--limit N] [--strict] [--against] [--json score.json]

The mutants come from cosmic-ray (its operators and its mutator; the harness
writes none of its own): comparisons, arithmetic, numbers, boolean operators,
``not``, loops that run zero times. cosmic-ray fits because it mutates a file
on disk by (operator, occurrence) and leaves running the tests to us: the
harness loads rule files by path, and needs no test framework in between.
(mutmut 3 rewrites a package into trampolines driven from its own pytest run,
which a file loaded by path outside any package does not fit.)

What is mutated: ``--file`` (repeatable) names files of the release, as paths
inside it; by default SGLang's ``mm_schedule.py`` (0.5.18 on; ``mm_utils.py``
before) and vLLM's six files below. Only mutants inside the functions the
harness drives count, since a mutant in code never run on CPU is not
*CPU-reachable*: each file has a default function set (``DRIVEN``: the
functions a CI-profile run of the unmutated release calls, found by tracing
it), ``--function`` replaces it (a name, or ``Class.method``). The sets:

- SGLang ``sglang/srt/managers/mm_schedule.py``: every function (the file is
  the rules and nothing else).
- SGLang ``sglang/srt/managers/mm_utils.py``: the rules where a release keeps
  them there (0.4.6 to 0.5.17), the splitter (``get_new_expanded_mm_items``,
  ``_try_simple_split`` and their helpers) and ``embed_mm_inputs``, the caller
  the end-to-end check runs; not the padding patterns, shared-memory
  transport or hashing helpers.
- SGLang ``sglang/srt/mem_cache/multimodal_cache.py``: the static cache's
  ``get``/``get_single``/``set``/``free``, ``combine_hashes``, the sizes.
- vLLM ``vllm/v1/core/sched/scheduler.py``: the encoder half of a step the
  driver runs (``_try_schedule_encoder_inputs``, ``_allocate_encoder_inputs``,
  ``_free_encoder_inputs``, ``_free_encoder_input``,
  ``_reject_on_encoder_cache_embed_mismatch``); not ``schedule()`` itself.
- vLLM ``vllm/v1/core/encoder_cache_manager.py``: ``EncoderCacheManager``'s
  methods the scheduler calls (not the encoder-decoder manager nor the budget).
- vLLM ``vllm/v1/worker/gpu_model_runner.py``: ``_gather_mm_embeddings`` and
  ``_get_encoder_output_from_cache`` (the V1 gather).
- vLLM ``vllm/v1/worker/gpu/mm/encoder_runner.py``: ``gather_mm_embeddings`` (V2).
- vLLM ``vllm/model_executor/models/qwen2_vl.py`` and ``kimi_k25.py``: the
  field configs that split a processor's output by grid.

Within those functions, a mutant whose lines the unmutated copy's CI run never
executes (traced while it writes its baseline) is *not reached* on CPU: it is
listed, not run (its run would be the same as the unmutated one), and left out
of the score; ``--all-lines`` runs those too.

Baselines: the unmutated copy is checked under the CI profile and under K more
seeds (``--baseline-seeds K``: ``--seed 1`` .. ``--seed K``), without a
deadline, and every mutant run gets all of those reports as baselines (they
combine), so a hazard the unmutated release shows only on other cases is not
taken for the mutant's. The output records K and the examples per check of
each baseline run.

Each mutant: the file is rewritten in a private copy of the release and
``mmharness check --target COPY --baseline ... --fail-fast --deadline S``
runs (a case still running after S seconds is a divergence of its own: a
kill; ``--timeout`` bounds the whole run as a safety net, also a kill). A
mutant is *killed* when the run fails (exit 1: a new way of failing), and
*killed under --strict* also when its report holds a hazard or could-not-test
signature none of the baselines has (wasted encoder work, a cache keeping
views: behaviour that follows the rules but changed), or a known finding whose
own case, replayed, no longer fails as recorded (``baseline_changes``: a change
in code that already failed, which a known signature would hide; ``check
--strict`` fails on it too). Both figures come from
the same run; ``--strict`` picks the one the survivors list and
``--survivors-of`` use. A run that ends otherwise (exit 2, 4) is an *error*,
listed and left out of the score. Workers run in parallel, each on its own
copy. The report gives the kill rate per file and function, and every
survivor with its diff. ``--checks`` and ``--max-examples`` (passed to every
run, baselines included) narrow a look to the checks a file's rules need.

``--against``: the rules pin rows, refusals and some encoder work, not which
path an item takes, the encoder's call pattern or the message of a refusal,
so a mutant changing only those survives them. In this mode a mutant the
rules leave alive (under ``--strict``) is checked again, ``mmharness check
--against UNMUTATED --strict --fail-fast --first-failure``, ``UNMUTATED`` being
a path copy of the same release no worker mutates: every case runs on both, and
it is *killed by --against* when that run reports any change (a regression, a
fix or a neutral change: ``mmharness.against``; ``--strict --fail-fast
--first-failure`` stops at the first case of the first check with one, unshrunk,
since one is enough: shrinking each change cost an eviction-order mutant of vLLM
its whole ``--timeout``). Its per-case deadline is
twice ``--deadline``, the two targets sharing it; one past ``--timeout`` is an
error (its cost, not a hang: the rules run finished). A mutant the rules kill is
counted killed by ``--against`` too without a second run: it fails in a way
none of the unmutated copy's baselines does, which ``--against`` reports as a
regression. One ``--against`` run per mutant instead would cost each mutant
several times a rules-only run (every case twice, every neutral change
shrunk) and would skew the rules-only score (a search that meets a neutral
change shrinks it and reaches other cases than the plain run), so the
rules-only figures stay those of the plain run and the third figure, the
``--against`` kill rate, is shown beside them; the survivors listed are those
``--against`` leaves, then the mutants only it kills, with their first change.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import importlib
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from mmharness.workers import count

FORMAT = "mmharness.mutation/2"
ENGINES = {"sglang": "0.5.23", "vllm": "0.33.0"}
"""Engine -> the release mutated by default."""
SGLANG_RULES = "sglang/srt/managers/mm_schedule.py"
SGLANG_OLD_RULES = "sglang/srt/managers/mm_utils.py"
VLLM_FILES = (
    "vllm/v1/core/sched/scheduler.py",
    "vllm/v1/core/encoder_cache_manager.py",
    "vllm/v1/worker/gpu_model_runner.py",
    "vllm/v1/worker/gpu/mm/encoder_runner.py",
    "vllm/model_executor/models/qwen2_vl.py",
    "vllm/model_executor/models/kimi_k25.py",
)
EVERY = None
"""A file whose every function the harness drives."""
_RULES = (
    "init_mm_embedding_cache",
    "get_embedding_chunk",
    "_get_precomputed_embedding",
    "_flatten_embedding_result",
    "_embedding_token_count",
    "_discard_mismatched_cached_embedding",
    "_can_skip_pre_embed_feature_move",
    "_move_items_to_device",
    "_acknowledge_deferred_cuda_ipc_cache_hits",
    "_item_overlap",
    "_slice_item_chunk",
    "_get_chunked_embedding_full",
    "_batch_encode_per_image_misses",
    "_get_chunked_embedding_by_item",
    "_assemble_per_image_chunk",
    "_get_chunked_prefill_embedding",
    "_get_multimodal_mask",
    "_count_mm_tokens_in_extend",
    "_adjust_embedding_length",
    "get_embedding_and_mask",
)
"""SGLang's rule functions (in ``mm_utils.py`` up to 0.5.17), every name any release used."""
_SPLITTER = (
    "get_new_expanded_mm_items",
    "_try_simple_split",
    "_split_model_data_for_item",
    "_compute_patch_slices",
    "_slice_model_data",
    "_slice_value",
    "_get_length",
    "_is_rank2_grid",
)
DRIVEN: dict[str, tuple[str, ...] | None] = {
    SGLANG_RULES: EVERY,
    SGLANG_OLD_RULES: (*_RULES, *_SPLITTER, "embed_mm_inputs", "_scatter_mm_embedding"),
    "sglang/srt/mem_cache/multimodal_cache.py": (
        "_get_tensor_size",
        "MultimodalCache.__init__",
        "MultimodalCache.combine_hashes",
        "MultiModalStaticCache.__init__",
        "MultiModalStaticCache.get",
        "MultiModalStaticCache.get_single",
        "MultiModalStaticCache.set",
        "MultiModalStaticCache.free",
    ),
    "vllm/v1/core/sched/scheduler.py": tuple(
        f"Scheduler.{name}"
        for name in (
            "_try_schedule_encoder_inputs",
            "_allocate_encoder_inputs",
            "_free_encoder_inputs",
            "_free_encoder_input",
            "_reject_on_encoder_cache_embed_mismatch",
        )
    ),
    "vllm/v1/core/encoder_cache_manager.py": tuple(
        f"EncoderCacheManager.{name}"
        for name in (
            "__init__",
            "check_and_update_cache",
            "get_cached_num_encoder_embeds",
            "can_allocate",
            "allocate",
            "_add_cached_input_id",
            "get_cached_input_ids",
            "free_encoder_input",
            "free",
            "get_freed_mm_hashes",
        )
    ),
    "vllm/v1/worker/gpu_model_runner.py": (
        "GPUModelRunner._gather_mm_embeddings",
        "GPUModelRunner._get_encoder_output_from_cache",
    ),
    "vllm/v1/worker/gpu/mm/encoder_runner.py": ("EncoderRunner.gather_mm_embeddings",),
    "vllm/model_executor/models/qwen2_vl.py": ("_create_qwen2vl_field_factory", "_qwen2vl_field_config"),
    "vllm/model_executor/models/kimi_k25.py": (
        "KimiK25MultiModalProcessor._get_mm_fields_config",
        "_get_mm_fields_config",
    ),
    # driven too, mutated only when asked (--file):
    "vllm/multimodal/utils.py": ("get_mm_features_in_window",),
    "vllm/v1/request.py": ("Request.get_num_encoder_embeds",),
    "vllm/multimodal/inputs.py": (
        "PlaceholderRange.embeds_cumsum",
        "PlaceholderRange.get_embeds_indices_in_range",
        "PlaceholderRange.get_num_embeds",
    ),
}
"""File in a release -> the functions the harness drives on CPU (``EVERY``: all of them)."""
OPERATORS = (
    "core/NumberReplacer",
    "core/ReplaceTrueWithFalse",
    "core/ReplaceFalseWithTrue",
    "core/ReplaceAndWithOr",
    "core/ReplaceOrWithAnd",
    "core/AddNot",
    "core/ZeroIterationForLoop",
    "core/ReplaceBinaryOperator_Add_Sub",
    "core/ReplaceBinaryOperator_Sub_Add",
    "core/ReplaceBinaryOperator_Mul_Add",
    "core/ReplaceBinaryOperator_FloorDiv_Mul",
    "core/ReplaceComparisonOperator_Eq_NotEq",
    "core/ReplaceComparisonOperator_NotEq_Eq",
    "core/ReplaceComparisonOperator_Lt_LtE",
    "core/ReplaceComparisonOperator_LtE_Lt",
    "core/ReplaceComparisonOperator_Gt_GtE",
    "core/ReplaceComparisonOperator_GtE_Gt",
    "core/ReplaceComparisonOperator_Lt_GtE",
    "core/ReplaceComparisonOperator_Gt_LtE",
    "core/ReplaceComparisonOperator_Is_IsNot",
    "core/ReplaceComparisonOperator_IsNot_Is",
    "core/ReplaceComparisonOperator_In_NotIn",
    "core/ReplaceComparisonOperator_NotIn_In",
)
"""Single-point mutations: comparisons (boundaries and negations), arithmetic, constants, booleans, loops."""
TIMEOUT_S = 300
DEADLINE_S = 5
KILLED, TIMED_OUT, SURVIVED, NOT_REACHED, NOT_APPLIED = (
    "killed", "timed out", "survived", "not reached", "not applied",
)  # fmt: skip
KILLS = (KILLED, TIMED_OUT)
CHANGED = "changed"
"""The kind ``new_findings`` gives a known finding whose own case no longer fails as recorded."""
STRICT_KINDS = ("hazard", "could-not-test", CHANGED)

_TRACED = r"""
import json, os, sys, threading
out, wanted, args = sys.argv[1], set(sys.argv[2].split(os.pathsep)), sys.argv[3:]
lines, known = {}, {}
def local(frame, event, arg):
    if event == "line":
        lines[frame.f_code.co_filename].add(frame.f_lineno)
    return local
def tracer(frame, event, arg):
    name = frame.f_code.co_filename
    hit = known.get(name)
    if hit is None:
        hit = known[name] = os.path.realpath(name) in wanted
        if hit:
            lines.setdefault(name, set())
    if not hit:
        return None
    lines[name].add(frame.f_lineno)
    return local
sys.settrace(tracer)
threading.settrace(tracer)
from mmharness.cli import main
try:
    code = main(args)
except SystemExit as stop:
    code = stop.code
finally:
    sys.settrace(None)
    reached = {}
    for name, seen in lines.items():
        reached.setdefault(os.path.realpath(name), set()).update(seen)
    with open(out, "w") as stream:
        json.dump({name: sorted(seen) for name, seen in reached.items()}, stream)
sys.exit(code)
"""
"""``mmharness check`` run with the lines it executes in the mutated files recorded (argv: OUT FILES ARGS)."""


def functions_of(source: str) -> list[tuple[str, int, int]]:
    """``(name, first line, last line)`` of each top-level function and each method of a top-level class
    (``Class.method``); a nested function belongs to the function around it."""
    tree = ast.parse(source)
    found = []
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    for node in tree.body:
        if isinstance(node, functions):
            found.append((node.name, node.lineno, node.end_lineno or node.lineno))
        elif isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, functions):
                    name = f"{node.name}.{member.name}"
                    found.append((name, member.lineno, member.end_lineno or member.lineno))
    return found


def chosen(function: str, wanted: Iterable[str] | None, *, bare: bool = False) -> bool:
    """Whether ``function`` (``name`` or ``Class.method``) is among ``wanted`` (``None``: every one).

    ``bare``: a method's own name matches too (``--function _free_encoder_inputs``)."""
    if wanted is None:
        return True
    names = set(wanted)
    return function in names or (bare and function.rsplit(".", 1)[-1] in names)


def parse_release(release: str | None, engine: str | None) -> tuple[str, str]:
    """``--release X`` (with ``--engine``) or ``--release ENGINE==X`` -> ``(engine, version)``."""
    if release and "==" in release:
        named, _, version = release.partition("==")
        if engine and engine != named:
            raise ValueError(f"--release {release} names {named}, but --engine is {engine}")
        engine = named
    else:
        version = release or ""
    engine = engine or "sglang"
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}: one of {', '.join(ENGINES)}")
    return engine, version or ENGINES[engine]


def default_files(engine: str, release: Path) -> list[str]:
    """What is mutated without ``--file``: SGLang's rules file, or vLLM's driven files the release has."""
    if engine == "sglang":
        return [SGLANG_RULES if (release / SGLANG_RULES).is_file() else SGLANG_OLD_RULES]
    return [name for name in VLLM_FILES if (release / name).is_file()]


def spans(mutant: dict) -> range:
    return range(mutant["line"], mutant.get("end_line", mutant["line"]) + 1)


def reached(mutant: dict, lines: set[int]) -> bool:
    """Whether the unmutated copy executed any line the mutation spans."""
    return any(line in lines for line in spans(mutant))


def tolerated(baselines: Iterable[dict]) -> set[tuple[str, str, str]]:
    """``(check, device, signature)`` of every finding in these ``--json`` reports."""
    return {
        (result["check"], result["device"], finding["signature"])
        for report in baselines
        for result in report.get("results", ())
        for finding in result.get("findings") or ()
    }


def new_findings(report: dict, known: set[tuple[str, str, str]]) -> list[dict]:
    """The findings of a mutant's report whose way of failing no baseline holds, then the known ones
    whose own case changed (kind ``CHANGED``)."""
    return [
        {"check": result["check"], "kind": finding["kind"], "signature": finding["signature"]}
        for result in report.get("results", ())
        for finding in result.get("findings") or ()
        if (result["check"], result["device"], finding["signature"]) not in known
    ] + [
        {"check": change["check"], "kind": CHANGED, "signature": change["signature"]}
        for change in report.get("baseline_changes") or ()
    ]


def verdicts(code: int, findings: list[dict]) -> tuple[str, str]:
    """``(outcome, outcome under --strict)`` of a mutant's check: exit code and new findings."""
    if code == -1:
        return TIMED_OUT, TIMED_OUT
    if code == 1:
        return KILLED, KILLED
    if code in (0, 3):
        strict = any(f["kind"] in STRICT_KINDS for f in findings)
        return SURVIVED, KILLED if strict else SURVIVED
    return f"error (exit {code})", f"error (exit {code})"


def score(mutants: list[dict], key: str) -> tuple[int, int]:
    """``(killed, counted)``: errors, unapplied and unreached mutants are not counted."""
    counted = [m for m in mutants if m[key] in (*KILLS, SURVIVED)]
    return sum(m[key] in KILLS for m in counted), len(counted)


def mutations(path: Path, relative: str, wanted: Iterable[str] | None, *, bare: bool) -> list[dict]:
    """Every mutation of the chosen operators inside the chosen functions of one file."""
    from cosmic_ray.ast import ast_nodes, get_ast_from_path
    from cosmic_ray.plugins import get_operator, operator_names

    functions = functions_of(path.read_text())
    module = get_ast_from_path(path)
    nodes = list(ast_nodes(module))
    found = []
    for name in sorted(set(OPERATORS) & set(operator_names())):  # a cosmic-ray without one skips it
        operator = get_operator(name)()
        positions = ((start, end) for node in nodes for start, end in operator.mutation_positions(node))
        for occurrence, (start, end) in enumerate(positions):
            line = start[0]
            owner = next((f for f, first, last in functions if first <= line <= last), None)
            if owner is not None and chosen(owner, wanted, bare=bare):
                found.append(
                    {"file": relative, "function": owner, "line": line, "end_line": end[0],
                     "operator": name, "occurrence": occurrence}
                )  # fmt: skip
    return sorted(found, key=lambda m: (m["line"], m["operator"], m["occurrence"]))


def check(
    copy: Path, extra: list[str], *, timeout: float, traced: tuple[Path, list[Path]] | None = None
) -> int:
    """``mmharness check --target .`` in ``copy`` (one spelling for every copy: their baselines match)."""
    args = ["check", "--target", ".", "--findings", str(copy.parent / f"findings-{copy.name}"), *extra]
    if traced is None:
        command = [sys.executable, "-m", "mmharness.cli", *args]
    else:
        out, files = traced
        wanted = os.pathsep.join(os.path.realpath(f) for f in files)
        command = [sys.executable, "-c", _TRACED, str(out), wanted, *args]
    try:
        done = subprocess.run(command, cwd=copy, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return -1
    if done.returncode not in (0, 1, 3):
        print(
            f"[{copy.name}] mmharness check {' '.join(extra)}: exit {done.returncode}\n{done.stderr[-2000:]}"
        )
    return done.returncode


def reported(copy: Path, extra: list[str], report: Path, *, timeout: float) -> tuple[int, dict]:
    """``check`` writing ``--json report``: its exit code and its report (empty when it wrote none)."""
    report.unlink(missing_ok=True)
    code = check(copy, [*extra, "--json", str(report)], timeout=timeout)
    return code, json.loads(report.read_text()) if report.is_file() else {}


def changes_in(report: dict) -> list[dict]:
    """The changes an ``--against`` run's report holds (``mmharness.against``), each with its check."""
    return [
        {"check": result["check"], "change": finding["change"], "signature": finding["signature"]}
        for result in report.get("results", ())
        for finding in result.get("findings") or ()
        if finding.get("change")
    ]


def against_verdict(code: int, changes: list[dict]) -> str:
    """A rules survivor's outcome ``--against`` the unmutated copy: killed by any change it reports."""
    if changes:
        return KILLED
    if code == -1:  # the rules run finished in time: this one's cost (each case twice), not a hang
        return "error (timed out)"
    if code in (0, 1, 3):  # 1 and 3 without a change: a finding of the mutant's the rules run already judged
        return SURVIVED
    return f"error (exit {code})"


def compared(
    copy: Path,
    given: list[str],
    unmutated: str,
    strict: str,
    *,
    deadline: float,
    timeout: float,
    report: Path,
) -> dict:
    """The ``--against`` fields of a mutant whose rules verdict under ``--strict`` is ``strict``: a
    survivor is checked against the unmutated copy; any other verdict (a kill, an error) is its own."""
    if strict != SURVIVED:
        return {"against": strict}
    extra = [*given, "--against", unmutated, "--strict", "--fail-fast", "--first-failure"]
    extra += ["--deadline", str(2 * deadline)]
    code, found = reported(copy, extra, report, timeout=timeout)
    changes = changes_in(found)
    return {"against": against_verdict(code, changes), "changes": changes}


def run_baseline(
    copy: Path, seed: int | None, out: Path, files: list[str], timeout: float, options: list[str]
) -> dict:
    """The unmutated copy's report under the CI profile (traced: which lines run) or another seed."""
    extra = [*options, "--deadline", "0", "--json", str(out)] + (
        [] if seed is None else ["--seed", str(seed)]
    )
    traced = None if seed is not None else (out.with_suffix(".lines.json"), [copy / f for f in files])
    started = time.perf_counter()
    code = check(copy, extra, timeout=timeout, traced=traced)
    seconds = round(time.perf_counter() - started, 1)
    report = json.loads(out.read_text()) if out.is_file() else {}
    examples = {r["check"]: r.get("examples") for r in report.get("results", ())}
    search = "ci" if seed is None else f"seed {seed}"
    print(f"[baseline {search}] exit {code} in {seconds} s, {len(examples)} checks", flush=True)
    lines: dict[str, list[int]] = {}
    if traced is not None and traced[0].is_file():
        by_path = json.loads(traced[0].read_text())
        lines = {f: by_path.get(os.path.realpath(copy / f), []) for f in files}
    return {"search": search, "seed": seed, "exit": code, "seconds": seconds, "examples": examples,
            "report": str(out), "lines": lines}  # fmt: skip


def run_worker(
    copy: Path,
    jobs: list[dict],
    baselines: list[str],
    deadline: float,
    timeout: float,
    options: list[str],
    unmutated: str | None = None,
) -> list[dict]:
    """Every job on one private copy of the release: mutate, check against the baselines (and, with
    ``unmutated``, a rules survivor ``--against`` that copy: ``compared``), restore. ``options``: the
    check options every run takes (``--checks``, ``--max-examples``)."""
    from cosmic_ray.mutating import mutate_code
    from cosmic_ray.plugins import get_operator

    known = tolerated(json.loads(Path(b).read_text()) for b in baselines)
    originals: dict[str, str] = {}
    report = copy.parent / f"{copy.name}-mutant.json"
    given = [*(a for b in baselines for a in ("--baseline", b)), *options]
    results = []
    for job in jobs:
        path = copy / job["file"]
        original = originals.setdefault(job["file"], path.read_text())
        mutated = mutate_code(original, get_operator(job["operator"])(), job["occurrence"])
        if mutated is None:
            results.append({**job, **dict.fromkeys(verdict_keys(unmutated is not None), NOT_APPLIED)})
            continue
        path.write_text(mutated)
        started = time.perf_counter()
        try:
            extra = [*given, "--fail-fast", "--deadline", str(deadline)]
            code, found = reported(copy, extra, report, timeout=timeout)
            findings = new_findings(found, known)
            outcome, strict = verdicts(code, findings)
            result = {**job, "outcome": outcome, "strict": strict, "new": findings}
            if unmutated is not None:
                # no baselines there: what both copies do alike is no change (and --first-failure
                # would stop at a tolerated finding)
                result |= compared(
                    copy, options, unmutated, strict, deadline=deadline, timeout=timeout, report=report
                )
        finally:
            path.write_text(original)
        seconds = round(time.perf_counter() - started, 1)
        results.append({**result, "seconds": seconds, "diff": diff_of(original, mutated)})
        where = f"{job['file'].rsplit('/', 1)[-1]} {job['function']} line {job['line']}"
        shown = outcome if strict == outcome else f"{outcome} (--strict: {strict})"
        if unmutated is not None and result["against"] != strict:
            shown += f" (--against: {result['against']})"
        progress = f"[{copy.name} {len(results)}/{len(jobs)}]"
        print(
            f"{progress} {where} ({job['operator'][5:]}): {shown} in {seconds} s",
            flush=True,
        )
    return results


def diff_of(original: str, mutated: str) -> str:
    lines = difflib.unified_diff(original.splitlines(True), mutated.splitlines(True), n=0)
    return "".join(lines).split("\n", 2)[-1]  # without the file header lines


def verdict_keys(against: bool) -> tuple[str, ...]:
    """The verdicts a mutant gets: rules-only, under ``--strict``, and ``--against`` in that mode."""
    return ("outcome", "strict", "against") if against else ("outcome", "strict")


def earlier_survivors(path: str, key: str) -> set[tuple[str, str, int]]:
    """``(file, operator, occurrence)`` of an earlier run's survivors (its list or its object)."""
    earlier = json.loads(Path(path).read_text())
    mutants = earlier["mutants"] if isinstance(earlier, dict) else earlier
    return {
        (m.get("file", SGLANG_RULES), m["operator"], m["occurrence"])
        for m in mutants
        if m.get(key, m["outcome"]) == SURVIVED
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--engine", choices=sorted(ENGINES), help="default: sglang, or the one --release names"
    )
    parser.add_argument(
        "--release", help="X or ENGINE==X (defaults: sglang==0.5.23, vllm==0.33.0), fetched into the cache"
    )
    parser.add_argument(
        "--file", action="append", metavar="PATH",
        help="a file of the release to mutate (repeatable); default:"
        f" {SGLANG_RULES} (else {SGLANG_OLD_RULES}) for SGLang, {len(VLLM_FILES)} files for vLLM",
    )  # fmt: skip
    parser.add_argument(
        "--function", action="append", help="only mutants inside these functions (NAME or Class.method;"
        " replaces each file's default set of driven functions)",
    )  # fmt: skip
    parser.add_argument(
        "-n", "--workers", type=count, default="auto", help="copies checked at once, or auto (one per core)"
    )
    parser.add_argument("--limit", type=int, help="only the first N mutants reached (a quick look)")
    parser.add_argument(
        "--sample", type=int, metavar="N",
        help="N mutants reached, drawn at random (--sample-seed): an unbiased estimate of the score"
        " in a fixed time, with its 95%% interval",
    )  # fmt: skip
    parser.add_argument("--sample-seed", type=int, default=0, help="the --sample draw (default 0)")
    parser.add_argument(
        "--baseline-seeds", type=int, default=2, metavar="K",
        help="baselines: the CI profile and --seed 1..K (default 2)",
    )  # fmt: skip
    parser.add_argument(
        "--deadline", type=float, default=DEADLINE_S, help="seconds per case in a mutant's run"
    )
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per mutant's whole run")
    parser.add_argument(
        "--all-lines", action="store_true", help="run mutants on lines the CI run never reaches"
    )
    parser.add_argument("--json", help="write the baselines and every mutant's outcome here")
    parser.add_argument(
        "--strict", action="store_true",
        help="survivors (and --survivors-of) by the strict verdict; both kill rates are always shown",
    )  # fmt: skip
    parser.add_argument(
        "--against", action="store_true",
        help="check each mutant the rules leave alive against the unmutated copy as well: killed by any"
        " change (another path, encoder pattern, refusal message, ...); survivors and --survivors-of by"
        " that verdict; the rules-only kill rates are shown beside it",
    )  # fmt: skip
    parser.add_argument(
        "--survivors-of", metavar="JSON", help="only the mutants that survived in an earlier run's --json"
    )
    parser.add_argument(
        "--checks", metavar="IDS", help="the checks run (mmharness check --checks; default all)"
    )
    parser.add_argument("--max-examples", type=int, metavar="N", help="examples per check of every run")
    parser.add_argument(
        "--no-shrink",
        action="store_true",
        help="every run (the baselines' too) reports its findings unshrunk (mmharness check --no-shrink):"
        " a third to a half of the time, the verdicts of a search that draws other cases",
    )
    args = parser.parse_args(argv)
    try:
        engine, version = parse_release(args.release, args.engine)
    except ValueError as error:
        parser.error(str(error))
    key = "against" if args.against else "strict" if args.strict else "outcome"
    options = ["--checks", args.checks] if args.checks else []
    options += ["--max-examples", str(args.max_examples)] if args.max_examples else []
    options += ["--no-shrink"] if args.no_shrink else []

    release = Path(importlib.import_module(f"mmharness.engines.{engine}.adapter").fetch(version))
    files = args.file or default_files(engine, release)
    for name in files:
        if not (release / name).is_file():
            parser.error(f"{engine}=={version} has no {name} (under {release})")
        if args.function is None and name not in DRIVEN:
            print(f"note: no default function set for {name}: every function is mutated (give --function)")
    jobs = []
    for name in files:
        wanted = args.function if args.function is not None else DRIVEN.get(name, EVERY)
        jobs += mutations(release / name, name, wanted, bare=args.function is not None)
        present = {f for f, _, _ in functions_of((release / name).read_text())}
        absent = sorted(set(wanted or ()) - present - {w.rsplit(".", 1)[-1] for w in present})
        if absent and args.function is not None:
            print(f"note: {name} has no {', '.join(absent)}")
    if args.survivors_of:
        alive = earlier_survivors(args.survivors_of, key)
        jobs = [job for job in jobs if (job["file"], job["operator"], job["occurrence"]) in alive]

    with tempfile.TemporaryDirectory(prefix="mmharness-mutation-") as scratch:
        workdir = Path(scratch)
        copies = [workdir / f"copy{k}" for k in range(args.workers)]
        for copy in copies:
            shutil.copytree(release, copy)
        unmutated = None
        if args.against:  # the known-good target of every --against run: a copy no worker mutates
            unmutated = str(workdir / "unmutated")
            shutil.copytree(release, unmutated)
        seeds = [None, *range(1, args.baseline_seeds + 1)]
        outs = [workdir / ("baseline-ci.json" if s is None else f"baseline-seed{s}.json") for s in seeds]
        print(f"{engine}=={version}: baselines of the unmutated copy (ci, seeds 1..{args.baseline_seeds})")
        with ProcessPoolExecutor(max_workers=args.workers) as pool:
            runs = list(pool.map(
                run_baseline, [copies[k % len(copies)] for k in range(len(seeds))], seeds, outs,
                [files] * len(seeds), [args.timeout * 10] * len(seeds), [options] * len(seeds),
            ))  # fmt: skip
        usable = [str(out) for run, out in zip(runs, outs, strict=True) if Path(out).is_file()]
        if len(usable) < len(runs) or runs[0]["exit"] not in (0, 1, 3):
            print("a baseline run of the unmutated copy did not report; see above", file=sys.stderr)
            return 2
        lines = {name: set(seen) for name, seen in runs[0]["lines"].items()}
        skipped = []
        if not args.all_lines:
            skipped = [
                {**job, **dict.fromkeys(verdict_keys(args.against), NOT_REACHED)}
                for job in jobs
                if not reached(job, lines.get(job["file"], set()))
            ]
            jobs = [job for job in jobs if reached(job, lines.get(job["file"], set()))]
        jobs = jobs[: args.limit] if args.limit else jobs
        if args.sample and args.sample < len(jobs):
            drawn = sorted(random.Random(args.sample_seed).sample(range(len(jobs)), args.sample))
            print(f"a sample of {args.sample} of the {len(jobs)} mutants reached (seed {args.sample_seed})")
            jobs = [jobs[k] for k in drawn]
        shown = ", ".join(files)
        print(f"{len(jobs)} mutants of {shown} ({len(skipped)} not reached), {args.workers} workers")
        shares = [jobs[k :: args.workers] for k in range(args.workers)]
        count_ = len(copies)
        with ProcessPoolExecutor(max_workers=args.workers) as pool:
            parts = pool.map(
                run_worker,
                copies,
                shares,
                [usable] * count_,
                [args.deadline] * count_,
                [args.timeout] * count_,
                [options] * count_,
                [unmutated] * count_,
            )
            results = [r for part in parts for r in part]
    order = {(j["file"], j["operator"], j["occurrence"]): k for k, j in enumerate(jobs)}
    results.sort(key=lambda r: order[(r["file"], r["operator"], r["occurrence"])])
    baselines = [{k: v for k, v in run.items() if k not in ("report", "lines")} for run in runs]
    report(results, skipped, baselines, key=key, sampled=bool(args.sample))
    if args.json:
        document = {
            "format": FORMAT, "engine": engine, "release": version, "files": files,
            "functions": args.function, "baseline_seeds": args.baseline_seeds, "baselines": baselines,
            "deadline": args.deadline, "timeout": args.timeout, "limit": args.limit,
            "sample": args.sample, "sample_seed": args.sample_seed, "against": args.against,
            "checks": args.checks, "max_examples": args.max_examples, "shrink": not args.no_shrink,
            "mutants": results + skipped,
        }  # fmt: skip
        Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
    return 0


def wilson(killed: int, counted: int) -> tuple[float, float]:
    """The 95 % Wilson interval of a sampled kill rate (sound near 0 % and 100 %)."""
    if not counted:
        return 0.0, 1.0
    z, p = 1.96, killed / counted
    centre = (p + z * z / (2 * counted)) / (1 + z * z / counted)
    half = z * math.sqrt(p * (1 - p) / counted + z * z / (4 * counted * counted)) / (1 + z * z / counted)
    return max(0.0, centre - half), min(1.0, centre + half)


def report(
    results: list[dict], skipped: list[dict], baselines: list[dict], *, key: str, sampled: bool = False
) -> None:
    """Kill rates per file and function (plain, --strict and, in that mode, --against), then the survivors
    by ``key`` (one of ``verdict_keys``) with their diffs."""
    keys = verdict_keys(key == "against")
    for run in baselines:
        depth = sorted(set(run["examples"].values()) - {None})
        print(f"baseline {run['search']}: exit {run['exit']}, examples per check {depth}")
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for mutant in [*results, *skipped]:
        groups[(mutant["file"], mutant["function"])].append(mutant)
    columns = (
        "killed",
        "of",
        "score",
        "strict",
        "score",
        *(("against", "score") if key == "against" else ()),
    )
    header = f"{'file / function':<60} " + " ".join(
        f"{c:>{max(len(c), 7) if c != 'of' else 4}}" for c in (*columns, "unreached")
    )
    print(f"\n{header}")
    for file in sorted({f for f, _ in groups}):
        print(file)
        for (owner, name), mutants in sorted(groups.items()):
            if owner == file:
                print(_line(f"  {name}", mutants, keys))
        print(_line("  (file)", [m for (owner, _), ms in groups.items() if owner == file for m in ms], keys))
    print(_line("all", [*results, *skipped], keys))
    if sampled:
        for shown in keys:
            low, high = wilson(*score(results, shown))
            label = {"outcome": "plain", "strict": "--strict", "against": "--against"}[shown]
            print(f"95% interval of the {label} score over every mutant reached: {low:.1%} to {high:.1%}")
    errors = [r for r in results if any(r[k].startswith("error") for k in keys)]
    if errors:
        print(f"\n{len(errors)} mutant(s) whose run ended in an error (not counted):")
        for r in errors:
            shown = next(r[k] for k in keys if r[k].startswith("error"))
            print(f"  {r['file']} {r['function']} line {r['line']} ({r['operator']}): {shown}")
    deadline_only = [
        r for r in results if r["outcome"] == KILLED and r.get("new")
        and all(f["signature"] == "did not finish in N s" for f in r["new"])
    ]  # fmt: skip
    if deadline_only:
        print(f"\n{len(deadline_only)} kill(s) by the per-case deadline alone")
    label = {"outcome": "", "strict": " under --strict", "against": " under --against"}[key]
    print(f"\nsurvivors{label}:")
    for r in results:
        if r[key] == SURVIVED:
            print(
                f"--- {r['file']} {r['function']} line {r['line']} ({r['operator']}),"
                f" occurrence {r['occurrence']}"
            )
            print(r["diff"].rstrip())
    if key == "outcome":
        caught = [r for r in results if r["outcome"] == SURVIVED and r["strict"] == KILLED]
        for r in caught:
            kinds = sorted({f"{f['check']}: {f['signature']}" for f in r["new"]})
            print(f"  (line {r['line']} {r['operator'][5:]} is killed under --strict: {'; '.join(kinds)})")
    if key == "against":
        caught = [r for r in results if r["strict"] == SURVIVED and r["against"] == KILLED]
        if caught:
            print(f"\nkilled by --against only ({len(caught)}), each with its first change:")
        for r in caught:
            first = r["changes"][0]
            print(
                f"--- {r['file']} {r['function']} line {r['line']} ({r['operator']}),"
                f" occurrence {r['occurrence']}: {first['check']}: {first['signature']}"
            )
            print(r["diff"].rstrip())


def _line(label: str, mutants: list[dict], keys: tuple[str, ...]) -> str:
    """One row: killed, counted and score for each verdict in ``keys``, then the mutants not reached."""
    figures = []
    for k, verdict in enumerate(keys):
        killed, counted = score(mutants, verdict)
        rate = f"{killed / counted:>7.1%}" if counted else f"{'-':>7}"
        figures += [f"{killed:>7}", *([f"{counted:>4}"] if k == 0 else []), rate]
    unreached = sum(m["outcome"] == NOT_REACHED for m in mutants)
    return f"{label:<60} {' '.join(figures)} {unreached:>9}"


if __name__ == "__main__":
    raise SystemExit(main())
