"""``--against SPEC``: each case on two targets, each difference a change (regression, fix, neutral).

Offline: the targets are the reference, the unmutated engine model (by ``module:attr``) and its seeded
mutants. A regression fails the run and replays with both targets; a fix and a neutral change are shown
and fail only under ``--strict``; what both targets do alike is no finding at all.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from mmharness import against, report
from mmharness.against import Call, Recorded, first_difference
from mmharness.cli import _parser, main
from mmharness.model import Case, Item, Request
from mmharness.targets.base import Encoder
from mmharness.targets.reference import ReferenceTarget

ROOT = Path(__file__).parent.parent
ENGINE_MODEL = "mmharness.targets.engine_model:EngineModel"
"""The engine model with no bug: it follows every rule, by another route than the reference."""
OFF_BY_ONE = "mutant:chunk_start_off_by_one"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def signatures(out: str) -> list[str]:
    return re.findall(r"^    signature: (.*)$", out, flags=re.M)


def test_a_regression_fails_the_run_and_replays_on_both_targets(capsys, tmp_path):
    argv = ["check", "--target", OFF_BY_ONE, "--against", "reference", "--checks", "R1"]
    code, out, _ = run(capsys, *argv, "--max-examples", "20", "--findings", str(tmp_path))
    assert code == 1
    assert out.startswith(f"target: {OFF_BY_ONE}\nagainst: reference\n")
    assert signatures(out) and all(s.startswith("regression: ") for s in signatures(out))
    assert "expected: reference: follows the rule" in out
    saved = sorted(tmp_path.glob("*.json"))
    assert saved
    for path in saved:
        line = f"reproduce with: mmharness replay {path} --target {OFF_BY_ONE} --against reference"
        assert line in out
        code, replayed, _ = run(capsys, *shlex.split(line.split(": ", 1)[1])[1:])
        assert code == 1 and "regression: " in replayed
        assert run(capsys, "replay", str(path), "--target", "reference", "--against", "reference")[0] == 0


def test_a_fix_is_shown_and_fails_only_under_strict(capsys, tmp_path):
    argv = ["check", "--target", "reference", "--against", OFF_BY_ONE, "--checks", "chunk.matches_reference"]
    argv += ["--max-examples", "20", "--findings", str(tmp_path / "findings")]
    code, out, _ = run(capsys, *argv[:3], *argv[5:])  # the reference alone: nothing to report
    assert code == 0 and not signatures(out)
    report_path, junit = tmp_path / "report.json", tmp_path / "junit.xml"
    code, out, _ = run(capsys, *argv, "--json", str(report_path), "--junit", str(junit))
    assert code == 0
    assert "HAZARD" in out and signatures(out)
    assert all(s.startswith("fix: ") for s in signatures(out))
    assert f"expected: {OFF_BY_ONE}: divergence" in out and "actual:   reference: follows the rule" in out
    document = json.loads(report_path.read_text())
    assert document["against"] == OFF_BY_ONE
    findings = [f for r in document["results"] for f in r["findings"]]
    assert findings and {f["change"] for f in findings} == {"fix"}
    assert f"against {OFF_BY_ONE}" in junit.read_text()
    assert run(capsys, *argv, "--strict")[0] == 1


def test_another_encoder_pattern_is_a_neutral_change(capsys, tmp_path):
    """Both give the reference's rows; the mutant encodes an item once per occurrence. Held to the rows
    alone (``prefill.matches_reference``) that is a neutral change; held to the encoder's work
    (``prefill.encoder_calls``, a hazard check) the mutant shows a hazard the engine model does not:
    a change the rules permit, never a regression (fatal under --strict)."""
    target = "mutant:prefill_duplicate_encode"
    argv = ["check", "--target", target, "--against", ENGINE_MODEL, "--max-examples", "30"]
    argv += ["--findings", str(tmp_path)]
    code, out, _ = run(capsys, *argv, "--checks", "prefill.matches_reference")
    assert code == 0
    assert "signature: neutral change (encoder calls): chunked_prefill_embedding on batched" in out
    # whether (and which way) each fails: --first-failure ends the search there, unshrunk
    assert run(capsys, *argv, "--checks", "prefill.matches_reference", "--strict", "--first-failure")[0] == 1
    code, out, _ = run(capsys, *argv, "--checks", "prefill.encoder_calls", "--first-failure", "--strict")
    assert code == 1
    assert "signature: permitted: an item was encoded more than once in one batch" in out
    assert run(capsys, *argv, "--checks", "prefill.encoder_calls", "--first-failure")[0] == 0


def test_another_path_pattern_of_a_correct_engine_is_neutral(capsys, tmp_path):
    """The engine model's per-request path calls the encoder once per request, the reference once per
    batch: both follow R3, and the comparison says where they differ."""
    argv = [
        "check",
        "--target",
        ENGINE_MODEL,
        "--against",
        "reference",
        "--checks",
        "prefill.path_independent",
    ]
    code, out, _ = run(capsys, *argv, "--max-examples", "30", "--findings", str(tmp_path))
    assert code == 0
    assert "neutral change (encoder calls): chunked_prefill_embedding on per_request" in signatures(out)
    assert run(capsys, *argv[:3], *argv[5:], "--max-examples", "30", "--findings", str(tmp_path))[0] == 0


@pytest.mark.parametrize(
    ("command", "spec", "words"),
    [
        ("check", "mutant:nope", "unknown mutant 'nope'"),
        ("check", "nonsense", "unknown target 'nonsense'"),
        ("replay", "mutant:nope", "unknown mutant 'nope'"),
    ],
)
def test_a_bad_against_spec_is_one_usage_error(capsys, tmp_path, command, spec, words):
    case = tmp_path / "case.json"  # a readable case: the spec is what is refused
    case.write_text('{"format": "mmharness.case/1", "check": "count.matches_reference", "requests": []}')
    argv = (
        ["check", "--checks", "R1", "--findings", str(tmp_path)]
        if command == "check"
        else ["replay", str(case)]
    )
    code, out, err = run(capsys, *argv, "--against", spec)
    assert code == 2
    assert "PASS" not in out and "DIVERGENCE" not in out  # refused before anything ran
    assert len(err.strip().splitlines()) == 1
    assert f"--against {spec}: " in err and words in err


def test_the_against_target_lacking_a_capability_skips_naming_it(capsys, tmp_path):
    argv = ["check", "--target", ENGINE_MODEL, "--against", "reference", "--checks", "prefill.whole_items"]
    code, out, _ = run(capsys, *argv, "--findings", str(tmp_path))
    assert "SKIP           prefill.whole_items (R3w)  --against reference: reference lacks whole_items" in out
    assert code == 4  # nothing ran


# The comparison itself ------------------------------------------------------------------------------


def _call(method: str, value=None, *, error: tuple | None = None, encoded=(), path=None) -> Call:
    outcome = ("error", *error) if error else ("value", against.normalised(value))
    return Call(method, path, outcome, tuple(encoded))


def test_the_first_difference_names_its_observable():
    import torch

    rows, other_rows = torch.zeros(2, 3), torch.ones(2, 3)
    mask, other_mask = torch.tensor([True, False]), torch.tensor([False, True])

    def observable(mine: list[Call], theirs: list[Call]) -> str:
        return first_difference(mine, theirs).observable

    same = [_call("embedding_and_mask", (rows, mask), encoded=[((1, 2),)])]
    assert first_difference(same, list(same)) is None
    assert observable(same, [_call("embedding_and_mask", (rows, other_mask), encoded=[((1, 2),)])]) == "mask"
    assert observable(same, [_call("embedding_and_mask", (other_rows, mask), encoded=[((1, 2),)])]) == "rows"
    assert observable(same, [_call("embedding_and_mask", (rows, mask), encoded=[((1, 2),), ((3, 1),)])]) == (
        "encoder calls"
    )
    assert observable(same, [_call("embedding_and_mask", error=("ValueError", "no"))]) == "refusal"
    refused = [_call("count_mm_tokens", error=("ValueError", "bad span"))]
    assert observable(refused, [_call("count_mm_tokens", error=("ValueError", "bad window"))]) == "message"
    assert observable(refused, [_call("count_mm_tokens", error=("RuntimeError", "bad span"))]) == "refusal"
    stepped = [_call("whole_item_prefill", (rows, [(0, 0, 2)]))]
    assert observable(stepped, [_call("whole_item_prefill", (rows, [(0, 0, 1)]))]) == "steps"
    assert observable([_call("count_mm_tokens", 3)], [_call("count_mm_tokens", 4)]) == "count"
    batched = [_call("chunked_prefill_embedding", rows, path="batched")]
    assert observable(batched, [_call("chunked_prefill_embedding", rows, path="per_request")]) == "calls"
    assert observable(batched, batched * 2) == "calls"
    # a tensor's dtype, shape and values all count
    assert observable(
        [_call("adjust_embedding_length", rows)], [_call("adjust_embedding_length", rows.half())]
    )
    assert first_difference([_call("chunk", rows)], [_call("chunk", rows.clone())]) is None


def test_a_recorded_target_keeps_each_call_with_its_encoder_calls_and_passes_through():
    item = Item(spans=((1, 2),), hash=7)
    case = Case(requests=(Request(seq_len=4, prefix_len=0, extend_len=4, items=(item,)),))
    recorded = Recorded(ReferenceTarget())
    assert recorded.name == "reference" and recorded.paths == ("batched", "per_request")
    assert recorded.new_cache(10) is None and recorded.calls == []  # a cache is no observable
    recorded.chunked_prefill_embedding(case, Encoder(case), cache=None, path="per_request")
    (call,) = recorded.calls
    assert (call.method, call.path, call.encoded) == (
        "chunked_prefill_embedding",
        "per_request",
        (((7, 2),),),
    )
    assert call.outcome[0] == "value" and call.outcome[1][:3] == ("tensor", (2, case.hidden), case.dtype)
    with pytest.raises(Exception) as raised:
        recorded.count_mm_tokens(
            Case(requests=(Request(seq_len=1, prefix_len=0, extend_len=1, items=(item,)),))
        )
    assert recorded.calls[-1].outcome == (
        "error",
        type(raised.value).__name__,
        str(raised.value).splitlines()[0],
    )


def test_the_replay_line_of_a_comparison_runs_both_targets():
    assert report.replay_command("f.json", "./python", against="sglang==0.5.23") == (
        "mmharness replay f.json --target ./python --against sglang==0.5.23"
    )
    assert "--against" not in report.replay_command("f.json", "./python")


def test_the_pull_request_recipe_parses_and_compares():
    text = re.sub(r"\\\n\s*", " ", (ROOT / "docs" / "ci" / "pull-request.yml").read_text())
    commands = [
        shlex.split(line.strip().removeprefix("- ").removeprefix("run: "))[1:]
        for line in text.splitlines()
        if line.strip().startswith("mmharness ")
    ]
    assert len(commands) == 2
    for words in commands:
        assert words[0] == "check"
        args = _parser().parse_args(words)
        assert args.against and args.findings and args.json
    assert {args.against.split("==")[0] for args in map(_parser().parse_args, commands)} == {"sglang", "vllm"}


def test_a_representation_only_difference_is_no_change_and_r2s_none_still_is():
    """docs/rules.md, representation-only differences: R3's ``None`` and rows of no element, R3e's
    ``None`` and an all-false mask (``[N, 1]`` and ``[N]`` alike) are one answer; R2's ``None`` ("run
    the encoder") and zero rows are not, nor is a mask selecting something."""
    import torch

    class Answers:
        """A target answering each method with the value given."""

        def __init__(self, value):
            self.value = value

        def chunked_prefill_embedding(self, *args, **kwargs):
            return self.value

        embedding_and_mask = precomputed_embedding = chunked_prefill_embedding

    def difference(method: str, mine, theirs):
        sides = Recorded(Answers(mine)), Recorded(Answers(theirs))
        for side in sides:
            getattr(side, method)()
        return first_difference(sides[0].calls, sides[1].calls)

    none, no_rows = None, torch.zeros(0, 4)
    mask = torch.tensor([True, False])
    assert difference("chunked_prefill_embedding", none, no_rows) is None
    assert difference("embedding_and_mask", (none, None), (no_rows, torch.zeros(3, dtype=torch.bool))) is None
    assert difference("embedding_and_mask", (no_rows, mask), (no_rows, mask.reshape(2, 1))) is None
    assert difference("embedding_and_mask", (no_rows, mask), (no_rows, ~mask)).observable == "mask"
    assert difference("embedding_and_mask", (no_rows, mask), (no_rows, None)).observable == "mask"
    assert difference("chunked_prefill_embedding", none, torch.zeros(1, 4)).observable == "rows"
    assert difference("precomputed_embedding", none, no_rows).observable == "rows"


