"""The baseline of ``mmharness bench``: the property a maintainer would write by hand instead.

Inclusive spans and a window drawn with ``st.lists``/``st.integers``, the
engine's own loaded ``get_embedding_chunk`` called directly, and an oracle that
walks the placeholder positions: one case per example. ``mmharness bench``
measures the harness's checks against this in the same process.

Run alone: python benchmarks/handwritten_property.py [--target sglang==0.5.23] [--examples 1000]
"""

from __future__ import annotations

import argparse
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

HIDDEN = 4


@st.composite
def spans_and_window(draw):
    """Inclusive, sorted, disjoint spans with gaps, and a window inside the sequence."""
    gaps = draw(st.lists(st.integers(0, 6), min_size=1, max_size=4))
    lengths = draw(st.lists(st.integers(1, 8), min_size=len(gaps), max_size=len(gaps)))
    spans, cursor = [], 0
    for gap, length in zip(gaps, lengths, strict=True):
        spans.append((cursor + gap, cursor + gap + length - 1))
        cursor += gap + length
    seq_len = cursor + draw(st.integers(0, 4))
    prefix = draw(st.integers(0, seq_len))
    extend = draw(st.integers(0, seq_len - prefix))
    return spans, prefix, extend


def cases_per_second(target, examples: int) -> float:
    """Examples (= cases) per second of the hand-written property against ``target``'s loaded function."""
    import torch

    get_embedding_chunk = target.functions.found["get_embedding_chunk"].fn

    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(spans_and_window())
    def test_chunk(drawn):
        spans, prefix, extend = drawn
        positions = [p for start, end in spans for p in range(start, end + 1)]
        embedding = torch.arange(len(positions) * HIDDEN, dtype=torch.float32).reshape(-1, HIDDEN)
        chunk, start, end = get_embedding_chunk(embedding, prefix, extend, spans)
        inside = [k for k, p in enumerate(positions) if prefix <= p < prefix + extend]
        assert torch.equal(chunk, embedding[inside])
        assert start == sum(p < prefix for p in positions)
        assert end == sum(p < prefix + extend for p in positions)

    began = time.perf_counter()
    test_chunk()
    return examples / (time.perf_counter() - began)


if __name__ == "__main__":
    from mmharness.targets.specs import resolve

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--target", default="sglang==0.5.23")
    parser.add_argument("--examples", type=int, default=1000)
    args = parser.parse_args()
    print(f"{cases_per_second(resolve(args.target), args.examples):.0f} cases/s")
