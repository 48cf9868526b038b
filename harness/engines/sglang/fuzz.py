"""atheris entry points for SGLang's request payload parsers (rule R7), one per parser.

Each target calls engine functions loaded by path from the target release; a
payload is a JSON object whose keys are the engine's own names:

- ``sglang-image-data``: ``GenerateReqInput(**fields).normalize_batch_and_arguments()``,
  then ``request[i]`` for each request of a batch (the tokenizer manager's
  hand-off). Fields: ``text``, ``input_ids``, ``input_embeds``, ``image_data``,
  ``video_data``, ``audio_data``, ``modalities``, ``sampling_params``, ``rid``.
- ``sglang-mm-data``: ``BaseMultimodalProcessor.validate_mm_data`` on one request's
  ``image_data``, ``video_data``, ``audio_data``.
- ``sglang-mm-items``: ``collect_mm_items_from_processor_output(data_dict[, modality])``
  on one ``processor_output`` dict (``modality``: a member name or null).

Documented errors: ``ValueError`` and ``TypeError``, with a message. They are
the classes these functions raise on purpose (``normalize_batch_and_arguments``
documents ``ValueError``; ``_validate_one_modality`` raises both; the modality
lookup raises ``ValueError``). ``NotImplementedError`` and ``RuntimeError`` are
raised on purpose elsewhere in these files but never by these functions, so here
they are findings. ``--strict`` also makes a documented class a finding when
Python or a library raised it from inside the parser (``len(5)``'s
``TypeError``) rather than a ``raise`` of the parser, as rule R7 (docs/rules.md) reads.

Silent acceptances, found by inspecting the payload once the parser returned:

- ``mixed-nesting`` (image-data): a batch's ``image_data`` mixes per-request lists
  with bare items, which is none of the documented forms (one item, a list of
  items, a list of lists);
- ``misnested`` (image-data): a request of a batch got other images than its
  documented form gives it (say ``[["a.png"]]`` for ``["a.png"]``);
- ``dropped-items`` (image-data): ``video_data`` or ``audio_data`` holds more
  entries than the batch has requests, and the extra ones reach no request;
- ``mixed-format`` (mm-data): one request mixes a ``precomputed_embedding`` item
  with raw or ``processor_output`` items, across modalities (the validator checks
  each modality alone): the scheduler then gets a partially precomputed request,
  which R2 (all precomputed or all raw) rules out;
- ``mixed-format`` (mm-items): one item carries both a raw feature and
  ``precomputed_embeddings`` (the item type allows one of the two);
- ``metadata-dropped`` (mm-items): a dict mixing modalities made several items
  and its ``offsets``/``hash`` were dropped without an error.

A normaliser is not a validator: image-data does not judge formats, that is
mm-data's property. Inputs over the harness's own limits (tensor sizes, a batch
times ``sampling_params.n`` over ``MAX_FANOUT`` requests) are skipped.
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmharness import fuzz
from mmharness.engines.sglang import layout, shims
from mmharness.engines.sglang.parsers import Parsers
from mmharness.fuzz import (
    ErrorPolicy,
    FuzzBaseline,
    SilentAcceptance,
    guarded,
    raised_deliberately,
)
from mmharness.fuzz.payloads import Draw, OutsideLimits, decode_json, with_tensors
from mmharness.targets.base import TargetError

DEFAULT_TARGET = "sglang==0.5.23"
IMAGE_DATA = "sglang-image-data"
MM_DATA = "sglang-mm-data"
MM_ITEMS = "sglang-mm-items"
EXPECTED = (ValueError, TypeError)
DEADLINE_S = 10.0
"""CPU seconds one input may take before it is a ``Hang`` finding."""
MAX_FANOUT = 4096
"""Requests a batch may expand to (prompts x ``sampling_params.n``) before the harness skips it."""

REQUEST_FIELDS = (
    "text", "input_ids", "input_embeds", "image_data", "video_data", "audio_data",
    "modalities", "sampling_params", "rid",
)  # fmt: skip
MEDIA_FIELDS = ("image_data", "video_data", "audio_data")
PRECOMPUTED, PROCESSOR_OUTPUT, RAW = "precomputed_embedding", "processor_output", "raw"
METADATA_KEYS = ("offsets", "hash")


# Error policy ----------------------------------------------------------------------------


def error_policy(files: Collection[str], *, strict: bool) -> ErrorPolicy:
    """ValueError/TypeError pass with a message; under ``strict`` only when the parser raised them."""
    deliberate_files = {*files, shims.__file__}

    def policy(error: BaseException) -> str | None:
        if not str(error).strip():
            return f"{type(error).__name__} without a message"
        if strict and not raised_deliberately(error, deliberate_files):
            return "raised by Python or a library inside the parser, not by a raise of the parser (--strict)"
        return None

    return policy


# What the harness calls, per target ------------------------------------------------------


Runner = Callable[[dict[str, Any]], None]


def _request_runner(parsers: Parsers) -> Runner:
    request_type = parsers.request_type(IMAGE_DATA)
    accepted = set(inspect.signature(request_type).parameters)
    split = callable(getattr(request_type, "__getitem__", None))

    def run(payload: dict[str, Any]) -> None:
        fields = {k: with_tensors(payload[k]) for k in REQUEST_FIELDS if k in payload and k in accepted}
        _check_fanout(fields)
        given = {key: _shallow_copy(fields.get(key)) for key in MEDIA_FIELDS}  # the engine may edit in place
        request = request_type(**fields)
        request.normalize_batch_and_arguments()
        if getattr(request, "is_single", True) or not split:
            return
        requests = [request[index] for index in range(request.batch_size)]
        _refuse_misnested(given["image_data"], requests, request)
        _refuse_dropped_items(given, len(requests))

    return run


def _shallow_copy(value: Any) -> Any:
    """Lists copied two levels deep, leaves shared: what the split checks compare by identity."""
    if not isinstance(value, list):
        return value
    return [list(entry) if isinstance(entry, list) else entry for entry in value]


def _check_fanout(fields: dict[str, Any]) -> None:
    batches = [fields[k] for k in ("text", "input_ids", "input_embeds") if isinstance(fields.get(k), list)]
    prompts = max(map(len, batches), default=1)
    params = fields.get("sampling_params")
    samples = [p.get("n") for p in (params if isinstance(params, list) else [params]) if isinstance(p, dict)]
    most = max((n for n in samples if type(n) is int), default=1)
    if max(prompts, 1) * max(most, 1) > MAX_FANOUT:
        raise OutsideLimits(f"{prompts} prompts x n={most} is over {MAX_FANOUT} requests")


def _refuse_misnested(images: Any, requests: list[Any], request: Any) -> None:
    """Each request of a batch gets the images its documented form gives it.

    One item: every request gets ``[item]``. A list with one entry per request:
    either lists (a request's images, ``None`` for none) or bare items (one image
    each, ``None`` for none); a mix of the two is none of the documented forms.
    """
    if not isinstance(images, list) or not images:
        wanted = [None if images is None or isinstance(images, list) else [images]] * len(requests)
    else:
        lists = [i for i, entry in enumerate(images) if isinstance(entry, list)]
        bare = [i for i, entry in enumerate(images) if entry is not None and not isinstance(entry, list)]
        if lists and bare:
            raise SilentAcceptance(
                "mixed-nesting",
                f"image_data mixes per-request lists (at {lists}) with bare items (at {bare}) in a batch"
                f" of {len(requests)} and was accepted; modalities became"
                f" {getattr(request, 'modalities', None)!r}",
            )
        wanted = [entry if lists or entry is None else [entry] for entry in images]
    for index, (want, sub) in enumerate(zip(wanted, requests, strict=False)):
        got = getattr(sub, "image_data", None)
        if not _same_images(want, got):
            raise SilentAcceptance(
                "misnested",
                f"request {index} got image_data {_brief(got)} where the documented form gives it"
                f" {_brief(want)}",
            )


def _no_images(value: Any) -> bool:
    return value is None or (isinstance(value, list) and all(entry is None for entry in value))


def _same_images(want: Any, got: Any) -> bool:
    """The same image objects in the same order (the normaliser only re-wraps, never copies)."""
    if _no_images(want):
        return _no_images(got)
    if not isinstance(want, list):
        return want is got
    return (
        isinstance(got, list)
        and len(got) == len(want)
        and all(a is b for a, b in zip(want, got, strict=True))
    )


def _brief(value: Any, longest: int = 100) -> str:
    text = json.dumps(value, default=lambda obj: f"<{type(obj).__name__}>")
    return text if len(text) <= longest else text[: longest - 3] + "..."


def _refuse_dropped_items(fields: dict[str, Any], batch: int) -> None:
    for key in MEDIA_FIELDS:
        value = fields.get(key)
        if isinstance(value, list) and len(value) > batch:
            raise SilentAcceptance(
                "dropped-items",
                f"{key} has {len(value)} entries for a batch of {batch} and was accepted;"
                f" the last {len(value) - batch} reach no request",
            )


def _validator_runner(parsers: Parsers) -> Runner:
    validate = parsers.validator(MM_DATA)
    accepted = set(inspect.signature(validate).parameters)

    def run(payload: dict[str, Any]) -> None:
        lists = {k: with_tensors(payload.get(k)) for k in MEDIA_FIELDS if k in accepted}
        validate(**lists)
        _refuse_mixed_formats(lists)

    return run


def media_format(item: Any) -> str | None:
    """The documented form of one media item: precomputed, processor output, raw; ``None`` for junk."""
    if isinstance(item, str):
        return RAW
    if not isinstance(item, dict):
        return None
    declared = item.get("format", RAW)
    return declared if declared in (PRECOMPUTED, PROCESSOR_OUTPUT, RAW) else None


def _refuse_mixed_formats(lists: dict[str, Any]) -> None:
    found: dict[str, list[str]] = {}
    for key, items in lists.items():
        for index, item in enumerate(items if isinstance(items, list) else ()):
            kind = media_format(item)
            if kind is not None:
                found.setdefault(kind, []).append(f"{key}[{index}]")
    if PRECOMPUTED in found and len(found) > 1:
        others = "; ".join(f"{kind} at {', '.join(at)}" for kind, at in found.items() if kind != PRECOMPUTED)
        raise SilentAcceptance(
            "mixed-format",
            f"precomputed_embedding at {', '.join(found[PRECOMPUTED])} with {others} in one request was"
            " accepted: the scheduler gets a partially precomputed request (R2: all or none)",
        )


def _collector_runner(parsers: Parsers) -> Runner:
    collect = parsers.collector(MM_ITEMS)
    modality_type = parsers.engine.shims.modality

    def run(payload: dict[str, Any]) -> None:
        data, name = payload.get("data_dict"), payload.get("modality")
        built = with_tensors(data)
        if not isinstance(built, dict):  # a tensor marker is an object too, until it is built
            raise OutsideLimits("data_dict must be an object: the engine passes only dicts here")
        args: list[Any] = [built]
        if name is not None:
            if not isinstance(name, str) or name.upper() not in modality_type.__members__:
                raise OutsideLimits("modality must name a Modality member: the argument is typed")
            args.append(modality_type[name.upper()])
        items = collect(*args)
        _refuse_mixed_items(items, data)

    return run


def _refuse_mixed_items(items: Sequence[Any], data: dict[str, Any]) -> None:
    for index, item in enumerate(items):
        both = (getattr(item, name, None) is not None for name in ("feature", "precomputed_embeddings"))
        if all(both):
            raise SilentAcceptance(
                "mixed-format",
                f"item {index} ({_modality_name(item)}) carries both a raw feature and precomputed_embeddings"
                " and was accepted; the item type allows only one of the two",
            )
    given = [key for key in METADATA_KEYS if data.get(key) is not None]
    if len(items) > 1 and given:
        raise SilentAcceptance(
            "metadata-dropped",
            f"the dict made {len(items)} items ({', '.join(_modality_name(i) for i in items)}) and"
            f" was accepted; the {' and '.join(given)} it gave reached no item",
        )


def _modality_name(item: Any) -> str:
    return getattr(getattr(item, "modality", None), "name", "?")


# Structured payloads ----------------------------------------------------------------------


@dataclass(frozen=True)
class Vocabulary:
    """Payload keys worth drawing: the release's own feature and attribute names where it has them."""

    features: tuple[str, ...] = ("pixel_values",)
    attributes: tuple[str, ...] = ("image_grid_thw", "video_grid_thw")
    metadata: tuple[str, ...] = ("format", "modality", "offsets", "hash", "pad_value", "input_ids")
    extra: tuple[str, ...] = ("feature", "precomputed_embeddings")

    @property
    def keys(self) -> tuple[str, ...]:
        return (*self.features, *self.attributes, *self.metadata, *self.extra)


