"""atheris entry point for the checks: ``mmharness fuzz check:ID --target SPEC``.

The check's Hypothesis test, built as the runner builds it (``mmharness.runner.fuzz_target``), is
driven by libFuzzer's bytes through Hypothesis's ``fuzz_one_input``. The coverage that guides the
fuzzer is the engine's only: the functions of the target's loaded engine files (``describe()``'s
``files``; a target with none, its ``source`` unless that is the harness's reference) are
instrumented once the target is loaded. Hypothesis, the strategies, the check and the reference
are not, so an input is kept for reaching new engine branches and nothing else.

A failing example is saved to an example database in memory; the check is then run by
``run_check`` on that database, which replays it and shrinks it into an ordinary ``Result``. Its
findings are saved under the findings directory as ``mmharness check`` saves them (``Session.keep``)
and printed with their ``reproduce with: mmharness replay ...`` line, before the exception goes on
to libFuzzer, which writes its crash file and ends the run. A finding whose signature the
baseline knows passes; a hazard or could-not-test passes too (reported once) unless ``strict``.
"""

from __future__ import annotations

import gc
import sys
import types
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from mmharness.fuzz.registry import CHECK_PREFIX

DEVICE = "cpu"
BUNDLED_BASELINE = "fuzz-check-baseline.json"
"""The release's known findings in a ClusterFuzzLite bundle (written by ``build.sh`` at build time)."""


class CheckFailed(Exception):
    """Raised to libFuzzer for a check's finding, once it is shrunk and saved (a crash to it)."""


def check_id(name: str) -> str:
    """``check:ID`` -> ``ID``."""
    return name.removeprefix(CHECK_PREFIX)


def coverage_files(target: Any) -> list[str]:
    """The engine files whose functions guide the fuzzer: the target's loaded files (as ``check
    --coverage`` measures them), else its ``source`` file when that is not the harness's reference."""
    from mmharness import reference
    from mmharness.reach import engine_files

    files = engine_files(target)
    if files:
        return files
    source = target.describe().get("source")
    if isinstance(source, str) and source.endswith(".py") and Path(source).is_file():
        resolved = Path(source).resolve()
        if resolved != Path(reference.__file__).resolve():
            return [str(resolved)]
    return []


def instrument(files: Collection[str]) -> int:
    """Instrument (atheris) every live function whose code is in one of ``files``, with the code
    nested in it (lambdas, comprehensions, inner functions); how many. The engine files are loaded
    by path (``mmharness.targets.loader``), past atheris's import hook, so their functions are
    patched in place once loaded."""
    import atheris

    wanted = {str(Path(f).resolve()) for f in files}
    resolved: dict[str, bool] = {}

    def inside(filename: str) -> bool:
        if filename not in resolved:
            try:
                resolved[filename] = str(Path(filename).resolve()) in wanted
            except (OSError, ValueError):
                resolved[filename] = False
        return resolved[filename]

    functions = [
        obj
        for obj in gc.get_objects()
        if type(obj) is types.FunctionType and inside(obj.__code__.co_filename)
    ]
    done = 0
    for function in functions:
        if getattr(function, "__mm_instrumented__", False):
            continue
        atheris.instrument_func(function)
        function.__mm_instrumented__ = True
        done += 1
    return done


def describe(name: str, target: Any) -> dict[str, Any]:
    """What ``mmharness fuzz check:ID --target SPEC --describe`` shows: the check, the files whose
    coverage guides the fuzzer, and the target's description."""
    from mmharness.checks import all_checks

    check = all_checks()[check_id(name)]
    return {
        "fuzz target": name,
        "check": f"{check.id} (rule {check.rule}): {check.doc}",
        "coverage from": coverage_files(target) or "nothing (no engine files: the fuzzer gets no feedback)",
        **target.describe(),
    }


