"""A fork's own modules, imported by the files the harness loads, run from the fork's tree.

A fork may move part of its scheduling code into a module of its own
(``sglang/srt/managers/mm_helpers.py``) that its rules module imports. The
loader follows such an import into the target's tree (``Layout.follow``,
``loader.Namespace.follows``) instead of serving a stub, so the fork's code is
what the checks run. The offline tests pin the rule on small trees: what is
followed (at load time, from a rules-side file, a plain module in the followed
directories, whose top level only defines names) and what stays a stub (a
call-time import, a model file's import, a module doing work on import, the
files the harness reads, one that raises). The network tests build a fork of
0.5.23 (the cached release) whose chunked prefill's slicing helpers live in
the new module: the prefill checks pass on it, a bug seeded into the new
module is found, and a cached release follows nothing.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from mmharness.checks import all_checks
from mmharness.checks.outcome import COULD_NOT_TEST, DIVERGENCE, HAZARD
from mmharness.engines.sglang import layout
from mmharness.engines.sglang.adapter import from_path
from mmharness.model import Case, Item, Request
from mmharness.runner import PASSED, run_check
from mmharness.targets import loader
from mmharness.targets.base import Encoder

CHECKS = all_checks()
HELPERS = "sglang.srt.managers.mm_helpers"


# The rule, on small trees (offline) -------------------------------------------------------------

RULES_FILE = """
import torch

from sglang.srt.managers.mm_helpers import scale
from .sibling import shift
from sglang.srt.managers import by_attribute
from sglang.srt.managers.busy import started
from sglang.srt.managers.broken import nothing
from sglang.srt.managers.schedule_batch import MultimodalDataItem
from sglang.srt.utils.helpers import outside


def get_embedding_and_mask(data_embedding_func, embedding_items, placeholder_tensor, input_ids):
    from sglang.srt.managers.lazy import later

    rows = by_attribute.twice(shift(scale(data_embedding_func(embedding_items))))
    return rows, torch.isin(input_ids, placeholder_tensor)


def lazy():
    from sglang.srt.managers.lazy import later

    return later
