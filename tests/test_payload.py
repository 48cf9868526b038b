"""The case format round-trips, and its parser is strict and total (rule R7).

Properties: ``loads(dumps(case)) == case``; on any JSON value, any mutation of a
valid document and any byte string the parser returns a ``Case`` or raises a
``PayloadError`` whose message starts with the offending field's path. Then one
hand-written test per kind of error message, the limits and the corpus.
"""

from __future__ import annotations

import copy
import json
import pickle
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mmharness import params, payload
from mmharness import strategies as mst
from mmharness.fuzz import FINDING_FORMAT, guarded
from mmharness.fuzz.case_parser import TestOneInput
from mmharness.model import (
    DEVICES,
    DTYPES,
    GRID_KEYS,
    MODALITIES,
    Case,
    Item,
    Request,
    is_well_formed,
)
from mmharness.payload import FORMAT, PayloadError, dump, dumps, loads, parse
from mmharness.steps import MAX_STEPS

ROOT = Path(__file__).resolve().parents[1]
SEEDS = sorted((ROOT / "corpus" / "case-parser").glob("*"))
REGRESSIONS = sorted((ROOT / "corpus" / "regressions").glob("*.json"))
SCHEMA = ROOT / "harness" / "schema" / "case.schema.json"

PATH = re.compile(r"\$|[a-z_]+(\[\d+\])*(\.[a-z_]+(\[\d+\])*)*")
"""What ``PayloadError.path`` looks like: ``$`` or ``requests[2].items[0].spans[1]``."""


def assert_names_a_field(error: PayloadError) -> None:
    assert PATH.fullmatch(error.path), error.path
    assert str(error) == f"{error.path}: {error.reason}"


def error_of(obj: object) -> PayloadError:
    with pytest.raises(PayloadError) as raised:
        parse(obj) if not isinstance(obj, (str, bytes)) else loads(obj)
    assert_names_a_field(raised.value)
    return raised.value


# Strategies ---------------------------------------------------------------------
# Well-formed, one-rule-broken and grid cases come from the project's strategies;
# the local ``wild_cases`` break many rules at once and reach the format's corners
# (any hash, negative grid entries, explicit rows, every device).

hashes = st.one_of(st.integers(0, 3), st.integers(0, payload.MAX_HASH))
small = st.integers(-8, 40)
wild_items = st.builds(
    Item,
    spans=st.lists(st.tuples(small, small), max_size=3).map(tuple),
    hash=hashes,
    precomputed=st.booleans(),
    modality=st.sampled_from(MODALITIES),
    grid=st.lists(st.tuples(*[st.integers(-2, 4)] * 3), max_size=2).map(tuple),
    grid_key=st.sampled_from(GRID_KEYS),
    rows=st.none() | st.integers(0, 50),
)
wild_cases = st.builds(
    Case,
    requests=st.lists(
        st.builds(Request, small, small, small, st.lists(wild_items, max_size=3).map(tuple)),
        max_size=3,
    ).map(tuple),
    hidden=st.integers(0, 16),
    dtype=st.sampled_from(DTYPES),
    ndim=st.sampled_from((2, 3)),
    device=st.sampled_from(DEVICES),
)
cases = st.one_of(
    mst.cases(),
    mst.cases(coverage="partial", collisions=True, device="cuda"),
    mst.cases(coverage="all", item_devices=("cpu", "cuda")),
    mst.malformed_cases(),
    mst.grid_cases(),
    wild_cases,
)
texts = st.text(max_size=20)
provenances = st.fixed_dictionaries({}, optional=dict.fromkeys(payload.PROVENANCE_KEYS, texts))

FORMAT_KEYS = sorted(
    {"format", "malformed", *payload.PROVENANCE_KEYS, "shape", "seed"}
    | payload._CASE_KEYS
    | payload._REQUEST_KEYS
    | payload._ITEM_KEYS
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    texts,
    st.sampled_from([FORMAT, *DTYPES, *DEVICES, *MODALITIES, *GRID_KEYS]),
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(texts | st.sampled_from(FORMAT_KEYS), children, max_size=5)
    ),
    max_leaves=25,
)