def main(
    argv: Sequence[str],
    *,
    check: str,
    target: Any,
    spec: str,
    known: Collection[str] = (),
    strict: bool = False,
    findings: Path | None = None,
    deadline: float | None = None,
) -> None:
    """Fuzz the check ``check`` (an id) on ``target`` (loaded from ``spec``, which it can run);
    ``known``: signatures that pass (a baseline's); ``findings``: where findings are saved
    (default: ``mmharness.fuzz.findings_dir()``)."""
    import atheris
    from hypothesis.database import InMemoryExampleDatabase
    from mmharness.checks import all_checks
    from mmharness.fuzz import findings_dir
    from mmharness.runner import fuzz_target

    the_check = all_checks()[check]
    loaded = target
    files = coverage_files(loaded)
    count = instrument(files)
    print(
        f"mmharness: fuzzing {the_check.id} on {spec}: coverage from {count} functions of"
        f" {len(files)} engine file(s)" + ("" if files else " (none: the fuzzer gets no feedback)"),
        file=sys.stderr,
    )
    database = InMemoryExampleDatabase()
    passing = set(known)
    one = fuzz_target(the_check, loaded, device=DEVICE, deadline=deadline, database=database, known=passing)
    where = findings or findings_dir()

    def test_one_input(data: bytes) -> None:
        failure = one(data)
        if failure is None:
            return
        from mmharness.runner import fails_run

        if not fails_run(failure.kind, strict=strict):
            passing.add(failure.signature)
            print(
                f"mmharness: {failure.kind} (not a finding without --strict), going on: {failure.signature}",
                file=sys.stderr,
            )
            return
        report_finding(the_check, loaded, spec, failure, database, where, deadline=deadline)
        raise CheckFailed(f"{the_check.id} on {spec}: {failure.kind}: {failure.message}")

    atheris.Setup(list(argv), test_one_input)
    atheris.Fuzz()


def report_finding(
    check: Any,
    target: Any,
    spec: str,
    failure: Any,
    database: Any,
    findings: Path,
    *,
    deadline: float | None = None,
) -> Any:
    """Shrink the fuzzer's failing example (``run_check`` replays it from ``database``), save each
    finding as ``check`` does and print it with its replay command; the ``Result``.

    Where the replay does not fail again (a flaky target), the example is saved as the fuzzer found it.
    """
    from mmharness.runner import Finding, Result, run_check, status_of
    from mmharness.session import Session
    from mmharness.views import console

    print(f"mmharness: {check.id} failed on {spec}: {failure.message}; shrinking", file=sys.stderr)
    result = run_check(check, target, profile="dev", max_examples=1, database=database, deadline=deadline)
    if not result.findings:
        finding = Finding(
            failure.kind,
            failure.signature,
            failure,
            failure.example,
            None,
            shrunk=False,
            unshrunk="case as the fuzzer found it (its replay passed: not shrunk)",
        )
        findings_ = [finding]
        result = Result(
            check, status_of(findings_), DEVICE, failure.message, findings_, 1, deadline=result.deadline
        )
    Session(target, spec, findings=findings).keep(result)
    for finding in result.findings:
        print("\n" + console.finding_details(result, finding, spec) + "\n", file=sys.stderr, flush=True)
    return result


def runnable(spec: str) -> list[str]:
    """The ids of the checks the target ``spec`` can run on CPU (what ClusterFuzzLite builds for it)."""
    from mmharness.checks import all_checks
    from mmharness.runner import not_run
    from mmharness.targets.specs import resolve

    target = resolve(spec)
    return [check.id for check in all_checks().values() if not_run(check, target, DEVICE) is None]


def bundled_main(check: str, spec: str) -> None:
    """The entry point of a ClusterFuzzLite build of ``check:ID`` on ``spec`` (a script per check,
    generated by ``.clusterfuzzlite/build.sh``). Packaged by ``compile_python_fuzzer``, the releases
    fetched at build time ship in the bundle (``sys._MEIPASS``); run from a checkout, they come from
    the cache. So does the release's baseline (``BUNDLED_BASELINE``, from a search at build time):
    without it a fuzzer would stop at a finding the release is known for instead of looking further."""
    import os

    from mmharness.targets.specs import resolve

    bundle = getattr(sys, "_MEIPASS", None)
    if bundle is not None:
        os.environ.setdefault("MMHARNESS_CACHE", str(Path(bundle) / "mmharness-cache"))
    target = resolve(spec)
    baseline = Path(bundle or "") / BUNDLED_BASELINE
    known = known_signatures(str(baseline), check, target, spec) if bundle and baseline.is_file() else set()
    main(sys.argv, check=check, target=target, spec=spec, known=known)


def known_signatures(path: str, check_id: str, target: Any, spec: str) -> set[str]:
    """The signatures of ``check_id``'s findings on CPU that the baseline ``path`` holds for this target
    (a ``check --write-baseline`` file or a ``--json`` report); ``ValueError`` naming the file where it
    cannot be used, or where it tolerates every finding of the check (nothing would be left to fuzz for)."""
    from mmharness import baseline

    known = baseline.load(path, baseline.identity(target, spec))
    entries = [e for e in known.entries if e.check == check_id and e.device == DEVICE]
    if any(e.signature is None for e in entries):
        raise ValueError(f"{path}: it tolerates every finding of {check_id}: nothing to fuzz for")
    return {e.signature for e in entries}
