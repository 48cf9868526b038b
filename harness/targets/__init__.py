"""Targets: the things checks run against, all behind ``mmharness.targets.base.Target``."""
