"""The mutation benchmark: its pure helpers (which functions count, verdicts, baselines, the report) and,
on a cached release (``network``), one mutant run rules-only and ``--against`` the unmutated copy."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest
from mmharness.cli import main

_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "mutation_score.py"
_SPEC = importlib.util.spec_from_file_location("mutation_score", _PATH)
ms = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(ms)

SOURCE = """
def top(a):
    def inner(b):
        return b + 1
    return inner(a)

class Scheduler:
    def _try_schedule(self, x):
        return x < 1

    def schedule(self):
        pass
"""


def test_functions_are_top_level_functions_and_methods_with_nested_ones_inside():
    assert ms.functions_of(SOURCE) == [
        ("top", 2, 5),
        ("Scheduler._try_schedule", 8, 9),
        ("Scheduler.schedule", 11, 12),
    ]


def test_a_default_set_matches_qualified_names_and_function_a_bare_method_name():
    assert ms.chosen("Scheduler._try_schedule", None)
    assert ms.chosen("Scheduler._try_schedule", ("Scheduler._try_schedule",))
    assert not ms.chosen("Other._try_schedule", ("Scheduler._try_schedule",))
    assert not ms.chosen("Scheduler._try_schedule", ("_try_schedule",))
    assert ms.chosen("Scheduler._try_schedule", ("_try_schedule",), bare=True)


@pytest.mark.parametrize(
    ("release", "engine", "expected"),
    [
        (None, None, ("sglang", "0.5.23")),
        ("0.5.17", None, ("sglang", "0.5.17")),
        ("vllm==0.33.0", None, ("vllm", "0.33.0")),
        (None, "vllm", ("vllm", "0.33.0")),
        ("0.20.0", "vllm", ("vllm", "0.20.0")),
    ],
)
def test_a_release_is_x_with_an_engine_or_engine_x(release, engine, expected):
    assert ms.parse_release(release, engine) == expected


def test_a_release_naming_another_engine_or_an_unknown_one_is_refused():
    with pytest.raises(ValueError, match="names vllm"):
        ms.parse_release("vllm==0.33.0", "sglang")
    with pytest.raises(ValueError, match="unknown engine"):
        ms.parse_release("trt==1.0", None)


def test_every_default_file_has_a_default_function_set():
    assert set(ms.VLLM_FILES) <= set(ms.DRIVEN)
    assert {ms.SGLANG_RULES, ms.SGLANG_OLD_RULES} <= set(ms.DRIVEN)
    assert {"get_new_expanded_mm_items", "_try_simple_split"} <= set(ms.DRIVEN[ms.SGLANG_OLD_RULES])


def test_a_mutant_is_reached_when_any_line_it_spans_ran():
    mutant = {"line": 10, "end_line": 12}
    assert ms.reached(mutant, {12})
    assert not ms.reached(mutant, {9, 13})
    assert ms.reached({"line": 4}, {4})


def _report(*findings):
    results = {}
    for check, kind, signature in findings:
        results.setdefault(check, []).append({"kind": kind, "signature": signature})
    return {"results": [{"check": c, "device": "cpu", "findings": f} for c, f in results.items()]}


def test_new_findings_are_those_no_baseline_holds_by_check_device_and_signature():
    known = ms.tolerated([_report(("a", "hazard", "s1")), _report(("b", "divergence", "s2"))])
    mutant = _report(("a", "hazard", "s1"), ("a", "hazard", "s3"), ("b", "divergence", "s1"))
    assert ms.new_findings(mutant, known) == [
        {"check": "a", "kind": "hazard", "signature": "s3"},
        {"check": "b", "kind": "divergence", "signature": "s1"},
    ]
    changed = {**mutant, "baseline_changes": [{"check": "a", "device": "cpu", "signature": "s1"}]}
    assert ms.new_findings(changed, known)[-1] == {"check": "a", "kind": ms.CHANGED, "signature": "s1"}
    assert ms.verdicts(0, ms.new_findings(changed, known)[-1:]) == (ms.SURVIVED, ms.KILLED)


def test_verdicts_plain_and_strict_from_one_run():
    hazard = [{"check": "a", "kind": "hazard", "signature": "s"}]
    assert ms.verdicts(1, []) == (ms.KILLED, ms.KILLED)
    assert ms.verdicts(-1, []) == (ms.TIMED_OUT, ms.TIMED_OUT)
    assert ms.verdicts(0, []) == (ms.SURVIVED, ms.SURVIVED)
    assert ms.verdicts(0, hazard) == (ms.SURVIVED, ms.KILLED)
    assert ms.verdicts(3, [{"check": "a", "kind": "could-not-test", "signature": "g"}]) == (
        ms.SURVIVED,
        ms.KILLED,
    )
    assert ms.verdicts(2, []) == ("error (exit 2)", "error (exit 2)")


def test_the_score_leaves_out_errors_unreached_and_unapplied_mutants():
    mutants = [
        {"outcome": ms.KILLED}, {"outcome": ms.TIMED_OUT}, {"outcome": ms.SURVIVED},
        {"outcome": ms.NOT_REACHED}, {"outcome": ms.NOT_APPLIED}, {"outcome": "error (exit 2)"},
    ]  # fmt: skip
    assert ms.score(mutants, "outcome") == (2, 3)


def test_survivors_of_reads_the_new_object_and_the_old_list(tmp_path):
    old = [
        {"operator": "o", "occurrence": 1, "outcome": "survived"},
        {"operator": "o", "occurrence": 2, "outcome": "killed"},
    ]
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert ms.earlier_survivors(str(tmp_path / "old.json"), "outcome") == {(ms.SGLANG_RULES, "o", 1)}
    new = {
        "mutants": [
            {"file": "f.py", "operator": "o", "occurrence": 3, "outcome": "survived", "strict": "killed"}
        ]
    }
    (tmp_path / "new.json").write_text(json.dumps(new))
    assert ms.earlier_survivors(str(tmp_path / "new.json"), "outcome") == {("f.py", "o", 3)}
    assert ms.earlier_survivors(str(tmp_path / "new.json"), "strict") == set()


def _mutant(line: int, outcome: str, strict: str, against: str, *changes: str) -> dict:
    return {
        "file": "f.py", "function": "f", "line": line, "operator": "core/AddNot", "occurrence": line,
        "outcome": outcome, "strict": strict, "against": against, "new": [], "diff": f"-line {line}\n",
        "changes": [{"check": "c", "change": "neutral", "signature": s} for s in changes],
    }  # fmt: skip


def test_the_against_report_shows_three_kill_rates_and_lists_what_against_leaves_and_kills(capsys):
    """Beside the rules' two rates, the --against one; survivors are those --against leaves, then the
    mutants only --against kills, each with its first change."""
    results = [
        _mutant(1, ms.KILLED, ms.KILLED, ms.KILLED),
        _mutant(2, ms.SURVIVED, ms.KILLED, ms.KILLED),
        _mutant(3, ms.SURVIVED, ms.SURVIVED, ms.KILLED, "neutral change (encoder calls): x"),
        _mutant(4, ms.SURVIVED, ms.SURVIVED, ms.SURVIVED),
    ]
    ms.report(results, [], [], key="against")
    out = capsys.readouterr().out
    assert re.search(r"^all +1 +4 +25\.0% +2 +50\.0% +3 +75\.0% +0$", out, flags=re.M)
    assert out.split()[:9] == ["file", "/", "function", "killed", "of", "score", "strict", "score", "against"]
    survivors = out.split("survivors under --against:\n")[1]
    assert "line 4 " in survivors and "-line 4" in survivors
    assert not re.search(r"line [123] ", survivors.split("killed by --against only")[0])
    only = survivors.split("killed by --against only (1), each with its first change:\n")[1]
    assert only.startswith(
        "--- f.py f line 3 (core/AddNot), occurrence 3: c: neutral change (encoder calls): x"
    )


def test_the_rules_only_report_has_no_against_column(capsys):
    ms.report(
        [{k: v for k, v in _mutant(1, ms.SURVIVED, ms.KILLED, "").items() if k != "against"}],
        [],
        [],
        key="outcome",
    )
    out = capsys.readouterr().out
    assert "against" not in out and re.search(r"^all +0 +1 +0\.0% +1 +100\.0% +0$", out, flags=re.M)


def test_an_against_verdict_is_any_change_else_what_the_run_ended_in():
    change = [{"check": "c", "change": "neutral", "signature": "s"}]
    assert ms.against_verdict(1, change) == ms.KILLED
    assert ms.against_verdict(0, []) == ms.against_verdict(1, []) == ms.SURVIVED
    assert ms.against_verdict(-1, []) == "error (timed out)", "a rules survivor's run is no hang"
    assert ms.against_verdict(2, []) == "error (exit 2)"
    report = {"results": [{"check": "c", "findings": [
        {"kind": "hazard", "signature": "s", "change": "neutral"},
        {"kind": "could-not-test", "signature": "g", "change": None},
    ]}]}  # fmt: skip
    assert ms.changes_in(report) == change


@pytest.mark.network
def test_a_mutant_changing_only_the_path_survives_the_rules_and_is_killed_against_the_unmutated(
    sglang_release, tmp_path
):
    """SGLang 0.5.23 sends single-span images down the per-request path of ROCm/NPU/XPU instead of the
    batched one: the same rows (the rules hold), another encoder call pattern (a neutral change)."""
    pytest.importorskip("cosmic_ray")
    root = Path(sglang_release("0.5.23").describe()["source"])
    copy, unmutated = tmp_path / "copy0", tmp_path / "unmutated"
    shutil.copytree(root, copy)
    shutil.copytree(root, unmutated)
    job = {"file": ms.SGLANG_RULES, "function": "_get_chunked_prefill_embedding", "line": 598,
           "end_line": 598, "operator": "core/AddNot", "occurrence": 57}  # fmt: skip
    options = ["--checks", "prefill.schedule_concat", "--max-examples", "10"]
    baseline = tmp_path / "baseline.json"  # a report of the copy, as run_baseline writes one
    with pytest.MonkeyPatch.context() as patch:  # the benchmark checks a copy as "." from inside it
        patch.chdir(copy)
        assert main(["check", "--target", ".", *options, "--json", str(baseline)]) == 0
    given = [str(baseline)]  # the rules stage reads it; the --against stage must not (--first-failure)
    [mutant] = ms.run_worker(copy, [job], given, ms.DEADLINE_S, ms.TIMEOUT_S, options, str(unmutated))
    assert "+            if not _is_hip or _is_npu or _is_xpu:" in mutant["diff"]
    assert (mutant["outcome"], mutant["strict"], mutant["against"]) == (ms.SURVIVED, ms.SURVIVED, ms.KILLED)
    assert mutant["changes"] == [
        {
            "check": "prefill.schedule_concat",
            "change": "neutral",
            "signature": "neutral change (encoder calls): chunked_prefill_embedding on batched",
        }
    ]
    assert (copy / ms.SGLANG_RULES).read_text() == (root / ms.SGLANG_RULES).read_text(), "restored"