def test_a_case_one_target_never_receives_is_not_compared():
    """An EVS-pruned video: the reference receives it, the engine model (no ``unreceived``) leaves it
    out; comparing one side's run with the other's leaving it out would be a change of input, so
    nothing is compared, either way round. A case both receive is compared as ever."""
    from mmharness.checks import all_checks
    from mmharness.targets.engine_model import EngineModel

    check, model, reference = all_checks()["prefill.matches_reference"], EngineModel(), ReferenceTarget()
    pruned = Item(((0, 0), (3, 3)), hash=3, modality="video", frame_rows=(2, 0))
    case = Case(requests=(Request(seq_len=4, prefix_len=1, extend_len=1, items=(pruned,)),), hidden=4)
    against.compare(check, model, reference, case, {})
    against.compare(check, reference, model, case, {})
    against.compare(check, reference, reference, case, {})


# How two sides' failures are judged, and which paths they are compared on ---------------------------


class _Named(ReferenceTarget):
    """The reference under another name and paths: a side whose property outcome a test decides."""

    def __init__(self, name: str, paths: tuple[str, ...] = ("batched", "per_request")) -> None:
        self.name, self._paths = name, paths

    @property
    def paths(self) -> tuple[str, ...]:
        return self._paths


def _judged(mine, theirs) -> str | None:
    """The change ``compare`` finds where the target's property raises ``mine`` and the other's
    ``theirs`` (each a ``Failure`` or ``None``); ``None``: no change."""
    from dataclasses import replace

    from mmharness.checks import all_checks
    from mmharness.checks.outcome import Failure

    outcomes = {"mine": mine, "theirs": theirs}

    def prop(target, case, params):
        if outcomes[target.name] is not None:
            raise outcomes[target.name]

    check = replace(all_checks()["count.matches_reference"], property=prop)
    try:
        against.compare(check, _Named("mine"), _Named("theirs"), Case(requests=()), {})
    except Failure as change:
        assert change.signature.startswith(f"{change.compared.change}: ")
        return change.compared.change
    return None


