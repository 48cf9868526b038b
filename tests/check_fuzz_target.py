"""A test-only target for ``tests/test_check_fuzz.py``: ``EngineModel`` with a bug behind nested branches.

R1's chunk starts one row late, but only for a request of three items whose first two items have
several spans each and whose third has three, when the window starts past the second item and
strictly inside the third item's second span. Each condition is a branch of its own (nested on
purpose: SIM102 off), so coverage feedback climbs them one at a time; a random search must meet them
all at once. Not a registered mutant: only the check-fuzzing test loads it
(``check_fuzz_target:NESTED_BUG``).
"""

# ruff: noqa: SIM102
from __future__ import annotations

from typing import Any

from mmharness.targets import engine_model
from mmharness.targets.engine_model import EngineModel


class NestedBug(EngineModel):
    def __init__(self) -> None:
        super().__init__(name="nested_bug")

    def describe(self) -> dict[str, Any]:
        # ``files``: what the fuzzer instruments for coverage, as a loaded engine's files are.
        return {**super().describe(), "files": [engine_model.__file__, __file__]}

    def embedding_chunk(self, embedding: Any, case: Any, request: int) -> Any:
        chunk, start, end = super().embedding_chunk(embedding, case, request)
        req = case.requests[request]
        items = req.items
        if len(items) == 3:
            if len(items[0].spans) >= 2:
                if len(items[1].spans) >= 2:
                    if len(items[2].spans) == 3:
                        first, last = items[2].spans[1]
                        if req.prefix_len > items[0].spans[-1][1]:  # the window starts past item 0,
                            if req.prefix_len > items[1].spans[-1][1]:  # past item 1,
                                if req.prefix_len > first:  # past the start of item 2's second span,
                                    if req.prefix_len <= last:  # and inside it
                                        return chunk[1:], start + 1, end  # the seeded bug
        return chunk, start, end


NESTED_BUG = NestedBug()
