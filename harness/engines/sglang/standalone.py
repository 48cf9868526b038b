"""SGLang's standalone writer: a finding of R1, R3 or R3e as a pytest file that loads the release's
own rule files by path (``mmharness.standalone`` says why).

It knows the layout of 0.5.18 on (the rules in ``srt/managers/mm_schedule.py``): the file stands in
for the few modules those files import at load time, visibly, and calls ``get_embedding_chunk``,
``_get_chunked_prefill_embedding`` or ``get_embedding_and_mask`` with the arguments
``inputs.Builder`` makes for the harness's own driver.
"""

from __future__ import annotations

import logging
import textwrap
from typing import Any

from mmharness import reference, tensors
from mmharness.engines.sglang import inputs, shims
from mmharness.engines.sglang.standalone_prelude import PRELUDE
from mmharness.model import Case, Item, interleaves, validate
from mmharness.standalone import SEEDED, Finding, Unsupported, block_source, literal, rows_source, runs

RULES_FILE = "sglang/srt/managers/mm_schedule.py"

STATEMENTS = {
    "chunk.matches_reference": (
        "R1 chunk",
        "the chunk is the rows whose positions lie inside the window, in position order; `start` counts"
        " the placeholder positions before the window and `end` those before the window's end.",
    ),
    "prefill.matches_reference": (
        "R3 chunked prefill (the encoder path)",
        "the rows of every item position inside each request's window, in request then position order"
        " (for an EVS-pruned video: its positions as EVS moved them, the rows each frame kept); None and"
        " no rows are one answer.",
    ),
    "embed_mask.matches_reference": (
        "R3e end to end",
        "the mask marks exactly the placeholder positions of the window's input_ids, and the rows, in"
        " mask order, are those of the items at those positions (for an EVS-pruned video: its"
        " placeholders as EVS moved them, to the rows each frame kept).",
    ),
}
"""Each covered check's rule, as docs/rules.md states it (its heading, then the rule in a sentence)."""


class SGLangWriter:
    """Writes R1, R3 and R3e findings of the ``mm_schedule.py`` layout."""

    checks = frozenset(STATEMENTS)

    def write(self, finding: Finding) -> str:
        case = finding.case
        _refuse_unwritable(finding)
        body = BODIES[finding.check_id](case)
        heading, statement = STATEMENTS[finding.check_id]
        harness = PRELUDE.format(root=str(finding.root), hidden=case.hidden, dtype=case.dtype, seeded=SEEDED)
        return f"{_header(finding, heading, statement)}\n\n{harness.strip()}\n\n\n{body.lstrip()}"


WRITER = SGLangWriter()


def _refuse_unwritable(finding: Finding) -> None:
    """One line for what this writer does not write yet (the command exits 2 on it)."""
    case, check = finding.case, finding.check_id
    if not (finding.root / RULES_FILE).is_file():
        raise Unsupported(f"{check}: the writer knows SGLang's {RULES_FILE} layout (0.5.18 on) only")
    if any(case.device_of(item) != "cpu" for _, _, item in case.items()) or case.device != "cpu":
        raise Unsupported(f"{check}: a case on another device than the CPU is not written yet")
    if any(interleaves(r) for r in case.requests):
        raise Unsupported(f"{check}: a request whose items interleave is not written yet")
    if check != "chunk.matches_reference" and reference.has_any_collision(case):
        raise Unsupported(f"{check}: a case whose item hashes collide is not written yet")
    if len({item.modality for _, _, item in case.items()}) > 1:
        raise Unsupported(f"{check}: a case with items of several modalities is not written yet")
    try:  # the reference's refusal: the file would assert a raise
        validate(case) if check == "chunk.matches_reference" else reference.embedding_and_mask(case)
    except Exception as error:
        raise Unsupported(f"{check}: the reference refuses this case ({error}); not written yet") from None


