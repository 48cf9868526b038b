"""Tests of the strategies package: validity, variety, shrinking and argument checks.

Validity runs under default Hypothesis settings, so its health checks run too.
Variety uses ``find`` without shrinking and a small example budget: each shape
a check depends on must come up within a few hundred examples, not eventually.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from itertools import accumulate, pairwise

import pytest
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from mmharness import boundaries as boundary_classes
from mmharness import strategies
from mmharness.model import GRID_KEYS, Case, Item, Request, Span, problems, validate
from mmharness.strategies import (
    COVERAGES,
    MALFORMED_KINDS,
    cases,
    grid_cases,
    grid_items,
    grids,
    malformed_cases,
    requests,
    schedules,
    spans,
)

# Helpers ----------------------------------------------------------------------


def flags(case: Case) -> list[bool]:
    return [item.precomputed for _, _, item in case.items()]


def check_spans(seq_len: int, drawn: tuple[Span, ...]) -> None:
    previous = -1
    for start, end in drawn:
        assert previous < start <= end < seq_len, (seq_len, drawn)
        previous = end


def check_hashes(case: Case, *, duplicates: bool, collisions: bool) -> None:
    counts: dict[int, set[int]] = {}
    for _, _, item in case.items():
        counts.setdefault(item.hash, set()).add(item.token_count)
        assert item.hash >= 0
    if not collisions:
        assert all(len(c) == 1 for c in counts.values()), counts
    if not duplicates and not collisions:
        assert len(counts) == sum(1 for _ in case.items())


def check_coverage(case: Case, coverage: str) -> None:
    fl = flags(case)
    if coverage == "all":
        assert all(fl)
    elif coverage == "none":
        assert not any(fl)
    elif coverage == "partial":
        assert any(fl) and not all(fl)


def alone(request: Request) -> Case:
    return Case((request,))


# Well-formed by construction ------------------------------------------------------


@given(st.data())
def test_spans_are_disjoint_increasing_and_in_range(data):
    seq_len = data.draw(st.integers(0, 40), label="seq_len")
    max_spans = data.draw(st.integers(1, 6), label="max_spans")
    min_spans = data.draw(st.integers(0, min(max_spans, seq_len)), label="min_spans")
    drawn = data.draw(spans(seq_len=seq_len, min_spans=min_spans, max_spans=max_spans))
    assert min_spans <= len(drawn) <= max_spans
    check_spans(seq_len, drawn)


@settings(max_examples=300)
@given(requests())
def test_requests_are_well_formed(request):
    validate(alone(request))
    assert len(request.items) <= 3 and request.seq_len <= 40
    for item in request.items:
        assert 1 <= len(item.spans) <= 3
        assert item.modality != "image" or len(item.spans) == 1  # videos and audio may have more
    check_hashes(alone(request), duplicates=True, collisions=False)


@settings(max_examples=300)
@given(cases())
def test_cases_are_well_formed(case):
    validate(case)
    assert len(case.requests) <= 4
    assert case.hidden in (4, 8) and case.device == "cpu"
    check_hashes(case, duplicates=True, collisions=False)


@pytest.mark.parametrize("coverage", COVERAGES)
@pytest.mark.parametrize(
    ("duplicates", "collisions"), [(False, False), (True, False), (True, True), (False, True)]
)
def test_cases_follow_their_options(coverage, duplicates, collisions):
    @settings(max_examples=60)
    @given(
        cases(
            min_requests=1,
            max_requests=3,
            max_items=2,
            max_spans_per_item=2,
            max_seq_len=12,
            hiddens=(16,),
            dtypes=("float16",),
            ndims=(3,),
            coverage=coverage,
            duplicates=duplicates,
            collisions=collisions,
            min_items_total=2,
            device="cuda",
        )
    )
    def inner(case):
        validate(case)
        assert 1 <= len(case.requests) <= 3
        assert sum(1 for _ in case.items()) >= 2
        for r in case.requests:
            assert r.seq_len <= 12 and len(r.items) <= 2
            assert all(len(item.spans) <= 2 for item in r.items)
        assert (case.hidden, case.dtype, case.ndim, case.device) == (16, "float16", 3, "cuda")
        check_hashes(case, duplicates=duplicates, collisions=collisions)
        check_coverage(case, coverage)

    inner()


@pytest.mark.parametrize("coverage", COVERAGES)
def test_requests_follow_coverage(coverage):
    @settings(max_examples=40)
    @given(requests(coverage=coverage, duplicates=False))
    def inner(request):
        validate(alone(request))
        check_coverage(alone(request), coverage)
        check_hashes(alone(request), duplicates=False, collisions=False)

    inner()


@given(cases(max_requests=0))
def test_empty_batches(case):
    assert case.requests == ()


@given(st.data())
def test_schedules_partition_the_sequence(data):
    seq_len = data.draw(st.integers(0, 40), label="seq_len")
    cuts = data.draw(st.lists(st.integers(-2, 42), max_size=5), label="cuts")
    chunks = data.draw(schedules(seq_len=seq_len, cuts=cuts))
    assert all(c > 0 for c in chunks) and sum(chunks) == seq_len


def test_empty_sequence_has_the_empty_schedule():
    assert find(schedules(seq_len=0), lambda s: True) == ()


@given(grids(min_rows=0, max_rows=3, max_dim=2))
def test_grids(grid):
    assert len(grid) <= 3
    assert all(len(row) == 3 and all(1 <= n <= 2 for n in row) for row in grid)


@pytest.mark.parametrize("aggregated", [None, True, False])
def test_grid_items(aggregated):
    @settings(max_examples=50)
    @given(grid_items(aggregated=aggregated, max_seq_len=20))
    def inner(item):
        assert item.modality == "image" and item.grid_key in GRID_KEYS
        assert len(item.spans) == len(item.grid) >= 1
        if aggregated is not None:
            assert (len(item.grid) >= 2) == aggregated
        check_spans(20, item.spans)
        validate(Case((Request(20, 0, 20, (item,)),)))

    inner()


@given(grid_cases())
def test_grid_cases_are_well_formed(case):
    validate(case)
    ((item,),) = [r.items for r in case.requests]
    assert len(item.spans) == len(item.grid)


# Malformed: exactly one rule broken, named by the first CaseError --------------------

SPAN_PATH = r"requests\[\d+\]\.items\[\d+\]\.spans\[\d+\]"
EXPECTED = {
    "unsorted": (r"requests\[\d+\]\.items\[\d+\]\.spans\[0\]", "not after"),
    "overlapping": (SPAN_PATH, "not after"),
    "out_of_range": (SPAN_PATH, "outside"),
    "reversed": (SPAN_PATH, "< start"),
    "negative_length": (r"requests\[\d+\]\.(prefix_len|extend_len)", "negative length"),
    "window_past_end": (r"requests\[\d+\]\.extend_len", "past seq_len"),
    "row_mismatch": (r"requests\[\d+\]\.items\[\d+\]\.rows", "embedding rows"),
}


def span_at(case: Case, path: str) -> tuple[list[Span], int]:
    """The flagged request's spans in order, and the flagged span's index among them."""
    r, i, s = map(int, re.findall(r"\d+", path))
    flat = [(k, n) for k, item in enumerate(case.requests[r].items) for n in range(len(item.spans))]
    spans_ = [case.requests[r].items[k].spans[n] for k, n in flat]
    return spans_, flat.index((i, s))


@pytest.mark.parametrize("kind", MALFORMED_KINDS)
def test_malformed_cases_break_one_rule_and_name_its_field(kind):
    path_pattern, reason = EXPECTED[kind]

    @settings(max_examples=60)
    @given(malformed_cases(kinds=[kind]))
    def inner(case):
        found = list(problems(case))
        assert found, case
        with pytest.raises(ValueError) as raised:
            validate(case)
        first = raised.value
        assert re.fullmatch(path_pattern, first.path), (kind, first)
        assert reason in first.reason, (kind, first)
        # Every problem is of the same kind (the one rule broken).
        for problem in found:
            assert reason in problem.reason, (kind, found)
        if kind in ("unsorted", "overlapping"):
            flat, at = span_at(case, first.path)
            (a_start, a_end), (b_start, _) = flat[at - 1], flat[at]
            if kind == "unsorted":
                assert b_start < a_start
            else:
                assert a_start <= b_start <= a_end

    inner()


@given(malformed_cases())
def test_every_malformed_case_fails_validation(case):
    with pytest.raises(ValueError):
        validate(case)


# Variety: each shape the checks rely on comes up within a small budget --------------

QUICK = settings(max_examples=300, phases=[Phase.generate], database=None)


def some_span(case: Case, test: Callable[[Request, int, int], bool]) -> bool:
    return any(test(r, s, e) for r in case.requests for i in r.items for s, e in i.spans)


def adjacent(drawn: tuple[Span, ...]) -> bool:
    return any(b[0] == a[1] + 1 for a, b in pairwise(drawn))


def boundaries(schedule: tuple[int, ...]) -> set[int]:
    return set(accumulate(schedule))


def dup_across(case: Case) -> bool:
    seen: dict[int, int] = {}
    return any(seen.setdefault(item.hash, r) != r for r, _, item in case.items())


def partial_inside_a_request(case: Case) -> bool:
    return any(len(r.items) > 1 and len({i.precomputed for i in r.items}) == 2 for r in case.requests)


def full_beside_raw(case: Case) -> bool:
    states = {tuple({i.precomputed for i in r.items}) for r in case.requests if r.items}
    return (True,) in states and (False,) in states


def collision(case: Case) -> bool:
    counts: dict[int, set[int]] = {}
    for _, _, item in case.items():
        counts.setdefault(item.hash, set()).add(item.token_count)
    return any(len(c) > 1 for c in counts.values())


VARIETY = {
    "adjacent spans": (spans(seq_len=20), adjacent),
    "one-token span": (spans(seq_len=20), lambda d: any(s == e for s, e in d)),
    "span at 0": (spans(seq_len=20), lambda d: d[0][0] == 0),
    "span at seq_len - 1": (spans(seq_len=20), lambda d: d[-1][1] == 19),
    "gap between spans": (
        spans(seq_len=20),
        lambda d: any(b[0] > a[1] + 1 for a, b in pairwise(d)),
    ),
    "extend_len 0 with items": (
        cases(),
        lambda c: any(r.items and not r.extend_len for r in c.requests),
    ),
    "prefix at a span start": (
        cases(min_items_total=1),
        lambda c: some_span(c, lambda r, s, e: 0 < r.prefix_len == s),
    ),
    "prefix at a span start - 1": (
        cases(min_items_total=1),
        lambda c: some_span(c, lambda r, s, e: 0 < r.prefix_len == s - 1),
    ),
    "prefix at a span end + 1": (
        cases(min_items_total=1),
        lambda c: some_span(c, lambda r, s, e: r.prefix_len == e + 1 < r.seq_len),
    ),
    "window ends inside a span": (
        cases(min_items_total=1),
        lambda c: some_span(c, lambda r, s, e: s < r.prefix_len + r.extend_len <= e),
    ),
    "empty request beside a non-empty one": (
        cases(),
        lambda c: any(not r.items for r in c.requests) and any(r.items for r in c.requests),
    ),
    "partial coverage inside one request": (cases(coverage="partial"), partial_inside_a_request),
    "full request beside a raw one": (cases(coverage="partial"), full_beside_raw),
    "partial coverage under any": (cases(), lambda c: any(flags(c)) and not all(flags(c))),
    "duplicate hash across requests": (cases(), dup_across),
    "duplicate video": (
        cases(),
        lambda c: any(
            len(a.spans) > 1 and a.hash == b.hash and a is not b
            for _, _, a in c.items()
            for _, _, b in c.items()
        ),
    ),
    "collision": (cases(collisions=True), collision),
    "audio item": (cases(), lambda c: any(i.modality == "audio" for _, _, i in c.items())),
    "3-D embeddings": (cases(), lambda c: c.ndim == 3),
    "bfloat16": (cases(), lambda c: c.dtype == "bfloat16"),
    "aggregated grid with 3+ rows": (grid_items(aggregated=True), lambda i: len(i.grid) >= 3),
    "grid_thws key": (grid_items(), lambda i: i.grid_key == "grid_thws"),
    "video of a span per frame": (
        grid_items(aggregated=True, modalities=("video",)),
        lambda i: len(i.spans) == sum(t for t, _, _ in i.grid) > len(i.grid),
    ),
    "numpy features": (grid_items(feature_forms=("tensor", "numpy")), lambda i: i.feature_form == "numpy"),
    "no grid, patch data cut by num_patches": (
        grid_items(aggregated=True, grid_forms=("absent",), model_data=("num_patches", "patch_pixel_values")),
        lambda i: len(i.model_data) == 2,
    ),
    "precomputed rows that follow the grid": (
        grid_items(aggregated=True, precomputed=True),
        lambda i: i.precomputed and [e - s + 1 for s, e in i.spans] == [t * h * w for t, h, w in i.grid],
    ),
    "schedule boundary on a cut": (schedules(seq_len=30, cuts=(7,)), lambda s: 7 in boundaries(s)),
    "schedule boundary next to a cut": (
        schedules(seq_len=30, cuts=(7,)),
        lambda s: 8 in boundaries(s) and 7 not in boundaries(s),
    ),
}


@pytest.mark.parametrize("name", list(VARIETY))
def test_variety(name):
    strategy, condition = VARIETY[name]
    find(strategy, condition, settings=QUICK)


# Shrinking: toward few requests, few items, short sequences, small hashes ------------


def minimal(strategy, condition=lambda _: True):
    return find(strategy, condition, settings=settings(database=None, max_examples=500))


def test_shrinks_to_one_one_token_item():
    case = minimal(cases(), lambda c: any(True for _ in c.items()))
    (request,) = case.requests
    assert request == Request(1, 0, 1, request.items)
    (item,) = request.items
    assert (item.spans, item.hash, item.precomputed) == (((0, 0),), 0, False)
    assert item.modality == "image"
    assert (case.hidden, case.dtype, case.ndim) == (4, "float32", 2)


def test_shrinks_partial_coverage_to_two_items():
    case = minimal(cases(coverage="partial"))
    (request,) = case.requests
    assert request.seq_len == 2
    assert [(i.spans, i.hash) for i in request.items] == [(((0, 0),), 0), (((1, 1),), 1)]


def test_shrinks_duplicates_across_requests():
    case = minimal(cases(), dup_across)
    assert len(case.requests) == 2
    assert all(r.seq_len == 1 and len(r.items) == 1 for r in case.requests)
    assert {i.hash for _, _, i in case.items()} == {0}


def test_shrinks_away_unneeded_requests_and_items():
    case = minimal(cases(), lambda c: any(len(r.items) >= 3 for r in c.requests))
    (request,) = case.requests
    assert [(i.spans, i.hash) for i in request.items] == [
        (((0, 0),), 0),
        (((1, 1),), 1),
        (((2, 2),), 2),
    ]


def test_shrinks_schedules_toward_few_chunks():
    assert minimal(schedules(seq_len=20, cuts=(5,)), lambda s: len(s) >= 2) == (19, 1)


def test_shrinks_malformed_cases():
    case = minimal(malformed_cases(kinds=["unsorted"]))
    (request,) = case.requests
    assert [i.spans for i in request.items] == [((1, 1),), ((0, 0),)]


# Argument validation: eager, at strategy construction -----------------------------

BAD_ARGUMENTS = [
    (spans, {"seq_len": -1}, "seq_len=-1 must be >= 0"),
    (spans, {"seq_len": 5, "max_spans": 0}, "max_spans=0 must be >= 1"),
    (spans, {"seq_len": 5, "min_spans": 3, "max_spans": 2}, "min_spans=3 must be <= max_spans=2"),
    (spans, {"seq_len": 2, "min_spans": 3}, "cannot fit"),
    (spans, {"seq_len": 2.0}, "must be an int"),
    (spans, {"seq_len": True}, "must be an int"),
    (requests, {"min_items": 4}, "min_items=4 must be <= max_items=3"),
    (requests, {"max_items": -1}, "max_items=-1 must be >= 0"),
    (requests, {"max_spans_per_item": 0}, "max_spans_per_item=0 must be >= 1"),
    (requests, {"coverage": "some"}, "coverage='some' must be one of"),
    (requests, {"coverage": "partial", "max_items": 1}, "2 items needed"),
    (requests, {"min_items": 3, "max_seq_len": 2}, "at most 2 fit"),
    (requests, {"duplicates": 1}, "duplicates=1 must be True or False"),
    (cases, {"min_requests": 3, "max_requests": 2}, "min_requests=3 must be <= max_requests=2"),
    (cases, {"max_requests": -1}, "max_requests=-1 must be >= 0"),
    (cases, {"hiddens": ()}, "hiddens=() must not be empty"),
    (cases, {"hiddens": (8, 0)}, "hiddens[1]=0 must be >= 1"),
    (cases, {"hiddens": 8}, "must be a sequence"),
    (cases, {"dtypes": ("float64",)}, "dtypes contains 'float64'"),
    (cases, {"dtypes": "float32"}, "not a single value"),
    (cases, {"ndims": (4,)}, "ndims contains 4"),
    (cases, {"device": "tpu"}, "device='tpu' must be one of"),
    (cases, {"collisions": None}, "collisions=None must be True or False"),
    (cases, {"min_items_total": 13}, "13 items needed"),
    (cases, {"min_items_total": -1}, "min_items_total=-1 must be >= 0"),
    (cases, {"coverage": "partial", "max_requests": 1, "max_items": 1}, "2 items needed"),
    (cases, {"max_seq_len": -1}, "max_seq_len=-1 must be >= 0"),
    (schedules, {"seq_len": -1}, "seq_len=-1 must be >= 0"),
    (schedules, {"seq_len": 3, "cuts": "12"}, "must be a sequence"),
    (schedules, {"seq_len": 3, "cuts": (1.5,)}, "cuts[0]=1.5 must be an int"),
    (grids, {"max_rows": 0}, "max_rows=0 must be >= 1"),
    (grids, {"min_rows": 3, "max_rows": 2}, "min_rows=3 must be <= max_rows=2"),
    (grids, {"max_dim": 0}, "max_dim=0 must be >= 1"),
    (grid_items, {"aggregated": True, "max_rows": 1}, "needs 2 grid rows"),
    (grid_items, {"aggregated": 1}, "must be None, True or False"),
    (grid_items, {"max_seq_len": 0}, "max_seq_len=0 must be >= 1"),
    (grid_cases, {"aggregated": True, "max_seq_len": 1}, "needs 2 grid rows"),
    (grid_cases, {"dtypes": ()}, "must not be empty"),
    (malformed_cases, {"kinds": ()}, "must not be empty"),
    (malformed_cases, {"kinds": ("bogus",)}, "kinds contains 'bogus'"),
    (malformed_cases, {"kinds": "unsorted"}, "not a single value"),
    (malformed_cases, {"kinds": ("unsorted",), "max_items": 1}, "needs a request with 2 items"),
    (malformed_cases, {"max_requests": 0}, "max_requests=0 must be >= 1"),
]


@pytest.mark.parametrize(
    ("factory", "kwargs", "message"),
    BAD_ARGUMENTS,
    ids=[f"{f.__name__}-{'-'.join(map(str, k))}" for f, k, _ in BAD_ARGUMENTS],
)
def test_bad_arguments_raise_at_construction(factory, kwargs, message):
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        factory(**kwargs)


@pytest.mark.parametrize("factory", [spans, requests, cases, schedules, grids, malformed_cases])
def test_options_are_keyword_only(factory):
    with pytest.raises(TypeError):
        factory(5)


def test_sets_of_options_are_accepted_in_a_stable_order():
    find(cases(dtypes={"bfloat16", "float32"}, hiddens={8, 4}), lambda c: True)


# Facade ------------------------------------------------------------------------


def test_facade_exports_exactly_all():
    public = {name for name in vars(strategies) if not name.startswith("_")}
    assert public == set(strategies.__all__)
    assert sorted(strategies.__all__) == list(strategies.__all__)


def test_importing_strategies_does_not_import_torch(tmp_path):
    code = "from mmharness import strategies; import sys; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path)


def test_the_adapter_facade_exports_exactly_all():
    from mmharness import api

    public = {name for name in vars(api) if not name.startswith("_")}
    assert public == set(api.__all__)
    assert len(set(api.__all__)) == len(api.__all__)


# Boundary classes -------------------------------------------------------------------------

REACHES = {
    "chunk.matches_reference": set(boundary_classes.CLASSES) - {"same hash, different token counts"},
    "embed_mask.matches_reference": set(boundary_classes.CLASSES) - {"same hash, different token counts"},
    "precomputed.matches_reference": set(boundary_classes.CLASSES) - {"same hash, different token counts"},
    "prefill.matches_reference": set(boundary_classes.CLASSES),
    "prefill.cache_independent": set(boundary_classes.CLASSES),
    # R5: every form a processor hands the splitter, and each layout outside the rule
    "grid.split_matches_reference": set(boundary_classes.SPLIT_CLASSES),
}


@pytest.mark.parametrize("check_id", sorted(REACHES))
def test_the_ci_profile_reaches_every_boundary_class(check_id):
    """Window edges on item edges, empty windows, 3-D embeddings...: each within the CI budget."""
    from mmharness.checks import all_checks
    from mmharness.targets.reference import ReferenceTarget

    first = boundary_classes.first_seen(all_checks()[check_id], ReferenceTarget())
    assert REACHES[check_id] <= set(first), REACHES[check_id] - set(first)
    assert max(first[c] for c in REACHES[check_id]) <= 50


def test_boundary_classes_of_a_hand_made_case():
    items = (Item(((0, 0),), hash=1), Item(((2, 3), (5, 5)), hash=1))
    case = Case((Request(2, 0, 0), Request(7, 3, 2, items)), ndim=3)
    assert boundary_classes.classes(case) == set(boundary_classes.CLASSES) - {"window starts on an item edge"}


def test_checks_sharing_a_strategy_draw_different_cases_under_the_ci_profile():
    from mmharness.checks import all_checks
    from mmharness.targets.reference import ReferenceTarget

    checks = all_checks()
    one, two = (
        boundary_classes.drawn(checks[c], ReferenceTarget())
        for c in ("prefill.matches_reference", "prefill.path_independent")
    )
    assert len(one) == len(two) == 100
    assert len(set(one) & set(two)) < 10, "each check explores its own sequence"
    again = boundary_classes.drawn(checks["prefill.matches_reference"], ReferenceTarget())
    assert again == one, "and it is the same sequence every run"


def test_items_draw_their_own_devices_when_asked():
    mixed = find(
        strategies.cases(min_items_total=2, item_devices=("cpu", "cuda")),
        lambda case: {item.device for _, _, item in case.items()} == {"cpu", "cuda"},
    )
    assert mixed.devices == {"cpu", "cuda"}
    plain = find(strategies.cases(min_items_total=1), lambda case: True)
    assert all(item.device is None for _, _, item in plain.items())
    with pytest.raises(InvalidArgument, match="item_devices"):
        strategies.cases(item_devices=("tpu",)).example()


def test_audio_clips_span_several_runs_too():
    """An audio clip interleaved with its transcript is one item of several runs: an engine routes it
    apart from videos (SGLang: the per-image path), so it must be drawn."""
    case = find(
        strategies.cases(min_items_total=1),
        lambda c: any(item.modality == "audio" and len(item.spans) > 1 for _, _, item in c.items()),
    )
    assert next(problems(case), None) is None


@settings(max_examples=200, database=None)
@given(strategies.prefill_programs(Case(requests=(Request(2, 0, 2, ()),) * 3), max_steps=1))
def test_a_program_keeps_to_max_steps_under_cache_pressure_too(steps):
    """``max_steps`` prefill steps and an opening cache step at most: the programs that prefill each
    request whole on a two-item cache are drawn only where the requests fit."""
    assert len(steps) <= 2
