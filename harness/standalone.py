"""A finding as one pytest file that needs only the engine and torch (DESIGN.md section 14).

A maintainer handed a JSON case must install the harness and trust its shims to
see the bug; a file that loads the engine's own files by path, builds the case
as literals and asserts the reference's value written out runs in the engine's
own repository. What is engine-specific (which files, their stand-ins, the call)
is a ``Writer`` in the engine's package (``<package>.standalone.WRITER``); here
is what every writer shares: the finding, the refusal, tensors as source text.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from mmharness import tensors

if TYPE_CHECKING:
    import torch
    from mmharness.model import Case, Row

LITERAL_LIMIT = 64
"""Tensors of at most this many values are written out; larger ones come from the seeded constructor."""


class Unsupported(Exception):
    """The writer cannot write this finding yet: one line saying which check or case, and why."""


@dataclass(frozen=True)
class Finding:
    """What a writer is handed: the saved case and where it was made."""

    check_id: str
    rule: str
    case: Case
    params: dict
    target: str
    """The spec it was made on (``sglang==0.5.23``)."""
    root: Path
    """The tree the engine was loaded from there: the file's default ``ENGINE_ROOT``."""
    source: str
    """Where the case was read (``findings/x.json``, ``ledger.ndjson#2``)."""


class Writer(Protocol):
    """One engine family's writer: the checks it covers, and the file for a finding of one."""

    checks: frozenset[str]

    def write(self, finding: Finding) -> str:
        """The pytest file's text; ``Unsupported`` where this finding is beyond it."""
        ...


def write(finding: Finding, target: Any) -> str:
    """The standalone file for a finding made on ``target`` (a loaded target), by its engine's writer."""
    writer = writer_for(target, finding.check_id)
    if finding.check_id not in writer.checks:
        covered = ", ".join(sorted(writer.checks))
        raise Unsupported(f"no standalone writer for check {finding.check_id} yet (written: {covered})")
    return writer.write(finding)


BLOCKED = "import sys; sys.modules['mmharness'] = None"
"""Run before pytest in ``verify``: any import of mmharness by the written file fails."""


def verify(text: str, root: Path) -> str | None:
    """Why the written file does not reproduce the finding on ``root``, the tree it was made in, or
    ``None`` where it fails there as it should (pytest's exit 1). Run as a maintainer would (no
    plugin autoloaded, mmharness unimportable); a file that passes there asserts nothing of the bug."""
    if importlib.util.find_spec("pytest") is None:
        return "pytest is not installed here to run it"
    with tempfile.TemporaryDirectory(prefix="mmharness-standalone-") as scratch:
        path = Path(scratch) / "test_finding.py"
        path.write_text(text)
        env = {**os.environ, "ENGINE_ROOT": str(root), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        run = f"{BLOCKED}; import pytest; sys.exit(pytest.main(sys.argv[1:]))"
        command = [sys.executable, "-c", run, "-q", "-p", "no:cacheprovider", str(path)]
        try:
            done = subprocess.run(command, env=env, cwd=scratch, capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            return "pytest did not finish in 300 s"
    if done.returncode == 1:
        return None
    last = (done.stdout.strip().splitlines() or ["no output"])[-1]
    return f"on {root} it exits {done.returncode}, not 1 ({last})"


def writer_for(target: Any, check_id: str) -> Writer:
    """The writer of the engine whose package defines the target's class."""
    from mmharness.targets.specs import engines

    name = type(target).__module__
    for engine in engines():
        if name == engine.package or name.startswith(engine.package + "."):
            try:
                return importlib.import_module(f"{engine.package}.standalone").WRITER
            except ModuleNotFoundError:
                break
    raise Unsupported(f"no standalone writer for check {check_id} on {target.name}: its engine has none yet")


SEEDED = '''
def rows(seed: int, count: int) -> torch.Tensor:
    """[count, HIDDEN] small integers from a seeded generator: values the rule never reads, only moves."""
    generator = torch.Generator().manual_seed(seed)
    values = torch.randint(-64, 65, (count, HIDDEN), generator=generator)
    return values.to(DTYPE)
'''
"""The file's constructor for larger tensors: the harness's rows (``tensors.block``), so the rows the
reference expects are the same values."""


def block_source(case: Case, key: int, count: int) -> str:
    """The ``[count, hidden]`` rows keyed by ``key`` as source: a literal when small, else ``rows(...)``."""
    if count * case.hidden <= LITERAL_LIMIT:
        return literal(tensors.block(key, count, case, "cpu"))
    return f"rows({tensors.row_seed(key, count)}, {count})"


def rows_source(case: Case, rows: list[Row]) -> str:
    """Symbolic rows (what the reference computed) as source: their values written out when few, else
    slices of the seeded blocks they come from, in order."""
    if len(rows) * case.hidden <= LITERAL_LIMIT:
        return literal(tensors.materialise(case, rows).cpu())
    runs: list[list[int]] = []  # [key, count, first index, last index + 1]
    for key, count, index in rows:
        last = runs[-1] if runs else None
        if last and last[:2] == [key, count] and last[3] == index:
            last[3] += 1
        else:
            runs.append([key, count, index, index + 1])
    parts = [f"rows({tensors.row_seed(k, n)}, {n})[{a}:{b}]" for k, n, a, b in runs]
    return f"torch.cat([{', '.join(parts)}])"


def runs(values: list) -> str:
    """A list as source, repeated values as runs (``[7] * 22 + [1000000]``): token ids and masks read at
    a glance."""
    parts: list[list] = []
    for value in values:
        if parts and parts[-1][0] == value:
            parts[-1][1] += 1
        else:
            parts.append([value, 1])
    if not parts:
        return "[]"
    return " + ".join(f"[{value!r}] * {n}" if n > 2 else repr([value] * n) for value, n in parts)


def literal(tensor: torch.Tensor) -> str:
    """A tensor as ``torch.tensor([...], dtype=...)``: its values are small integers, exact in its dtype."""
    values = tensor.to(int).tolist() if tensor.is_floating_point() else tensor.tolist()
    return f"torch.tensor({values}, dtype=torch.{str(tensor.dtype).removeprefix('torch.')})"
