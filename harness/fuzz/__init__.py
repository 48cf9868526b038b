"""atheris entry points, one module per parser, and what they share.

Each entry point feeds libFuzzer's bytes to one parser and lets through only
the parser's documented error (rule R7). Anything else is a finding: before it
propagates (and libFuzzer stops with its own crash file), ``write_finding``
saves a self-contained JSON record, so the input survives even when the crash
file is lost in a CI workspace, and a maintainer can read it without tooling.

Nothing here imports atheris or a parser: an entry point must import its parser
inside ``atheris.instrument_imports()``, which only instruments fresh imports.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

FINDING_FORMAT = "mmharness.fuzz-finding/1"
FINDINGS_ENV = "MMHARNESS_FINDINGS"
"""Directory for finding files; ``./findings`` when unset."""


def findings_dir() -> Path:
    return Path(os.environ.get(FINDINGS_ENV) or "findings")


def write_finding(parser: str, data: bytes, error: BaseException) -> Path:
    """Save ``data`` and the unexpected ``error`` as ``<parser>-<sha1>.json``; return the path.

    The name depends only on the input, so a crash found twice is saved once.
    """
    try:
        text: str | None = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    record = {
        "format": FINDING_FORMAT,
        "parser": parser,
        "exception": f"{type(error).__name__}: {error}",
        "traceback": "".join(traceback.format_exception(error)),
        "input_b64": base64.b64encode(data).decode("ascii"),
        "input_text": text,
    }
    directory = findings_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{parser}-{hashlib.sha1(data).hexdigest()}.json"
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return path


def guarded(
    parser: str,
    parse: Callable[[bytes], object],
    expected: type[BaseException] | tuple[type[BaseException], ...],
) -> Callable[[bytes], None]:
    """A ``TestOneInput`` for ``parse``: ``expected`` errors pass, others are saved, re-raised."""

    def test_one_input(data: bytes) -> None:
        try:
            parse(data)
        except expected:
            pass
        except Exception as error:
            path = write_finding(parser, data, error)
            print(
                f"mmharness: unexpected {type(error).__name__}; finding saved to {path}",
                file=sys.stderr,
            )
            raise

    return test_one_input
