"""Package discovery for the four source roots (metadata lives in pyproject.toml).

``trainers/``, ``attacks/`` and ``tasks/`` sit beside ``dpaudit/`` and install as ``dpaudit.trainers``,
``dpaudit.attacks`` and ``dpaudit.tasks`` (docs/architecture.md, Layout). Every package under each root is
found, never listed by hand: a new subpackage ships in the wheel without an edit here.
"""

from setuptools import find_packages, setup

ROOTS = {"dpaudit": "dpaudit", "dpaudit.trainers": "trainers", "dpaudit.attacks": "attacks",
         "dpaudit.tasks": "tasks"}


def packages() -> list[str]:
    """Every importable package of the four roots, under its installed name."""
    found = []
    for name, folder in ROOTS.items():
        found += [name] + [f"{name}.{sub}" for sub in find_packages(folder)]
    return sorted(found)


if __name__ == "__main__":
    setup(packages=packages(), package_dir=ROOTS)
