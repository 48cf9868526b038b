"""``mmharness check --coverage``: branch coverage of a target's rule functions; why the rest is unreached.

A tiny rules module written here (not an engine's code) holds one branch of
each kind: one only another platform takes, one only CUDA takes, one no check
can reach, and a declared rule function the selected checks never call. The
figures of a run are compared serially and with ``-n 2``. A release downloaded
once per cache (``network``) gives a real figure.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from mmharness import reach
from mmharness.cli import main
from mmharness.engines.sglang.adapter import BRANCH_REASONS

pytest.importorskip("coverage")

RULES = '''
"""A tiny rules module for mmharness's coverage tests."""
import torch

from sglang.srt.utils import is_hip

_is_hip = is_hip()


def get_embedding_chunk(embedding, extend_prefix_len, extend_seq_len, items_offset):
    if _is_hip:
        raise RuntimeError("a platform the harness never selects")
    if embedding.is_cuda:
        torch.cuda.synchronize()
    positions = []
    for start, end in items_offset:
        positions.extend(range(start, end + 1))
    low, high = extend_prefix_len, extend_prefix_len + extend_seq_len
    inside = [k for k, p in enumerate(positions) if low <= p < high]
    flat = embedding.reshape(-1, embedding.shape[-1])
    if len(positions) > 10**9:
        return None  # UNREACHED
    return flat[inside], sum(p < low for p in positions), sum(p < high for p in positions)


def _count_mm_tokens_in_extend(prefix_length, extend_length, items_offset_list):
    total = 0
    for low, n, offsets in zip(prefix_length, extend_length, items_offset_list):
        for start, end in offsets:
            total += sum(low <= p < low + n for p in range(start, end + 1))
    return total
