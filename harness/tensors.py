"""Deterministic tensor materialisation: a ``Row`` becomes values, the same on every device.

Values are small integers (|v| <= 64), exact in float32, float16 and bfloat16,
so every comparison in the harness can be bit-exact. Rows are generated on the
CPU and then moved, which makes CPU and CUDA inputs identical by construction.
torch is imported here, and only when a tensor is first made.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

from mmharness.model import Case, Item, Request, Row

if TYPE_CHECKING:
    import torch

VALUE_BOUND = 64
FEATURE_SALT = 0x5EED_F00D
"""Mixed into an item's hash so its vision features differ from its embedding rows."""
TEXT_TOKEN = 7
PLACEHOLDER_BASE = 1_000_000


def _torch():
    import torch

    return torch


def row_seed(key: int, count: int) -> int:
    """The generator seed of the rows keyed by ``(key, count)`` (a standalone reproducer writes it)."""
    return (key * 0x9E3779B97F4A7C15 + count * 0xBF58476D1CE4E5B9) & (2**63 - 1)


@lru_cache(maxsize=4096)
def _block(key: int, count: int, hidden: int, dtype: str) -> torch.Tensor:
    torch = _torch()
    generator = torch.Generator().manual_seed(row_seed(key, count))
    values = torch.randint(-VALUE_BOUND, VALUE_BOUND + 1, (count, hidden), generator=generator)
    return values.to(getattr(torch, dtype))


def block(key: int, count: int, case: Case, device: str | None = None) -> torch.Tensor:
    """The full ``[count, hidden]`` tensor keyed by ``key`` (a fresh copy, on ``device`` or the case's)."""
    return _block(key, count, case.hidden, case.dtype).clone().to(device or case.device)


def shaped(tensor: torch.Tensor, case: Case) -> torch.Tensor:
    """Give a 2-D tensor the case's ``ndim`` (3-D means ``[1, n, H]``, as some models hand it)."""
    return tensor.unsqueeze(0) if case.ndim == 3 else tensor


def item_rows(case: Case, item: Item) -> torch.Tensor:
    """The item's whole 2-D embedding: ``row_count`` rows in span order (none for a reversed span),
    on the item's device."""
    return block(item.hash, max(item.row_count, 0), case, case.device_of(item))


def item_embedding(case: Case, item: Item) -> torch.Tensor:
    """The item's whole embedding, shaped by ``case.ndim``."""
    return shaped(item_rows(case, item), case)


def request_embedding(case: Case, items: Sequence[Item]) -> torch.Tensor:
    """The concatenated embedding of a request's items, as R1 receives it."""
    torch = _torch()
    # ``cat`` copies, so the cached blocks need no defensive clone here.
    parts = [_block(item.hash, max(item.row_count, 0), case.hidden, case.dtype) for item in items]
    flat = torch.cat(parts) if parts else torch.empty(0, case.hidden, dtype=getattr(torch, case.dtype))
    return shaped(flat.to(case.device), case)


def feature_key(item: Item) -> int:
    return item.hash ^ FEATURE_SALT


def item_features(case: Case, item: Item) -> torch.Tensor:
    """The item's vision features as a 2-D tensor: ``t*h*w`` patch rows per grid row (``feature_count``:
    unless the item says otherwise, a layout processors never produce)."""
    return block(feature_key(item), item.feature_count, case)


def materialise(case: Case, rows: Sequence[Row]) -> torch.Tensor:
    """Stack symbolic rows into a ``[len(rows), hidden]`` tensor on the case's device."""
    torch = _torch()
    if not rows:
        return torch.empty(0, case.hidden, dtype=getattr(torch, case.dtype), device=case.device)
    index = torch.tensor([row.index for row in rows])
    parts = []
    start = 0
    for stop in range(1, len(rows) + 1):
        if stop == len(rows) or rows[stop][:2] != rows[start][:2]:
            key, count, _ = rows[start]
            parts.append(_block(key, count, case.hidden, case.dtype)[index[start:stop]])
            start = stop
    return torch.cat(parts).to(case.device)


