"""The toy engine's fuzz target: what ``mmharness fuzz`` asks of an entry point module, no parser."""

from __future__ import annotations

from typing import Any

DEFAULT_TARGET = "toy"


def describe(parser: str, target: str) -> dict[str, Any]:
    return {"fuzz target": parser, "target": target}


def main(argv: list[str], **options: Any) -> None:
    raise NotImplementedError("the toy parser is described, never fuzzed")