def shaped(keys: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with the format's keys (any subset) holding mostly-right or arbitrary values."""
    return st.fixed_dictionaries({}, optional={key: value | json_values for key, value in keys.items()})


item_like = shaped(
    {
        "spans": st.lists(st.lists(st.integers(-2, 30), max_size=3), max_size=3),
        "hash": hashes,
        "rows": st.none() | st.integers(-1, 40),
        "grid": st.lists(st.lists(st.integers(-1, 3), max_size=4), max_size=3),
        "embedding": shaped({"shape": st.lists(st.integers(-1, 40), max_size=3), "seed": hashes}),
    }
)
request_like = shaped(
    {key: st.integers(-2, 30) for key in ("seq_len", "prefix_len", "extend_len")}
    | {"items": st.lists(item_like, max_size=3)}
)
documents_like = shaped(
    {"format": st.just(FORMAT), "requests": st.lists(request_like, max_size=3)}
    | {"malformed": st.booleans(), "hidden": st.integers(-1, 20), "ndim": st.integers(1, 4)}
)


# Round trip ---------------------------------------------------------------------


@given(cases, provenances)
def test_round_trip(case: Case, provenance: dict[str, str]) -> None:
    text = dumps(case, **provenance)
    assert text.endswith("}\n")
    document = payload.loads_document(text)
    assert document.case == case
    assert document.provenance == provenance
    assert json.loads(text)["malformed"] is not is_well_formed(case)


@given(cases)
def test_dumps_is_indented_json_of_dump(case: Case) -> None:
    text = dumps(case)
    assert json.loads(text) == dump(case)
    assert text.startswith('{\n  "format": ')


def test_dump_validates_against_the_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    validator.check_schema(validator.schema)

    @given(cases, provenances)
    def every_dump_validates(case: Case, provenance: dict[str, str]) -> None:
        validator.validate(dump(case, **provenance))

    every_dump_validates()


def test_schema_limits_match_the_parser() -> None:
    schema = json.loads(SCHEMA.read_text())
    defs = schema["$defs"]
    assert schema["properties"]["format"]["enum"] == list(payload.FORMATS)
    assert schema["properties"]["requests"]["maxItems"] == payload.MAX_REQUESTS
    assert schema["properties"]["hidden"]["maximum"] == payload.MAX_HIDDEN
    assert defs["request"]["properties"]["items"]["maxItems"] == payload.MAX_ITEMS
    assert defs["item"]["properties"]["spans"]["maxItems"] == payload.MAX_SPANS
    assert defs["item"]["properties"]["grid"]["maxItems"] == payload.MAX_GRID_ROWS
    assert defs["item"]["properties"]["hash"]["maximum"] == payload.MAX_HASH
    assert defs["length"]["maximum"] == payload.MAX_SEQ_LEN
    assert set(schema["properties"]) == payload._CASE_KEYS
    assert set(defs["request"]["properties"]) == payload._REQUEST_KEYS
    assert set(defs["item"]["properties"]) == payload._ITEM_KEYS
    assert schema["properties"]["params"] == params.schema()


def test_a_program_longer_than_the_steps_limit_is_refused_where_it_is_read() -> None:
    step = {"op": "skip", "request": 0, "length": 1}
    document = dump(Case((Request(4, 0, 4, ()),)), params={"steps": [step] * (MAX_STEPS + 1)})
    with pytest.raises(PayloadError, match=r"^params\.steps: "):
        payload.loads_document(json.dumps(document))


# Totality -----------------------------------------------------------------------


def parse_or_payload_error(obj: object) -> Case | None:
    """The parser's only outcomes; a case parsed without ``malformed`` obeys the rules."""
    try:
        case = parse(obj)
    except PayloadError as error:
        assert_names_a_field(error)
        return None
    malformed = type(obj) is dict and obj.get("malformed") is True
    assert malformed or is_well_formed(case)
    return case


@given(json_values | documents_like)
def test_total_on_json_values(value: object) -> None:
    parse_or_payload_error(value)
    try:
        loads(json.dumps(value))
    except PayloadError as error:
        assert_names_a_field(error)


def json_paths(value: object, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``value`` (keys and indices), the root included."""
    paths = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            paths += json_paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            paths += json_paths(child, (*prefix, index))
    return paths


@st.composite
def mutated_documents(draw: st.DrawFn) -> object:
    """A valid dump with one value replaced, deleted, or one key or entry inserted."""
    document: Any = copy.deepcopy(dump(draw(cases)))
    path = draw(st.sampled_from(json_paths(document)))
    if not path:
        return draw(json_values)
    parent = document
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    action = draw(st.sampled_from(["replace", "delete", "insert"]))
    if action == "replace":
        parent[last] = draw(json_values)
    elif action == "delete":
        del parent[last]
    elif isinstance(parent, list):
        parent.insert(last, draw(json_values))
    else:
        parent[draw(texts | st.sampled_from(FORMAT_KEYS))] = draw(json_values)
    return document


@given(mutated_documents())
def test_total_on_mutated_documents(document: object) -> None:
    parse_or_payload_error(document)


@given(st.binary(max_size=200) | cases.map(lambda case: dumps(case).encode()[:-7]))
def test_total_on_bytes(data: bytes) -> None:
    try:
        loads(data)
    except PayloadError as error:
        assert_names_a_field(error)


# Error messages, one per kind -----------------------------------------------------


def document(**changes: Any) -> dict[str, Any]:
    """A valid three-request document to break one field of."""
    items = (Item(((1, 2), (4, 5)), 7), Item(((7, 8),), 9, grid=((1, 1, 2),)))
    case = Case(requests=(Request(10, 0, 10, items),) * 3)
    doc = dump(case)
    doc.update(changes)
    return doc


def item0(doc: dict[str, Any], request: int = 0) -> dict[str, Any]:
    return doc["requests"][request]["items"][0]


def test_the_issue_example_verbatim() -> None:
    doc = document()
    item0(doc, 2)["spans"][1] = [9, 7]
    error = error_of(doc)
    assert str(error) == "requests[2].items[0].spans[1]: end 7 < start 9"
    assert error.path == "requests[2].items[0].spans[1]"
    assert error.reason == "end 7 < start 9"


def with_item(**changes: Any) -> dict[str, Any]:
    doc = document()
    item0(doc).update(changes)
    return doc


def without(key: str, doc: dict[str, Any]) -> dict[str, Any]:
    del doc[key]
    return doc


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "$: expected an object, got an array"),
        ((), "$: expected an object, got a Python tuple"),
        (without("format", document()), "format: missing; expected 'mmharness.case/1'"),
        (document(format="case"), "format: expected 'mmharness.case/1', got 'case'"),
        (document(format="mmharness.case/2"), "format: unsupported version 'mmharness.case/2'"),
        (document(format=1), "format: expected 'mmharness.case/1', got 1"),
        (document(extra=1, other=2), "$: unknown key 'extra', 'other'; allowed: check,"),
        (without("requests", document()), "requests: missing required key"),
        (document(hidden=True), "hidden: expected an integer, got a boolean"),
        (document(hidden=8.0), "hidden: expected an integer, got a number"),
        (document(hidden=-1), "hidden: -1 is outside [0, 16384]"),
        (document(ndim=2.0), "ndim: expected one of 2, 3, got a number"),
        (document(ndim=True), "ndim: expected one of 2, 3, got true"),
        (document(dtype="float64"), "dtype: expected one of 'float32', 'float16', 'bfloat16', got"),
        (document(device=None), "device: expected one of 'cpu', 'cuda', got null"),
        (document(malformed="yes"), "malformed: expected true or false, got a string"),
        (document(note=["a"]), "note: expected a string, got an array"),
        (document(note="\ud800"), "note: holds a lone surrogate escape"),
        (document(requests={}), "requests: expected an array, got an object"),
        (document(requests=[{}] * 65), "requests: 65 entries, over the limit of 64"),
        (document(requests=[1]), "requests[0]: expected an object, got an integer"),
        (document(requests=[{"seq_len": 1}]), "requests[0].prefix_len: missing required key"),
        (with_item(hash=-1), "requests[0].items[0].hash: -1 is outside [0, 9223372036854775807]"),
        (with_item(hash=2**63), "requests[0].items[0].hash: an integer of 64 bits is outside"),
        (with_item(spans=[[1, 2]] * 257), "requests[0].items[0].spans: 257 entries, over"),
        (
            with_item(spans=[[1, 2, 3]]),
            "requests[0].items[0].spans[0]: expected [start, end], got 3",
        ),
        (with_item(spans=[7]), "requests[0].items[0].spans[0]: expected [start, end], got an int"),
        (
            with_item(spans=[[1, "2"]]),
            "requests[0].items[0].spans[0]: end: expected an integer, got",
        ),
        (with_item(spans=[[1, 2**21]]), "requests[0].items[0].spans[0]: end 2097152 is outside"),
        (
            with_item(grid=[[1, 2]]),
            "requests[0].items[0].grid[0]: expected [t, h, w], got 2 entries",
        ),
        (with_item(grid=[[1, 2, 0]]), "requests[0].items[0].grid[0]: expected three positive ints"),
        (with_item(precomputed=1), "requests[0].items[0].precomputed: expected true or false, got"),
        (with_item(modality="text"), "requests[0].items[0].modality: expected one of 'image',"),
        (with_item(rows=-1), "requests[0].items[0].rows: -1 is outside [0, 1048576]"),
        (with_item(rows=5), "requests[0].items[0].rows: 5 embedding rows for 4 placeholder tokens"),
        (with_item(colour=1), "requests[0].items[0]: unknown key 'colour'; allowed: device, embedding,"),
        (with_item(embedding=None), "requests[0].items[0].embedding: expected an object, got null"),
        (with_item(embedding={"shape": [4, 8]}), "requests[0].items[0].embedding.dtype: missing"),
        (
            with_item(embedding={"shape": [4, 8], "dtype": "float32", "seed": 7, "values": []}),
            "requests[0].items[0].embedding: unknown key 'values'",
        ),
        (
            with_item(embedding={"shape": [1, 4, 8], "dtype": "float32", "seed": 7}),
            "requests[0].items[0].embedding.shape: [1, 4, 8] disagrees with the item: expected [4,",
        ),
        (
            with_item(embedding={"shape": [True, 8], "dtype": "float32", "seed": 7}),
            "requests[0].items[0].embedding.shape: [true, 8] disagrees",
        ),
        (
            with_item(embedding={"shape": [4, 8], "dtype": "float16", "seed": 7}),
            "requests[0].items[0].embedding.dtype: 'float16' disagrees with the item: expected",
        ),
        (
            with_item(embedding={"shape": [4, 8], "dtype": "float32", "seed": 8}),
            "requests[0].items[0].embedding.seed: 8 disagrees with the item: expected 7",
        ),
        (
            document(requests=[{"seq_len": 4, "prefix_len": 2, "extend_len": 3}]),
            "requests[0].extend_len: window ends at 5, past seq_len 4",
        ),
    ],
)
def test_error_messages(doc: object, message: str) -> None:
    assert str(error_of(doc)).startswith(message)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "$: invalid JSON at line 1 column 1: Expecting value"),
        ('{"format": 1,}', "$: invalid JSON at line 1 column 14: Expecting property name"),
        ('{"a": 1, "a": 2}', "$: invalid JSON: key 'a' repeated in one object"),
        ('{"hidden": NaN}', "$: invalid JSON: NaN is not a JSON number"),
        ("[-Infinity]", "$: invalid JSON: -Infinity is not a JSON number"),
        (b'{"note": "\xff"}', "$: not UTF-8: byte 0xff at offset 10"),
        ('{"n": 1}'.encode("utf-16"), "$: not UTF-8: byte 0xff at offset 0"),
        (b"\xef\xbb\xbf{}", "$: invalid JSON at line 1 column 1: Unexpected UTF-8 BOM"),
        ("1" * 5000, "$: invalid JSON: Exceeds the limit (4300 digits)"),
        ("[" * 100_000, "$: invalid JSON: arrays or objects nested too deeply"),
        ('{"a":' * 100_000, "$: invalid JSON: arrays or objects nested too deeply"),
        (" " * (payload.MAX_TEXT_BYTES + 1), "$: the text is 1048577 characters, over 1048576"),
        (b" " * (payload.MAX_TEXT_BYTES + 1), "$: the text is 1048577 bytes, over 1048576"),
    ],
)
def test_decode_errors(text: str | bytes, message: str) -> None:
    assert str(error_of(text)).startswith(message)


def test_loads_refuses_what_is_not_text() -> None:
    with pytest.raises(PayloadError, match=r"^\$: expected JSON text as str or bytes, got an int"):
        loads(12)  # type: ignore[arg-type]


def test_malformed_documents_keep_their_rule_breaking_case() -> None:
    doc = document(malformed=True)
    item0(doc, 2)["spans"][1] = [9, 7]
    del item0(doc, 2)["embedding"]
    case = parse(doc)
    assert case.requests[2].items[0].spans[1] == (9, 7)
    assert json.loads(dumps(case))["malformed"] is True


def test_only_the_required_keys_take_the_model_defaults() -> None:
    text = '{"format": "mmharness.case/1", "requests": [{"seq_len": 4, "prefix_len": 0,'
    text += ' "extend_len": 4, "items": [{"spans": [[1, 2]], "hash": 5}]}]}'
    assert loads(text) == Case(requests=(Request(4, 0, 4, (Item(((1, 2),), 5),)),))


# Limits: refused at once, naming the field ------------------------------------------


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (lambda doc: item0(doc).update(rows=10**12), "requests[0].items[0].rows"),
        (lambda doc: item0(doc).update(spans=[[0, 10**12]]), "requests[0].items[0].spans[0]"),
        (lambda doc: item0(doc).update(grid=[[10**4] * 3]), "requests[0].items[0].grid"),
        (lambda doc: item0(doc).update(grid=[[10**5] * 3]), "requests[0].items[0].grid[0]"),
        (
            lambda doc: item0(doc)["embedding"].update(shape=[10**12, 8]),
            "requests[0].items[0].embedding.shape",
        ),
    ],
)
def test_a_claimed_huge_tensor_is_refused_at_once(change: Any, path: str) -> None:
    doc = document()
    change(doc)
    assert error_of(doc).path == path


def test_the_rows_budget_counts_the_whole_case() -> None:
    spans = [[n * 4000, n * 4000 + 3999] for n in range(256)]  # 1,024,000 tokens in one item
    doc = document(
        requests=[
            {
                "seq_len": 1 << 20,
                "prefix_len": 0,
                "extend_len": 0,
                "items": [{"spans": spans, "hash": 1}, {"spans": [[0, 99_999]], "hash": 2}],
            }
        ]
    )
    error = error_of(doc)
    assert error.path == "requests[0].items[1].spans"
    assert "the limit is 1048576 rows" in error.reason


def test_the_elements_budget_counts_rows_times_hidden() -> None:
    doc = document(hidden=1 << 14)
    item0(doc)["spans"] = [[0, 599]]
    item0(doc, 1)["rows"] = 600  # each fine alone; together over 2**24 elements
    doc["malformed"] = True
    error = error_of(doc)
    assert error.path == "requests[1].items[0].rows"
    assert "elements" in error.reason


def test_the_token_budget_counts_every_request() -> None:
    request = {"seq_len": 1 << 20, "prefix_len": 0, "extend_len": 0}
    assert error_of(document(requests=[request] * 3)).path == "requests[2]"


def test_huge_ints_are_named_without_printing_them() -> None:
    doc = document()
    item0(doc)["hash"] = 10**100_000  # str() of it would raise ValueError
    assert "an integer of 332193 bits" in error_of(doc).reason
    text = json.dumps(document()).replace('"hash": 7', f'"hash": {10**4000}', 1)
    assert error_of(text).reason.startswith("an integer of 13288 bits is outside")


def test_deep_nesting_in_a_decoded_value_is_never_walked() -> None:
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    assert str(error_of(document(note=deep))) == "note: expected a string, got an array"
    assert error_of(document(requests=deep)).path == "requests[0]"
    assert error_of({"format": FORMAT, "deep": deep}).reason.startswith("unknown key 'deep'")


def test_load_reads_no_more_than_the_limit(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (payload.MAX_TEXT_BYTES * 4))
    with pytest.raises(PayloadError, match="bytes, over"):
        payload.load(big)


def test_payload_error_pickles() -> None:
    error = pickle.loads(pickle.dumps(PayloadError("hidden", "bad")))
    assert (error.path, error.reason, str(error)) == ("hidden", "bad", "hidden: bad")


def test_importing_the_parser_and_its_fuzzer_never_imports_torch() -> None:
    code = "import sys, mmharness.payload, mmharness.fuzz.case_parser; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


# Corpus and fuzz entry point ------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS, ids=lambda path: path.name)
def test_the_fuzz_entry_accepts_every_seed(seed: Path) -> None:
    TestOneInput(seed.read_bytes())


def test_the_seed_corpus_holds_valid_and_near_valid_cases() -> None:
    valid = [seed for seed in SEEDS if seed.name.startswith(("valid-", "malformed-"))]
    near = [seed for seed in SEEDS if seed.name.startswith("near-")]
    for seed in valid:
        payload.load(seed)
    for seed in near:
        with pytest.raises(PayloadError):
            payload.load(seed)
    assert len(valid) >= 12 and len(near) >= 3


@pytest.mark.parametrize("case_file", REGRESSIONS, ids=lambda path: path.name)
def test_every_regression_case_loads(case_file: Path) -> None:
    document = payload.load_document(case_file)
    assert is_well_formed(document.case) or json.loads(case_file.read_text())["malformed"]


def test_the_founding_scenarios_are_regression_cases() -> None:
    regressions = ROOT / "corpus" / "regressions"
    (request,) = payload.load(regressions / "partial-precomputed-multi-image.json").requests
    assert [(item.modality, item.precomputed) for item in request.items] == [
        ("image", True),
        ("image", False),
    ]
    (request,) = payload.load(regressions / "aggregated-grid-item.json").requests
    (item,) = request.items
    assert (item.modality, len(item.spans), len(item.grid)) == ("image", 3, 3)


def test_an_unexpected_exception_is_saved_then_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MMHARNESS_FINDINGS", str(tmp_path / "findings"))
    entry = guarded("demo", lambda data: data.decode("ascii"), PayloadError)
    with pytest.raises(UnicodeDecodeError):
        entry(b"\xffhi")
    (saved,) = (tmp_path / "findings").glob("demo-*.json")
    finding = json.loads(saved.read_text())
    assert finding["format"] == FINDING_FORMAT
    assert finding["parser"] == "demo"
    assert finding["exception"].startswith("UnicodeDecodeError: 'ascii' codec")
    assert "Traceback" in finding["traceback"]
    assert (finding["input_b64"], finding["input_text"]) == ("/2hp", None)
    entry(b"ok")  # the parser's own outcome is not a finding
    assert len(list((tmp_path / "findings").iterdir())) == 1


def test_items_on_their_own_devices_round_trip_as_format_1_1():
    case = Case((Request(4, 0, 4, (Item(((0, 1),), 1, True, device="cuda"), Item(((2, 3),), 2, True))),))
    document = dump(case)
    assert document["format"] == payload.FORMAT_ITEM_DEVICES
    assert document["requests"][0]["items"][0]["device"] == "cuda"
    assert "device" not in document["requests"][0]["items"][1], "an item on the case's device says nothing"
    assert loads(dumps(case)) == case
    assert dump(Case((Request(4, 0, 4, (Item(((0, 1),), 1),)),)))["format"] == FORMAT, "no item device: /1"


def test_an_item_device_in_a_format_1_document_is_refused_with_its_path():
    document = dump(Case((Request(4, 0, 4, (Item(((0, 1),), 1, device="cuda"),)),)))
    document["format"] = FORMAT
    with pytest.raises(
        PayloadError, match=r"requests\[0\].items\[0\].device: an item's own device needs format"
    ):
        payload.parse(document)


def test_the_env_a_case_was_saved_under_round_trips_and_a_bad_one_is_named():
    text = payload.dumps(Case(()), check="chunk.matches_reference", engine="sglang", env={"SGLANG_X": "1"})
    document = payload.loads_document(text)
    assert document.env == {"SGLANG_X": "1"} and document.provenance["engine"] == "sglang"
    assert payload.loads_document(payload.dumps(Case(()))).env == {}
    bad_envs = (({"1X": "1"}, "not an environment variable name: '1X'"), ({"X": 1}, "expected a string"))
    for env, said in bad_envs:
        bad = json.loads(text) | {"env": env}
        with pytest.raises(payload.PayloadError, match=said) as raised:
            payload.parse_document(bad)
        assert raised.value.path.startswith("env")
