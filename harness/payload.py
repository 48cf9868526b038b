"""JSON <-> ``Case``: the ``mmharness.case/1`` format (``/1.1``: items may name their device; ``/1.2``:
and carry the R5 split forms; ``/1.3``: and be EVS-pruned videos) and its strict, total parser (rule R7).

One format serves the corpus, saved findings and ``replay``, so the parser is
fed both hand-written files and fuzzer output. It therefore promises three
things: it raises nothing but ``PayloadError``; every error names the offending
field as a JSON-ish path (``requests[2].items[0].spans[1]``, ``$`` for the
root), the same paths ``mmharness.model.problems`` uses; and every size is
checked against a limit before anything is iterated or allocated at scale, so a
document that merely *claims* a huge tensor is refused at once.

Structure (types, keys, enums, limits) is always enforced. The rules of
docs/rules.md (disjoint, increasing, in-range spans; windows inside ``seq_len``;
rows matching tokens) are enforced unless the document says
``"malformed": true``: robustness findings break them on purpose and must
still round-trip. Importing this module never imports torch.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import MISSING, fields
from typing import Any, NamedTuple, TypeVar

from mmharness.model import (
    DEVICES,
    DTYPES,
    FEATURE_FORMS,
    GRID_FORMS,
    ITEM_GRID_KEYS,
    MODALITIES,
    MODEL_DATA_KEYS,
    NDIMS,
    Case,
    GridRow,
    Item,
    Request,
    Span,
    is_well_formed,
    problems,
)
from mmharness.params import MAX_PARAMS, STEP_CHOICES, STEP_FLAGS, STEP_INTS, STEP_KEYS, STEP_LISTS
from mmharness.steps import MAX_STEPS

FORMAT = "mmharness.case/1"
FORMAT_ITEM_DEVICES = "mmharness.case/1.1"
"""The minor version that adds ``items[].device``; a case that sets none is written as ``/1``."""
FORMAT_SPLIT_FORMS = "mmharness.case/1.2"
"""The minor version that adds the R5 split forms (``items[].grid_form``, ``feature_form``,
``feature_rows``, ``model_data``, the ``video_grid_thw`` key); a case using none is written as before."""
FORMAT_EVS = "mmharness.case/1.3"
"""The minor version that adds EVS-pruned videos (``items[].frame_rows``); a case with none is written
as before."""
FORMATS = (FORMAT, FORMAT_ITEM_DEVICES, FORMAT_SPLIT_FORMS, FORMAT_EVS)
SPLIT_FORM_KEYS = ("grid_form", "feature_form", "feature_rows", "model_data")
PROVENANCE_KEYS = ("check", "rule", "target", "engine", "note")
"""Free-form strings a saved finding carries; they never change the case."""

# Limits. Each bounds one field, so nothing is iterated or allocated past it.
MAX_TEXT_BYTES = 1 << 20
"""Largest document ``loads`` decodes (bytes, or characters for ``str``)."""
MAX_REQUESTS = 64
MAX_ITEMS = 64
"""Items per request."""
MAX_SPANS = 256
"""Spans per item."""
MAX_GRID_ROWS = 256
"""Grid rows per item (an aggregated item has one per span)."""
MAX_SEQ_LEN = 1 << 20
"""Every length and position lies in ``[-MAX_SEQ_LEN, MAX_SEQ_LEN]`` (< 0 only if malformed)."""
MAX_GRID_DIM = 1 << 16
"""Every ``t``, ``h``, ``w`` of a grid row lies in ``[-MAX_GRID_DIM, MAX_GRID_DIM]``."""
MAX_HIDDEN = 1 << 14
MAX_HASH = (1 << 63) - 1
MAX_ROWS = 1 << 20
"""Embedding, placeholder and feature rows the whole case may need (and the bound on ``rows``)."""
MAX_ELEMENTS = 1 << 24
"""``rows * hidden`` over the whole case: what materialising its tensors allocates."""
MAX_TOKENS = 1 << 21
"""Sum over requests of ``max(seq_len, prefix_len + extend_len)``: what ``input_ids`` walks."""

_T = TypeVar("_T")


class PayloadError(ValueError):
    """A document is not a valid case; ``path`` names the field, ``reason`` says what is wrong.

    ``str(error)`` is ``"<path>: <reason>"``, e.g.
    ``requests[2].items[0].spans[1]: end 7 < start 9``.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason

    def __reduce__(self) -> tuple[type[PayloadError], tuple[str, str]]:
        # The default would call PayloadError(message) on unpickling (pytest-xdist, Hypothesis).
        return PayloadError, (self.path, self.reason)