def vocabulary(parsers: Parsers) -> Vocabulary:
    """The stand-in processor's ``FEATURE_NAMES`` and ``ATTR_NAME_TO_MODALITY`` keys, when it has them."""
    try:
        processor = parsers.processor
    except TargetError:
        return Vocabulary()
    features = getattr(processor, "FEATURE_NAMES", None)
    attributes = getattr(processor, "ATTR_NAME_TO_MODALITY", None)
    if not isinstance(features, list) or not isinstance(attributes, dict):
        return Vocabulary()
    return Vocabulary(
        features=tuple(str(f) for f in features),
        attributes=tuple(str(a) for a in attributes if a not in features),
    )


RAW_MEDIA = (
    "https://example.com/cat.png", "file:///tmp/frame.jpg", "/tmp/clip.wav",
    "data:image/png;base64,iVBORw0KGgo=", "",
)  # fmt: skip
MODALITY_NAMES = ("IMAGE", "image", "VIDEO", "AUDIO", "MULTI_IMAGES", "multi-images", "TEXT")
FORMATS = (PROCESSOR_OUTPUT, PRECOMPUTED, "PROCESSOR_OUTPUT", "PRECOMPUTED_EMBEDDING", "normal", "")


def _value(d: Draw, key: str, vocab: Vocabulary) -> Any:
    """A value of the kind ``key`` documents, now and then anything at all."""
    if d.int(0, 9) == 0:
        return d.scalar()
    if key in vocab.features or key in vocab.extra:
        return d.tensor()
    if "grid" in key:
        return d.grid()
    if key == "offsets":
        return d.spans()
    if key == "modality":
        return d.pick(MODALITY_NAMES)
    if key == "format":
        return d.pick(FORMATS)
    if key in ("hash", "pad_value"):
        return d.pick((d.int(0, 1 << 62), d.text(8), {"tensor": [d.int(0, 2)], "dtype": "int64"}))
    if key == "input_ids":
        return [d.int(0, 100) for _ in range(d.int(0, 8))]
    return d.tensor() if d.flag() else d.scalar()


