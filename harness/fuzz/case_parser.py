"""atheris entry point for the case parser (``mmharness.payload.loads``).

Run it as ``python -m mmharness.fuzz.case_parser [libFuzzer flags] [CORPUS_DIR...]``;
``corpus/case-parser`` holds seeds. libFuzzer writes new inputs into the first
corpus directory, so give it a scratch directory first to keep the seeds clean.
The format's dictionary (``case.dict``) is added unless ``-dict=`` is given.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from mmharness.fuzz import FuzzBaseline, guarded

PARSER = "case-parser"
DICTIONARY = Path(__file__).with_name("case.dict")

_one_input: Callable[[bytes], None] | None = None


def _bind(baseline: FuzzBaseline | None = None) -> Callable[[bytes], None]:
    """Import the parser (instrumented when ``main`` runs) and build the guarded entry point."""
    global _one_input
    from mmharness import payload

    _one_input = guarded(PARSER, payload.loads, payload.PayloadError, baseline=baseline)
    return _one_input


def TestOneInput(data: bytes) -> None:  # the name atheris expects
    """Parse ``data``; only ``PayloadError`` is an expected outcome."""
    (_one_input or _bind())(data)


def main(argv: Sequence[str], *, baseline: FuzzBaseline | None = None) -> None:
    """Fuzz the parser, with coverage from ``mmharness.payload`` and ``mmharness.model`` only."""
    import atheris

    with atheris.instrument_imports(include=["mmharness.payload", "mmharness.model"]):
        _bind(baseline)
    args = list(argv)
    if not any(arg.startswith("-dict=") for arg in args):
        args.insert(1, f"-dict={DICTIONARY}")
    atheris.Setup(args, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
