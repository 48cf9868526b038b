"""Targets: the things checks run against, all behind ``harness.targets.base.Target``."""
