"""Forks measured from outside, as a maintainer runs them (``network``: trees built from the cached 0.5.23).

Each tree is the release's package directory copied without its wheel metadata (a fork's checkout: its
version file still names its donor release), with one change a public fork made:
- its prefill reads ``item.feature.transport_mode`` (a processor's transport tensor): the harness's items
  carry plain feature tensors, so the read is what the harness cannot supply, never the fork's divergence;
- its ``embed_mm_inputs`` takes another form (an older release's, or one with a parameter the harness
  cannot name): the harness never drives it, and the fork report (console and JSON) says so;
- its rules import a name its ``multimodal_cache.py`` lacks: the one-line error names the import in the
  fork's own module names, with no release advice;
and ``targets`` says a tree is a tree, with the cached release whose files it shares.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from mmharness.cli import main

SCHEDULE = "sglang/srt/managers/mm_schedule.py"
UTILS = "sglang/srt/managers/mm_utils.py"
TRANSPORT = (
    SCHEDULE,
    "    defer_move = _can_skip_pre_embed_feature_move(data_embedding_func)\n",
    "    defer_move = _can_skip_pre_embed_feature_move(data_embedding_func)\n"
    "    if any(item.feature.transport_mode == 'cuda_ipc' for item in items):\n"
    "        defer_move = True\n",
)
"""Features behind a CUDA-IPC transport tensor are left for the encoder to move."""
EMBED = (
    "    input_ids: torch.Tensor,\n    input_embedding: nn.Embedding,\n"
    "    multimodal_model: nn.Module = None,\n"
)
MAPPING = f"{EMBED}    data_embedding_func_mapping: Dict[Modality, DataEmbeddingFunc] = None,\n"
OLDER_FORM = (
    UTILS,
    MAPPING,
    "    input_ids: torch.Tensor,\n    input_embedding: nn.Embedding,\n    image_data_embedding_func=None,\n"
    "    audio_data_embedding_func=None,\n",
)
"""``embed_mm_inputs`` in 0.4.7's own form: an encoder per modality, no mapping."""
NEW_FORM = (UTILS, MAPPING, MAPPING.replace(EMBED, f"{EMBED}    *,\n    vision_token_budget: int,\n"))
"""``embed_mm_inputs`` with a required parameter no release has."""
MISSING_IMPORT = (
    SCHEDULE,
    "from sglang.srt.mem_cache.multimodal_cache import EmbeddingResult, MultiModalStaticCache\n",
    "from sglang.srt.mem_cache.multimodal_cache import EmbeddingResult, MultiModalCache\n",
)


@pytest.fixture
def tree(sglang_release, tmp_path):
    """``tree(*edits)``: the cached 0.5.23's package as a fork's checkout, each ``(file, old, new)`` made."""
    release = Path(sglang_release("0.5.23").describe()["source"])

    def make(*edits) -> str:
        root = tmp_path / "fork"
        shutil.copytree(release / "sglang", root / "sglang")
        for file, old, new in edits:
            text = (root / file).read_text()
            assert text.count(old) == 1, f"{file} no longer holds the text this fork changes"
            (root / file).write_text(text.replace(old, new))
        return str(root)

    return make


def _check(tmp_path, capsys, target: str, checks: str) -> tuple[int, str, dict]:
    report = tmp_path / "report.json"
    code = main(
        [
            *("check", "--target", target, "--checks", checks, "--max-examples", "10"),
            *("--findings", str(tmp_path / "findings"), "--json", str(report)),
        ]
    )
    return code, capsys.readouterr().out, json.loads(report.read_text())


@pytest.mark.network
def test_a_fork_reading_a_transport_tensors_attribute_is_could_not_test_never_a_divergence(
    tree, tmp_path, capsys
):
    checks = "prefill.permutation,prefill.schedule_concat,prefill.short_lists"
    code, out, report = _check(tmp_path, capsys, tree(TRANSPORT), checks)
    findings = [f for r in report["results"] for f in r["findings"]]
    assert code == 3, out
    assert findings and all(f["kind"] == "could-not-test" for f in findings), out
    assert {f["signature"] for f in findings} == {"could not test: item.feature.transport_mode"}
    assert "which the harness supplies as a plain Tensor" in findings[0]["message"]