class Document(NamedTuple):
    """A parsed document: the case, the provenance strings, the check's extra draws and the ``--env``
    values of the run that saved it (a setting changes what the target does: a replay needs them)."""

    case: Case
    provenance: dict[str, str]
    params: dict[str, Any]
    env: dict[str, str]


# Reading ----------------------------------------------------------------------


def parse(obj: object) -> Case:
    """The case of an already-decoded JSON value; raises only ``PayloadError``."""
    return parse_document(obj).case


def loads(text: str | bytes) -> Case:
    """The case of JSON text (``bytes`` must be UTF-8); raises only ``PayloadError``."""
    return parse_document(_decode(text)).case


def load(path: str | os.PathLike[str]) -> Case:
    """The case stored in a file; ``OSError`` if it cannot be read, else only ``PayloadError``."""
    return load_document(path).case


def loads_document(text: str | bytes) -> Document:
    """Like ``loads``, keeping the provenance."""
    return parse_document(_decode(text))


def load_document(path: str | os.PathLike[str]) -> Document:
    """Like ``load``, keeping the provenance."""
    with open(path, "rb") as file:
        data = file.read(MAX_TEXT_BYTES + 1)  # enough to see it is too long, never more
        if len(data) > MAX_TEXT_BYTES:
            size = os.fstat(file.fileno()).st_size
            shown = f"{size} bytes" if size > MAX_TEXT_BYTES else "more bytes"
            raise PayloadError("$", f"the file holds {shown}, over the limit of {MAX_TEXT_BYTES} bytes")
    return loads_document(data)


def parse_document(obj: object) -> Document:
    """Like ``parse``, keeping the provenance."""
    root = _root(obj)
    malformed = _get(root, "$", "malformed", False, _bool)
    defaults = _CASE_DEFAULTS
    hidden = _get(root, "$", "hidden", defaults["hidden"], _int, 0, MAX_HIDDEN)
    context = _Context(
        hidden=hidden,
        dtype=_get(root, "$", "dtype", defaults["dtype"], _choice, DTYPES),
        ndim=_get(root, "$", "ndim", defaults["ndim"], _choice, NDIMS),
    )
    device = _get(root, "$", "device", defaults["device"], _choice, DEVICES)
    context.item_devices = root["format"] in (FORMAT_ITEM_DEVICES, FORMAT_SPLIT_FORMS, FORMAT_EVS)
    context.split_forms = root["format"] in (FORMAT_SPLIT_FORMS, FORMAT_EVS)
    context.evs = root["format"] == FORMAT_EVS
    provenance = {key: _text(root[key], "$", key) for key in PROVENANCE_KEYS if key in root}
    params = _params(root["params"]) if "params" in root else {}
    env = _env(root["env"]) if "env" in root else {}
    requests = _array(root["requests"], "$", "requests", MAX_REQUESTS)
    case = Case(
        requests=tuple(_request(r, f"requests[{n}]", context) for n, r in enumerate(requests)),
        hidden=hidden,
        dtype=context.dtype,
        ndim=context.ndim,
        device=device,
        prefix_listed=_get(root, "$", "prefix_listed", None, _optional_int, 0, MAX_REQUESTS),
        extend_listed=_get(root, "$", "extend_listed", None, _optional_int, 0, MAX_REQUESTS),
    )
    if not malformed:
        _check_rules(case)
    for value, path, item in context.descriptions:
        _check_embedding(value, path, item, context)
    return Document(case, provenance, params, env)


# Writing ----------------------------------------------------------------------


