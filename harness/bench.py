"""``mmharness bench``: how fast the harness is, each figure beside a baseline measured in the same run.

The machines this runs on are shared and noisy, so a figure alone says little:
each speed comes with the baseline it is measured against in the same process
(or the same minute), and the ratio is what to read.

- cases/s and examples/s of each differential check, against the reference and
  a loaded release, beside the hand-written property a maintainer would write
  instead (``benchmarks/handwritten_property.py``; skipped where the package is
  installed without its checkout);
- ``check`` of one release with one worker and with N;
- the atlas (``matrix``) over the releases in the cache, with N workers;
- execs/s of the case parser and of the target engine's fuzz targets (atheris, bounded by time;
  another engine's fuzzers cannot load this release, so they are skipped with a note);
- a warm load of the release, and ``mmharness --help``, beside a bare ``python -c pass``.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

FORMAT = "mmharness.bench/1"
CHECKS = (
    "chunk.matches_reference",
    "precomputed.matches_reference",
    "prefill.matches_reference",
    "prefill.encoder_calls",
    "prefill.cache_independent",
    "prefill.path_independent",
    "count.matches_reference",
    "embed_mask.matches_reference",
)
"""The differential and metamorphic checks of one drawn case: their cases/s is comparable."""
CHECKOUT = Path(__file__).resolve().parent.parent
HANDWRITTEN = CHECKOUT / "benchmarks" / "handwritten_property.py"
KNOWN_FUZZ_FINDINGS = CHECKOUT / "corpus" / "fuzz-baseline.json"


@dataclass
class Figure:
    name: str
    value: float
    unit: str
    baseline: str = ""
    """What the figure is measured against (in the same run), if anything."""
    ratio: float | None = None
    """``value`` over the baseline's value (higher is better for rates, lower for times)."""
    note: str = ""


