"""The package layout, computed: ``harness/`` installs as ``mmharness``, ``strategies/`` as
``mmharness.strategies``, and every directory below them
(packages and data directories alike) is a subpackage.

Listing packages by hand once left an engine package out of the wheel (the built
package could not start); ``tests/test_packaging.py`` builds the wheel and checks
it holds every package directory of the tree. Everything else is in ``pyproject.toml``.
"""

from setuptools import find_namespace_packages, setup

ROOTS = {"mmharness": "harness", "mmharness.strategies": "strategies"}


def packages(name: str, directory: str) -> list[str]:
    found = find_namespace_packages(directory, exclude=["*__pycache__*"])
    return [name, *(f"{name}.{sub}" for sub in found)]


setup(package_dir=ROOTS, packages=[p for name, directory in ROOTS.items() for p in packages(name, directory)])