def dump(
    case: Case,
    *,
    check: str | None = None,
    rule: str | None = None,
    target: str | None = None,
    engine: str | None = None,
    note: str | None = None,
    params: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The case as a JSON-ready document, with any provenance given (``None`` is left out).

    ``"malformed"`` is written as ``True`` exactly when the case breaks a rule,
    so a rule-breaking case still parses back to itself.
    """
    provenance = {
        "check": check,
        "rule": rule,
        "target": target,
        "engine": engine,
        "note": note,
        "params": params or None,
        "env": env or None,
    }
    mixed = any(item.device is not None for _, _, item in case.items())
    forms = any(_uses_split_forms(item) for _, _, item in case.items())
    evs = any(item.frame_rows for _, _, item in case.items())
    newest = FORMAT_EVS if evs else FORMAT_SPLIT_FORMS if forms else None  # each minor adds to the last
    document: dict[str, Any] = {"format": newest or (FORMAT_ITEM_DEVICES if mixed else FORMAT)}
    document.update((key, value) for key, value in provenance.items() if value is not None)
    document.update(
        malformed=not is_well_formed(case),
        hidden=case.hidden,
        dtype=case.dtype,
        ndim=case.ndim,
        device=case.device,
    )
    for key in ("prefix_listed", "extend_listed"):  # written only when set: older readers load the rest
        if getattr(case, key) is not None:
            document[key] = getattr(case, key)
    document["requests"] = [_dump_request(request, case) for request in case.requests]
    return document


def dumps(case: Case, **provenance: Any) -> str:
    """``dump`` as text: fixed key order, indent 2, number arrays on one line, final newline."""
    return text(dump(case, **provenance))  # dump's keyword-only signature rejects a misspelt key


def text(document: dict[str, Any]) -> str:
    """A document (``dump``'s, or one read back from a report) as ``dumps`` writes it."""
    return _compact_number_arrays(json.dumps(document, indent=2, ensure_ascii=False)) + "\n"


def _dump_request(request: Request, case: Case) -> dict[str, Any]:
    return {
        "seq_len": request.seq_len,
        "prefix_len": request.prefix_len,
        "extend_len": request.extend_len,
        "items": [_dump_item(item, case) for item in request.items],
    }


def _dump_item(item: Item, case: Case) -> dict[str, Any]:
    dumped = {
        "spans": [list(span) for span in item.spans],
        "hash": item.hash,
        "precomputed": item.precomputed,
        "modality": item.modality,
        "grid": [list(row) for row in item.grid],
        "grid_key": item.grid_key,
        "rows": item.rows,
    }
    if item.device is not None:
        dumped["device"] = item.device
    forms = _split_forms(item)
    if "model_data" in forms:
        forms["model_data"] = [list(entry) for entry in item.model_data]
    dumped.update(forms)
    if item.frame_rows:
        dumped["frame_rows"] = list(item.frame_rows)
    dumped["embedding"] = _embedding_description(item, case.hidden, case.dtype, case.ndim)
    return dumped


def _split_forms(item: Item) -> dict[str, Any]:
    """The R5 split-form fields that differ from their defaults (only these are written)."""
    return {key: getattr(item, key) for key in SPLIT_FORM_KEYS if getattr(item, key) != _ITEM_DEFAULTS[key]}


def _uses_split_forms(item: Item) -> bool:
    """Whether writing the item needs format ``/1.2``."""
    return bool(_split_forms(item)) or item.grid_key not in _FORMAT_1_GRID_KEYS


def _embedding_description(item: Item, hidden: int, dtype: str, ndim: int) -> dict[str, Any]:
    """What ``mmharness.tensors`` makes for the item; a description given on parse must match it."""
    rows = item.row_count
    return {
        "shape": [1, rows, hidden] if ndim == 3 else [rows, hidden],
        "dtype": dtype,
        "seed": item.hash,
    }


def _compact_number_arrays(text: str) -> str:
    """Put arrays of scalars (spans, grid rows, shapes) on one line.

    Only arrays json.dumps opened with ``[`` and a newline are touched; JSON
    strings never hold a raw newline, so string contents are never changed.
    """
    scalar = r"(?:-?[0-9][0-9.eE+-]*|true|false|null)"
    array = re.compile(rf"\[\n\s*({scalar}(?:,\n\s*{scalar})*)\n\s*\]")
    separator = re.compile(r",\n\s*")
    return array.sub(lambda match: "[" + separator.sub(", ", match.group(1)) + "]", text)


# Decoding ---------------------------------------------------------------------


def _decode(text: object) -> object:
    """JSON text -> value, with every way that can fail turned into a ``PayloadError`` at ``$``."""
    if type(text) is not str:
        text = _utf8(text)
    elif len(text) > MAX_TEXT_BYTES:
        raise PayloadError("$", f"the text is {len(text)} characters, over {MAX_TEXT_BYTES}")
    try:
        return json.loads(text, object_pairs_hook=_object_pairs, parse_constant=_constant)
    except PayloadError:
        raise
    except json.JSONDecodeError as error:
        where = f"line {error.lineno} column {error.colno}"
        raise PayloadError("$", f"invalid JSON at {where}: {error.msg}") from None
    except RecursionError:
        raise PayloadError("$", "invalid JSON: arrays or objects nested too deeply") from None
    except ValueError as error:  # e.g. an integer literal past Python's 4300-digit limit
        raise PayloadError("$", f"invalid JSON: {error}") from None


def _utf8(data: object) -> str:
    if not isinstance(data, (bytes, bytearray)):
        raise PayloadError("$", f"expected JSON text as str or bytes, got {_kind(data)}")
    if len(data) > MAX_TEXT_BYTES:
        raise PayloadError("$", f"the text is {len(data)} bytes, over {MAX_TEXT_BYTES}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        byte = data[error.start]
        raise PayloadError("$", f"not UTF-8: byte 0x{byte:02x} at offset {error.start}") from None


def _object_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """Build a JSON object, refusing repeated keys (json would silently keep the last)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        repeated = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise PayloadError("$", f"invalid JSON: key {_show(repeated)} repeated in one object")
    return obj


def _constant(name: str) -> object:
    raise PayloadError("$", f"invalid JSON: {name} is not a JSON number")


# Structure --------------------------------------------------------------------

_CASE_KEYS = frozenset(
    {"format", "malformed", "params", "env", *PROVENANCE_KEYS, *(f.name for f in fields(Case))}
)
_REQUEST_KEYS = frozenset(f.name for f in fields(Request))
_ITEM_KEYS = frozenset({"embedding", *(f.name for f in fields(Item))})
_EMBEDDING_REQUIRED = ("shape", "dtype", "seed")
_EMBEDDING_KEYS = frozenset(_EMBEDDING_REQUIRED)


def _defaults(cls: type) -> dict[str, Any]:
    """The model's defaults, so that a key left out means what the model says it means."""
    return {f.name: f.default for f in fields(cls) if f.default is not MISSING}


def _required(cls: type) -> tuple[str, ...]:
    """Keys for the model's fields without a default, in field order."""
    return tuple(f.name for f in fields(cls) if f.default is MISSING)


_CASE_REQUIRED = _required(Case)
_REQUEST_REQUIRED = _required(Request)
_ITEM_REQUIRED = _required(Item)
_CASE_DEFAULTS = _defaults(Case)
_REQUEST_DEFAULTS = _defaults(Request)
_ITEM_DEFAULTS = _defaults(Item)
_FORMAT_1_GRID_KEYS = ("image_grid_thw", "grid_thws")
"""The grid keys format ``/1`` knows; ``video_grid_thw`` needs ``/1.2``."""


class _Context:
    """The case-wide facts items are checked against, and the running size budget.

    Embedding descriptions are only collected while parsing and checked after the
    rules: a reversed span also makes the description disagree, and the span is
    the field worth naming.
    """

    __slots__ = (
        "descriptions", "dtype", "evs", "hidden", "item_devices", "ndim", "rows", "split_forms", "tokens",
    )  # fmt: skip

    def __init__(self, hidden: int, dtype: str, ndim: int) -> None:
        self.hidden = hidden
        self.dtype = dtype
        self.ndim = ndim
        self.rows = 0
        self.tokens = 0
        self.descriptions: list[tuple[object, str, Item]] = []
        self.item_devices = False
        """Whether items may name their own device (format ``/1.1`` or later)."""
        self.split_forms = False
        """Whether items may carry the R5 split forms (format ``/1.2`` or later)."""
        self.evs = False
        """Whether items may be EVS-pruned videos (format ``/1.3``)."""

    def charge_rows(self, path: str, key: str, rows: int) -> None:
        self.rows += rows
        elements = self.rows * self.hidden
        if self.rows > MAX_ROWS or elements > MAX_ELEMENTS:
            raise PayloadError(
                _at(path, key),
                f"brings the case to {self.rows} rows of width {self.hidden} ({elements} elements);"
                f" the limit is {MAX_ROWS} rows and {MAX_ELEMENTS} elements",
            )

    def charge_tokens(self, path: str, tokens: int) -> None:
        self.tokens += tokens
        if self.tokens > MAX_TOKENS:
            raise PayloadError(path, f"brings the batch to {self.tokens} tokens; the limit is {MAX_TOKENS}")


def _root(obj: object) -> dict[str, Any]:
    """The top-level object, its format checked before its keys (a newer format may add keys)."""
    if type(obj) is not dict:
        raise PayloadError("$", f"expected an object, got {_kind(obj)}")
    if "format" not in obj:
        raise PayloadError("format", f"missing; expected {FORMAT!r}")
    found = obj["format"]
    if found not in FORMATS:
        newer = type(found) is str and found.startswith("mmharness.case/")
        what = "unsupported version" if newer else "expected " + repr(FORMAT) + ", got"
        raise PayloadError("format", f"{what} {_show(found)}")
    return _object(obj, "$", _CASE_KEYS, _CASE_REQUIRED)


def _request(value: object, path: str, context: _Context) -> Request:
    obj = _object(value, path, _REQUEST_KEYS, _REQUEST_REQUIRED)
    seq_len = _length(obj["seq_len"], path, "seq_len")
    prefix_len = _length(obj["prefix_len"], path, "prefix_len")
    extend_len = _length(obj["extend_len"], path, "extend_len")
    # The sequence and the window are both walked, whatever the signs (a malformed case).
    context.charge_tokens(path, max(0, seq_len) + max(0, extend_len))
    items = _get(obj, path, "items", _REQUEST_DEFAULTS["items"], _array, MAX_ITEMS)
    return Request(
        seq_len=seq_len,
        prefix_len=prefix_len,
        extend_len=extend_len,
        items=tuple(_item(v, f"{path}.items[{n}]", context) for n, v in enumerate(items)),
    )


def _item(value: object, path: str, context: _Context) -> Item:
    obj = _object(value, path, _ITEM_KEYS, _ITEM_REQUIRED)
    defaults = _ITEM_DEFAULTS
    item = Item(
        spans=_int_rows(obj["spans"], path, "spans", _SPAN),
        hash=_int(obj["hash"], path, "hash", 0, MAX_HASH),
        precomputed=_get(obj, path, "precomputed", defaults["precomputed"], _bool),
        modality=_get(obj, path, "modality", defaults["modality"], _choice, MODALITIES),
        grid=_get(obj, path, "grid", defaults["grid"], _int_rows, _GRID_ROW),
        grid_key=_get(obj, path, "grid_key", defaults["grid_key"], _choice, ITEM_GRID_KEYS),
        rows=_get(obj, path, "rows", defaults["rows"], _optional_int, 0, MAX_ROWS),
        device=_get(obj, path, "device", defaults["device"], _choice, DEVICES),
        grid_form=_get(obj, path, "grid_form", defaults["grid_form"], _choice, GRID_FORMS),
        feature_form=_get(obj, path, "feature_form", defaults["feature_form"], _choice, FEATURE_FORMS),
        feature_rows=_get(obj, path, "feature_rows", defaults["feature_rows"], _optional_int, 0, MAX_ROWS),
        model_data=_get(obj, path, "model_data", defaults["model_data"], _model_data),
        frame_rows=_get(obj, path, "frame_rows", defaults["frame_rows"], _frame_rows),
    )
    if item.device is not None and not context.item_devices:
        raise PayloadError(f"{path}.device", f"an item's own device needs format {FORMAT_ITEM_DEVICES!r}")
    if not context.split_forms:
        for key in (*SPLIT_FORM_KEYS, "grid_key"):
            if key in obj and (key != "grid_key" or item.grid_key not in _FORMAT_1_GRID_KEYS):
                raise PayloadError(f"{path}.{key}", f"the R5 split forms need format {FORMAT_SPLIT_FORMS!r}")
    if "frame_rows" in obj and not context.evs:
        raise PayloadError(f"{path}.frame_rows", f"EVS-pruned videos need format {FORMAT_EVS!r}")
    _charge_item(context, path, item)
    if "embedding" in obj:
        context.descriptions.append((obj["embedding"], f"{path}.embedding", item))
    return item


def _charge_item(context: _Context, path: str, item: Item) -> None:
    """Charge the rows materialising the item makes, naming the field that asked for them.

    Its embedding has ``rows`` rows (or one per placeholder token), and its grid's
    vision features ``t*h*w`` rows per grid row.
    """
    tokens = sum(max(0, end - start + 1) for start, end in item.spans)
    if item.rows is not None and item.rows > tokens:
        context.charge_rows(path, "rows", item.rows)
    else:
        context.charge_rows(path, "spans", tokens)
    patches = sum(max(0, t * h * w) for t, h, w in item.grid)
    if item.feature_rows is not None:
        context.charge_rows(path, "feature_rows", item.feature_rows)
    elif item.grid:
        context.charge_rows(path, "grid", patches)
    for key, _ in item.model_data:  # patch-aligned model data: a row per patch
        if MODEL_DATA_KEYS.get(key) == "patch":
            context.charge_rows(path, "model_data", patches)


def _check_embedding(value: object, path: str, item: Item, context: _Context) -> None:
    """An embedding description is redundant; one that disagrees is a mistake worth naming."""
    obj = _object(value, path, _EMBEDDING_KEYS, _EMBEDDING_REQUIRED)
    expected = _embedding_description(item, context.hidden, context.dtype, context.ndim)
    for key, want in expected.items():
        got = obj[key]
        if not _same_json(got, want):
            raise PayloadError(
                f"{path}.{key}", f"{_show(got)} disagrees with the item: expected {_show(want)}"
            )


def _same_json(got: object, want: object) -> bool:
    """Equality that keeps JSON types apart (``true`` is not ``1``, ``2.0`` is not ``2``)."""
    if type(got) is not type(want):
        return False
    if type(want) is list:
        return len(got) == len(want) and all(map(_same_json, got, want))  # type: ignore[arg-type]
    return got == want


def _check_rules(case: Case) -> None:
    problem = next(problems(case), None)
    if problem is not None:
        raise PayloadError(problem.path, problem.reason)


# Field parsers: (value, parent path, key, ...) -> value; the path is built only on error.


def _at(path: str, key: str) -> str:
    return key if path == "$" else f"{path}.{key}"


def _get(
    obj: dict[str, Any],
    path: str,
    key: str,
    default: _T,
    parse_field: Callable[..., _T],
    *limits: Any,
) -> _T:
    """An optional key: parsed if present, else the model's default (never parsed)."""
    if key in obj:
        return parse_field(obj[key], path, key, *limits)
    return default


def _object(value: object, path: str, allowed: frozenset[str], required: tuple[str, ...]) -> dict:
    if type(value) is not dict:
        raise PayloadError(path, f"expected an object, got {_kind(value)}")
    if not value.keys() <= allowed:
        raise PayloadError(
            path,
            f"unknown key {_first_few(value.keys() - allowed)}; allowed: " + ", ".join(sorted(allowed)),
        )
    for key in required:
        if key not in value:
            raise PayloadError(_at(path, key), "missing required key")
    return value


def _first_few(keys: set[Any], shown: int = 5) -> str:
    """Name a few unknown keys, sorted; a fuzzer may send thousands."""
    names = sorted(_show(key) for key in keys)
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _array(value: object, path: str, key: str, limit: int) -> list:
    if type(value) is not list:
        raise PayloadError(_at(path, key), f"expected an array, got {_kind(value)}")
    if len(value) > limit:
        raise PayloadError(_at(path, key), f"{len(value)} entries, over the limit of {limit}")
    return value


def _int(value: object, path: str, key: str, low: int, high: int) -> int:
    if type(value) is not int:
        raise PayloadError(_at(path, key), f"expected an integer, got {_kind(value)}")
    if not low <= value <= high:
        raise PayloadError(_at(path, key), f"{_show(value)} is outside [{low}, {high}]")
    return value


def _length(value: object, path: str, key: str) -> int:
    return _int(value, path, key, -MAX_SEQ_LEN, MAX_SEQ_LEN)


def _optional_int(value: object, path: str, key: str, low: int, high: int) -> int | None:
    return None if value is None else _int(value, path, key, low, high)


def _bool(value: object, path: str, key: str) -> bool:
    if type(value) is not bool:
        raise PayloadError(_at(path, key), f"expected true or false, got {_kind(value)}")
    return value


def _choice(value: object, path: str, key: str, choices: tuple[Any, ...]) -> Any:
    # type(value) of a choice keeps True out of (1, 2) and 2.0 out of (2, 3)
    if type(value) is type(choices[0]) and value in choices:
        return value
    allowed = ", ".join(map(_show, choices))
    raise PayloadError(_at(path, key), f"expected one of {allowed}, got {_show(value)}")


def _params(value: object) -> dict[str, Any]:
    """A check's extra draws: ints or int arrays (a schedule, a permutation, a row count), or steps."""
    if type(value) is not dict:
        raise PayloadError("params", f"expected an object, got {_kind(value)}")
    if len(value) > MAX_PARAMS:
        raise PayloadError("params", f"{len(value)} keys, more than the limit {MAX_PARAMS}")
    read: dict[str, Any] = {}
    for key, entry in value.items():
        if key == "steps":
            program = _array(entry, "params", key, MAX_STEPS)
            read[key] = [_step(step, f"params.steps[{k}]") for k, step in enumerate(program)]
        elif type(entry) is list:
            numbers = _array(entry, "params", key, MAX_SEQ_LEN)
            read[key] = [
                _int(n, "params", f"{key}[{k}]", -MAX_SEQ_LEN, MAX_SEQ_LEN) for k, n in enumerate(numbers)
            ]
        else:
            read[key] = _int(entry, "params", key, -MAX_SEQ_LEN, MAX_SEQ_LEN)
    return read


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _env(value: object) -> dict[str, str]:
    """The ``--env`` values of the run that saved the case: ``{"NAME": "VALUE"}``, names as a shell's."""
    if type(value) is not dict:
        raise PayloadError("env", f"expected an object, got {_kind(value)}")
    if len(value) > MAX_PARAMS:
        raise PayloadError("env", f"{len(value)} keys, more than the limit {MAX_PARAMS}")
    for name in value:
        if not _ENV_NAME.fullmatch(name):
            raise PayloadError("env", f"not an environment variable name: {name!r}")
    return {name: _text(entry, "env", name) for name, entry in value.items()}


def _step(value: object, path: str) -> dict[str, Any]:
    """One step of a multi-step program (``mmharness.steps``): its shape here, its meaning in ``params``."""
    if type(value) is not dict:
        raise PayloadError(path, f"expected an object, got {_kind(value)}")
    step: dict[str, Any] = {}
    for key, entry in value.items():
        if key in STEP_CHOICES:
            step[key] = _text(entry, path, key)
        elif key in STEP_INTS:
            step[key] = _int(entry, path, key, 0, MAX_SEQ_LEN)
        elif key in STEP_LISTS:
            numbers = _array(entry, path, key, MAX_REQUESTS)
            step[key] = [_int(n, path, f"{key}[{k}]", 0, MAX_SEQ_LEN) for k, n in enumerate(numbers)]
        elif key in STEP_FLAGS:
            step[key] = _bool(entry, path, key)
        else:
            raise PayloadError(_at(path, key), f"unknown key; a step has {', '.join(STEP_KEYS)}")
    if "op" not in step:
        raise PayloadError(path, "a step needs an op")
    return step


def _text(value: object, path: str, key: str) -> str:
    if type(value) is not str:
        raise PayloadError(_at(path, key), f"expected a string, got {_kind(value)}")
    if not value.isascii():
        try:
            value.encode("utf-8")  # a lone surrogate from a \ud800 escape cannot be saved again
        except UnicodeEncodeError:
            raise PayloadError(_at(path, key), "holds a lone surrogate escape") from None
    return value


def _model_data(value: object, path: str, key: str) -> tuple[tuple[str, str], ...]:
    """``[[key, form], ...]``: which model data an item carries beside its grid, each in its form (R5)."""
    entries = _array(value, path, key, len(MODEL_DATA_KEYS))
    out: list[tuple[str, str]] = []
    for n, entry in enumerate(entries):
        at = f"{_at(path, key)}[{n}]"
        if type(entry) is not list or len(entry) != 2:
            raise PayloadError(at, f"expected [key, form], got {_show(entry)}")
        name = _choice(entry[0], at, "key", tuple(MODEL_DATA_KEYS))
        form = _choice(entry[1], at, "form", FEATURE_FORMS)
        out.append((name, form))
    return tuple(out)


class _Tuple(NamedTuple):
    """How to read one fixed-width integer row: spans and grid rows."""

    names: tuple[str, ...]
    limit: int
    low: int
    high: int


_SPAN = _Tuple(("start", "end"), MAX_SPANS, -MAX_SEQ_LEN, MAX_SEQ_LEN)
_GRID_ROW = _Tuple(("t", "h", "w"), MAX_GRID_ROWS, -MAX_GRID_DIM, MAX_GRID_DIM)


def _frame_rows(value: object, path: str, key: str) -> tuple[int, ...]:
    """An EVS video's rows per frame: at most one per span, each in ``[0, MAX_ROWS]``."""
    counts = _array(value, path, key, MAX_SPANS)
    for k, n in enumerate(counts):
        if type(n) is not int or not 0 <= n <= MAX_ROWS:
            raise PayloadError(
                f"{_at(path, key)}[{k}]", f"expected an integer in [0, {MAX_ROWS}], got {_show(n)}"
            )
    return tuple(counts)


def _int_rows(value: object, path: str, key: str, shape: _Tuple) -> tuple[Any, ...]:
    """An array of fixed-width integer arrays, as tuples (``Span`` or ``GridRow``)."""
    rows = _array(value, path, key, shape.limit)
    width, low, high = len(shape.names), shape.low, shape.high
    out: list[Span | GridRow] = []
    for row in rows:
        if type(row) is list and len(row) == width:
            for n in row:
                if type(n) is not int or not low <= n <= high:
                    break
            else:
                out.append(tuple(row))  # type: ignore[arg-type]
                continue
        raise _bad_int_row(f"{_at(path, key)}[{len(out)}]", row, shape)
    return tuple(out)


def _bad_int_row(path: str, row: object, shape: _Tuple) -> PayloadError:
    """Say exactly what is wrong with a row the fast path refused."""
    form = "[" + ", ".join(shape.names) + "]"
    if type(row) is not list:
        return PayloadError(path, f"expected {form}, got {_kind(row)}")
    if len(row) != len(shape.names):
        return PayloadError(path, f"expected {form}, got {len(row)} entries")
    for name, n in zip(shape.names, row, strict=True):
        if type(n) is not int:
            return PayloadError(path, f"{name}: expected an integer, got {_kind(n)}")
        if not shape.low <= n <= shape.high:
            return PayloadError(path, f"{name} {_show(n)} is outside [{shape.low}, {shape.high}]")
    return PayloadError(path, f"expected {form}")  # pragma: no cover (the row was valid)


# Showing input in messages: bounded, ASCII, and never recursing into the input.

_KINDS = {
    type(None): "null",
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "an array",
    dict: "an object",
}


def _kind(value: object) -> str:
    return _KINDS.get(type(value)) or f"a Python {type(value).__name__}"


def _show(value: object) -> str:
    """A short, printable rendering of an input value (the input may be huge or hostile)."""
    kind = type(value)
    if kind is str:
        return ascii(value[:40]) + ("..." if len(value) > 40 else "")  # type: ignore[index]
    if kind is int:
        if -(10**18) < value < 10**18:  # type: ignore[operator]
            return str(value)
        return f"an integer of {value.bit_length()} bits"  # type: ignore[attr-defined]
    if kind is bool:
        return "true" if value else "false"
    if kind is list and len(value) <= 4 and all(type(v) in (int, str, bool) for v in value):  # type: ignore[arg-type]
        return "[" + ", ".join(map(_show, value)) + "]"  # type: ignore[call-overload]
    return _kind(value)