"""
MODULES = {
    "srt/managers/mm_helpers.py": '''
        """A fork's helper: only defines names."""
        import logging

        from sglang.srt.managers.deeper import factor
        from sglang.srt.distributed import get_tp_group

        logger = logging.getLogger(__name__)


        def scale(rows):
            return rows * factor()


        if __name__ == "__main__":
            print("never on import")
        ''',
    "srt/managers/deeper.py": "def factor():\n    return 3\n",
    "srt/managers/sibling.py": "def shift(rows):\n    return rows + 1\n",
    "srt/managers/by_attribute.py": "def twice(rows):\n    return rows * 2\n",
    "srt/managers/busy.py": "started = []\nstarted.append(1)\n",
    "srt/managers/broken.py": "raise RuntimeError('needs a GPU')\n",
    "srt/managers/lazy.py": "later = 1\n",
    "srt/managers/schedule_batch.py": "class MultimodalDataItem:\n    pass\n",
    "srt/utils/helpers.py": "outside = 1\n",
    "srt/models/kimi_k3.py": "from sglang.srt.managers.model_side import thing\n",
    "srt/managers/model_side.py": "thing = 1\n",
}


def _tree(root: Path, package: str = "sglang") -> Path:
    directory = root / package
    for rel, text in {"srt/managers/mm_utils.py": RULES_FILE, **MODULES}.items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        source = textwrap.dedent(text)
        path.write_text(source.replace("from sglang.", f"from {package}."))
    return root


def _load(root: Path) -> loader.Engine:
    return loader.load(loader.locate(root, layout.RULES), layout.RULES, stub_missing=True)


def test_imports_of_modules_in_the_tree_are_followed_recursively_relative_and_by_attribute(tmp_path):
    engine = _load(_tree(tmp_path))
    assert set(engine.followed) == {
        HELPERS,
        "sglang.srt.managers.deeper",
        "sglang.srt.managers.sibling",
        "sglang.srt.managers.by_attribute",
    }
    assert engine.record.followed[HELPERS] == "sglang.srt.managers.mm_utils"
    assert engine.record.followed["sglang.srt.managers.deeper"] == HELPERS
    assert engine.modules[HELPERS].scale(2) == 6, "the fork's code runs, with its own import followed"
    assert "sglang.srt.distributed.get_tp_group" in engine.record.stubbed, "outside the followed dirs: a stub"


def test_what_is_not_followed_stays_a_stub_and_each_refusal_is_said(tmp_path):
    engine = _load(_tree(tmp_path))
    not_followed = (
        "sglang.srt.managers.lazy",  # imported at call time
        "sglang.srt.managers.schedule_batch",  # read by the harness, its names shimmed
        "sglang.srt.utils.helpers",  # outside the followed directories
        "sglang.srt.managers.model_side",  # imported by the model file, not by the scheduling code
    )
    for name in not_followed:
        assert name not in engine.followed and name not in engine.record.unfollowed, name
    assert engine.record.unfollowed["sglang.srt.managers.busy"].startswith(
        "stubbed: its top level does work on import (line 2: started.append(1))"
    )
    assert engine.record.unfollowed["sglang.srt.managers.broken"] == (
        "stubbed: raised RuntimeError: needs a GPU"
    )
    assert not engine.errors, "a followed module that raises never costs the file that imported it"


def test_a_call_time_import_is_never_followed(tmp_path):
    engine = _load(_tree(tmp_path))
    later = engine.modules["sglang.srt.managers.mm_utils"].lazy()
    assert type(later).__name__ == "Stub", "served from a stub, not the tree's value (1)"
    assert "sglang.srt.managers.lazy" not in engine.followed
    assert "sglang.srt.managers.lazy" not in engine.record.unfollowed


def test_a_renamed_fork_follows_its_own_imports_under_the_engine_name(tmp_path):
    engine = _load(_tree(tmp_path, package="myfork"))
    assert HELPERS in engine.followed and engine.followed[HELPERS].parts[-4] == "myfork"
    assert engine.modules[HELPERS].scale(1) == 3


def test_a_lone_file_follows_nothing(tmp_path):
    rules = _tree(tmp_path) / "sglang" / "srt" / "managers" / "mm_utils.py"
    engine = loader.load(loader.locate(rules, layout.RULES), layout.RULES, stub_missing=True)
    assert not engine.followed and f"{HELPERS}.scale" in engine.record.stubbed


def test_the_target_lists_followed_modules_and_runs_them(tmp_path):
    """``targets SPEC``: each followed module with its importer; the notes say so; the call runs the
    fork's helpers (x3, +1, x2) where stubs would have made it a could-not-test."""
    import torch

    target = from_path(str(_tree(tmp_path)))
    described = target.describe()
    assert described["followed"][HELPERS].endswith(
        "sglang/srt/managers/mm_helpers.py (imported by sglang.srt.managers.mm_utils)"
    )
    assert "sglang.srt.managers.busy" in described["not_followed"]
    assert "sglang/srt/managers/mm_helpers.py" in described["digests"]
    assert str(target.engine.followed[HELPERS]) in described["files"], "measured by check --coverage too"
    assert any("run from its code" in note and HELPERS in note for note in target.notes())
    case = Case((Request(3, 0, 3, (Item(((0, 1),), hash=1),)),))
    rows, _ = target.embedding_and_mask(case, Encoder(case))
    encoded = Encoder(case)(list(case.requests[0].items))
    assert torch.equal(rows, (encoded * 3 + 1) * 2)


@pytest.mark.parametrize(
    ("source", "work"),
    [
        ("import os\nX: int = 1\nY = os.getenv('Y')\ndef f():\n    pass\nclass C:\n    pass\n", None),
        (
            "try:\n    import a\nexcept ImportError:\n    a = None\nif a:\n    B = 1\nelse:\n    raise E\n",
            None,
        ),
        ('"""doc"""\nif __name__ == "__main__":\n    main()\n', None),
        ("register()\n", "line 1: register()"),
        ("for i in range(3):\n    pass\n", "line 1: for i in range(3):"),
        ("if FLAG:\n    torch.cuda.init()\n", "line 2: torch.cuda.init()"),
        ("with lock:\n    X = 1\n", "line 1: with lock:"),
    ],
)
def test_work_on_import_is_any_top_level_statement_that_does_not_define_names(tmp_path, source, work):
    path = tmp_path / "m.py"
    path.write_text(source)
    assert loader.work_on_import(path) == work


# A fork of 0.5.23 (network) ---------------------------------------------------------------------

SCHEDULE = "sglang/srt/managers/mm_schedule.py"
HELPERS_FILE = "sglang/srt/managers/mm_helpers.py"
MOVED_FROM = "def _item_overlap("
MOVED_TO = "def _get_chunked_embedding_full("
SEEDED_BUG = (
    "        return emb[local_start : min(end + 1, chunk_start + chunk_len) - start]\n",
    "        return emb[: min(end + 1, chunk_start + chunk_len) - start - local_start]\n",
)
"""In the moved helper: a window's slice of a partly prefilled image taken from the image's first rows."""


def _fork(release: Path, into: Path, *, bug: bool = False) -> Path:
    """A copy of the release whose chunked prefill's slicing helpers (``_item_overlap``,
    ``_slice_item_chunk``) moved into a module of the fork's own, imported by the rules module."""
    import shutil

    shutil.copytree(release, into)
    schedule = into / SCHEDULE
    text = schedule.read_text()
    start, end = text.index(MOVED_FROM), text.index(MOVED_TO)
    moved = text[start:end].replace(
        "    return get_embedding_chunk(",
        "    from .mm_schedule import get_embedding_chunk\n\n    return get_embedding_chunk(",
    )
    if bug:
        assert moved.count(SEEDED_BUG[0]) == 1
        moved = moved.replace(*SEEDED_BUG)
    header = (
        '"""The fork\'s scheduling helpers."""\n\nfrom typing import Optional\n\nimport torch\n\n'
        "from sglang.srt.managers.schedule_batch import MultimodalDataItem\n\n\n"
    )
    (into / HELPERS_FILE).write_text(header + moved)
    importing = "from sglang.srt.managers.schedule_batch import MultimodalDataItem\n"
    assert text.count(importing) == 1
    text = text[:start] + text[end:]
    text = text.replace(importing, importing + "from .mm_helpers import _item_overlap, _slice_item_chunk\n")
    schedule.write_text(text)
    return into


@pytest.fixture
def release_root(sglang_release) -> Path:
    return Path(sglang_release("0.5.23").describe()["source"])


@pytest.mark.network
def test_the_fork_prefill_runs_from_its_own_module_and_passes(release_root, tmp_path):
    target = from_path(str(_fork(release_root, tmp_path / "fork")), name="fork", release="0.5.23-fork")
    assert set(target.engine.followed) == {HELPERS}
    moved = target.engine.modules[HELPERS]._slice_item_chunk
    assert target.engine.modules["sglang.srt.managers.mm_schedule"]._slice_item_chunk is moved
    assert moved.__code__.co_filename.endswith(HELPERS_FILE)
    for check_id in ("prefill.matches_reference", "prefill.cache_independent"):
        result = run_check(CHECKS[check_id], target, max_examples=30, stop_at=(DIVERGENCE, COULD_NOT_TEST))
        assert result.status in (PASSED, HAZARD), (check_id, result.reason)
        assert all(f.kind == HAZARD for f in result.findings), (check_id, result.reason)


PARTLY_PREFILLED = Case((Request(12, 4, 3, (Item(((1, 9),), hash=7),)),))
"""A window (rows 4..6) inside one image (rows 1..9): the moved helper slices the image's rows 3..5."""


@pytest.mark.network
def test_a_bug_seeded_into_the_fork_module_is_found(release_root, tmp_path):
    """The seeded slice is found on a partly prefilled image, which the fork without it passes (a
    search would first meet the release's own divergence, whatever the helper does)."""
    check = CHECKS["prefill.matches_reference"]
    sound = from_path(str(_fork(release_root, tmp_path / "sound")), name="sound")
    assert run_check(check, sound, max_examples=1, explicit=[(PARTLY_PREFILLED, {})]).status == PASSED
    buggy = from_path(str(_fork(release_root, tmp_path / "buggy", bug=True)), name="buggy")
    result = run_check(check, buggy, max_examples=1, explicit=[(PARTLY_PREFILLED, {})])
    assert result.status == DIVERGENCE, result.reason
    assert "None instead of a tensor" not in result.reason, "the slice's rows differ: not the release's own"


@pytest.mark.network
@pytest.mark.parametrize("version", ["0.5.23", "0.5.15", "0.4.10"])
def test_a_cached_release_follows_nothing(sglang_release, version):
    target = sglang_release(version)
    assert not target.engine.followed and not target.engine.record.unfollowed
    assert "followed" not in target.describe() and "not_followed" not in target.describe()
