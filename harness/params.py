"""A check's params, the draws saved beside its case, validated in one place.

A saved or hand-edited finding is user input: a bad param must be a one-line
error naming it (``params.steps[2].path``), never an ``IndexError`` that reads
like an engine bug. Their shape is read with the case (``payload``, from the
vocabulary and limits here); their meaning for one check and one case is
``problem``; the case schema's ``params`` part is ``schema()``, which
``tests/test_payload.py`` holds ``harness/schema/case.schema.json`` to.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mmharness import steps
from mmharness.model import Case

if TYPE_CHECKING:
    from mmharness.checks.registry import Check

MAX_PARAMS = 16
"""Keys in one example's params."""
MAX_ROWS = 4096
"""The most rows a row-count param (``rows``, ``wanted``) asks for."""
ROW_COUNTS = ("rows", "wanted")

STEP_CHOICES: dict[str, tuple[str, ...]] = {
    "op": (*steps.CHUNKS, steps.SKIP, steps.CACHE),
    "path": steps.PATHS,
    "form": steps.FORMS,
    "size": steps.CACHE_SIZES,
}
"""A step's text keys, each with its values."""
STEP_INTS = ("request", "length")
STEP_LISTS = ("requests", "lengths")
STEP_FLAGS = ("scribble",)
STEP_KEYS = (*STEP_CHOICES, *STEP_INTS, *STEP_LISTS, *STEP_FLAGS)


def problem(check: Check, case: Case, params: dict[str, Any]) -> str | None:
    """What is wrong with an example's params for this check and case, or ``None``."""
    missing = [key for key in check.params if key not in params]
    if missing:
        return f"params lacks {', '.join(missing)} (check {check.id} needs {', '.join(check.params)})"
    if "permutation" in params and sorted(params["permutation"]) != list(range(len(case.requests))):
        return f"params.permutation is not a permutation of the {len(case.requests)} requests"
    if "schedule" in params:
        schedule = params["schedule"]
        seq_len = case.requests[0].seq_len if case.requests else None
        if seq_len is None or any(n < 1 for n in schedule) or sum(schedule) != seq_len:
            return f"params.schedule must be positive chunk lengths summing to seq_len {seq_len}"
    if "steps" in params:
        wrong = steps_problem(case, params["steps"])
        if wrong:
            return wrong
    for key in ROW_COUNTS:
        if key in params and not 0 <= params[key] <= MAX_ROWS:
            return f"params.{key} must be in [0, {MAX_ROWS}]"
    return None


def steps_problem(case: Case, program: object) -> str | None:
    """What is wrong with a multi-step program (``mmharness.steps``) for this case, or ``None``."""
    if not isinstance(program, list) or len(program) > steps.MAX_STEPS:
        return f"params.steps must be a list of at most {steps.MAX_STEPS} steps"
    count = len(case.requests)
    for k, step in enumerate(program):
        where = f"params.steps[{k}]"
        if not isinstance(step, dict) or step.get("op") not in STEP_CHOICES["op"]:
            return f"{where}: a step is an object with op {_or(STEP_CHOICES['op'])}"
        if step["op"] in steps.CHUNKS:
            requests, lengths = step.get("requests"), step.get("lengths")
            if not _indices(requests, count) or not _lengths(lengths) or len(lengths) != len(requests):
                return f"{where}: requests (distinct indices of the case's requests) and as many lengths >= 0"
            for key in ("path", "form"):
                if key in step and step[key] not in STEP_CHOICES[key]:
                    return f"{where}.{key}: one of {', '.join(STEP_CHOICES[key])}"
        elif step["op"] == steps.SKIP:
            if not _indices([step.get("request")], count) or not _lengths([step.get("length")]):
                return f"{where}: request is an index of the case's requests, length >= 0"
        elif step.get("size") not in STEP_CHOICES["size"]:
            return f"{where}.size: one of {', '.join(STEP_CHOICES['size'])}"
    return None


def schema() -> dict[str, Any]:
    """The ``params`` part of the case schema, from the vocabulary above."""
    index = {"type": "integer", "minimum": 0}
    step = {
        "type": "object",
        "required": ["op"],
        "additionalProperties": False,
        "properties": {
            **{key: {"enum": list(values)} for key, values in STEP_CHOICES.items()},
            **{key: index for key in STEP_INTS},
            **{key: {"type": "array", "items": index} for key in STEP_LISTS},
            **{key: {"type": "boolean"} for key in STEP_FLAGS},
        },
    }
    return {
        "type": "object",
        "maxProperties": MAX_PARAMS,
        "additionalProperties": {
            "oneOf": [{"type": "integer"}, {"type": "array", "items": {"type": "integer"}}]
        },
        "description": "The check's extra draws beside the case (a schedule, a permutation, row counts,"
        " a program of steps).",
        "properties": {
            "steps": {
                "type": "array",
                "maxItems": steps.MAX_STEPS,
                "description": "A multi-step prefill program (mmharness.steps): prefill, embed, skip and"
                " cache steps.",
                "items": step,
            }
        },
    }


def _or(values: Sequence[str]) -> str:
    return ", ".join(values[:-1]) + f" or {values[-1]}"


def _indices(values: object, count: int) -> bool:
    return (
        isinstance(values, list)
        and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < count for v in values)
        and len(set(values)) == len(values)
    )


def _lengths(values: object) -> bool:
    return isinstance(values, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 1 << 20 for v in values
    )