def processor_output(d: Draw, vocab: Vocabulary, most_keys: int = 4) -> dict[str, Any]:
    """A ``format: processor_output`` dict: a feature, a grid, modality, offsets, hash..."""
    out: dict[str, Any] = {"format": PROCESSOR_OUTPUT if d.int(0, 7) else d.pick(FORMATS)}
    for _ in range(d.int(1, most_keys)):
        key = d.pick((*vocab.keys, d.text(6)))
        out[key] = _value(d, key, vocab)
    return out


def precomputed_embedding(d: Draw, vocab: Vocabulary) -> dict[str, Any]:
    """A ``format: precomputed_embedding`` dict (its ``feature`` holds the embedding)."""
    out: dict[str, Any] = {"format": PRECOMPUTED, "feature": d.tensor()}
    for _ in range(d.int(0, 3)):
        key = d.pick(("precomputed_embeddings", "modality", "offsets", "hash", "image_grid_thw", "feature"))
        out[key] = _value(d, key, vocab)
    return out


def media_item(d: Draw, vocab: Vocabulary, depth: int = 0) -> Any:
    kind = d.int(0, 9)
    if kind < 4:
        return d.pick(RAW_MEDIA) if kind < 3 else d.text()
    if kind < 6:
        return processor_output(d, vocab)
    if kind < 8:
        return precomputed_embedding(d, vocab)
    if kind == 8 or depth:
        return d.scalar()
    return media_list(d, vocab, depth + 1)