def _handwritten(target: Any, examples: int) -> float | None:
    """Cases/s of the hand-written property, or ``None`` without the checkout's benchmarks/."""
    if not HANDWRITTEN.is_file() or not hasattr(target, "functions"):
        return None
    spec = importlib.util.spec_from_file_location("mmharness_bench_handwritten", HANDWRITTEN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.cases_per_second(target, examples)


def check_speeds(spec: str, examples: int) -> list[Figure]:
    """Cases/s and examples/s per check on the reference and on ``spec``, against the hand-written one:
    the search's pace, so nothing is shrunk (shrinking draws no new case; ``run_check(shrink=False)``)."""
    from mmharness.checks import all_checks
    from mmharness.runner import run_check
    from mmharness.targets.specs import resolve

    checks = all_checks()
    release = resolve(spec)
    baseline = _handwritten(release, examples)
    figures = []
    if baseline is not None:
        figures.append(Figure(f"hand-written chunk property on {spec}", baseline, "cases/s"))
    against = "hand-written" if baseline else ""
    for target_spec, target in (("reference", resolve("reference")), (spec, release)):
        for check_id in CHECKS:
            began = time.perf_counter()
            result = run_check(
                checks[check_id], target, profile="dev", max_examples=examples, seed=0, shrink=False
            )
            seconds = time.perf_counter() - began
            cases = result.cases_run / seconds
            ratio = cases / baseline if baseline else None
            name = f"{check_id} on {target_spec}"
            note = f"{result.examples_run / seconds:.0f} examples/s; {result.status}"
            figures.append(Figure(name, cases, "cases/s", against, ratio, note))
    return figures


def check_times(spec: str, workers: int) -> list[Figure]:
    """Seconds of ``mmharness check`` on one release with one worker and with ``workers``."""
    serial = _seconds([sys.executable, "-m", "mmharness.cli", "check", "--target", spec, "-n", "1"])
    figures = [Figure(f"check {spec}, 1 worker", serial, "s")]
    if workers > 1:
        parallel = _seconds(
            [sys.executable, "-m", "mmharness.cli", "check", "--target", spec, "-n", str(workers)]
        )
        figures.append(
            Figure(f"check {spec}, {workers} workers", parallel, "s", "1 worker", parallel / serial)
        )
    return figures


def atlas_time(spec: str, workers: int) -> list[Figure]:
    """Seconds of the matrix over every cached release of ``spec``'s engine, with ``workers``."""
    from mmharness.targets.releases import cached

    releases = cached(spec.partition("==")[0])
    if not releases:
        return [Figure("atlas over the cached releases", 0, "s", note="no release in the cache")]
    # Each release loaded once first: a release's first load compiles its engine files into the cache,
    # a one-time cost (a third of the atlas's time just after the downloads) that is not the atlas's.
    _seconds([sys.executable, "-c", _LOAD_EACH, *releases])
    command = [sys.executable, "-m", "mmharness.cli", "matrix", "-n", str(workers)]
    for spec in releases:
        command += ["--target", spec]
    seconds = _seconds(command)
    return [Figure(f"atlas over {len(releases)} cached releases, {workers} workers", seconds, "s")]


_LOAD_EACH = """
import sys
from mmharness.targets.base import TargetError
from mmharness.targets.specs import resolve
for spec in sys.argv[1:]:
    try:
        resolve(spec)
    except TargetError:  # the matrix reports it
        pass
"""


LIBFUZZER_RATE = re.compile(r"stat::average_exec_per_sec:\s*(\d+)")


def engine_of(target: Any) -> str | None:
    """The shipped engine package (``mmharness.engines.sglang``...) a loaded target belongs to, if any."""
    from mmharness.targets.specs import engine_packages

    module = type(target).__module__
    return next((engine for engine in engine_packages() if module.startswith(f"{engine}.")), None)


def fuzz_plan(engine: str | None) -> tuple[list[str], dict[str, str]]:
    """The fuzz targets to measure against a target of ``engine`` (the case parser, then that engine's),
    and each other engine's target with why it is skipped: an engine's fuzzers load only its own releases."""
    from mmharness.fuzz.registry import CASE_PARSER, by_engine

    measured, skipped = [CASE_PARSER], {}
    for package, parsers in by_engine().items():
        for parser in parsers:
            if package == engine:
                measured.append(parser)
            else:
                name = package.rpartition(".")[2]
                skipped[parser] = f"skipped: a {name} fuzz target, and the target is not {name}"
    return measured, skipped


def fuzz_rates(spec: str, seconds: int, *, engine: str | None) -> list[Figure]:
    """Execs/s of the case parser and of each fuzz target of ``engine`` (``engine_of`` the loaded ``spec``),
    ``seconds`` each (libFuzzer's own figure), known findings let through; other engines' are skipped."""
    if importlib.util.find_spec("atheris") is None:
        missing = "atheris is not installed (pip install 'mmharness[fuzz]')"
        return [Figure("fuzz targets", 0, "execs/s", note=missing)]
    from mmharness.fuzz.registry import CASE_PARSER

    measured, skipped = fuzz_plan(engine)
    figures = []
    for parser in measured:
        on_target = parser != CASE_PARSER
        command = [sys.executable, "-m", "mmharness.cli", "fuzz", parser]
        if on_target:
            command += ["--target", spec]
        if KNOWN_FUZZ_FINDINGS.is_file():
            command += ["--baseline", str(KNOWN_FUZZ_FINDINGS)]
        command += ["--", f"-max_total_time={seconds}", "-print_final_stats=1", "-seed=1"]
        with tempfile.TemporaryDirectory(prefix="mmharness-bench-") as scratch:
            # findings, crash files and whatever the run puts in temporary files stay in here
            env = {**os.environ, "MMHARNESS_FINDINGS": scratch, "TMPDIR": scratch}
            run = subprocess.run(command, capture_output=True, text=True, check=False, env=env, cwd=scratch)
        found = LIBFUZZER_RATE.search(run.stderr)
        rate = float(found.group(1)) if found else 0.0
        note = "" if run.returncode == 0 else f"stopped early (exit {run.returncode}): a new finding?"
        if run.returncode == 2:  # a usage error: say which
            note = f"could not run (exit 2): {_last_line(run.stderr)}"
        name = f"fuzz {parser}" + (f" on {spec}" if on_target else "")
        figures.append(Figure(name, rate, "execs/s", note=note))
    figures += [Figure(f"fuzz {parser}", 0, "execs/s", note=why) for parser, why in skipped.items()]
    return figures


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no message"


def start_times(spec: str) -> list[Figure]:
    """A warm load of the release and ``--help``, in fresh processes, each beside what it cannot avoid:
    importing torch for the load, a bare interpreter for ``--help`` (which never imports torch)."""
    load = f"from mmharness.targets.specs import resolve; resolve({spec!r})"
    pairs = (
        (
            f"load {spec} (warm cache)",
            [sys.executable, "-c", load],
            "python -c 'import torch'",
            "import torch",
        ),
        ("mmharness --help", [sys.executable, "-m", "mmharness.cli", "--help"], "python -c pass", "pass"),
    )
    figures = []
    for name, command, baseline, code in pairs:
        seconds = min(_seconds(command) for _ in range(3))
        floor = min(_seconds([sys.executable, "-c", code]) for _ in range(3))
        figures.append(Figure(name, seconds, "s", baseline, seconds / floor))
    return figures


def _seconds(command: list[str]) -> float:
    began = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - began


def machine() -> dict[str, Any]:
    import torch

    return {
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
    }


def run(
    spec: str,
    *,
    workers: int,
    examples: int,
    fuzz_seconds: int,
    engine: str | None,
    atlas: bool,
    shown: Callable[[Figure], None] = lambda figure: None,
) -> dict[str, Any]:
    """Every figure, each passed to ``shown`` as soon as it is measured; the JSON document.

    ``engine`` is the engine package of ``spec``'s target (``engine_of``): only its fuzz targets run.
    """
    figures: list[Figure] = []
    parts: list[Callable[[], list[Figure]]] = [
        lambda: check_speeds(spec, examples),
        lambda: check_times(spec, workers),
        *([lambda: atlas_time(spec, workers)] if atlas else []),
        lambda: fuzz_rates(spec, fuzz_seconds, engine=engine),
        lambda: start_times(spec),
    ]
    for part in parts:
        for figure in part():
            figures.append(figure)
            shown(figure)
    return {
        "format": FORMAT,
        "machine": machine(),
        "workers": workers,
        "figures": [asdict(f) for f in figures],
    }


def line(figure: Figure) -> str:
    """One figure as a line of text."""
    value = f"{figure.value:,.0f}" if figure.unit != "s" else f"{figure.value:.2f}"
    text = f"{figure.name:<58} {value:>9} {figure.unit}"
    if figure.ratio is not None:
        text += f"  ({figure.ratio:.2f}x {figure.baseline})"
    if figure.note:
        text += f"  [{figure.note}]"
    return text