@pytest.mark.network
@pytest.mark.parametrize(
    "form, why",
    [(OLDER_FORM, "takes no data_embedding_func_mapping"), (NEW_FORM, "cannot supply vision_token_budget")],
)
def test_a_fork_form_of_embed_mm_inputs_the_harness_does_not_drive_is_listed_untested(
    tree, tmp_path, capsys, form, why
):
    code, out, report = _check(tmp_path, capsys, tree(form), "embed_mask.matches_reference")
    assert code in (0, 1), out  # ran (the release's own R3e finding may show: end to end still runs)
    untested = out.split("untested in ", 1)[1]
    assert "not driven: embed_mm_inputs" in untested and why in untested, out
    listed = [line for line in report["untested"] if line.startswith("not driven: embed_mm_inputs")]
    assert len(listed) == 1 and why in listed[0], report["untested"]


@pytest.mark.network
def test_a_failing_import_is_named_in_the_forks_own_modules_without_release_advice(tree, capsys):
    code = main(["check", "--target", tree(MISSING_IMPORT), "--checks", "chunk"])
    err = capsys.readouterr().err
    assert code == 2
    assert "cannot import name 'MultiModalCache' from 'sglang.srt.mem_cache.multimodal_cache'" in err
    assert "_mmharness_engine" not in err and "point at an SGLang release" not in err
    assert err.count("ImportError") == 1 and "mm_schedule.py, mm_utils.py" in err  # one error, its files


@pytest.mark.network
def test_targets_says_a_tree_is_a_tree_with_the_cached_release_it_shares_files_with(tree, capsys):
    assert main(["targets", tree(TRANSPORT)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "release: 0.5.23"
    assert lines[2].startswith("tree: by path, not a release (its version file says 0.5.23); nearest cached")
    assert "sglang==0.5.23 (5 of its 6 files alike)" in lines[2]
    assert main(["targets", "sglang==0.5.23"]) == 0
    assert "tree:" not in capsys.readouterr().out


@pytest.mark.network
def test_a_lone_rules_file_is_described_its_imported_rule_functions_not_taken_for_its_own(
    sglang_release, capsys
):
    """0.5.23's ``mm_utils.py`` alone imports the cache init and the prefill from ``mm_schedule.py``,
    which the load lacks: those names are stubs, not the release's functions (``describe`` called the
    stub init and crashed), and the file is byte for byte the release's."""
    lone = Path(sglang_release("0.5.23").describe()["source"]) / UTILS
    assert main(["targets", str(lone)]) == 0
    out = capsys.readouterr().out
    assert "tree: by path, not a release (it names no release); its files are sglang==0.5.23's" in out
    assert "cache: None" in out and "capabilities: (1)\n  split\n" in out


@pytest.mark.network
def test_against_its_release_a_fork_that_no_longer_drives_a_function_has_lost_coverage(
    tree, sglang_release, tmp_path, capsys
):
    """The release drives ``embed_mm_inputs``; the fork's new form is one the harness cannot call: against
    the release that is coverage lost, listed first and exit 3, unless allowed by name."""
    release = str(Path(sglang_release("0.5.23").describe()["source"]))
    report = tmp_path / "lost.json"
    argv = ["check", "--target", tree(NEW_FORM), "--against", release, "--checks", "count.matches_reference"]
    junit = tmp_path / "lost.xml"
    argv += ["--max-examples", "3", "--findings", str(tmp_path / "findings"), "--json", str(report)]
    assert main([*argv, "--junit", str(junit)]) == 3
    out = capsys.readouterr().out
    assert f"lost coverage: engine function embed_mm_inputs runs on {release} and not here: " in out
    assert out.index("lost coverage:") < out.index("PASS ")
    (lost,) = json.loads(report.read_text())["lost"]
    assert (lost["what"], lost["of"], lost["allowed"]) == ("embed_mm_inputs", "function", False)
    assert "vision_token_budget" in lost["reason"]
    xml = junit.read_text()
    assert '<property name="untested" value="not driven: embed_mm_inputs: ' in xml, "untested, in JUnit too"
    assert 'classname="mmharness.lost.function" name="embed_mm_inputs"' in xml
    assert main([*argv, "--allow-lost", "embed_mm_inputs"]) == 0
    assert "(allowed: --allow-lost)" in capsys.readouterr().out
