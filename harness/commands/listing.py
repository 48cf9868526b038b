"""``mmharness targets`` (every target form, or one target described) and ``mmharness checks`` (the
registered checks)."""

from __future__ import annotations

import argparse

from mmharness.commands.options import resolve_target


def add_parser(sub) -> None:
    targets = sub.add_parser("targets", help="list targets, or describe one")
    targets.add_argument("spec", nargs="?")

    sub.add_parser("checks", help="list the registered checks")


def run(args: argparse.Namespace) -> int:
    return _checks(args) if args.command == "checks" else _targets(args)


def _targets(args: argparse.Namespace) -> int:
    if args.spec:
        print_description(resolve_target(args.spec).describe())
        return 0
    from mmharness.targets.specs import listing

    for spec, description in listing():
        print(f"{spec:<40} {description}")
    return 0


def print_description(description: dict) -> None:
    """A target's ``describe()`` (or a fuzz target's), one key a line, collections one entry a line."""
    for key, value in description.items():
        if isinstance(value, dict):
            value = [f"{name}: {entry}" for name, entry in value.items()]
        if isinstance(value, (list, tuple, set, frozenset)):
            print(f"{key}: ({len(value)})")
            for entry in sorted(map(str, value)) if isinstance(value, (set, frozenset)) else value:
                print(f"  {entry}")
        else:
            print(f"{key}: {value}")


def _checks(args: argparse.Namespace) -> int:
    from mmharness.checks import all_checks

    for check in all_checks().values():
        needs = ",".join(sorted(check.needs))
        print(f"{check.id:<32} {check.rule:<4} {check.family:<12} needs {needs:<24} {check.doc}")
    return 0