def test_only_a_divergence_the_other_does_not_share_is_a_regression():
    from mmharness.checks.outcome import Failure, Hazard

    def diverges(why: str) -> Failure:
        return Failure(f"rows differ: {why}")

    assert _judged(diverges("a"), None) == "regression"
    assert _judged(diverges("a"), Hazard("a fallback")) == "regression"
    assert _judged(diverges("a"), diverges("b")) == "inherited", "the other diverges on this case too"
    assert _judged(Hazard("a fallback"), None) == "permitted", "the rules permit a hazard"
    assert _judged(Hazard("a fallback"), Hazard("another")) == "permitted"
    assert _judged(None, diverges("b")) == "fix"
    assert _judged(Hazard("a fallback"), diverges("b")) == "fix"
    assert _judged(diverges("a"), diverges("a")) is None, "failing alike is no change"


def test_two_targets_are_compared_on_the_paths_both_have():
    """vLLM 0.33's default path is v1, 0.34's v2 (and its only one): both run on v2, the changed default
    is one note, and the comparison goes on past it."""
    old, new = _Named("old", ("v1", "v2")), _Named("new", ("v2",))
    assert against.shared_paths(new, old) == ("v2",) and against.shared_paths(old, new) == ("v2",)
    assert Recorded(old, against.shared_paths(new, old)).paths == ("v2",)
    note = against.path_note(new, old, "vllm==0.33.0")
    assert note.startswith("the default path changed (v1 on vllm==0.33.0, v2 here)")
    assert "both run on v2" in note
    assert against.path_note(old, old, "x") is None
    assert "no path in common" in against.path_note(_Named("a", ("p",)), _Named("b", ("q",)), "b")


