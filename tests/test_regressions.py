"""Saved cases run before a check searches (``check --regressions``): a committed finding stays a test.

They run as Hypothesis runs ``@example``s: first, unshrunk, outside the example budget.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from mmharness import cli, payload
from mmharness.checks import all_checks
from mmharness.checks.outcome import DIVERGENCE
from mmharness.runner import PASSED, run_check
from mmharness.targets.engine_model import EngineModel

SAVED = Path(__file__).parent.parent / "corpus" / "regressions" / "precomputed-window-head.json"
CHECK = "embed_mask.matches_reference"


class WrongOnOneCase(EngineModel):
    """Right everywhere but on the saved case: a bug no single drawn example is likely to hit."""

    def __init__(self, case) -> None:
        super().__init__()
        self.wrong_on = case

    def embedding_and_mask(self, case, encoder, *, cache=None):
        rows, mask = super().embedding_and_mask(case, encoder, cache=cache)
        return (rows + 1 if case == self.wrong_on and rows is not None else rows), mask


def test_a_saved_case_runs_first_and_is_kept_as_it_is():
    document = payload.load_document(SAVED)
    target, check = WrongOnOneCase(document.case), all_checks()[CHECK]
    assert run_check(check, target, max_examples=1).status == PASSED
    result = run_check(check, target, max_examples=1, explicit=[(document.case, document.params)])
    assert result.status == DIVERGENCE, result.reason
    assert result.findings[0].example[0] == document.case  # not shrunk: the saved case itself


def test_check_runs_the_saved_cases_of_its_checks(tmp_path, capsys):
    regressions = tmp_path / "regressions"
    regressions.mkdir()
    shutil.copy(SAVED, regressions)
    argv = ["check", "--target", "reference", "--max-examples", "1", "--findings", str(tmp_path / "f")]
    assert cli.main([*argv, "--checks", CHECK, "--regressions", str(regressions)]) == 0
    assert f"regressions: 1 saved case(s) from {regressions} run first" in capsys.readouterr().out
    assert cli.main([*argv, "--checks", "count", "--regressions", str(regressions)]) == 0
    assert "regressions:" not in capsys.readouterr().out  # its check is not selected
    assert cli.main([*argv, "--checks", CHECK, "--regressions", "none"]) == 0
    assert "regressions:" not in capsys.readouterr().out


def test_a_saved_case_that_does_not_parse_is_a_usage_error_naming_it(tmp_path, capsys):
    (tmp_path / "broken.json").write_text('{"format": "mmharness.case/1", "requests": 3}')
    argv = ["check", "--target", "reference", "--checks", CHECK, "--regressions", str(tmp_path)]
    assert cli.main(argv) == 2
    assert f"--regressions: {tmp_path / 'broken.json'}: " in capsys.readouterr().err
    assert cli.main(["check", "--regressions", str(tmp_path / "absent")]) == 2
    assert "--regressions" in capsys.readouterr().err
