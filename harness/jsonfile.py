"""JSON files a user hands the harness (baselines, reports, matrices, atlas notes, fuzz baselines).

Each is read with the same limits and fails with one line naming the file. The
reader lives apart from ``mmharness.baseline``, which needs the check runner,
so that a fuzzer reading its known findings imports no check.
"""

from __future__ import annotations

import json

MAX_BYTES = 16 * 1024 * 1024


class JSONFileError(ValueError):
    """A JSON file that cannot be used; the message names the file and what is wrong."""


def read_json(path: str, what: str, *, max_bytes: int = MAX_BYTES) -> object:
    """A JSON file read with a size and nesting limit; ``JSONFileError`` naming the file otherwise."""
    try:
        with open(path, "rb") as stream:
            raw = stream.read(max_bytes + 1)
    except OSError as error:
        raise JSONFileError(f"{path}: cannot read {what} ({error.strerror or error})") from None
    if len(raw) > max_bytes:
        raise JSONFileError(f"{path}: {what} larger than {max_bytes // (1024 * 1024)} MiB")
    try:
        return json.loads(raw)
    except RecursionError:
        raise JSONFileError(f"{path}: {what} nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise JSONFileError(f"{path}: {what} is not JSON ({error})") from None
