"""Leaf-by-leaf differences between what a report holds and what the gate re-derived (dpaudit/gate/rederive.py):
numbers equal to 1e-6 relative, everything else exactly, a key missing on either side a difference."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

MISSING = "(missing)"


def differences(got: Any, want: Any, where: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(path, the report's value, the re-derived value) for every leaf where ``got`` and ``want`` differ.

    Args:
        got: What the report holds (parsed JSON).
        want: What the gate re-derived (plain containers; a tuple reads as the list JSON gives).
        where: The path of ``got`` in the report, prefixed to every difference's path.

    Returns:
        An iterator of (path, report's value, re-derived value); empty when the two agree.
    """
    if isinstance(want, dict) and isinstance(got, dict):
        for k in list(want) + [k for k in got if k not in want]:
            yield from differences(got.get(k, MISSING), want.get(k, MISSING), f"{where}/{k}" if where else str(k))
    elif isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)):
        if len(want) != len(got):
            yield f"{where} (entries)", len(got), len(want)
            return
        for i, (g, w) in enumerate(zip(got, want)):
            yield from differences(g, w, f"{where}/{i}")
    elif _numbers(got, want):
        if not (math.isclose(float(got), float(want), rel_tol=1e-6, abs_tol=1e-9)
                or (math.isnan(float(got)) and math.isnan(float(want)))):
            yield where, got, want
    elif got != want and not (isinstance(want, tuple) and list(want) == got):
        yield where, got, want


def described(diffs: list[tuple[str, Any, Any]], shown: int = 3) -> str:
    """The first ``shown`` differences in words, and how many more there are.

    Args:
        diffs: Differences as :func:`differences` yields them.
        shown: How many to spell out.

    Returns:
        "PATH: the report has A, re-derived B; ..." with " (and N more)" when some were left out.
    """
    text = "; ".join(f"{where}: the report has {short(a)}, re-derived {short(b)}" for where, a, b in diffs[:shown])
    return text + (f" (and {len(diffs) - shown} more)" if len(diffs) > shown else "")


def short(x: Any) -> str:
    """``repr(x)``, cut to 60 characters."""
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def _numbers(a: Any, b: Any) -> bool:
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b))
