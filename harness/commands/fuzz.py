"""``mmharness fuzz``: a parser, or a check against a target (``check:ID``), fuzzed with atheris,
every option (libFuzzer's integer flags too) checked first, the fuzzer in a supervised child process
(``mmharness.fuzz.supervised``); ``mmharness fuzz --list``: every fuzz target with its engine, one a
line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from mmharness.commands.listing import print_description
from mmharness.commands.options import (
    INT_MAX,
    PASSED_EXIT,
    USAGE_ERROR,
    UsageError,
    apply_env,
    engine_option,
    env_option,
    findings_option,
    writable,
)
from mmharness.fuzz.registry import CASE_PARSER, CHECK_PREFIX, fuzz_parsers, listing


def add_parser(sub) -> None:
    fuzz = sub.add_parser(
        "fuzz",
        help="fuzz a parser, or a check on a target (check:ID), with atheris (libFuzzer arguments after --)",
        usage=(
            "mmharness fuzz {PARSER | check:ID | --list} [--target SPEC] [--engine NAME] [--env NAME=VALUE]"
            " [--corpus DIR]"
            " [--baseline FILE] [--strict] [--findings DIR] [--describe] [-- LIBFUZZER_ARGS...]"
        ),
    )
    fuzz.add_argument(
        "parser",
        nargs="?",
        metavar="PARSER | check:ID",
        help=f"one of {', '.join(sorted(fuzz_parsers()))}; or check:ID, a check (`mmharness checks`)"
        " run on --target with coverage of the target's engine files guiding the search",
    )
    fuzz.add_argument(
        "--list",
        action="store_true",
        help="list every fuzz target and its engine (case-parser's: -), one a line, then exit",
    )
    fuzz.add_argument(
        "--target",
        metavar="SPEC",
        help="engine parsers: a release (ENGINE==X) or a path to one (default: the engine's newest tested);"
        " check:ID: any target `mmharness check` takes (default: reference); case-parser ignores it",
    )
    engine_option(fuzz)
    env_option(fuzz)
    fuzz.add_argument(
        "--corpus",
        metavar="DIR",
        help="seed inputs (default: corpus/PARSER when it exists); new inputs go to a scratch dir",
    )
    fuzz.add_argument(
        "--baseline",
        metavar="FILE",
        help="known findings (e.g. corpus/fuzz-baseline.json): reported once, not fatal; check:ID: a"
        " `check --write-baseline` file or a --json report, whose findings of the check on the target pass",
    )
    fuzz.add_argument(
        "--strict",
        action="store_true",
        help="engine parsers: a ValueError/TypeError that Python raised inside the parser is a finding too;"
        " check:ID: hazards and could-not-test are findings too, as for `check --strict`",
    )
    fuzz.add_argument(
        "--findings",
        metavar="DIR",
        help="where findings and libFuzzer's crash files go (default: ./findings or $MMHARNESS_FINDINGS)",
    )
    fuzz.add_argument(
        "--describe",
        action="store_true",
        help="engine parsers and checks: show the loaded target (release, files, functions, stubs); exit"
        " (a check that cannot run on it exits as a run would: 4 skipped, 3 could not test)",
    )


def run(args: argparse.Namespace) -> int:
    if args.list:
        rows = listing()
        width = max(24, *(len(name) for name, _ in rows))
        for name, engine in rows:
            print(f"{name:<{width}} {engine}")
        return 0
    if args.parser is None:
        raise UsageError("fuzz: give a PARSER or check:ID (`mmharness fuzz --list` lists them)")
    _known_fuzz_target(args.parser)
    apply_env(args)
    from mmharness.fuzz import FINDINGS_ENV, findings_dir

    saved = os.environ.get(FINDINGS_ENV)
    if args.findings:  # the fuzz guard reads it from the environment; put it back for a caller in-process
        os.environ[FINDINGS_ENV] = args.findings
    try:
        with _removed_if_left_empty(findings_dir()):
            if args.parser.startswith(CHECK_PREFIX):
                return _run_check_fuzzer(args)
            return _run_fuzzer(args)
    finally:
        if saved is None:
            os.environ.pop(FINDINGS_ENV, None)
        else:
            os.environ[FINDINGS_ENV] = saved


@contextmanager
def _removed_if_left_empty(directory: Path) -> Iterator[None]:
    """libFuzzer needs its artifact directory before it writes a crash there, so the run makes it; one
    this run made and left empty is removed: a run that wrote nothing leaves no empty ``./findings``."""
    existed = directory.exists()
    try:
        yield
    finally:
        if not existed:
            with suppress(OSError):  # not empty (a finding was written), or never made
                directory.rmdir()


def _known_fuzz_target(name: str) -> None:
    """A name ``--list`` lists, else a usage error naming the choices."""
    if name.startswith(CHECK_PREFIX):
        from mmharness.checks import all_checks

        if name.removeprefix(CHECK_PREFIX) not in all_checks():
            raise UsageError(f"fuzz: {name}: no such check (`mmharness checks` lists them)")
        return
    if name not in fuzz_parsers():
        choices = ", ".join(sorted(fuzz_parsers()))
        raise UsageError(f"fuzz: {name}: no such fuzz target; choose from {choices} or check:ID")


def _seed_corpus(parser: str) -> Path:
    """``corpus/PARSER`` of the current directory, else of the checkout the package runs from."""
    here = Path("corpus") / parser
    if here.is_dir():
        return here
    return Path(__file__).resolve().parents[2] / "corpus" / parser


INTEGER_FLAGS = (
    "-atheris_runs=",
    "-runs=",
    "-max_len=",
    "-seed=",
    "-max_total_time=",
    "-timeout=",
    "-jobs=",
    "-workers=",
    "-fork=",
    "-rss_limit_mb=",
    "-malloc_limit_mb=",
)
"""libFuzzer's (and atheris's) integer flags: each takes 0 to ``INT_MAX``, checked before the run."""


def _check_libfuzzer_args(args: list[str]) -> None:
    """libFuzzer's integer flags, checked here: atheris answers a bad one with a C++ traceback, and
    libFuzzer reads a negative one (or one past ``INT_MAX``, which wraps) as no bound at all."""
    for arg in args:
        flag = next((f for f in INTEGER_FLAGS if arg.startswith(f)), None)
        if flag is None:
            continue
        value = arg.removeprefix(flag)
        if not value.lstrip("-").isdigit():
            raise UsageError(f"{arg}: {flag[:-1]} takes an integer")
        if not 0 <= int(value) <= INT_MAX:
            raise UsageError(f"{arg}: {flag[:-1]} must be in [0, {INT_MAX}], got {value}")


def _run_fuzzer(args: argparse.Namespace) -> int:
    """Every option checked, then the fuzzer in a child process (``mmharness.fuzz.supervised``): its
    scratch directory, dictionary and temporary files are removed however libFuzzer ends it, and a
    SIGINT or SIGTERM answers 130 or 143 (libFuzzer's own answer would be 72)."""
    import importlib

    from mmharness.fuzz import FuzzBaseline, findings_dir, supervised
    from mmharness.targets.base import TargetError

    engine = args.parser != CASE_PARSER
    writable(findings_option(args.findings)[0], str(findings_dir()), directory=True)
    try:
        baseline = FuzzBaseline.load(args.baseline) if args.baseline else None
    except ValueError as error:
        raise UsageError(f"--baseline {error}") from None
    seeds = args.corpus or str(_seed_corpus(args.parser))
    if args.corpus and not Path(seeds).is_dir():
        raise UsageError(f"--corpus {seeds}: not a directory")
    _check_libfuzzer_args(args.passthrough)
    module = importlib.import_module(fuzz_parsers()[args.parser])
    target = args.target or (module.DEFAULT_TARGET if engine else None)
    if args.describe:
        if not engine:
            raise UsageError("--describe shows an engine parser's target; case-parser has none")
        try:
            print_description(module.describe(args.parser, target))
        except TargetError as error:
            raise UsageError(str(error)) from None
        return 0
    try:
        import atheris  # noqa: F401
    except ImportError:
        raise UsageError("fuzzing needs atheris: pip install 'mmharness[fuzz]'") from None
    libfuzzer, replaying = _libfuzzer_args(args.passthrough)

    def fuzz(scratch: Path) -> int:
        """In the child: new inputs go to ``scratch/corpus`` (libFuzzer writes into the first corpus
        dir, so the seeds stay clean); an engine parser writes its dictionary into ``scratch``."""
        corpus = scratch / "corpus"
        corpus.mkdir()
        dirs = [] if replaying else [str(corpus), *([seeds] if Path(seeds).is_dir() else [])]
        argv = [f"mmharness-fuzz-{args.parser}", *libfuzzer, *dirs]
        try:
            if not engine:
                module.main(argv, baseline=baseline)
            else:
                module.main(
                    argv,
                    parser=args.parser,
                    target=target,
                    baseline=baseline,
                    strict=args.strict,
                    scratch=scratch,
                )
        except TargetError as error:
            print(f"mmharness: error: {error}", file=sys.stderr)
            return USAGE_ERROR
        return PASSED_EXIT

    return supervised(f"mmharness-{args.parser}-", fuzz)


def _libfuzzer_args(passthrough: list[str]) -> tuple[list[str], bool]:
    """libFuzzer's arguments with the findings directory as its ``-artifact_prefix`` unless one is
    given; whether they name an input file (a replay: no corpus directories then)."""
    from mmharness.fuzz import findings_dir

    replaying = any(not arg.startswith("-") and Path(arg).is_file() for arg in passthrough)
    libfuzzer = list(passthrough)
    if not any(arg.startswith("-artifact_prefix=") for arg in libfuzzer):
        findings_dir().mkdir(parents=True, exist_ok=True)
        libfuzzer.insert(0, f"-artifact_prefix={findings_dir()}{os.sep}")
    return libfuzzer, replaying


CHECK_FLAGS = ("-max_len=1024", "-len_control=0")
"""libFuzzer's defaults for a check, unless given: Hypothesis draws a whole example from the input, and
the short inputs libFuzzer starts with (its length control) draw none, so the fuzzer saw no coverage."""


def _run_check_fuzzer(args: argparse.Namespace) -> int:
    """``check:ID``: the check on ``--target`` in the supervised child (``mmharness.fuzz.checks``).
    The target is loaded here, before the child starts, so one that does not load is a usage error;
    a check it cannot run answers as ``check`` would (4: nothing ran; 3: could not test)."""
    from mmharness.commands.options import COULD_NOT_TEST_EXIT, NOTHING_RAN, resolve_target
    from mmharness.fuzz import checks, findings_dir, supervised
    from mmharness.runner import SKIPPED, not_run

    check_id = checks.check_id(args.parser)
    spec = args.target or "reference"
    writable(findings_option(args.findings)[0], str(findings_dir()), directory=True)
    seeds = args.corpus or str(_seed_corpus(args.parser))
    if args.corpus and not Path(seeds).is_dir():
        raise UsageError(f"--corpus {seeds}: not a directory")
    _check_libfuzzer_args(args.passthrough)
    target = resolve_target(spec)
    if args.describe:  # then whether the check can run: a description of one that cannot is no success
        print_description(checks.describe(args.parser, target))
    known = set() if args.describe else _check_baseline(args.baseline, check_id, target, spec)
    from mmharness.checks import all_checks

    unrunnable = not_run(all_checks()[check_id], target, checks.DEVICE)
    if unrunnable is not None:
        print(f"mmharness: {check_id} cannot run on {spec}: {unrunnable.reason}", file=sys.stderr)
        return NOTHING_RAN if unrunnable.status == SKIPPED else COULD_NOT_TEST_EXIT
    if args.describe:
        return 0
    try:
        import atheris  # noqa: F401
    except ImportError:
        raise UsageError("fuzzing needs atheris: pip install 'mmharness[fuzz]'") from None
    libfuzzer, replaying = _libfuzzer_args(args.passthrough)
    given = {flag.split("=", 1)[0] for flag in libfuzzer}
    libfuzzer = [*(flag for flag in CHECK_FLAGS if flag.split("=", 1)[0] not in given), *libfuzzer]
    findings = findings_dir()

    def fuzz(scratch: Path) -> int:
        corpus = scratch / "corpus"
        corpus.mkdir()
        dirs = [] if replaying else [str(corpus), *([seeds] if Path(seeds).is_dir() else [])]
        argv = [f"mmharness-fuzz-{args.parser}", *libfuzzer, *dirs]
        checks.main(
            argv, check=check_id, target=target, spec=spec, known=known, strict=args.strict, findings=findings
        )
        return PASSED_EXIT

    return supervised(f"mmharness-check-{check_id}-", fuzz)


def _check_baseline(path: str | None, check_id: str, target, spec: str) -> set[str]:
    """``--baseline`` for a check: the signatures of ``check_id``'s findings it holds for this target
    (a ``check --write-baseline`` file or a ``--json`` report)."""
    if not path:
        return set()
    from mmharness.fuzz.checks import known_signatures

    try:
        return known_signatures(path, check_id, target, spec)
    except ValueError as error:
        raise UsageError(f"--baseline {error}") from None