def placeholder_id(item: Item) -> int:
    """The token id standing for this item in ``input_ids`` (equal hashes share it)."""
    return PLACEHOLDER_BASE + item.hash % PLACEHOLDER_BASE


def sequence_ids(request: Request) -> list[int]:
    """The request's whole token sequence as its processor emits it: each item's placeholder id at its
    positions (as the spans give them, before any EVS move), a text token elsewhere."""
    tokens = [TEXT_TOKEN] * request.seq_len
    for item in request.items:
        for p in item.positions():
            tokens[p] = placeholder_id(item)
    return tokens


def input_ids(case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch's ``input_ids`` (each request's window) and its sorted placeholder ids.

    Positions of an item hold its placeholder id; every other position holds a
    text token, so the mask a target builds must mark exactly the item positions.
    Fresh tensors each call (a target may write into them), built once per case.
    """
    ids, placeholders = _input_ids(case)
    return ids.clone(), placeholders.clone()


@lru_cache(maxsize=64)
def _input_ids(case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    torch = _torch()
    ids: list[int] = []
    for request in case.requests:
        window, tokens = request.window, [TEXT_TOKEN] * request.extend_len
        for item in request.items:
            for p in item.positions():
                if p in window:
                    tokens[p - request.prefix_len] = placeholder_id(item)
        ids.extend(tokens)
    placeholders = sorted({placeholder_id(item) for _, _, item in case.items()})
    device = case.device
    return (
        torch.tensor(ids, dtype=torch.int64, device=device),
        torch.tensor(placeholders, dtype=torch.int64, device=device),
    )


def _owners(case: Case) -> dict[tuple, list[tuple[int, int, int]]]:
    """Each item row's values -> every ``(request, item, row)`` holding them (equal hashes share rows)."""
    owners: dict[tuple, list[tuple[int, int, int]]] = {}
    for r, i, item in case.items():
        for count in {item.row_count, item.token_count}:
            rows = _block(item.hash, max(count, 0), case.hidden, case.dtype).tolist()
            for k, row in enumerate(rows):
                owners.setdefault(tuple(row), []).append((r, i, k))
    return owners


def _rows(tensor: torch.Tensor) -> list[tuple]:
    return [tuple(row) for row in tensor.reshape(-1, tensor.shape[-1]).cpu().tolist()]


def explain_rows(case: Case, tensor: torch.Tensor) -> str:
    """Name the source of each row, e.g. ``= r0.i1[2:6] r1.i0[0:1] ?``, so a diff reads as a story.

    Rows are recognised by value among the case's item rows; ``?`` is a row no
    item has (zeros, garbage, a wrong dtype cast).
    """
    if tensor.dim() < 1 or tensor.numel() == 0:
        return ""
    owners = _owners(case)
    runs: list[list] = []
    for row in _rows(tensor):
        found = owners.get(row)
        owner = found[0] if found else None
        last = runs[-1] if runs else None
        if owner and last and last[0] == owner[:2] and last[2] == owner[2]:
            last[2] += 1
        else:
            runs.append([owner[:2], owner[2], owner[2] + 1] if owner else [None, 0, 0])
    names = [f"r{o[0]}.i{o[1]}[{a}:{b}]" if o else "?" for o, a, b in runs]
    return " = " + " ".join(names)


def row_difference(case: Case, expected: torch.Tensor, actual: torch.Tensor) -> str:
    """How equally shaped tensors differ, as a kind a maintainer can act on.

    ``rows out of order`` (the right rows, misplaced), ``rows of no item``
    (values no item has: zeros, garbage, a bad cast), ``another request's rows``
    (a row only other requests own), else ``wrong rows`` (rows of the right
    request, from the wrong place).
    """
    wanted, got = _rows(expected), _rows(actual)
    if sorted(wanted) == sorted(got):
        return "rows out of order"
    owners = _owners(case)
    if any(row not in owners for row in got):
        return "rows of no item"
    for want, have in zip(wanted, got, strict=True):
        if want == have:
            continue
        requests = {r for r, _, _ in owners.get(want, [])}
        if requests and not requests & {r for r, _, _ in owners[have]}:
            return "another request's rows"
    return "wrong rows"
