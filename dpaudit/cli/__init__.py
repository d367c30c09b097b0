"""The ``dpaudit`` command line: one module per command group, each a thin layer over the stages.

``main`` (the entry point, also ``python -m dpaudit.cli``) holds the click group and the single-stage commands;
``account``, ``audit``, ``canaries``, ``lmo``, ``pmixed`` and ``reports`` register the others on it.
"""

from dpaudit.cli.main import main

__all__ = ["main"]
