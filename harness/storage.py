"""Where the harness keeps what it downloads and compiles, apart from any one use of it.

Release files (``targets.releases``), compiled engine code (``targets.loader``), Hypothesis's
example databases (``database``) and its own storage (the CLI) all live below ``cache_dir()``;
one home keeps the CLI from importing the loader to learn a directory name.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$MMHARNESS_CACHE``, else ``mmharness`` under XDG's cache (``~/.cache``)."""
    explicit = os.environ.get("MMHARNESS_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "mmharness"