def media_list(d: Draw, vocab: Vocabulary, depth: int = 0) -> list[Any]:
    return [media_item(d, vocab, depth) for _ in range(d.int(0, 3))]


def _per_request(d: Draw, vocab: Vocabulary, batch: int) -> Any:
    """``image_data`` in one of the documented forms, or a near miss (mixed, wrong length)."""
    form = d.int(0, 7)
    if form == 0:
        return None
    if form == 1:
        return media_item(d, vocab)
    if form == 2:
        return []
    if form == 3:
        return [media_item(d, vocab) for _ in range(batch)]
    if form == 4:
        return [media_list(d, vocab) if d.int(0, 3) else None for _ in range(batch)]
    if form == 5:
        return [media_list(d, vocab) if d.flag() else media_item(d, vocab) for _ in range(batch)]
    return [media_item(d, vocab) for _ in range(max(0, batch + d.pick((-1, 1))))]


def request_payload(d: Draw, vocab: Vocabulary) -> dict[str, Any]:
    """``GenerateReqInput`` fields: a single request or a batch, media in every documented form."""
    batch = d.int(0, 4)
    payload: dict[str, Any] = {}
    prompt = d.int(0, 4)
    if prompt == 0:
        payload["text"] = d.text()
    elif prompt == 1:
        payload["text"] = [d.text() for _ in range(batch)]
    elif prompt == 2:
        payload["input_ids"] = [d.int(0, 100) for _ in range(d.int(0, 6))]
    elif prompt == 3:
        payload["input_ids"] = [[d.int(0, 100) for _ in range(d.int(0, 4))] for _ in range(batch)]
    else:
        rows = [[0.5] * d.int(0, 2) for _ in range(d.int(0, 2))]
        payload["input_embeds"] = rows if d.flag() else [rows] * batch
    payload["image_data"] = _per_request(d, vocab, batch)
    for key in ("video_data", "audio_data"):
        if d.int(0, 3) == 0:
            entries = [d.pick(RAW_MEDIA) for _ in range(max(0, batch + d.int(-1, 1)))]
            payload[key] = entries if d.flag() else d.pick(RAW_MEDIA)
    if d.int(0, 2) == 0:
        n, form = d.int(1, 3), d.int(0, 3)
        if form == 0:
            payload["sampling_params"] = {"n": n}
        elif form == 3:
            payload["sampling_params"] = [d.scalar() for _ in range(batch)]
        else:
            count = batch if form == 1 else d.int(0, batch + 1)
            payload["sampling_params"] = [{"n": n if form == 1 else d.int(1, 3)} for _ in range(count)]
    if d.int(0, 5) == 0:
        payload["modalities"] = [d.pick(MODALITY_NAMES) for _ in range(d.int(0, batch + 1))]
    if d.int(0, 5) == 0:
        payload["rid"] = d.pick((d.text(6), [d.text(4) for _ in range(batch)]))
    return payload


