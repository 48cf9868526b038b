"""``mmharness fuzz``: a parser fuzzed with atheris, every option (libFuzzer's integer flags too)
checked first, the fuzzer in a supervised child process (``mmharness.fuzz.supervised``);
``mmharness fuzz --list``: every fuzz target with its engine, one a line."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from mmharness.commands.listing import print_description
from mmharness.commands.options import (
    INT_MAX,
    PASSED_EXIT,
    USAGE_ERROR,
    UsageError,
    findings_option,
    writable,
)
from mmharness.fuzz.registry import CASE_PARSER, fuzz_parsers, listing


def add_parser(sub) -> None:
    fuzz = sub.add_parser(
        "fuzz",
        help="fuzz a parser with atheris (libFuzzer arguments after --)",
        usage=(
            "mmharness fuzz {PARSER | --list} [--target SPEC] [--corpus DIR] [--baseline FILE] [--strict]"
            " [--findings DIR] [--describe] [-- LIBFUZZER_ARGS...]"
        ),
    )
    fuzz.add_argument("parser", nargs="?", choices=sorted(fuzz_parsers()))
    fuzz.add_argument(
        "--list",
        action="store_true",
        help="list every fuzz target and its engine (case-parser's: -), one a line, then exit",
    )
    fuzz.add_argument(
        "--target",
        metavar="SPEC",
        help="engine parsers: a release (ENGINE==X) or a path to one (default: the engine's newest tested);"
        " case-parser ignores it",
    )
    fuzz.add_argument(
        "--corpus",
        metavar="DIR",
        help="seed inputs (default: corpus/PARSER when it exists); new inputs go to a scratch dir",
    )
    fuzz.add_argument(
        "--baseline",
        metavar="FILE",
        help="known findings (e.g. corpus/fuzz-baseline.json): reported once, not fatal",
    )
    fuzz.add_argument(
        "--strict",
        action="store_true",
        help="engine parsers: a ValueError/TypeError that Python raised inside the parser is a finding too",
    )
    fuzz.add_argument(
        "--findings",
        metavar="DIR",
        help="where findings and libFuzzer's crash files go (default: ./findings or $MMHARNESS_FINDINGS)",
    )
    fuzz.add_argument(
        "--describe",
        action="store_true",
        help="engine parsers: show the loaded release, files, functions and stubs, then exit",
    )


def run(args: argparse.Namespace) -> int:
    if args.list:
        for name, engine in listing():
            print(f"{name:<24} {engine}")
        return 0
    if args.parser is None:
        raise UsageError("fuzz: give a PARSER (`mmharness fuzz --list` lists them)")
    from mmharness.fuzz import FINDINGS_ENV

    saved = os.environ.get(FINDINGS_ENV)
    if args.findings:  # the fuzz guard reads it from the environment; put it back for a caller in-process
        os.environ[FINDINGS_ENV] = args.findings
    try:
        return _run_fuzzer(args)
    finally:
        if saved is None:
            os.environ.pop(FINDINGS_ENV, None)
        else:
            os.environ[FINDINGS_ENV] = saved


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
    replaying = any(not arg.startswith("-") and Path(arg).is_file() for arg in args.passthrough)
    libfuzzer = list(args.passthrough)
    if not any(arg.startswith("-artifact_prefix=") for arg in libfuzzer):
        findings_dir().mkdir(parents=True, exist_ok=True)
        libfuzzer.insert(0, f"-artifact_prefix={findings_dir()}{os.sep}")

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