def _header(finding: Finding, heading: str, statement: str) -> str:
    return f'''"""{finding.check_id} on {finding.target}: a standalone reproducer written by mmharness.

{textwrap.fill(f"Rule {heading} (docs/rules.md): {statement}", 100)}

It imports torch, pytest and SGLang's own rule files, loaded by path from ENGINE_ROOT (a directory
holding the `sglang/` package: a wheel's tree, site-packages, a checkout's `python/`):

    ENGINE_ROOT=/path/to/tree python -m pytest THIS_FILE

It fails where the finding was made ({finding.target}) and passes where the rule holds. Written by
`mmharness replay {finding.source} --standalone`.
"""'''


def _chunk_tests(case: Case) -> str:
    """R1: one test per request with items, ``get_embedding_chunk`` as the harness's driver calls it."""
    from mmharness.targets.reference import ReferenceTarget

    tests = []
    for r, request in enumerate(case.requests):
        if not request.items:
            continue
        embedding = tensors.request_embedding(case, request.items)
        expected, start, end = ReferenceTarget().embedding_chunk(embedding, case, r)
        parts = [block_source(case, item.hash, max(item.row_count, 0)) for item in request.items]
        spans = [tuple(span) for item in request.items for span in item.spans]
        tests.append(
            f'''

def test_request_{r}_chunk(mm_schedule):
    """R1 for request {r}: window [{request.prefix_len}, {request.prefix_len + request.extend_len}) of
    positions {spans}."""
    embedding = {_shaped(case, f"torch.cat([{', '.join(parts)}])")}  # its items' rows, concatenated
    chunk, start, end = mm_schedule.get_embedding_chunk(
        embedding=embedding,
        extend_prefix_len={request.prefix_len},
        extend_seq_len={request.extend_len},
        items_offset={spans},
    )
    assert (start, end) == {(start, end)}
    assert torch.equal(chunk, {literal(expected)})
'''
        )
    return "".join(tests)


def _mask_test(case: Case) -> str:
    """R3e: one ``get_embedding_and_mask`` call over the batch (as ``embed_mm_inputs`` makes it for one
    modality)."""
    batch, setup = _batch_setup(case, precomputed=True)
    input_ids, placeholders = tensors.input_ids(case)
    rows, mask = reference.embedding_and_mask(case)
    checks = (
        "    # an all-false mask and None are the same answer (docs/rules.md, representation-only)\n"
        "    assert mask is None or not mask.any()\n    assert embedding is None or embedding.numel() == 0\n"
        if not any(mask)
        else '    assert mask is not None, "no mask: the window was served as text"\n'
        f"    assert mask.reshape(-1).tolist() == {runs(mask)}\n"
        "    assert embedding is not None and torch.equal(embedding.reshape(-1, HIDDEN), expected_rows)\n"
    )
    return f'''
def test_embedding_and_mask(mm_schedule):
    """R3e over the batch: the rows and mask of its window(s)."""
{setup}
    embedding, mask, _ = mm_schedule.get_embedding_and_mask(
        data_embedding_func=data_embedding_func,
        embedding_items=items,
        placeholder_tensor={literal(placeholders)},
        input_ids=torch.tensor({runs(input_ids.tolist())}),
{_batch_lists(batch)}
    )
    expected_rows = {rows_source(case, rows) if rows else "None"}
{checks}'''


def _prefill_test(case: Case) -> str:
    """R3: one ``_get_chunked_prefill_embedding`` call over the batch, every item raw (the encoder path)."""
    batch, setup = _batch_setup(case, precomputed=False)
    input_ids, _ = tensors.input_ids(case)
    rows = reference.chunked_prefill_embedding(case)
    checks = (
        "    assert embedding is None or embedding.numel() == 0  # None and no rows are one answer (R3)\n"
        if not rows
        else '    assert embedding is not None, "no rows: the window was served as text"\n'
        f"    assert torch.equal(embedding.reshape(-1, HIDDEN), {rows_source(case, rows)})\n"
    )
    return f'''
def test_chunked_prefill_embedding(mm_schedule):
    """R3 over the batch: the encoder path's rows of its window(s), in request and position order."""
{setup}
    result = mm_schedule._get_chunked_prefill_embedding(
        data_embedding_func=data_embedding_func,
        embedding_items=items,
{_batch_lists(batch)}
        input_ids=torch.tensor({runs(input_ids.tolist())}),
    )
    embedding = result[0] if isinstance(result, tuple) else result  # 0.5.20 on: (rows, input_ids)
{checks}'''