def media_payload(d: Draw, vocab: Vocabulary) -> dict[str, Any]:
    """One request's ``image_data``/``video_data``/``audio_data`` lists (now and then a bare item)."""
    payload: dict[str, Any] = {}
    for key in MEDIA_FIELDS:
        form = d.int(0, 5)
        if form in (1, 2, 3):
            payload[key] = media_list(d, vocab)
        elif form == 4:
            payload[key] = media_item(d, vocab)
    return payload


def collector_payload(d: Draw, vocab: Vocabulary) -> dict[str, Any]:
    """A ``processor_output`` dict and, now and then, an explicit modality argument."""
    return {
        "data_dict": processor_output(d, vocab, most_keys=6),
        "modality": d.pick(("IMAGE", "VIDEO", "AUDIO")) if d.int(0, 5) == 0 else None,
    }


# Entry points ---------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineTarget:
    name: str
    summary: str
    runner: Callable[[Parsers], Runner]
    generate: Callable[[Draw, Vocabulary], dict[str, Any]]


TARGETS: dict[str, EngineTarget] = {
    target.name: target
    for target in (
        EngineTarget(
            IMAGE_DATA,
            "GenerateReqInput.normalize_batch_and_arguments, then the per-request split",
            _request_runner,
            request_payload,
        ),
        EngineTarget(MM_DATA, "BaseMultimodalProcessor.validate_mm_data", _validator_runner, media_payload),
        EngineTarget(
            MM_ITEMS,
            "BaseMultimodalProcessor.collect_mm_items_from_processor_output",
            _collector_runner,
            collector_payload,
        ),
    )
}


