"""R5 on every form a processor hands the splitter: the strategies, the case format, the rule, the
adapters' calling conventions, the mutants each form alone exposes, and real releases.

The offline tests need no engine: a synthetic SGLang splitter that records what
it is handed stands for the engine's. The ``network`` ones download SGLang
releases, check what they show, and seed single-line bugs into a copy of
0.5.23's splitter that the founding layout (images, tensors, no model data)
never sees and the new forms catch.
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis.errors import InvalidArgument
from mmharness import boundaries, item_data, payload, reference
from mmharness import strategies as mst
from mmharness.checks import all_checks
from mmharness.checks import grids as grid_checks
from mmharness.checks.outcome import COULD_NOT_TEST, DIVERGENCE, HAZARD
from mmharness.model import Case, CaseError, Item, Request, validate
from mmharness.runner import PASSED, run_check
from mmharness.targets.mutants import MUTANTS
from mmharness.targets.specs import resolve

CHECKS = all_checks()
SPLIT_CHECKS = ("grid.split_matches_reference", "grid.split_then_encode")
FORM_MUTANTS = (
    "split_video_as_images",
    "split_numpy_features_whole",
    "split_sequence_features_by_part",
    "split_list_data_copied",
    "split_patch_data_copied",
    "split_scalar_data_dropped",
    "split_ignores_num_patches",
    "split_precomputed_kept_whole",
    "split_mismatched_grid_per_span",
    "split_flat_grid_crashes",
    "split_ignores_feature_total",
)
"""One mutant per class of R5 items: each shows on its class only."""
EVERY_FORM = {
    "modalities": ("image", "video", "audio"),
    "feature_forms": ("tensor", "numpy", "list", "tuple"),
    "grid_forms": ("rows", "flat", "absent"),
    "layouts": ("aligned", "grid_rows_differ", "feature_rows_differ"),
    "model_data": ("num_patches", "image_sizes", "patch_pixel_values", "patch_newline_mask", "merge_size"),
    "precomputed": True,
}


def case_of(item: Item, **fields) -> Case:
    return Case((Request(item.spans[-1][1] + 1, 0, item.spans[-1][1] + 1, (item,)),), **fields)


# Strategies ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"modalities": ("image", "hologram")}, "modalities contains 'hologram'"),
        ({"modalities": "video"}, "must be a sequence of values"),
        ({"feature_forms": ()}, "feature_forms=() must not be empty"),
        ({"feature_forms": ("jax",)}, "feature_forms contains 'jax'"),
        ({"grid_forms": ("sparse",)}, "grid_forms contains 'sparse'"),
        ({"layouts": ("jumbled",)}, "layouts contains 'jumbled'"),
        ({"model_data": ("pixel_values",)}, "model_data contains 'pixel_values'"),
        ({"model_data": "num_patches"}, "must be a sequence of keys"),
        ({"precomputed": 1}, "precomputed=1 must be True or False"),
        ({"modalities": ("audio",)}, "grid_forms needs 'absent'"),
    ],
)
@pytest.mark.parametrize("strategy", [mst.grid_items, mst.grid_cases])
def test_bad_options_are_refused_when_the_strategy_is_built(strategy, options, message):
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        strategy(**options)


@settings(max_examples=60, deadline=None, database=None)
@given(mst.grid_cases(**EVERY_FORM))
def test_every_form_draws_well_formed_cases_that_round_trip(case):
    validate(case)
    document = payload.dumps(case)
    assert payload.loads(document) == case
    (item,) = case.requests[0].items
    if item.modality == "audio":
        assert item.grid_form == "absent"
    if item.modality == "video":
        assert item.grid_key == "video_grid_thw"
    if item.precomputed:
        assert item.feature_rows is None


@settings(max_examples=40, deadline=None, database=None)
@given(mst.grid_items(aggregated=True, modalities=("video",), max_seq_len=30))
def test_videos_have_a_span_per_frame_or_per_video(item):
    frames = sum(t for t, _, _ in item.grid)
    assert len(item.spans) in (len(item.grid), frames) and len(item.spans) >= 2


def test_the_defaults_draw_the_founding_layout_only():
    @settings(max_examples=40, database=None)
    @given(mst.grid_items())
    def founding(item):
        assert (item.modality, item.grid_form, item.feature_form, item.model_data) == (
            "image",
            "rows",
            "tensor",
            (),
        )
        assert item.feature_rows is None and not item.precomputed
        assert len(item.spans) == len(item.grid)

    founding()


# The case format -------------------------------------------------------------------------

FORMS = Item(
    spans=((0, 0), (2, 2)),
    hash=3,
    modality="video",
    grid=((1, 1, 2), (1, 2, 1)),
    grid_key="video_grid_thw",
    feature_form="tuple",
    feature_rows=2,
    grid_form="absent",
    model_data=(("num_patches", "list"), ("merge_size", "numpy")),
)


def test_the_split_forms_round_trip_as_format_1_2():
    case = case_of(FORMS)
    document = payload.dump(case)
    assert document["format"] == payload.FORMAT_SPLIT_FORMS
    written = document["requests"][0]["items"][0]
    assert written["model_data"] == [["num_patches", "list"], ["merge_size", "numpy"]]
    assert payload.loads(payload.dumps(case)) == case
    plain = case_of(Item(((0, 1),), 1, grid=((1, 1, 2),)))
    assert payload.dump(plain)["format"] == payload.FORMAT, "no split form: still /1"
    assert "grid_form" not in payload.dump(plain)["requests"][0]["items"][0]


def test_a_split_form_in_an_older_format_is_refused_with_its_path():
    document = payload.dump(case_of(FORMS))
    document["format"] = payload.FORMAT_ITEM_DEVICES
    with pytest.raises(
        payload.PayloadError, match=r"requests\[0\]\.items\[0\]\.grid_form: the R5 split forms need"
    ):
        payload.parse(document)


def test_an_old_case_file_loads_with_the_founding_forms():
    path = Path(__file__).parent.parent / "corpus" / "regressions" / "aggregated-grid-item.json"
    (item,) = payload.load(path).requests[0].items
    assert (item.grid_form, item.feature_form, item.feature_rows, item.model_data) == (
        "rows",
        "tensor",
        None,
        (),
    )


@pytest.mark.parametrize(
    ("fields", "path", "reason"),
    [
        ({"grid_form": "flat", "grid": ((1, 1, 1), (1, 1, 1))}, "grid_form", "a flat grid is one row"),
        ({"model_data": (("pixels", "tensor"),)}, "model_data[0]", "unknown key 'pixels'"),
        ({"model_data": (("merge_size", "tensor"), ("merge_size", "list"))}, "model_data[1]", "given twice"),
        ({"model_data": (("num_patches", "list"),), "grid": ()}, "model_data[0]", "sized by the grid's rows"),
        ({"feature_form": "jax"}, "feature_form", "must be one of"),
        ({"feature_rows": -1}, "feature_rows", "negative row count"),
    ],
)
def test_bad_split_forms_name_their_field(fields, path, reason):
    item = replace(Item(((0, 1),), 1, grid=((1, 1, 2),)), **fields)
    with pytest.raises(CaseError) as raised:
        validate(case_of(item))
    assert raised.value.path == f"requests[0].items[0].{path}" and reason in raised.value.reason
    text = json.dumps(payload.dump(case_of(Item(((0, 1),), 1, grid=((1, 1, 2),)))))
    assert payload.loads(text)  # the well-formed neighbour still parses


# The rule -------------------------------------------------------------------------------

IMAGES = Item(((0, 3), (5, 6)), 1, grid=((1, 2, 2), (1, 1, 2)))
VIDEO = Item(
    ((0, 0), (2, 2), (4, 5)), 2, modality="video", grid=((2, 1, 1), (1, 1, 2)), grid_key="video_grid_thw"
)


@pytest.mark.parametrize(
    ("item", "kind", "processor"),
    [
        (IMAGES, reference.SPLIT, True),
        (VIDEO, reference.SPLIT, True),
        (replace(VIDEO, spans=((0, 1), (3, 3))), reference.EITHER, True),  # a span per video
        (replace(VIDEO, spans=((0, 0), (2, 2), (4, 4), (6, 6))), reference.OUTSIDE, False),
        (replace(IMAGES, grid=((1, 2, 2),)), reference.OUTSIDE, False),
        (replace(IMAGES, grid=((1, 2, 2),), grid_form="flat"), reference.OUTSIDE, False),
        (replace(IMAGES, feature_rows=2), reference.OUTSIDE, False),
        (replace(IMAGES, precomputed=True), reference.SPLIT, True),  # 4 + 2 tokens, 4 + 2 patches
        (replace(IMAGES, spans=((0, 1), (3, 3)), precomputed=True), reference.OUTSIDE, True),  # merged
        (replace(IMAGES, spans=((0, 1), (3, 6)), precomputed=True), reference.OUTSIDE, False),
        (replace(IMAGES, grid_form="absent", feature_rows=2), reference.EITHER, True),
        (replace(IMAGES, grid_form="absent"), reference.OUTSIDE, False),  # 6 rows for 2 entries
        (
            replace(
                IMAGES, grid_form="absent", feature_rows=2, model_data=(("patch_pixel_values", "tensor"),)
            ),
            reference.OUTSIDE,
            True,
        ),
        (Item(((0, 2),), 4, grid=((1, 2, 2), (1, 1, 1))), reference.WHOLE, False),
    ],
)
def test_what_the_rule_asks_of_each_layout(item, kind, processor):
    assert reference.split_rule(item).kind == kind
    assert reference.split_from_processors(item) == processor


def test_a_video_split_gives_each_video_its_frames():
    first, second = reference.split_rule(VIDEO).parts
    assert (first.spans, first.grid_row, first.features) == (((0, 0), (2, 2)), (2, 1, 1), range(0, 2))
    assert (second.spans, second.grid_row, second.features) == (((4, 5),), (1, 1, 2), range(2, 4))


def test_the_parts_cut_every_value_in_its_form():
    item = replace(
        IMAGES,
        feature_form="numpy",
        model_data=(("num_patches", "list"), ("patch_pixel_values", "tuple"), ("merge_size", "tensor")),
    )
    case = case_of(item)
    whole = item_data.feature_item(case, item)
    assert isinstance(whole.features, np.ndarray) and whole.features.shape == (6, 8)
    first, second = item_data.expected_parts(whole)
    assert first.features.shape == (4, 8) and second.features.shape == (2, 8)
    assert first.model_data["num_patches"] == [4] and second.model_data["num_patches"] == [2]
    assert len(first.model_data["patch_pixel_values"]) == 4
    assert first.model_data["merge_size"] is whole.model_data["merge_size"]
    joined = np.concatenate([first.features, second.features])
    assert item_data.canonical(joined) == item_data.canonical(whole.features)


def test_a_list_and_a_tuple_are_one_form_and_grids_read_back_in_theirs():
    rows = torch.arange(6).reshape(3, 2)
    assert item_data.canonical(item_data.in_form(rows, "list")) == item_data.canonical(
        item_data.in_form(rows, "tuple")
    )
    assert item_data.canonical(item_data.in_form(rows, "numpy")) != item_data.canonical(rows)
    assert item_data.read_grid(torch.tensor([[1, 2, 3]])) == (((1, 2, 3),), "rows")
    assert item_data.read_grid(torch.tensor([1, 2, 3])) == (((1, 2, 3),), "flat")
    assert item_data.read_grid(None) == ((), "absent")
    assert item_data.grid(replace(IMAGES, grid=((1, 2, 2),), grid_form="flat")).shape == (3,)


# Boundary classes ---------------------------------------------------------------------------


def test_split_classes_of_hand_made_items():
    assert boundaries.split_classes(VIDEO) == {"video, a grid row per video"}
    assert boundaries.split_classes(replace(IMAGES, grid=((1, 2, 2),), grid_form="flat")) == {"flat grid"}
    gridless = replace(
        IMAGES,
        grid_form="absent",
        feature_rows=2,
        feature_form="tuple",
        model_data=(("num_patches", "numpy"), ("patch_newline_mask", "list")),
    )
    assert boundaries.split_classes(gridless) == {
        "no grid",
        "no grid, patch data cut by num_patches",
        "tuple features",
        "row-aligned model data",
        "patch-aligned model data",
        "numpy model data",
        "list or tuple model data",
    }
    assert boundaries.split_classes(Item(((0, 1), (3, 4)), 1)) == set(), "no R5 data: no split class"
    # An audio clip of two runs with one feature entry (SGLang's splitter must keep it whole).
    clip = Item(((0, 1), (3, 4)), 1, modality="audio", grid=((1, 1, 1),) * 2, grid_form="absent")
    differ = "no grid, entries differ from the spans"
    assert boundaries.split_classes(replace(clip, feature_rows=1)) == {"no grid", differ}
    assert differ not in boundaries.split_classes(replace(clip, feature_rows=2))


def test_the_metamorphic_split_check_reaches_every_split_class_too():
    """Within its CI run (the differential check reaches each within 50: tests/test_strategies.py).

    Measured in a process of its own, as ``mmharness check`` runs it: past about example 30 the CI
    profile's draws differ in a process that has run other Hypothesis tests before."""
    import json
    import subprocess
    import sys

    script = (
        "import json; from mmharness import boundaries; from mmharness.checks import all_checks;"
        " from mmharness.targets.reference import ReferenceTarget;"
        " print(json.dumps(boundaries.first_seen(all_checks()['grid.split_then_encode'], ReferenceTarget())))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    first = json.loads(done.stdout)
    assert set(boundaries.SPLIT_CLASSES) <= set(first), set(boundaries.SPLIT_CLASSES) - set(first)


# The mutants: each form's bug shows on its form only ---------------------------------------


def test_every_form_mutant_is_registered_for_r5():
    assert all(MUTANTS[name].rule == "R5" for name in FORM_MUTANTS)
    assert {name for name in MUTANTS if name.startswith("split_")} >= set(FORM_MUTANTS)


@pytest.mark.parametrize("name", FORM_MUTANTS)
def test_the_founding_layout_alone_misses_each_form_mutant(name):
    """The split checks as they were (images, tensor features, no model data) pass every one."""
    founding = {
        "grid.split_matches_reference": grid_checks._grid_cases(None),
        "grid.split_then_encode": grid_checks._grid_cases(True),
    }
    for check_id, examples in founding.items():
        result = run_check(replace(CHECKS[check_id], examples=examples), resolve(f"mutant:{name}"))
        assert result.status == PASSED, (check_id, result.reason)


@pytest.mark.parametrize("name", FORM_MUTANTS)
def test_the_split_checks_kill_each_form_mutant(name):
    expected = HAZARD if MUTANTS[name].hazard else DIVERGENCE
    statuses = {
        run_check(CHECKS[c], resolve(f"mutant:{name}"), stop_at=(expected,)).status for c in SPLIT_CHECKS
    }
    assert expected in statuses, statuses


# The SGLang calling convention, on a synthetic splitter ---------------------------------------

RECORDING_SPLITTER = '''
"""A synthetic splitter for mmharness tests: it records each item it is handed and splits none."""

HANDED = []


def get_new_expanded_mm_items(original_mm_items):
    HANDED.extend(original_mm_items)
    return list(original_mm_items)
'''


@pytest.fixture
def recording(tmp_path):
    from mmharness.engines.sglang.adapter import from_path

    managers = tmp_path / "sglang" / "srt" / "managers"
    managers.mkdir(parents=True)
    (managers / "mm_utils.py").write_text(textwrap.dedent(RECORDING_SPLITTER))
    (tmp_path / "sglang" / "__init__.py").write_text('raise RuntimeError("never run")\n')
    return from_path(str(tmp_path))


@pytest.mark.parametrize(
    "item",
    [
        replace(IMAGES, feature_form="numpy", model_data=(("merge_size", "numpy"), ("image_sizes", "tuple"))),
        replace(IMAGES, grid=((1, 2, 2),), grid_form="flat", feature_form="list"),
        replace(IMAGES, grid_form="absent", feature_rows=2, model_data=(("num_patches", "tensor"),)),
        replace(VIDEO, precomputed=True, spans=((0, 0), (2, 2), (4, 5))),
    ],
)
def test_the_adapter_hands_the_splitter_each_form_and_reads_the_parts_back(recording, item):
    case = case_of(item)
    whole = item_data.feature_item(case, item)
    (part,) = recording.split_item(case, whole)
    (engine_item,) = recording.engine.module("sglang.srt.managers.mm_utils").HANDED
    assert engine_item.feature is whole.features and engine_item.precomputed_embeddings is whole.embedding
    data = dict(engine_item.model_specific_data)
    grid = data.pop(item.grid_key, None)
    assert item_data.read_grid(grid) == (
        ((), "absent") if item.grid_form == "absent" else (item.grid, item.grid_form)
    )
    if grid is not None:  # in the item's container, as its processor hands the grid with its features
        container = {"tensor": "Tensor", "numpy": "ndarray", "list": "list", "tuple": "tuple"}
        assert type(grid).__name__ == container[item.feature_form]
    assert data.keys() == whole.model_data.keys()
    assert engine_item.offsets == [tuple(span) for span in item.spans]
    assert item_data.view(part) == item_data.view(whole), "an item left whole reads back as itself"


def test_a_splitter_that_splits_nothing_is_caught_on_images_and_videos(recording):
    result = run_check(CHECKS["grid.split_matches_reference"], recording)
    assert result.status == DIVERGENCE
    fewer = {f.signature for f in result.findings if f.signature.startswith("split items: fewer entries")}
    assert any("(image, a span per grid row; " in s for s in fewer), fewer
    assert any("(video, a span per frame; video_grid_thw)" in s for s in fewer), fewer


def test_a_divergence_names_the_form_it_failed_on_so_a_baseline_of_one_form_hides_no_other(recording):
    """The same way of failing on another layout or grid key is another signature: a release known to
    leave Kimi-keyed images whole (0.5.7..0.5.22) does not hide a splitter that cuts no image at all."""
    check = CHECKS["grid.split_matches_reference"]
    signatures = {
        key: {f.signature for f in _replay(check, recording, case_of(replace(IMAGES, grid_key=key))).findings}
        for key in ("grid_thws", "image_grid_thw")
    }
    assert signatures == {
        key: {f"split items: fewer entries (image, a span per grid row; {key})"} for key in signatures
    }


# Releases (network) -------------------------------------------------------------------------------

RELEASE = "0.5.23"
SPLITTER = "sglang/srt/managers/mm_utils.py"
SEEDED = [
    (
        "a video keeps only its first frame span",
        "new_item.offsets = item.offsets[frame_start:frame_end]",
        "new_item.offsets = item.offsets[frame_start : frame_start + 1]",
    ),
    (
        "patch-aligned model data copied to every part of a grid split",
        "sliced[key] = _slice_value(value, start, end)",
        "sliced[key] = value",
    ),
    (
        "no grid: patch-aligned model data copied, num_patches ignored",
        "new_data[k] = _slice_value(v, patch_start, patch_end)",
        "new_data[k] = v",
    ),
    ("no grid: list model data copied to every part", "new_data[k] = [v[index]]", "new_data[k] = v"),
    (
        "no grid: precomputed rows not cut",
        "new_item.precomputed_embeddings = item.precomputed_embeddings[i : i + 1]",
        "new_item.precomputed_embeddings = item.precomputed_embeddings",
    ),
]


@pytest.mark.network
@pytest.mark.parametrize(("what", "original", "bug"), SEEDED, ids=[s[0] for s in SEEDED])
def test_a_seeded_splitter_bug_the_founding_layout_misses_is_caught(
    sglang_release, seeded_copy, what, original, bug
):
    from mmharness.engines.sglang.adapter import from_path

    copy = seeded_copy(release_dir(sglang_release, RELEASE), [(SPLITTER, original, bug)])
    seeded = from_path(str(copy), name="seeded", release=RELEASE)
    founding = {
        "grid.split_matches_reference": grid_checks._grid_cases(None),
        "grid.split_then_encode": grid_checks._grid_cases(True),
    }
    for check_id, examples in founding.items():
        assert run_check(replace(CHECKS[check_id], examples=examples), seeded).status == PASSED
    caught = (run_check(CHECKS[c], seeded, stop_at=(DIVERGENCE,)).status for c in SPLIT_CHECKS)
    assert DIVERGENCE in caught, what


def release_dir(sglang_release, version: str) -> Path:
    """The directory a release was unpacked into (what a seeded copy copies)."""
    return Path(sglang_release(version).describe()["source"])


@pytest.mark.network
def test_0_5_23_diverges_on_no_form_and_its_hazards_are_hand_built_layouts(sglang_release):
    from mmharness.engines.sglang.adapter import from_path

    target = from_path(str(release_dir(sglang_release, RELEASE)), release=RELEASE)
    for check_id in SPLIT_CHECKS:
        # the whole budget, each hazard's signature kept unshrunk: it ends early only at a failing status
        result = run_check(CHECKS[check_id], target, stop_at=(DIVERGENCE, COULD_NOT_TEST))
        assert result.status in (PASSED, HAZARD), (check_id, result.reason)
        assert all(f.signature.startswith("not from a processor") for f in result.findings)


@pytest.mark.network
def test_0_5_10_copies_patch_data_to_every_part_and_0_5_15_cuts_it(sglang_release):
    """0.5.10's per-entry split (no grid) copies patch-aligned data whole; 0.5.15 cuts it by num_patches."""
    from mmharness.engines.sglang.adapter import from_path

    item = replace(
        IMAGES,
        grid_form="absent",
        feature_rows=2,
        model_data=(("num_patches", "list"), ("patch_pixel_values", "tensor")),
    )
    check = CHECKS["grid.split_matches_reference"]
    found = {}
    for version in ("0.5.10", "0.5.15"):
        target = from_path(str(release_dir(sglang_release, version)), release=version)
        found[version] = {f.signature for f in _replay(check, target, case_of(item)).findings}
    assert found["0.5.10"] == {
        "split: a part's model data 'patch_pixel_values': more rows (no grid, an entry per span)"
    }
    assert found["0.5.15"] == set()


def _replay(check, target, case):
    from mmharness.runner import replay

    return replay(check, target, (case, {}))