def _batch_setup(case: Case, *, precomputed: bool) -> tuple[inputs.Batch, str]:
    """The batch as the harness's driver builds it (``inputs.Builder``) and its source: the items, and
    the encoder answering each with its rows (an EVS video: with the rows each frame kept)."""
    builder = inputs.Builder(_Recorded, shims.Modality, False, None, logging.getLogger(__name__))
    batch = builder.batch(case, precomputed=precomputed)
    owners = [batch.owners[id(engine_item)] for engine_item in batch.items]
    items = ",\n        ".join(
        _item_source(case, e.given, owner) for e, owner in zip(batch.items, owners, strict=True)
    )
    encoded = ",\n        ".join(_encoded_source(case, owner) for owner in owners)
    return (
        batch,
        f"""    items = [
        {items},
    ]
    encoded = [
        {encoded},
    ]  # per item: what its encoder computes (rows; frames kept, for an EVS-pruned video)
    evs = sys.modules["sglang.srt.multimodal.evs"]{_evs_guard(case)}

    def data_embedding_func(batch):
        found = [encoded[next(k for k, item in enumerate(items) if item is given)] for given in batch]
        embedding = torch.cat([found_rows for found_rows, _ in found]){_unsqueezed(case)}
        if any(frames for _, frames in found):  # the model prunes one video per call
            assert len(found) == 1, "EVS prunes one video per encoder call"
            return evs.EVSEmbeddingResult(embedding=embedding, num_tokens_per_frame=found[0][1])
        return embedding
""",
    )


def _batch_lists(batch: inputs.Batch) -> str:
    return f"""        items_size={batch.items_size},
        prefix_length={batch.prefix_length},
        extend_length={batch.extend_length},
        items_offset_list={batch.items_offset_list},"""


def _evs_guard(case: Case) -> str:
    """For an EVS case: a skip where the release's EVS code asserts its own item type (0.5.8 to 0.5.18:
    only its EVS processor makes one), as the harness leaves such a release out (adapter.unreceived)."""
    if not any(item.frame_rows for _, _, item in case.items()):
        return ""
    return """
    if hasattr(sys.modules["sglang.srt.multimodal.evs.evs_module"], "VideoEVSDataItem"):
        pytest.skip("this release's EVS code takes only its own VideoEVSDataItem (its EVS processor's)")"""


class _Recorded:
    """An engine item as the builder would make it: the keywords it was given, to be written out."""

    def __init__(self, **given: Any) -> None:
        self.given = given


def _item_source(case: Case, given: dict[str, Any], item: Item) -> str:
    fields = [
        f"modality=Modality.{given['modality'].name}",
        f"hash={given['hash']}",
        f"pad_value={given['pad_value']}",
        f"offsets={given['offsets']}",
    ]
    if given["precomputed_embeddings"] is not None:
        rows = block_source(case, item.hash, max(item.row_count, 0))
        fields.append(f"precomputed_embeddings={_shaped(case, rows)}")
    else:
        fields.append(f"feature={block_source(case, tensors.feature_key(item), item.feature_count)}")
    data = given["model_specific_data"]
    if data:
        shown = ", ".join(f'"{k}": {runs(v) if isinstance(v, list) else repr(v)}' for k, v in data.items())
        fields.append(f"model_specific_data={{{shown}}}")
    inner = "".join(f"\n            {field}," for field in fields)
    return f"MultimodalDataItem({inner}\n        )"


def _encoded_source(case: Case, item: Item) -> str:
    rows = block_source(case, item.hash, item.token_count)
    return f"({rows}, {list(item.frame_rows) if item.frame_rows else None})"


def _shaped(case: Case, source: str) -> str:
    return source + _unsqueezed(case)


def _unsqueezed(case: Case) -> str:
    """A 3-D case's tensors are ``[1, n, H]``, as some models hand them."""
    return ".unsqueeze(0)" if case.ndim == 3 else ""


BODIES = {
    "chunk.matches_reference": _chunk_tests,
    "prefill.matches_reference": _prefill_test,
    "embed_mask.matches_reference": _mask_test,
}
"""Each covered check's test, as source."""