def _decoder(generate: Callable[[Draw, Vocabulary], dict[str, Any]], vocab: Vocabulary):
    """Fuzz bytes -> payload: a JSON object as is, anything else through the structured generator."""

    def decode(data: bytes) -> dict[str, Any] | None:
        document = decode_json(data)
        if document is not None:
            return document
        try:
            return generate(Draw(data), vocab)
        except ImportError:  # no atheris: only JSON inputs run
            return None

    return decode


def entry(
    parser: str,
    parsers: Parsers,
    *,
    strict: bool = False,
    baseline: FuzzBaseline | None = None,
    deadline_s: float | None = DEADLINE_S,
) -> Callable[[bytes], None]:
    """The ``TestOneInput`` of one engine fuzz target against loaded parsers.

    ``TargetError`` (one line) when the release lacks the function the target needs.
    """
    target = TARGETS[parser]
    run = target.runner(parsers)
    decode = _decoder(target.generate, vocabulary(parsers))
    files = {str(path): f"sglang/{layout.PARSERS.files[name]}" for name, path in parsers.files.items()}

    def parse(data: bytes) -> None:
        payload = decode(data)
        if payload is None:
            return
        try:
            run(payload)
        except OutsideLimits:
            return

    return guarded(
        parser,
        parse,
        EXPECTED,
        policy=error_policy(files, strict=strict),
        payload=decode,
        target={"spec": parsers.name, "release": parsers.release},
        files=files,
        baseline=baseline,
        deadline_s=deadline_s,
    )


def dictionary(parsers: Parsers) -> str:
    """libFuzzer dictionary lines: the JSON keys and values the payloads are made of."""
    vocab = vocabulary(parsers)
    words = {*vocab.keys, *REQUEST_FIELDS, "data_dict", "tensor", "dtype", "n", *FORMATS, *MODALITY_NAMES}
    tokens = sorted(f'"\\"{word}\\""' for word in words if word)
    return "\n".join([*tokens, '"{"', '"}"', '"["', '"]"', '":"', '","', '"null"']) + "\n"


def describe(parser: str, target: str) -> dict[str, Any]:
    """What ``mmharness fuzz PARSER --describe`` shows: the loaded parsers and the function fuzzed."""
    from mmharness.engines.sglang import parsers as parser_targets

    loaded = parser_targets.resolve(target)
    TARGETS[parser].runner(loaded)
    return {"fuzz target": parser, "calls": TARGETS[parser].summary, **loaded.describe()}


def main(
    argv: Sequence[str],
    *,
    parser: str,
    target: str = DEFAULT_TARGET,
    baseline: FuzzBaseline | None = None,
    strict: bool = False,
    scratch: Path | None = None,
) -> None:
    """Fuzz one engine parser; coverage comes from the parser files only (instrumented as loaded).

    ``scratch`` is the run's own directory, removed after it (the CLI's, ``mmharness.fuzz.supervised``):
    the dictionary of the release's payload words is written there unless ``-dict=`` is given.
    """
    import atheris
    from mmharness.engines.sglang import parsers as parser_targets

    loaded = parser_targets.resolve(target, transform=lambda name, code: atheris.patch_code(code, True))
    test_one_input = entry(parser, loaded, strict=strict, baseline=baseline)
    packages = ", ".join(sorted(loaded.engine.record.packages)) or "none"
    print(
        f"mmharness: fuzzing {TARGETS[parser].summary} of {loaded.name} (release {loaded.release});"
        f" stubbed packages: {packages}; {len(loaded.engine.record.stubbed)} stubbed names"
        f" (`mmharness fuzz {parser} --target {loaded.name} --describe` lists them)",
        file=sys.stderr,
    )
    args = list(argv)
    if scratch is not None and not any(arg.startswith("-dict=") for arg in args):
        words = scratch / f"{parser}.dict"  # not a corpus dir: libFuzzer would read it as an input
        words.write_text(dictionary(loaded), encoding="utf-8")
        args.insert(1, f"-dict={words}")
    atheris.Setup(args, test_one_input)
    atheris.Fuzz()


def bundled_main(parser: str) -> None:
    """The ClusterFuzzLite entry point of ``parser``; ``MMHARNESS_FUZZ_RELEASE`` picks the release."""
    fuzz.bundled_main(parser, main, release=DEFAULT_TARGET, env="MMHARNESS_FUZZ_RELEASE")