'''
PASSING = "chunk.matches_reference,chunk.schedule_concat"


@pytest.fixture
def engine(tmp_path, monkeypatch) -> Path:
    """A directory holding a tiny ``sglang/`` package; the cache and findings stay under ``tmp_path``."""
    package = tmp_path / "site" / "sglang"
    (package / "srt" / "managers").mkdir(parents=True)
    (package / "srt" / "managers" / "mm_schedule.py").write_text(textwrap.dedent(RULES).lstrip())
    (package / "__init__.py").write_text('raise RuntimeError("sglang/__init__.py must never run")\n')
    (package / "_version.py").write_text("__version__ = version = '9.8.7'\n")
    monkeypatch.setenv("MMHARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "site"


def _line_of(marker: str) -> int:
    return next(k for k, line in enumerate(textwrap.dedent(RULES).lstrip().splitlines(), 1) if marker in line)


def _check(capsys, engine: Path, report: Path, *extra: str) -> tuple[int, str, dict]:
    argv = ["check", "--target", str(engine), "--checks", PASSING, "--max-examples", "15"]
    code = main([*argv, "--coverage", "--json", str(report), *extra])
    return code, capsys.readouterr().out, json.loads(report.read_text())


def test_the_table_the_unreached_branches_and_the_json(capsys, engine, tmp_path):
    code, out, document = _check(capsys, engine, tmp_path / "report.json")
    assert code == 0, out
    table = out[out.index("branch coverage of the rule functions") :]
    assert "mm_schedule.py:get_embedding_chunk " in table
    assert "mm_schedule.py:_count_mm_tokens_in_extend  (not entered)" in table
    assert "total (2 functions)" in table
    unreached = _line_of("UNREACHED") - 1
    assert f"mm_schedule.py:{unreached}->{unreached + 1} get_embedding_chunk: not reached" in table
    assert "get_embedding_chunk: another platform  [_is_hip]" in table
    assert "get_embedding_chunk: CUDA  [embedding.is_cuda]" in table

    figures = document["coverage"]
    (path,) = figures["files"]
    assert Path(path) == (engine / "sglang" / "srt" / "managers" / "mm_schedule.py").resolve()
    chunk = figures["files"][path]["functions"]["get_embedding_chunk"]
    assert chunk["declared_as"] == "get_embedding_chunk" and chunk["entered"]
    assert chunk["branches"] == {"reached": 5, "total": 8} and chunk["percent"] == 62.5
    assert chunk["cpu_reachable"] == {"reached": 5, "total": 6} and chunk["cpu_percent"] == 83.3
    assert _line_of("UNREACHED") in chunk["unreached_lines"]
    reasons = {(u["line"], u["to"]): u["reason"] for u in chunk["unreached_branches"]}
    assert reasons[(unreached, unreached + 1)] == reach.NOT_REACHED
    assert sorted(reasons.values()) == ["CUDA", "another platform", "not reached"]
    count = figures["files"][path]["functions"]["_count_mm_tokens_in_extend"]
    assert not count["entered"] and count["percent"] == 0.0
    assert {u["reason"] for u in count["unreached_branches"]} == {reach.NOT_ENTERED}
    total = figures["total"]
    assert total["functions"] == 2
    assert total["branches"]["total"] == chunk["branches"]["total"] + count["branches"]["total"]
    assert isinstance(total["percent"], float)


def test_a_branch_the_target_excludes_leaves_the_figure_and_is_listed_with_why(
    capsys, engine, tmp_path, monkeypatch
):
    from mmharness.engines.sglang import excluded

    dead = reach.Excluded(
        "get_embedding_chunk",
        "len(positions) > 10**9",
        reach.TRUE,
        reach.DEAD,
        "no batch holds 10**9 positions",
    )
    wrong_exit = replace(dead, exit=reach.FALSE, why="the other exit")
    gone = replace(dead, function="_count_mm_tokens_in_extend", why="another function")
    monkeypatch.setattr(excluded, "EXCLUDED", (wrong_exit, gone, dead))
    code, out, document = _check(capsys, engine, tmp_path / "report.json")
    assert code == 0, out
    unreached = _line_of("UNREACHED") - 1
    table = out[out.index("branch coverage of the rule functions") :]
    excluded_line = (
        "excluded from the cpu-reachable figure: 1 branches the target verified no run of the rules"
    )
    assert f"{excluded_line} takes (dead 1)" in table
    branch = f"mm_schedule.py:{unreached}->{unreached + 1} get_embedding_chunk"
    assert f"{branch}: dead: no batch holds 10**9 positions" in table
    figures = document["coverage"]
    (path,) = figures["files"]
    chunk = figures["files"][path]["functions"]["get_embedding_chunk"]
    assert chunk["branches"] == {"reached": 5, "total": 8}
    assert chunk["cpu_reachable"] == {"reached": 5, "total": 5} and chunk["cpu_percent"] == 100.0
    (entry,) = [u for u in chunk["unreached_branches"] if u["line"] == unreached]
    assert entry["reason"] == reach.DEAD and entry["read_from"] == reach.EXCLUDED
    assert figures["total"]["excluded"] == {reach.DEAD: 1}

    # A file without the source the claim rests on keeps the branch counted.
    monkeypatch.setattr(excluded, "EXCLUDED", (replace(dead, needs="if len(positions) > 10**8:"),))
    _, out, document = _check(capsys, engine, tmp_path / "needs.json")
    assert "excluded from the cpu-reachable figure" not in out
    assert f"mm_schedule.py:{unreached}->{unreached + 1} get_embedding_chunk: not reached" in out
    assert document["coverage"]["total"]["excluded"] == {}


def test_the_target_s_branch_reasons_explain_its_unreached_branches(capsys, engine, tmp_path, monkeypatch):
    """An engine's own names (``Target.branch_reasons``) reach the analysis: here the unreached guard's
    ``10**9`` read as IPC, which leaves the branch out of the CPU-reachable figure."""
    from mmharness.engines.sglang.adapter import SGLangTarget

    monkeypatch.setattr(SGLangTarget, "branch_reasons", lambda self: {"IPC": r"10\*\*9"})
    code, out, document = _check(capsys, engine, tmp_path / "report.json")
    assert code == 0, out
    unreached = _line_of("UNREACHED") - 1
    assert f"mm_schedule.py:{unreached}->{unreached + 1} get_embedding_chunk: IPC" in out
    (path,) = document["coverage"]["files"]
    chunk = document["coverage"]["files"][path]["functions"]["get_embedding_chunk"]
    assert chunk["cpu_reachable"] == {"reached": 5, "total": 5}


BLOCK = """
def f(xs, deferred):
    if any(deferred):
        for x in xs:
            if x:
                pass
    if xs:
        return 1
    return 0
"""


@pytest.mark.parametrize(
    ("line", "to", "covered"),
    [
        (3, 4, True),  # the block's own true exit
        (3, 7, False),  # its other exit
        (4, 5, True),  # inside the block
        (5, 6, True),
        (7, 8, False),  # after it
    ],
)
def test_an_excluded_block_covers_the_branches_inside_it(line, to, covered):
    block = reach.Excluded("f", "any( deferred )", reach.TRUE, reach.OUTSIDE, "not the rules", block=True)
    conditions, bodies = reach.conditions_of(BLOCK), reach.bodies_of(BLOCK)
    assert block.covers(line, to, conditions, bodies) is covered


def test_an_exclusion_names_a_known_kind_and_exit():
    with pytest.raises(ValueError, match="kind 'unlikely'"):
        reach.Excluded("f", "x", reach.TRUE, "unlikely", "why")
    with pytest.raises(ValueError, match="a block is the body its true exit enters"):
        reach.Excluded("f", "x", reach.FALSE, reach.DEAD, "why", block=True)


def test_workers_give_the_serial_figures(capsys, engine, tmp_path):
    _, serial_out, serial = _check(capsys, engine, tmp_path / "serial.json")
    code, parallel_out, parallel = _check(capsys, engine, tmp_path / "parallel.json", "-n", "2")
    assert code == 0
    assert parallel["coverage"] == serial["coverage"]
    table = serial_out[serial_out.index("branch coverage") :]
    assert parallel_out[parallel_out.index("branch coverage") :] == table


def test_a_target_without_engine_files_says_so_and_runs_as_usual(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MMHARNESS_CACHE", str(tmp_path / "cache"))
    report = tmp_path / "report.json"
    argv = ["check", "--target", "reference", "--checks", "chunk.matches_reference", "--max-examples", "5"]
    code = main([*argv, "--coverage", "--json", str(report)])
    out = capsys.readouterr().out
    assert code == 0
    assert [line for line in out.splitlines() if line.startswith("coverage:")] == [
        "coverage: reference loads no engine files: nothing to measure"
    ]
    assert "branch coverage" not in out
    assert "coverage" not in json.loads(report.read_text())


def test_without_coverage_installed_it_is_a_usage_error(capsys, engine, monkeypatch):
    monkeypatch.setitem(sys.modules, "coverage", None)  # import coverage -> ImportError
    code = main(["check", "--target", str(engine), "--coverage"])
    assert code == 2
    assert "--coverage needs coverage.py: pip install 'mmharness[coverage]'" in capsys.readouterr().err


def test_help_and_import_never_import_coverage():
    code = (
        "import sys; import mmharness, mmharness.reach; from mmharness.cli import main\n"
        "try: main(['check', '--help'])\n"
        "except SystemExit: pass\n"
        "assert 'coverage' not in sys.modules, 'coverage imported'\n"
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


SOURCE = """
def f(x, tp_size, device):
    if x.is_cuda:
        a = 1
    if _is_npu:
        a = 2
    if tp_size > 1:
        a = 3
    if use_cuda_ipc:
        a = 4
    if x is None:
        logger.warning("no x")
    if torch.cuda.is_available():
        if x:
            a = 5
    if device.type == "cuda" and x:
        a = 6
    if x > 3:
        a = 7
    if host_offload_event is not None and x:
        a = 8
    if self.use_data_parallel:
        a = 9
    return a
"""


@pytest.mark.parametrize(
    ("line", "executed", "reason"),
    [
        (3, True, "CUDA"),
        (5, True, "another platform"),
        (7, True, "distributed"),
        (9, True, "IPC"),
        (11, True, "logging only"),
        (14, False, "CUDA"),  # the branch line never ran: its enclosing block's condition says why
        (16, True, "CUDA"),
        (18, True, reach.NOT_REACHED),
        (20, True, "CUDA"),  # SGLang's host offload waits on a torch.cuda.Event (its branch_reasons)
        (22, True, "distributed"),  # a vision tower sharded over data-parallel ranks
    ],
)
def test_the_classifier_reads_the_guarding_source(line, executed, reason):
    lines = SOURCE.splitlines()
    ran = set(range(1, len(lines) + 1)) - ({line} if not executed else set())
    table = reach.reason_table(BRANCH_REASONS)
    assert reach.classify(line, line + 1, lines, reach.conditions_of(SOURCE), ran, table=table)[0] == reason


def test_an_engine_s_own_names_widen_a_reason_and_only_its_own():
    """The generic table names no engine's function: SGLang's CUDA event explains a branch only through
    its target's ``branch_reasons``; a reason the table lacks is refused."""
    lines, ran = SOURCE.splitlines(), set(range(1, 30))
    assert reach.classify(20, 21, lines, reach.conditions_of(SOURCE), ran)[0] == reach.NOT_REACHED
    assert not any("host_offload_event" in pattern for pattern, _, _ in reach.REASONS)
    with pytest.raises(ValueError, match="unknown"):
        reach.reason_table({"GPU only": "x"})


def test_functions_own_their_body_less_nested_functions():
    source = textwrap.dedent(
        """
        class A:
            @staticmethod
            def m(x):
                def inner(y):
                    return y
                return inner(x)

            @property
            def p(self):
                return 1

            @p.setter
            def p(self, value):
                pass
        """
    )
    found = reach.functions_of(source)
    assert set(found) == {"A.m", "A.m.inner", "A.p", "A.p@13"}
    assert found["A.m"].first == 3  # the decorator's line, as a code object's co_firstlineno
    assert found["A.m"].own == {5, 7} and found["A.m.inner"].own == {6}
    assert found["A.p"].own == {11} and found["A.p@13"].own == {15}


@pytest.mark.network
@pytest.mark.parametrize("version", ["0.5.15", "0.5.23"])
def test_every_exclusion_holds_in_the_releases_it_was_read_in(sglang_release, version):
    """Each of SGLang's excluded branches is a condition of its function, and its claim's source is
    there, in the releases it was verified in (a typo would exclude nothing, silently)."""
    from mmharness.engines.sglang.excluded import EXCLUDED

    files = [Path(f) for f in reach.engine_files(sglang_release(version))]
    sources = [f.read_text() for f in files]
    found = set()
    for exclusion in EXCLUDED:
        for source in sources:
            function = reach.functions_of(source).get(exclusion.function)
            if function is None or not exclusion.holds_in("".join(source.split())):
                continue
            conditions = reach.conditions_of(source)
            wanted = "".join(exclusion.condition.split())
            if any("".join(conditions[n][0].split()) == wanted for n in function.own if n in conditions):
                found.add(exclusion)
    assert found, version
    if version == "0.5.23":  # every one was read there
        assert [e.function for e in EXCLUDED if e not in found] == []


@pytest.mark.network
def test_a_release_gives_a_figure(capsys, harness_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("MMHARNESS_CACHE", str(harness_cache))
    monkeypatch.chdir(tmp_path)
    report = tmp_path / "report.json"
    # A figure, not the figure of every check (`check --coverage` on a release gives that): one check
    # per kind of rule function the release's files hold (chunk, prefill, counts, grids), in this
    # process (workers' figures are the serial ones: test_workers_give_the_serial_figures).
    checks = "chunk.matches_reference,prefill.schedule_concat,count.matches_reference,grid.one_grid_rule"
    argv = ["check", "--target", "sglang==0.5.23", "--checks", checks, "--max-examples", "20"]
    main([*argv, "--coverage", "--json", str(report)])
    out = capsys.readouterr().out
    total = json.loads(report.read_text())["coverage"]["total"]
    assert isinstance(total["percent"], float) and 0 < total["percent"] <= 100
    with capsys.disabled():
        print(f"\nsglang==0.5.23, 4 checks, 20 examples each: {out[out.index('total (') :].splitlines()[0]}")