def test_a_check_that_runs_on_the_other_target_and_not_here_is_lost_coverage(capsys, tmp_path):
    """The reference lacks the engine option ``whole_items`` the engine model has: against it, that check
    is lost coverage, listed first, and the run exits 3 unless the user allows it by name."""
    report_path, junit = tmp_path / "r.json", tmp_path / "j.xml"
    argv = ["check", "--target", "reference", "--against", ENGINE_MODEL, "--max-examples", "5"]
    argv += ["--checks", "prefill.whole_items,chunk.matches_reference", "--findings", str(tmp_path / "f")]
    code, out, _ = run(capsys, *argv, "--json", str(report_path), "--junit", str(junit))
    assert code == 3, out
    lost = f"lost coverage: prefill.whole_items [cpu] runs on {ENGINE_MODEL} and not here: reference lacks"
    assert lost in out and out.index(lost) < out.index("check ") if "check " in out else lost in out
    (entry,) = json.loads(report_path.read_text())["lost"]
    assert (entry["what"], entry["of"], entry["allowed"]) == ("prefill.whole_items", "check", False)
    assert 'classname="mmharness.lost.check" name="prefill.whole_items[cpu]"' in junit.read_text()
    code, out, _ = run(capsys, *argv, "--allow-lost", "prefill.whole_items")
    assert code == 0 and "(allowed: --allow-lost)" in out
    code, _, err = run(capsys, *argv, "--allow-lost", "prefill.nope")
    assert code == 2 and "--allow-lost prefill.nope: not a check this run selects nor an engine" in err
    code, _, err = run(capsys, *argv[:3], *argv[5:], "--allow-lost", "prefill.whole_items")
    assert code == 2 and "--allow-lost needs --against" in err
